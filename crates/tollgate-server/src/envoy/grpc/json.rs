//! envoyproxy/ratelimit's `/json` endpoint: `ShouldRateLimit` over plain HTTP, for clients that
//! cannot speak gRPC (a Lua filter, a shell script, a service without a gRPC stack).
//!
//! `POST /json` takes a `RateLimitRequest` in the proto3 JSON mapping and answers the
//! `RateLimitResponse` in the same mapping, decided by the very function the gRPC door calls
//! ([`RlsService::answer`]), so both doors always give the same answer:
//!
//! ```json
//! {"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}]}
//! ```
//!
//! ```json
//! {"overallCode": "OVER_LIMIT", "statuses": [{"code": "OVER_LIMIT",
//!  "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"}, "durationUntilReset": "42s"}]}
//! ```
//!
//! # Reading the request, as protobuf's JSON parser does
//!
//! - Field names in either spelling: `hits_addend` or `hitsAddend`, `is_negative_hits` or
//!   `isNegativeHits`, `requests_per_unit` or `requestsPerUnit`; both spellings of one field in
//!   one object is an error, and so is a field the message does not have.
//! - Integers as JSON numbers or as strings (`"3"`); `null` for any field means its default.
//! - A descriptor's `limit.unit` by name (`"MINUTE"`) or number; `hits_addend` of a descriptor
//!   is a `google.protobuf.UInt64Value`, written as the bare number.
//!
//! # Status codes
//!
//! As upstream: `200` when the overall code is `OK`, `429` when it is `OVER_LIMIT`, `500` when it
//! is `UNKNOWN`, and `400` for a body that is not a valid request (malformed JSON, a wrong type,
//! an unknown field) and for the requests `ShouldRateLimit` refuses (an empty domain or
//! descriptor list, `is_negative_hits`). Where upstream answers `400` with the text `Bad
//! Request`, tollgate answers an RFC 9457 problem (`application/problem+json`) whose `detail`
//! says what is wrong (`descriptors[0].entries[0].key: expected a string, got 7`). One deliberate
//! difference: when the store failed and a limit fails closed, the answer is `503` (the gRPC
//! door's `UNAVAILABLE`), not `400`, so a client can tell a sick server from a bad request.
//! A body over `MAX_BODY` (64 KiB) is `413`.
//!
//! # Writing the answer, as protobuf's JSON printer does
//!
//! lowerCamelCase names; fields at their default (0, `""`, `UNKNOWN`, empty lists) left out;
//! enums by name; `google.protobuf.Duration` as `"42s"` (fractions as `"1.500s"`); bytes in
//! base64; `google.protobuf.Struct` as the JSON object it stands for.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use envoy_types::pb::envoy::config::core::v3::HeaderValue as ProtoHeader;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::{
    Duration as ProtoDuration, Struct, Timestamp, Value as ProtoValue, value::Kind,
};
use serde_json::{Map, Value};
use tonic::Code as GrpcCode;

use super::RlsService;
use super::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use super::proto::rate_limit_response::quota::ExpirationSpecifier;
use super::proto::rate_limit_response::rate_limit::Unit;
use super::proto::rate_limit_response::{Code, DescriptorStatus, Quota, RateLimit};
use super::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use crate::runtime::listener::MAX_BODY;
use crate::runtime::problem::problem;

/// `POST /json` over `rls`, to merge into the HTTP router.
///
/// ```
/// use axum::body::Body;
/// use axum::http::{Request, StatusCode};
/// use tollgate_server::grpc::{RlsService, json};
/// use tollgate_server::{AppState, Settings};
/// use tollgate_server::AnyStore;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = tollgate_config::parse(
///     "edge.yaml",
///     "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
/// )?;
/// let app = json::router(RlsService::new(AppState::new(limits, AnyStore::memory(), Settings::default())));
/// let ask = || {
///     Request::post("/json").body(Body::from(
///         r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/"}]}]}"#,
///     ))
/// };
/// assert_eq!(app.clone().oneshot(ask()?).await?.status(), StatusCode::OK);
/// assert_eq!(app.oneshot(ask()?).await?.status(), StatusCode::TOO_MANY_REQUESTS);
/// # Ok(())
/// # }
/// ```
pub fn router(rls: RlsService) -> Router {
    Router::new()
        .route("/json", post(json))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(rls)
}

async fn json(State(rls): State<RlsService>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return problem(rejection.status(), rejection.body_text(), None),
    };
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err(detail) => return problem(StatusCode::BAD_REQUEST, detail, None),
    };
    match rls.answer(request).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::Unknown) | Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let mut answer = (status, response_json(&response).to_string()).into_response();
            answer
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            answer
        }
        Err(status) => {
            let code = match status.code() {
                GrpcCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                GrpcCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            problem(code, status.message().to_owned(), None)
        }
    }
}

/// Reads a `RateLimitRequest` in the proto3 JSON mapping; the error names the field.
///
/// ```
/// let request = tollgate_server::grpc::json::parse_request(
///     br#"{"domain": "edge", "hitsAddend": "2", "descriptors": [{"entries": [{"key": "k"}]}]}"#,
/// )?;
/// assert_eq!(request.hits_addend, 2);
/// assert_eq!(request.descriptors[0].entries[0].value, "");
///
/// let err = tollgate_server::grpc::json::parse_request(br#"{"domain": 7}"#).unwrap_err();
/// assert_eq!(err, "domain: expected a string, got 7");
/// # Ok::<(), String>(())
/// ```
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let value: Value = serde_json::from_slice(body).map_err(|err| format!("invalid json: {err}"))?;
    let mut fields = Fields::new(&value, "")?;
    let domain = fields
        .take(&["domain"])
        .map(|v| string(v, "domain"))
        .transpose()?;
    let hits_addend = fields
        .take(&["hits_addend", "hitsAddend"])
        .map(|v| uint32(v, "hits_addend"))
        .transpose()?;
    let descriptors = match fields.take(&["descriptors"]) {
        Some(list) => array(list, "descriptors")?
            .iter()
            .enumerate()
            .map(|(i, d)| descriptor(d, &format!("descriptors[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    fields.finish()?;
    Ok(RateLimitRequest {
        domain: domain.unwrap_or_default(),
        descriptors,
        hits_addend: hits_addend.unwrap_or_default(),
    })
}

fn descriptor(value: &Value, at: &str) -> Result<RateLimitDescriptor, String> {
    let mut fields = Fields::new(value, at)?;
    let entries = match fields.take(&["entries"]) {
        Some(list) => array(list, &join(at, "entries"))?
            .iter()
            .enumerate()
            .map(|(i, e)| entry(e, &format!("{at}.entries[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let limit = fields
        .take(&["limit"])
        .map(|v| limit(v, &join(at, "limit")))
        .transpose()?;
    let hits_addend = fields
        .take(&["hits_addend", "hitsAddend"])
        .map(|v| uint64(v, &join(at, "hits_addend")))
        .transpose()?
        .map(|value| envoy_types::pb::google::protobuf::UInt64Value { value });
    let is_negative_hits = fields
        .take(&["is_negative_hits", "isNegativeHits"])
        .map(|v| boolean(v, &join(at, "is_negative_hits")))
        .transpose()?
        .unwrap_or_default();
    fields.finish()?;
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

fn entry(value: &Value, at: &str) -> Result<Entry, String> {
    let mut fields = Fields::new(value, at)?;
    let key = fields
        .take(&["key"])
        .map(|v| string(v, &join(at, "key")))
        .transpose()?;
    let value = fields
        .take(&["value"])
        .map(|v| string(v, &join(at, "value")))
        .transpose()?;
    fields.finish()?;
    Ok(Entry {
        key: key.unwrap_or_default(),
        value: value.unwrap_or_default(),
    })
}

fn limit(value: &Value, at: &str) -> Result<RateLimitOverride, String> {
    let mut fields = Fields::new(value, at)?;
    let requests_per_unit = fields
        .take(&["requests_per_unit", "requestsPerUnit"])
        .map(|v| uint32(v, &join(at, "requests_per_unit")))
        .transpose()?;
    let unit = fields
        .take(&["unit"])
        .map(|v| unit(v, &join(at, "unit")))
        .transpose()?;
    fields.finish()?;
    Ok(RateLimitOverride {
        requests_per_unit: requests_per_unit.unwrap_or_default(),
        unit: unit.unwrap_or_default(),
    })
}

/// The members of one JSON object, taken one field at a time; what is left is unknown.
struct Fields<'a> {
    members: Option<&'a Map<String, Value>>,
    taken: Vec<&'a str>,
    at: String,
}

impl<'a> Fields<'a> {
    /// The object at `at`; `null` is an empty message.
    fn new(value: &'a Value, at: &str) -> Result<Self, String> {
        let members = match value {
            Value::Object(members) => Some(members),
            Value::Null => None,
            other => return Err(format!("{}expected an object, got {}", prefix(at), shown(other))),
        };
        Ok(Fields {
            members,
            taken: Vec::new(),
            at: at.to_owned(),
        })
    }

    /// The field under any of its `names` (proto name, JSON name); `null` is absent.
    fn take(&mut self, names: &[&'a str]) -> Option<&'a Value> {
        let members = self.members?;
        let mut found = None;
        for &name in names {
            if let Some(value) = members.get(name) {
                self.taken.push(name);
                if found.is_some() {
                    // Reported by `finish`, which sees both spellings taken.
                    self.taken.push("");
                }
                found = Some(value);
            }
        }
        found.filter(|value| !value.is_null())
    }

    /// Fails on a field taken twice (two spellings) or never taken (unknown).
    fn finish(self) -> Result<(), String> {
        let Some(members) = self.members else {
            return Ok(());
        };
        if self.taken.contains(&"") {
            return Err(format!(
                "{}a field is given under both of its names",
                prefix(&self.at)
            ));
        }
        if let Some(unknown) = members.keys().find(|k| !self.taken.contains(&k.as_str())) {
            return Err(format!("{}unknown field `{unknown}`", prefix(&self.at)));
        }
        Ok(())
    }
}

fn prefix(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("{at}: ")
    }
}

fn join(at: &str, field: &str) -> String {
    if at.is_empty() {
        field.to_owned()
    } else {
        format!("{at}.{field}")
    }
}

/// A value as an error message shows it, cut short.
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

fn string(value: &Value, at: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{at}: expected a string, got {}", shown(value)))
}

fn boolean(value: &Value, at: &str) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| format!("{at}: expected true or false, got {}", shown(value)))
}

fn array<'a>(value: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{at}: expected a list, got {}", shown(value)))
}

/// A non-negative integer, as a number (`3`, `3.0`, `3e0`) or a decimal string (`"3"`).
fn uint64(value: &Value, at: &str) -> Result<u64, String> {
    let parsed = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
                // The range is checked above: the conversion is exact.
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok().filter(|_| s.trim() == s),
        _ => None,
    };
    parsed.ok_or_else(|| format!("{at}: expected a non-negative integer, got {}", shown(value)))
}

fn uint32(value: &Value, at: &str) -> Result<u32, String> {
    let n = uint64(value, at)?;
    u32::try_from(n).map_err(|_| format!("{at}: {n} is more than a 32-bit field holds"))
}

/// An `envoy.type.v3.RateLimitUnit` by name or number.
fn unit(value: &Value, at: &str) -> Result<i32, String> {
    if let Some(name) = value.as_str() {
        return RateLimitUnit::from_str_name(name)
            .map(|unit| unit as i32)
            .ok_or_else(|| format!("{at}: unknown unit `{name}`"));
    }
    let n = uint32(value, at)?;
    i32::try_from(n).map_err(|_| format!("{at}: unknown unit {n}"))
}

/// The answer in the proto3 JSON mapping (see the [module docs](self)).
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

fn struct_json(value: &Struct) -> Value {
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
    fn both_spellings_of_a_field_are_read() {
        for body in [
            r#"{"domain":"d","hits_addend":3,"descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":0,"is_negative_hits":false}]}"#,
            r#"{"domain":"d","hitsAddend":"3","descriptors":[{"entries":[{"key":"k","value":"v"}],"hitsAddend":"0","isNegativeHits":false}]}"#,
        ] {
            let request = parse_request(body.as_bytes()).expect(body);
            assert_eq!(request.hits_addend, 3, "{body}");
            let descriptor = &request.descriptors[0];
            assert_eq!(descriptor.hits_addend.map(|h| h.value), Some(0), "{body}");
            assert_eq!(
                (
                    descriptor.entries[0].key.as_str(),
                    descriptor.entries[0].value.as_str()
                ),
                ("k", "v")
            );
        }
    }

    #[test]
    fn a_limit_override_is_read_by_unit_name_or_number() {
        let by_name = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[],"limit":{"requestsPerUnit":5,"unit":"HOUR"}}]}"#,
        )
        .unwrap();
        let by_number = parse_request(
            br#"{"domain":"d","descriptors":[{"entries":[],"limit":{"requests_per_unit":"5","unit":3}}]}"#,
        )
        .unwrap();
        assert_eq!(by_name, by_number);
        assert_eq!(
            by_name.descriptors[0].limit,
            Some(RateLimitOverride {
                requests_per_unit: 5,
                unit: RateLimitUnit::Hour as i32
            })
        );
    }

    #[test]
    fn bad_requests_name_the_field() {
        let cases: [(&str, &str); 9] = [
            ("{", "invalid json: "),
            ("[]", "expected an object, got []"),
            (r#"{"domain":"d","extra":1}"#, "unknown field `extra`"),
            (
                r#"{"hits_addend":1,"hitsAddend":1}"#,
                "a field is given under both of its names",
            ),
            (
                r#"{"hits_addend":-1}"#,
                "hits_addend: expected a non-negative integer, got -1",
            ),
            (
                r#"{"hits_addend":4294967296}"#,
                "hits_addend: 4294967296 is more than a 32-bit field holds",
            ),
            (r#"{"descriptors":{}}"#, "descriptors: expected a list, got {}"),
            (
                r#"{"descriptors":[{"entries":[{"key":7}]}]}"#,
                "descriptors[0].entries[0].key: expected a string, got 7",
            ),
            (
                r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#,
                "descriptors[0].limit.unit: unknown unit `FORTNIGHT`",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_request(body.as_bytes()).expect_err(body);
            assert!(err.contains(expected), "{body}: {err}");
        }
    }

    #[test]
    fn null_means_the_default() {
        let request = parse_request(
            br#"{"domain":"d","hitsAddend":null,"descriptors":[{"entries":null,"limit":null}]}"#,
        )
        .unwrap();
        assert_eq!(request.hits_addend, 0);
        assert!(request.descriptors[0].entries.is_empty() && request.descriptors[0].limit.is_none());
    }

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
