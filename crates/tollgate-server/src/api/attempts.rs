//! Attempts counters for login protection: try (count an attempt only while fewer than `max`
//! are counted, in one atomic step: the way to admit a login), count a failure, read the counter,
//! ask whether another is allowed, clear it after a success. Trying, counting and clearing are
//! app calls (the app or admin token, when the server has one); reading is open. Counters of
//! different purposes never meet. The login story end to end is `docs/login.md`.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tollgate::{AttemptsStore, headers};
use utoipa::ToSchema;

use super::auth::authorize_app;
use super::body::json_body;
use super::error::ApiError;
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

/// The count after `POST /v1/attempts/{purpose}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptCount {
    /// Failed attempts counted so far.
    pub attempts: u64,
}

/// The counter, from `GET /v1/attempts/{purpose}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Attempts {
    /// Failed attempts counted so far.
    pub attempts: u64,
    /// Seconds until the counter is forgotten; null when there is none.
    pub ttl_seconds: Option<u64>,
}

/// Whether another attempt is allowed, from `GET /v1/attempts/{purpose}/{key}/check`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptsCheck {
    /// Another attempt is allowed.
    pub allowed: bool,
    /// Attempts left before `max`.
    pub remaining: u64,
    /// Seconds until the counter is forgotten; null when there is none.
    pub ttl_seconds: Option<u64>,
}

/// The body of `POST /v1/attempts/{purpose}/{key}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CountAttemptRequest)]
pub(crate) struct CountAttempt {
    /// How long a new counter lives, in seconds (at most 1000 days), from the attempt that
    /// creates it; later attempts do not extend it.
    #[schema(minimum = 1, maximum = 86_400_000)]
    ttl_seconds: u64,
}

/// The body of `POST /v1/attempts/{purpose}/{key}/try`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = TryAttemptRequest)]
pub(crate) struct TryAttempt {
    /// The most attempts counted: a try is counted only while fewer are.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    max: u64,
    /// How long a new counter lives, in seconds (at most 1000 days), from the try that creates
    /// it; later tries do not extend it.
    #[schema(minimum = 1, maximum = 86_400_000)]
    ttl_seconds: u64,
}

/// A counted try, from `POST /v1/attempts/{purpose}/{key}/try`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptAllowed {
    /// Always true: the try was counted; go on and verify the password.
    pub allowed: bool,
    /// Attempts counted, this one included.
    pub attempts: u64,
    /// Tries left before `max`.
    pub remaining: u64,
    /// Seconds until the counter is forgotten.
    pub ttl_seconds: u64,
}

/// The 429 of a refused try: an RFC 9457 problem with the count and the wait.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptRefused {
    /// Always `about:blank`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `Too Many Requests`.
    pub title: &'static str,
    /// 429.
    pub status: u16,
    /// How many attempts are counted, of how many.
    pub detail: String,
    /// Always false: the try was not counted; do not verify the password.
    pub allowed: bool,
    /// Attempts counted (at least `max`).
    pub attempts: u64,
    /// Always 0.
    pub remaining: u64,
    /// Seconds until the counter expires and tries are allowed again; also `Retry-After`.
    pub ttl_seconds: u64,
}

#[derive(Deserialize)]
pub(crate) struct MaxQuery {
    max: Option<u64>,
}

#[utoipa::path(
    post,
    path = "/v1/attempts/{purpose}/{key}/try",
    tag = "attempts",
    summary = "Try an attempt: count it only while fewer than max are counted",
    description = "Call it before verifying a password: the check and the count are one atomic \
                   step on every store, so of any number of parallel tries exactly as many as \
                   were left are allowed. A refused try changes nothing and answers 429 with \
                   `Retry-After` until the counter expires. Clear the counter after a success. \
                   Needs `Authorization: Bearer <token>` with the app or the admin token when the \
                   server has one.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    request_body(content = TryAttempt, content_type = "application/json"),
    responses(
        (status = 200, description = "Counted: go on", body = AttemptAllowed),
        (status = 429, description = "Refused: `max` attempts are counted", body = AttemptRefused, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Whole seconds until the counter expires"))),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn try_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize_app(&state, &request_headers)?;
    let request: TryAttempt = json_body(body)?;
    check_max(request.max)?;
    let ttl = check_ttl_seconds(request.ttl_seconds)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let tried = state.store.try_attempt(&name, request.max, ttl).await?;
    let ttl_seconds = headers::seconds_up(tried.ttl);
    if tried.allowed {
        let body = AttemptAllowed {
            allowed: true,
            attempts: tried.attempts,
            remaining: tried.remaining,
            ttl_seconds,
        };
        return Ok(Json(body).into_response());
    }
    let body = AttemptRefused {
        kind: "about:blank",
        title: "Too Many Requests",
        status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
        detail: format!(
            "{} of {} attempts are counted; tries are allowed again in {ttl_seconds} s",
            tried.attempts, request.max
        ),
        allowed: false,
        attempts: tried.attempts,
        remaining: 0,
        ttl_seconds,
    };
    let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
    let response_headers = response.headers_mut();
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::runtime::problem::PROBLEM_JSON),
    );
    response_headers.insert(header::RETRY_AFTER, HeaderValue::from(ttl_seconds.max(1)));
    Ok(response)
}

#[utoipa::path(
    post,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Count a failed attempt",
    description = "Counts whatever the count, so a login that checks first and counts after lets \
                   parallel guesses through: use `.../try` to admit a login. Needs \
                   `Authorization: Bearer <token>` with the app or the admin token when the \
                   server has one.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    request_body(content = CountAttempt, content_type = "application/json"),
    responses(
        (status = 200, description = "The count after this attempt", body = AttemptCount),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn count_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AttemptCount>, ApiError> {
    authorize_app(&state, &request_headers)?;
    let request: CountAttempt = json_body(body)?;
    let ttl = check_ttl_seconds(request.ttl_seconds)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state.store.increment_attempts(&name, ttl).await?;
    Ok(Json(AttemptCount { attempts: count }))
}

#[utoipa::path(
    get,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Read a counter",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    responses(
        (status = 200, description = "The count and its time to live", body = Attempts),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
) -> Result<Json<Attempts>, ApiError> {
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state.store.get_attempts(&name).await?;
    let ttl = state.store.get_ttl(&name).await?;
    Ok(Json(Attempts {
        attempts: count,
        ttl_seconds: ttl.map(headers::seconds_up),
    }))
}

#[utoipa::path(
    get,
    path = "/v1/attempts/{purpose}/{key}/check",
    tag = "attempts",
    summary = "Whether another attempt is allowed",
    description = "A reading only: parallel requests all get the same answer before any of them \
                   is counted, so checking then counting lets more than `max` guesses through. \
                   Use `.../try` to admit a login.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for"),
        ("key" = String, Path, description = "Whose attempts"),
        ("max" = u64, Query, minimum = 1, maximum = 1_000_000_000, description = "The most attempts allowed"),
    ),
    responses(
        (status = 200, description = "Allowed or not, and what is left", body = AttemptsCheck),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn check_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    query: Result<Query<MaxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AttemptsCheck>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let max = query
        .max
        .ok_or_else(|| ApiError::bad_request("missing query parameter `max`"))?;
    check_max(max)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let status = state.store.check_limit(&name, max).await?;
    Ok(Json(AttemptsCheck {
        allowed: status.allowed,
        remaining: status.remaining,
        ttl_seconds: status.ttl.map(headers::seconds_up),
    }))
}

#[utoipa::path(
    delete,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Clear a counter",
    description = "After a success, or to unlock an account. Needs `Authorization: Bearer <token>` \
                   with the app or the admin token when the server has one.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    responses(
        (status = 204, description = "Cleared"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn clear_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_app(&state, &request_headers)?;
    let name = attempts_key(&state, &purpose, &key)?;
    state.store.reset_attempts(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `max` is 1 to the core's bound on a limit; 0 is the store's own error.
fn check_max(max: u64) -> Result<(), ApiError> {
    if max == 0 || max > tollgate::bounds::MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "max is {max}: from 1 to {} attempts",
            tollgate::bounds::MAX_LIMIT
        )));
    }
    Ok(())
}

/// A counter's life in whole seconds, checked against the store's range here so the problem
/// names the field as the client wrote it.
fn check_ttl_seconds(ttl_seconds: u64) -> Result<Duration, ApiError> {
    let most = tollgate::bounds::MAX_PERIOD.as_secs();
    if ttl_seconds == 0 || ttl_seconds > most {
        return Err(ApiError::bad_request(format!(
            "ttl_seconds is {ttl_seconds}: from 1 to {most} seconds"
        )));
    }
    Ok(Duration::from_secs(ttl_seconds))
}

/// Attempts counters of different purposes never meet: the purpose is length-prefixed.
fn attempts_key(state: &SharedState, purpose: &str, key: &str) -> Result<Vec<u8>, ApiError> {
    if purpose.is_empty() {
        return Err(ApiError::bad_request("purpose must not be empty"));
    }
    state.settings.check_key(key.as_bytes())?;
    Ok(format!("{}:{purpose}{key}", purpose.len()).into_bytes())
}
