//! The HTTP/JSON API: what a NestJS, Spring or any other service calls to ask for a decision.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/check` `{"policy", "key", "cost"?}` | decide and record: 200 allowed, 429 denied |
//! | `GET /v1/limits/{policy}/{key}?cost=N` | the same answer, recording nothing (peek) |
//! | `DELETE /v1/limits/{policy}/{key}` | forget the key's state (admin) |
//! | `POST /v1/attempts/{purpose}/{key}` `{"ttl_seconds"}` | count a failed attempt |
//! | `GET /v1/attempts/{purpose}/{key}` | the count and its TTL |
//! | `GET /v1/attempts/{purpose}/{key}/check?max=N` | whether another attempt is allowed |
//! | `DELETE /v1/attempts/{purpose}/{key}` | clear the counter (after a success) |
//! | `GET /metrics`, `/healthz`, `/readyz` | Prometheus, liveness, store reachability |
//!
//! Decisions carry the IETF `RateLimit-Policy` and `RateLimit` headers, and `Retry-After` (whole
//! seconds, rounded up) when denied. Every error is a 4xx or 5xx with a JSON body
//! `{"error": "..."}` that names the problem. Bodies are parsed here rather than by an extractor
//! so that malformed JSON, a missing field and an oversized body all get that same shape.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tollgate::{AttemptsStore, Decision, Error, Policy, Store, headers};

use crate::metrics;
use crate::state::SharedState;

/// The largest request body accepted.
pub const MAX_BODY: usize = 64 * 1024;

/// The API's routes over `state`. Tests drive it with `oneshot`; the binary serves it.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/limits/{policy}/{key}", get(peek).delete(reset))
        .route(
            "/v1/attempts/{purpose}/{key}",
            post(count_attempt).get(attempts).delete(clear_attempts),
        )
        .route("/v1/attempts/{purpose}/{key}/check", get(check_attempts))
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// An error answer: a status and a message for `{"error": ...}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// Unusable input is the caller's fault (400); a failing store is ours (503).
impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        if err.is_bad_input() {
            ApiError::bad_request(err.to_string())
        } else {
            if let Error::Store { kind, .. } = &err {
                metrics::store_error(&kind.to_string());
            }
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
    }
}

/// Parses a JSON body, turning every way it can be wrong into a 4xx naming the problem.
fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("request body is larger than {MAX_BODY} bytes")
        } else {
            rejection.body_text()
        };
        ApiError::new(status, message)
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest {
    policy: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
struct CostQuery {
    #[serde(default = "one")]
    cost: u64,
}

async fn check(
    State(state): State<SharedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: CheckRequest = json_body(body)?;
    decide(&state, &request.policy, &request.key, request.cost, true).await
}

async fn peek(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    query: Result<Query<CostQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    decide(&state, &policy, &key, query.cost, false).await
}

async fn reset(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let limits = state.limits.load();
    let named = limits.policy(&policy).ok_or_else(|| unknown_policy(&policy))?;
    check_key(&state, &key)?;
    state.store.reset(named.policy(), key.as_bytes()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Check or peek: the decision as JSON, with the rate limit headers.
async fn decide(
    state: &SharedState,
    policy: &str,
    key: &str,
    cost: u64,
    commit: bool,
) -> Result<Response, ApiError> {
    let limits = state.limits.load();
    let named = limits.policy(policy).ok_or_else(|| unknown_policy(policy))?;
    check_key(state, key)?;
    let started = Instant::now();
    let result = if commit {
        state.store.check(named.policy(), key.as_bytes(), cost).await
    } else {
        state.store.peek(named.policy(), key.as_bytes(), cost).await
    };
    metrics::store_latency(started.elapsed());
    let decision = result?;
    if decision.degraded {
        metrics::degraded(policy);
    }
    // Shadow mode: count what would have been denied, but let it through.
    let shadowed = !decision.allowed && named.shadow();
    let outcome = match (decision.allowed, shadowed) {
        (true, _) => "allowed",
        (false, true) => "shadow_denied",
        (false, false) => "denied",
    };
    if commit {
        metrics::decision(policy, outcome);
    }
    let denied = !decision.allowed && !shadowed;
    let status = if denied && commit {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let body = json!({
        "allowed": !denied,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "reset_after_ms": millis_up(decision.reset_after),
        "retry_after_ms": decision.retry_after.filter(|_| denied).map(millis_up),
        "degraded": decision.degraded,
    });
    let mut response = (status, Json(body)).into_response();
    add_headers(response.headers_mut(), named.policy(), &decision, denied);
    Ok(response)
}

fn add_headers(map: &mut HeaderMap, policy: &Policy, decision: &Decision, denied: bool) {
    let mut insert = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            map.insert(name, value);
        }
    };
    insert("ratelimit-policy", headers::ratelimit_policy(policy));
    insert("ratelimit", headers::ratelimit(policy, decision));
    if let (true, Some(seconds)) = (denied, headers::retry_after_seconds(decision)) {
        insert(header::RETRY_AFTER.as_str(), seconds.to_string());
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountAttempt {
    ttl_seconds: u64,
}

#[derive(Deserialize)]
struct MaxQuery {
    max: Option<u64>,
}

async fn count_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let request: CountAttempt = json_body(body)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state
        .store
        .increment_attempts(&name, Duration::from_secs(request.ttl_seconds))
        .await?;
    Ok(Json(json!({ "attempts": count })))
}

async fn attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state.store.get_attempts(&name).await?;
    let ttl = state.store.get_ttl(&name).await?;
    Ok(Json(
        json!({ "attempts": count, "ttl_seconds": ttl.map(headers::seconds_up) }),
    ))
}

async fn check_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    query: Result<Query<MaxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let max = query
        .max
        .ok_or_else(|| ApiError::bad_request("missing query parameter `max`"))?;
    let name = attempts_key(&state, &purpose, &key)?;
    let status = state.store.check_limit(&name, max).await?;
    Ok(Json(json!({
        "allowed": status.allowed,
        "remaining": status.remaining,
        "ttl_seconds": status.ttl.map(headers::seconds_up),
    })))
}

async fn clear_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let name = attempts_key(&state, &purpose, &key)?;
    state.store.reset_attempts(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn render_metrics() -> String {
    metrics::install().render()
}

async fn ready(State(state): State<SharedState>) -> Response {
    if state.store.ready().await {
        (StatusCode::OK, "ready").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} store unreachable", state.store.kind()),
        )
            .into_response()
    }
}

/// Attempts counters of different purposes never meet: the purpose is length-prefixed.
fn attempts_key(state: &SharedState, purpose: &str, key: &str) -> Result<Vec<u8>, ApiError> {
    if purpose.is_empty() {
        return Err(ApiError::bad_request("purpose must not be empty"));
    }
    check_key(state, key)?;
    Ok(format!("{}:{purpose}{key}", purpose.len()).into_bytes())
}

fn check_key(state: &SharedState, key: &str) -> Result<(), ApiError> {
    let max = state.settings.max_key_len;
    if key.is_empty() {
        return Err(ApiError::bad_request("key must not be empty"));
    }
    if key.len() > max {
        return Err(ApiError::bad_request(format!(
            "key is {} bytes, above the maximum of {max}",
            key.len()
        )));
    }
    Ok(())
}

fn unknown_policy(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("unknown policy `{name}`"))
}

/// Admin calls need `Authorization: Bearer <token>` when a token is configured. The token is
/// compared in constant time, so response timing does not reveal how much of a guess was right.
fn authorize_admin(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.settings.admin_token else {
        return Ok(());
    };
    let given = request_headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin token required: Authorization: Bearer <token>",
        ))
    }
}

/// Equal contents, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// Milliseconds, rounded up, so a client waiting that long is never early.
fn millis_up(duration: Duration) -> u64 {
    let micros = duration.as_micros();
    u64::try_from(micros.div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(millis_up(Duration::from_micros(1)), 1);
        assert_eq!(millis_up(Duration::from_millis(20)), 20);
        assert_eq!(millis_up(Duration::ZERO), 0);
    }
}
