//! The login's error answers as RFC 9457 problem details (`application/problem+json`), shaped
//! like the ones the tollgate tower layer sends, so clients handle both the same way.

use std::time::Duration;

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tollgate::headers::seconds_up;
use tollgate_tower::problem::CONTENT_TYPE_PROBLEM;

/// 429: the account has too many failures; retry once its counter expires in `ttl`.
///
/// `Retry-After` is whole seconds rounded up (at least 1) and `retry_after_ms` milliseconds
/// rounded up, so a client that waits that long is never early.
///
/// ```
/// use std::time::Duration;
///
/// let response = tollgate_example_login::problem::locked(Duration::from_millis(1_500));
/// assert_eq!(response.status(), 429);
/// assert_eq!(response.headers()["retry-after"], "2");
/// ```
pub fn locked(ttl: Duration) -> Response {
    let seconds = seconds_up(ttl).max(1);
    let mut response = problem(
        StatusCode::TOO_MANY_REQUESTS,
        format!("too many failed logins for this account; retry in {seconds} s"),
        json!({ "retry_after_ms": millis_up(ttl).max(1) }),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// 401: wrong username or password, with the failures left before the account locks.
///
/// ```
/// let response = tollgate_example_login::problem::unauthorized(4);
/// assert_eq!(response.status(), 401);
/// ```
pub fn unauthorized(attempts_remaining: u64) -> Response {
    problem(
        StatusCode::UNAUTHORIZED,
        "wrong username or password".to_owned(),
        json!({ "attempts_remaining": attempts_remaining }),
    )
}

/// `status` (400 or 415) for a body that cannot be used, with what is wrong in `detail`.
///
/// ```
/// use axum::http::StatusCode;
///
/// let response = tollgate_example_login::problem::bad_request(StatusCode::BAD_REQUEST, "no".into());
/// assert_eq!(response.status(), 400);
/// ```
pub fn bad_request(status: StatusCode, detail: String) -> Response {
    problem(status, detail, json!({}))
}

/// 503: the attempts store failed. A login limiter fails closed: without the count it cannot
/// tell a user from a guesser, so it lets no one try. The error goes to stderr for the operator,
/// not into the answer.
///
/// ```
/// let response = tollgate_example_login::problem::store_unavailable(&tollgate::Error::EmptyKey);
/// assert_eq!(response.status(), 503);
/// ```
pub fn store_unavailable(err: &tollgate::Error) -> Response {
    eprintln!("login: attempts store failed: {err}");
    problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "login is unavailable: the attempts store failed; try again shortly".to_owned(),
        json!({}),
    )
}

fn problem(status: StatusCode, detail: String, members: Value) -> Response {
    let mut body = Map::new();
    body.insert("type".into(), "about:blank".into());
    body.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    body.insert("status".into(), status.as_u16().into());
    body.insert("detail".into(), detail.into());
    if let Value::Object(members) = members {
        body.extend(members);
    }
    let mut response = (status, Value::Object(body).to_string()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_PROBLEM));
    response
}

/// Milliseconds, rounded up.
fn millis_up(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros().div_ceil(1_000)).unwrap_or(u64::MAX)
}
