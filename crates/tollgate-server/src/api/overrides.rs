//! The admin API of runtime overrides: another limit for one key, or for every key under a
//! prefix, of a configured policy, kept in the store so every server sharing it applies it (see
//! [`tollgate::overrides`] and, for Redis, how fast each kind reaches the fleet).
//!
//! | route | does |
//! |---|---|
//! | `GET /v1/overrides/{policy}?limit=&cursor=` | the policy's live overrides, keys then prefixes, a page at a time |
//! | `PUT /v1/overrides/{policy}/keys/{key}` | set the key's override (body: the parameters, `ttl`) |
//! | `GET /v1/overrides/{policy}/keys/{key}` | read it (404 when there is none) |
//! | `DELETE /v1/overrides/{policy}/keys/{key}` | remove it (404 when there was none) |
//! | `PUT`/`GET`/`DELETE /v1/overrides/{policy}/prefixes/{prefix}` | the same for every key starting with `prefix` |
//!
//! Keys and prefixes are separate routes so that one can never be taken for the other. Every
//! route needs the admin token when the server has one. A `PUT` body is the policy's algorithm
//! fields as in a config file (`{"rate": "100/s", "burst": 50}`, `{"limit": 500, "window":
//! "1m"}`) and an optional `ttl` (`"1h"`), validated exactly as the config is (errors name the
//! field: `body: burst: burst must be at least 1`). Setting and removing are logged as `info`
//! events with the policy, the target and the parameters, for an audit trail.
//!
//! Overrides are kept per policy name, so they survive a reload that keeps the policy's name
//! and algorithm; a policy that changes algorithm ignores its old overrides until they are
//! removed or lapse.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use serde::Serialize;
use serde_json::Value;
use tollgate::Policy;
use tollgate::overrides::{Override, OverrideStore, OverrideTarget};

use super::auth::authorize_admin;
use super::body::body_bytes;
use super::error::ApiError;
use super::override_view::{OverrideAnswer, answer, parameters};
use super::page::{PageQuery, bad_cursor, page};
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

/// The override routes, merged into the API's router.
pub(crate) fn routes() -> Router<SharedState> {
    Router::new()
        .route("/v1/overrides/{policy}", get(list))
        .route(
            "/v1/overrides/{policy}/keys/{key}",
            get(get_key).put(set_key).delete(remove_key),
        )
        .route(
            "/v1/overrides/{policy}/prefixes/{prefix}",
            get(get_prefix).put(set_prefix).delete(remove_prefix),
        )
}

/// The body of a `PUT`: the fields the policy's algorithm takes, as in a config file, and an
/// optional `ttl`. Only the policy's own fields are accepted.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // parsed by `tollgate_config::ours::parse_override`; this is its documented shape
pub(crate) struct OverrideRequest {
    /// `fixed_window`, `sliding_log`, `sliding_window`: requests per window.
    #[schema(minimum = 1)]
    limit: Option<u64>,
    /// `fixed_window`, `sliding_log`, `sliding_window`: the window, such as `"1m"`.
    window: Option<String>,
    /// `fixed_window`: `epoch` or `first_hit` (default: the policy's).
    anchor: Option<String>,
    /// `token_bucket`, `leaky_bucket`: the bucket's size.
    #[schema(minimum = 1)]
    capacity: Option<u64>,
    /// `token_bucket`: the refill rate, such as `"10/s"`.
    refill: Option<String>,
    /// `leaky_bucket`: the drain rate.
    leak: Option<String>,
    /// `gcra`: the rate, such as `"100/s"`.
    rate: Option<String>,
    /// `gcra`: the burst.
    #[schema(minimum = 1)]
    burst: Option<u64>,
    /// How long the override lasts, such as `"1h"`; without it, until removed.
    ttl: Option<String>,
}

/// A page of a policy's overrides, from `GET /v1/overrides/{policy}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OverrideList {
    /// The policy.
    pub policy: String,
    /// The policy's algorithm.
    pub algorithm: &'static str,
    /// The policy's own parameters, for comparison.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// This page's live overrides (at most `limit`), keys first then prefixes, each in byte
    /// order.
    pub overrides: Vec<OverrideAnswer>,
    /// Pass it as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A cursor: the target to list after, as `key:<key>` or `prefix:<prefix>`.
fn cursor_of(target: &OverrideTarget) -> String {
    format!("{}:{}", target.kind(), String::from_utf8_lossy(target.bytes()))
}

fn target_of(cursor: &str) -> Result<OverrideTarget, ApiError> {
    match cursor.split_once(':') {
        Some(("key", key)) if !key.is_empty() => Ok(OverrideTarget::key(key)),
        Some(("prefix", prefix)) if !prefix.is_empty() => Ok(OverrideTarget::prefix(prefix)),
        _ => Err(bad_cursor(cursor)),
    }
}

fn configured(state: &SharedState, name: &str) -> Result<Policy, ApiError> {
    let limits = state.limits.load();
    limits
        .policy(name)
        .map(|named| named.policy().clone())
        .ok_or_else(|| ApiError::unknown_policy(name))
}

fn no_override(target: &OverrideTarget) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no override for {} `{}`",
            target.kind(),
            String::from_utf8_lossy(target.bytes())
        ),
    )
}

#[utoipa::path(
    get,
    path = "/v1/overrides/{policy}",
    tag = "overrides",
    summary = "List a policy's overrides",
    description = "The policy's live overrides, keys first then prefixes, each in byte order, a page \
                   at a time: pass `next_cursor` back as `cursor` for the next page. Needs \
                   `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "Overrides a page holds (default 100)"),
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the page before; absent for the first page"),
    ),
    responses(
        (status = 200, description = "A page of overrides", body = OverrideList),
        (status = 400, description = "A limit out of range, a cursor no page answered, an unknown parameter", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn list(
    State(state): State<SharedState>,
    Path(policy): Path<String>,
    request_headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<OverrideList>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let policy = configured(&state, &policy)?;
    let page = page(query)?;
    let after = page.cursor.as_deref().map(target_of).transpose()?;
    let listed = state
        .store
        .list_overrides(&policy, after.as_ref(), page.limit)
        .await?;
    Ok(Json(OverrideList {
        policy: policy.name().to_owned(),
        algorithm: policy.algorithm().name(),
        parameters: parameters(policy.algorithm()),
        overrides: listed.overrides.iter().map(|o| answer(&policy, o)).collect(),
        next_cursor: listed.next.as_ref().map(cursor_of),
    }))
}

async fn set(
    state: &SharedState,
    policy: &str,
    target: OverrideTarget,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<OverrideAnswer>, ApiError> {
    let policy = configured(state, policy)?;
    let bytes = body_bytes(body)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
    let parsed = tollgate_config::ours::parse_override("body", text, &policy)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let value = Override::new(&policy, target, parsed.algorithm, parsed.ttl)?;
    state.store.set_override(&policy, &value).await?;
    let answer = answer(&policy, &value);
    tracing::info!(
        target: "tollgate_server::overrides",
        action = "set",
        policy = %answer.policy,
        kind = answer.kind,
        target = %String::from_utf8_lossy(value.target.bytes()),
        algorithm = answer.algorithm,
        parameters = %answer.parameters,
        ttl_ms = answer.expires_in_ms,
        "override changed"
    );
    Ok(Json(answer))
}

async fn read(
    state: &SharedState,
    policy: &str,
    target: OverrideTarget,
) -> Result<Json<OverrideAnswer>, ApiError> {
    let policy = configured(state, policy)?;
    match state.store.get_override(&policy, &target).await? {
        Some(value) => Ok(Json(answer(&policy, &value))),
        None => Err(no_override(&target)),
    }
}

async fn remove(state: &SharedState, policy: &str, target: OverrideTarget) -> Result<StatusCode, ApiError> {
    let policy = configured(state, policy)?;
    if !state.store.remove_override(&policy, &target).await? {
        return Err(no_override(&target));
    }
    tracing::info!(
        target: "tollgate_server::overrides",
        action = "remove",
        policy = %policy.name(),
        kind = target.kind(),
        target = %String::from_utf8_lossy(target.bytes()),
        "override changed"
    );
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    put,
    path = "/v1/overrides/{policy}/keys/{key}",
    tag = "overrides",
    summary = "Set a key's override",
    description = "This key gets these parameters of the policy's algorithm (validated as in the \
                   config), on every server sharing the store, until `ttl` or removal. Needs \
                   `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("key" = String, Path, description = "The key"),
    ),
    request_body(content = OverrideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Set", body = OverrideAnswer),
        (status = 400, description = "Unusable parameters", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The policy has the most key overrides a policy may have (100 000)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn set_key(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<OverrideAnswer>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(key.as_bytes())?;
    set(&state, &policy, OverrideTarget::key(key), body).await
}

#[utoipa::path(
    get,
    path = "/v1/overrides/{policy}/keys/{key}",
    tag = "overrides",
    summary = "Read a key's override",
    description = "Needs `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 200, description = "The override", body = OverrideAnswer),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy, or no override", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn get_key(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<Json<OverrideAnswer>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(key.as_bytes())?;
    read(&state, &policy, OverrideTarget::key(key)).await
}

#[utoipa::path(
    delete,
    path = "/v1/overrides/{policy}/keys/{key}",
    tag = "overrides",
    summary = "Remove a key's override",
    description = "The policy's own parameters apply again. Needs `Authorization: Bearer <token>` \
                   when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy, or no override", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn remove_key(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(key.as_bytes())?;
    remove(&state, &policy, OverrideTarget::key(key)).await
}

#[utoipa::path(
    put,
    path = "/v1/overrides/{policy}/prefixes/{prefix}",
    tag = "overrides",
    summary = "Set a prefix override",
    description = "Every key starting with `prefix` (unless it has a key override, or a longer \
                   prefix covers it) gets these parameters. Needs `Authorization: Bearer <token>` \
                   when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("prefix" = String, Path, description = "The key prefix"),
    ),
    request_body(content = OverrideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Set", body = OverrideAnswer),
        (status = 400, description = "Unusable parameters", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The policy has the most prefix overrides a policy may have (1 024)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn set_prefix(
    State(state): State<SharedState>,
    Path((policy, prefix)): Path<(String, String)>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<OverrideAnswer>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(prefix.as_bytes())?;
    set(&state, &policy, OverrideTarget::prefix(prefix), body).await
}

#[utoipa::path(
    get,
    path = "/v1/overrides/{policy}/prefixes/{prefix}",
    tag = "overrides",
    summary = "Read a prefix override",
    description = "Needs `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("prefix" = String, Path, description = "The key prefix"),
    ),
    responses(
        (status = 200, description = "The override", body = OverrideAnswer),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy, or no override", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn get_prefix(
    State(state): State<SharedState>,
    Path((policy, prefix)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<Json<OverrideAnswer>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(prefix.as_bytes())?;
    read(&state, &policy, OverrideTarget::prefix(prefix)).await
}

#[utoipa::path(
    delete,
    path = "/v1/overrides/{policy}/prefixes/{prefix}",
    tag = "overrides",
    summary = "Remove a prefix override",
    description = "Needs `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("prefix" = String, Path, description = "The key prefix"),
    ),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy, or no override", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn remove_prefix(
    State(state): State<SharedState>,
    Path((policy, prefix)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    state.settings.check_key(prefix.as_bytes())?;
    remove(&state, &policy, OverrideTarget::prefix(prefix)).await
}
