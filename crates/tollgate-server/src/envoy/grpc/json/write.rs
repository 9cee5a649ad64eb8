//! Writing a `RateLimitResponse` in the proto3 JSON mapping, as protobuf's JSON printer does
//! (see the [module docs](super)).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use envoy_types::pb::envoy::config::core::v3::HeaderValue as ProtoHeader;
use envoy_types::pb::google::protobuf::{
    Duration as ProtoDuration, Struct, Timestamp, Value as ProtoValue, value::Kind,
};
use serde_json::{Map, Value};

use super::super::proto::RateLimitResponse;
use super::super::proto::rate_limit_response::quota::ExpirationSpecifier;
use super::super::proto::rate_limit_response::rate_limit::Unit;
use super::super::proto::rate_limit_response::{Code, DescriptorStatus, Quota, RateLimit};
use crate::runtime::utc::rfc3339;

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
    rfc3339(at.seconds, &fraction(at.nanos.unsigned_abs()))
}

/// Standard base64 with padding, as protobuf's JSON mapping writes bytes.
fn base64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
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
