//! Failed-attempt counters for login protection: count an attempt, read the counter, ask whether
//! another is allowed, clear it after a success (admin). Counters of different purposes never
//! meet.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use tollgate::{AttemptsStore, headers};
use utoipa::ToSchema;

use super::auth::authorize_admin;
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
    /// How long the counter lives after this attempt, in seconds (at most 1000 days).
    #[schema(minimum = 1, maximum = 86_400_000)]
    ttl_seconds: u64,
}

#[derive(Deserialize)]
pub(crate) struct MaxQuery {
    max: Option<u64>,
}

#[utoipa::path(
    post,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Count a failed attempt",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    request_body(content = CountAttempt, content_type = "application/json"),
    responses(
        (status = 200, description = "The count after this attempt", body = AttemptCount),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn count_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AttemptCount>, ApiError> {
    let request: CountAttempt = json_body(body)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state
        .store
        .increment_attempts(&name, Duration::from_secs(request.ttl_seconds))
        .await?;
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
    if max > tollgate::bounds::MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "max is {max}, above the maximum of {}",
            tollgate::bounds::MAX_LIMIT
        )));
    }
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
    description = "After a success. Needs `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    responses(
        (status = 204, description = "Cleared"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn clear_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let name = attempts_key(&state, &purpose, &key)?;
    state.store.reset_attempts(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Attempts counters of different purposes never meet: the purpose is length-prefixed.
fn attempts_key(state: &SharedState, purpose: &str, key: &str) -> Result<Vec<u8>, ApiError> {
    if purpose.is_empty() {
        return Err(ApiError::bad_request("purpose must not be empty"));
    }
    state.settings.check_key(key.as_bytes())?;
    Ok(format!("{}:{purpose}{key}", purpose.len()).into_bytes())
}
