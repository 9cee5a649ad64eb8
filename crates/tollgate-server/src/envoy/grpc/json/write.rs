//! Writing a `RateLimitResponse` in the proto3 JSON mapping, as protobuf's JSON printer does
//! (see the [module docs](super)).

use envoy_types::pb::envoy::config::core::v3::HeaderValue as ProtoHeader;
use envoy_types::pb::google::protobuf::{
    Duration as ProtoDuration, Struct, Timestamp, Value as ProtoValue, value::Kind,
};
use serde_json::{Map, Value};

use super::super::proto::RateLimitResponse;
use super::super::proto::rate_limit_response::quota::ExpirationSpecifier;
use super::super::proto::rate_limit_response::rate_limit::Unit;
use super::super::proto::rate_limit_response::{Code, DescriptorStatus, Quota, RateLimit};

/// The answer in the proto3 JSON mapping (see the [module docs](super)).
///
/// ```
/// use tollgate_server::grpc::proto::RateLimitResponse;
/// use tollgate_server::grpc::proto::rate_limit_response::{Code, DescriptorStatus};
///
/// let answer = RateLimitResponse {
///     overall_code: Code::Ok as i32,
///     statuses: vec![DescriptorStatus { code: Code::Ok as i32, limit_remaining: 4, ..Default::default() }],
///     ..Default::default()
/// };
/// assert_eq!(
///     tollgate_server::grpc::json::response_json(&answer).to_string(),
///     r#"{"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":4}]}"#
/// );
/// ```
pub fn response_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    put_code(&mut out, "overallCode", response.overall_code);
    put_list(
        &mut out,
        "statuses",
        response.statuses.iter().map(status_json).collect(),
    );
    put_list(
        &mut out,
        "responseHeadersToAdd",
        response.response_headers_to_add.iter().map(header_json).collect(),
    );
    put_list(
        &mut out,
        "requestHeadersToAdd",
        response.request_headers_to_add.iter().map(header_json).collect(),
    );
    if !response.raw_body.is_empty() {
        out.insert("rawBody".into(), base64(&response.raw_body).into());
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_json(metadata));
    }
    if let Some(quota) = &response.quota {
        out.insert("quota".into(), quota_json(quota));
    }
    Value::Object(out)
}

fn status_json(status: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    put_code(&mut out, "code", status.code);
    if let Some(limit) = &status.current_limit {
        out.insert("currentLimit".into(), limit_json(limit));
    }
    if status.limit_remaining != 0 {
        out.insert("limitRemaining".into(), status.limit_remaining.into());
    }
    if let Some(duration) = &status.duration_until_reset {
        out.insert("durationUntilReset".into(), duration_json(duration).into());
    }
    if let Some(quota) = &status.quota {
        out.insert("quota".into(), quota_json(quota));
    }
    Value::Object(out)
}

fn limit_json(limit: &RateLimit) -> Value {
    let mut out = Map::new();
    if !limit.name.is_empty() {
        out.insert("name".into(), limit.name.clone().into());
    }
    if limit.requests_per_unit != 0 {
        out.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
    }
    if limit.unit != 0 {
        let unit = Unit::try_from(limit.unit).map_or_else(|_| limit.unit.into(), |u| u.as_str_name().into());
        out.insert("unit".into(), unit);
    }
    Value::Object(out)
}

fn header_json(header: &ProtoHeader) -> Value {
    let mut out = Map::new();
    if !header.key.is_empty() {
        out.insert("key".into(), header.key.clone().into());
    }
    if !header.value.is_empty() {
        out.insert("value".into(), header.value.clone().into());
    }
    if !header.raw_value.is_empty() {
        out.insert("rawValue".into(), base64(&header.raw_value).into());
    }
    Value::Object(out)
}

fn quota_json(quota: &Quota) -> Value {
    let mut out = Map::new();
    if quota.requests != 0 {
        out.insert("requests".into(), quota.requests.into());
    }
    if let Some(ExpirationSpecifier::ValidUntil(at)) = &quota.expiration_specifier {
        out.insert("validUntil".into(), timestamp_json(at).into());
    }
    if !quota.id.is_empty() {
        out.insert("id".into(), quota.id.clone().into());
    }
    Value::Object(out)
}

/// A `google.protobuf.Struct` as the JSON object it stands for (also how an xDS push's
/// descriptor metadata becomes config).
pub(crate) fn struct_json(value: &Struct) -> Value {
    // Sorted, so the same answer always prints the same.
    let mut fields: Vec<_> = value.fields.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    Value::Object(
        fields
            .into_iter()
            .map(|(name, v)| (name.clone(), value_json(v)))
            .collect(),
    )
}

fn value_json(value: &ProtoValue) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        // NaN and infinities have no JSON form.
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => struct_json(s),
        Some(Kind::ListValue(list)) => list.values.iter().map(value_json).collect(),
    }
}

fn put_code(out: &mut Map<String, Value>, name: &str, code: i32) {
    if code != 0 {
        let code = Code::try_from(code).map_or_else(|_| code.into(), |c| c.as_str_name().into());
        out.insert(name.into(), code);
    }
}

fn put_list(out: &mut Map<String, Value>, name: &str, list: Vec<Value>) {
    if !list.is_empty() {
        out.insert(name.into(), Value::Array(list));
    }
}

/// `"42s"`, `"1.500s"`, `"0.000000001s"`: whole seconds and 0, 3, 6 or 9 fraction digits.
fn duration_json(duration: &ProtoDuration) -> String {
    let negative = duration.seconds < 0 || duration.nanos < 0;
    let seconds = duration.seconds.unsigned_abs();
    let nanos = duration.nanos.unsigned_abs();
    format!("{}{seconds}{}s", if negative { "-" } else { "" }, fraction(nanos))
}

fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    }
}

/// RFC 3339 in UTC, `"2026-11-23T07:00:00Z"`, with a fraction when there is one.
fn timestamp_json(at: &Timestamp) -> String {
    let days = at.seconds.div_euclid(86_400);
    let secs = at.seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{}Z",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60,
        fraction(at.nanos.unsigned_abs())
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (the well-known era-based algorithm:
/// 400-year eras of 146 097 days, years starting in March so the leap day comes last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// Standard base64 with padding, as protobuf's JSON mapping writes bytes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_printed_like_protojson() {
        let answer = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::OverLimit as i32,
                    current_limit: Some(RateLimit {
                        name: String::new(),
                        requests_per_unit: 1,
                        unit: Unit::Minute as i32,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(ProtoDuration {
                        seconds: 42,
                        nanos: 0,
                    }),
                    quota: None,
                },
                DescriptorStatus::default(),
            ],
            response_headers_to_add: vec![ProtoHeader {
                key: "x-ratelimit-limit".into(),
                value: "1".into(),
                raw_value: Vec::new(),
            }],
            ..Default::default()
        };
        assert_eq!(
            response_json(&answer).to_string(),
            r#"{"overallCode":"OVER_LIMIT","responseHeadersToAdd":[{"key":"x-ratelimit-limit","value":"1"}],"statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"42s"},{}]}"#
        );
    }

    #[test]
    fn durations_timestamps_and_bytes_use_the_wellknown_forms() {
        assert_eq!(
            duration_json(&ProtoDuration {
                seconds: 1,
                nanos: 500_000_000
            }),
            "1.500s"
        );
        assert_eq!(
            duration_json(&ProtoDuration { seconds: 0, nanos: 1 }),
            "0.000000001s"
        );
        assert_eq!(duration_json(&ProtoDuration { seconds: 3, nanos: 0 }), "3s");
        assert_eq!(
            timestamp_json(&Timestamp { seconds: 0, nanos: 0 }),
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(
            timestamp_json(&Timestamp {
                seconds: 1_709_210_096,
                nanos: 0
            }),
            "2024-02-29T12:34:56Z",
            "a leap day"
        );
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }
}
