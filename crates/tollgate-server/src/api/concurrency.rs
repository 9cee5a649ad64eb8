//! The HTTP routes of concurrency limits (`algorithm: concurrency`): acquire a lease before the
//! work, release it after.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/concurrency/{policy}/{key}/acquire` | 200 `{"lease_id", "expires_in_ms", "in_flight", "limit", "degraded"}`, or 429 (a problem with `retry_after_ms`, `in_flight` and `limit`) when every slot is taken |
//! | `POST /v1/concurrency/{policy}/{key}/release` `{"lease_id"}` | 200 `{"released", "in_flight"}`; a lease already released, expired or never granted is `"released": false`, not an error |
//! | `DELETE /v1/concurrency/{policy}/{key}` | admin: drop every lease of the key at once, 200 `{"cleared"}` (how many were live) |
//!
//! Both go through the [`Engine`](tollgate::Engine): an acquisition the store cannot answer is
//! decided by the policy's `on_store_failure` (`fail_closed` answers 503, `fail_open` grants a
//! lease held nowhere, `local` decides on this instance's share); a release the store cannot
//! answer is 503, counted and logged, and the lease ends by itself at its `lease_timeout`.
//!
//! Clearing is the operator's way out when holders vanished without releasing and their leases
//! would hold the key's slots until their `lease_timeout`; it needs the admin token, like the
//! reset of a rate limit key, and is logged as an `info` event with `audit = true`.
//!
//! Concurrency policies are not rate limits: `POST /v1/check` and the gRPC service never decide
//! them. A check naming one is a 400 that says where to go; the Envoy rate limit protocol has a
//! single call per request and no release, so a descriptor cannot hold a lease (the config
//! refuses `algorithm: concurrency` in a descriptor).

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tollgate::concurrency::{Acquire, LeaseId, Release};
use tollgate::{FailureMode, headers};

use serde::Serialize;
use tollgate::headers::millis_up;
use utoipa::ToSchema;

use super::answer::insert;
use super::auth::{authorize_admin, authorize_app};
use super::body::{body_bytes, json_body, parse_json};
use super::error::ApiError;
use super::policy::concurrency_policy;
use crate::ops::{count, metrics};
use crate::runtime::SharedState;
use crate::runtime::problem::{PROBLEM_JSON, Problem, problem};

/// The body of `POST /v1/concurrency/{policy}/{key}/release`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReleaseBody {
    /// The `lease_id` the acquisition answered: 32 hexadecimal digits.
    #[schema(min_length = 32, max_length = 32, pattern = "^[0-9a-fA-F]{32}$")]
    lease_id: String,
}

/// The answer of `POST /v1/concurrency/{policy}/{key}/acquire` when a slot was granted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseGranted {
    /// What to send to `.../release`: 32 hexadecimal digits.
    pub lease_id: String,
    /// Milliseconds until the lease ends by itself, if it is not released before.
    pub expires_in_ms: u64,
    /// Leases of the key live now, this one included.
    pub in_flight: u64,
    /// The policy's `max_in_flight` (this instance's share, when degraded under `local`).
    pub limit: u64,
    /// The store failed and the policy's failure mode granted the lease.
    pub degraded: bool,
}

/// The 429 of an acquisition: an RFC 9457 problem with the wait and the count.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseDenied {
    /// Always `about:blank`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `Too Many Requests`.
    pub title: &'static str,
    /// 429.
    pub status: u16,
    /// How many leases are in flight, of how many.
    pub detail: String,
    /// The concurrency policy.
    pub policy: String,
    /// Milliseconds until the oldest lease expires: a slot is free by then at the latest.
    pub retry_after_ms: u64,
    /// Leases of the key live now.
    pub in_flight: u64,
    /// The policy's `max_in_flight`.
    pub limit: u64,
    /// The store failed and the policy's failure mode (`local`) denied.
    pub degraded: bool,
}

/// The answer of `DELETE /v1/concurrency/{policy}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeasesCleared {
    /// How many live leases the key held: their slots are free now.
    pub cleared: u64,
}

/// The answer of `POST /v1/concurrency/{policy}/{key}/release`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseReleased {
    /// True when the lease was live and its slot is free now; false when it was not held
    /// (released before, expired, or never granted).
    pub released: bool,
    /// When released: leases of the key still live.
    pub in_flight: Option<u64>,
}

/// The body an acquire takes: nothing, or `{}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

#[utoipa::path(
    post,
    path = "/v1/concurrency/{policy}/{key}/acquire",
    tag = "concurrency",
    summary = "Acquire a lease",
    description = "Takes one of the key's `max_in_flight` slots until it is released or its \
                   `lease_timeout` passes. A full key answers 429 with `Retry-After`: the time until \
                   the oldest lease expires (a slot may free sooner, when its holder releases).",
    params(
        ("policy" = String, Path, description = "A configured concurrency policy"),
        ("key" = String, Path, description = "The key: a user, a tenant"),
    ),
    responses(
        (status = 200, description = "Granted", body = LeaseGranted),
        (status = 429, description = "Every slot is taken", body = LeaseDenied, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Whole seconds until the oldest lease expires"))),
        (status = 400, description = "Unusable input (a body other than nothing or `{}`), or a rate policy", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed and the policy fails closed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn acquire(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // It takes no fields: an empty body or `{}`, so a client that thinks it sends something
    // (a cost, a ttl) learns that it is not read.
    let bytes = body_bytes(body)?;
    if !bytes.iter().all(u8::is_ascii_whitespace) {
        let _: NoFields = parse_json(&bytes)?;
    }
    let limits = state.limits.load_full();
    let policy = concurrency_policy(&limits, &policy)?;
    state.settings.check_key(key.as_bytes())?;
    let acquisition = state.engine.acquire(policy, key.as_bytes()).await?;
    if let Some(err) = &acquisition.store_error {
        metrics::store_error(err);
        count::degraded(policy.name());
    }
    match acquisition.acquire {
        Acquire::Granted(lease) => {
            let outcome = if lease.degraded { "degraded" } else { "granted" };
            metrics::concurrency_acquire(policy.name(), outcome);
            let body = LeaseGranted {
                lease_id: lease.id.to_string(),
                expires_in_ms: millis_up(lease.expires_in),
                in_flight: lease.in_flight,
                limit: lease.limit,
                degraded: lease.degraded,
            };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Acquire::Denied(full) if full.degraded && policy.failure_mode() == FailureMode::FailClosed => {
            metrics::concurrency_acquire(policy.name(), "error");
            let cause = acquisition
                .store_error
                .map_or_else(|| "the store failed".to_owned(), |e| e.to_string());
            let mut response = problem(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{cause}; policy `{}` fails closed", policy.name()),
                Some(policy.name()),
            );
            retry_after(&mut response, full.retry_after);
            Ok(response)
        }
        Acquire::Denied(full) => {
            let outcome = if full.degraded { "degraded" } else { "denied" };
            metrics::concurrency_acquire(policy.name(), outcome);
            if !full.degraded {
                // The admin API's top offenders, as an enforced rate limit denial counts.
                count::denied_key(policy.name(), key.as_bytes());
            }
            let body = LeaseDenied {
                kind: "about:blank",
                title: "Too Many Requests",
                status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
                detail: format!(
                    "{} of {} leases of this key are in flight under policy `{}`",
                    full.in_flight,
                    full.limit,
                    policy.name()
                ),
                policy: policy.name().to_owned(),
                retry_after_ms: millis_up(full.retry_after),
                in_flight: full.in_flight,
                limit: full.limit,
                degraded: full.degraded,
            };
            let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
            retry_after(&mut response, full.retry_after);
            Ok(response)
        }
    }
}

fn retry_after(response: &mut Response, wait: Duration) {
    insert(
        response.headers_mut(),
        header::RETRY_AFTER.as_str(),
        headers::seconds_up(wait).max(1).to_string(),
    );
}

#[utoipa::path(
    post,
    path = "/v1/concurrency/{policy}/{key}/release",
    tag = "concurrency",
    summary = "Release a lease",
    description = "Frees the slot of `lease_id`. A lease that is not held (released before, expired, \
                   never granted) answers `released: false`: not an error, since it holds no slot. \
                   When the store fails the answer is 503 and the lease ends at its `lease_timeout`. \
                   Needs `Authorization: Bearer <token>` with the app or the admin token when the \
                   server has one.",
    params(
        ("policy" = String, Path, description = "A configured concurrency policy"),
        ("key" = String, Path, description = "The key the lease was acquired for"),
    ),
    request_body(content = ReleaseBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Released, or not held", body = LeaseReleased),
        (status = 400, description = "Unusable input, or a rate policy", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed; the lease ends at its timeout", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn release(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize_app(&state, &request_headers)?;
    let limits = state.limits.load_full();
    let policy = concurrency_policy(&limits, &policy)?;
    state.settings.check_key(key.as_bytes())?;
    let body: ReleaseBody = json_body(body)?;
    let lease: LeaseId = body
        .lease_id
        .parse()
        .map_err(|e: tollgate::concurrency::BadLeaseId| ApiError::bad_request(format!("lease_id: {e}")))?;
    match state.engine.release(policy, key.as_bytes(), lease).await {
        Ok(Release::Released { in_flight }) => {
            metrics::concurrency_release(policy.name(), "released", None);
            Ok(Json(LeaseReleased {
                released: true,
                in_flight: Some(in_flight),
            })
            .into_response())
        }
        Ok(Release::NotHeld) => {
            metrics::concurrency_release(policy.name(), "not_held", None);
            Ok(Json(LeaseReleased {
                released: false,
                in_flight: None,
            })
            .into_response())
        }
        Err(err) if err.is_bad_input() => Err(err.into()),
        Err(err) => {
            metrics::concurrency_release(policy.name(), "failed", Some(&err));
            Ok(problem(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{err}; the lease was not released and ends by itself within {} ms",
                    millis_up(policy.lease_timeout())
                ),
                Some(policy.name()),
            ))
        }
    }
}

#[utoipa::path(
    delete,
    path = "/v1/concurrency/{policy}/{key}",
    tag = "concurrency",
    summary = "Clear a key's leases",
    description = "Drops every lease of the key at once, freeing its slots: for holders that vanished \
                   without releasing, whose leases would otherwise hold the key until their \
                   `lease_timeout`. A holder releasing one later gets `released: false`. Needs \
                   `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured concurrency policy"),
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 200, description = "Cleared (`cleared` is 0 when the key held no lease)", body = LeasesCleared),
        (status = 400, description = "Unusable input, or a rate policy", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed; the leases end at their timeout", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn clear(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<Json<LeasesCleared>, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let limits = state.limits.load_full();
    let policy = concurrency_policy(&limits, &policy)?;
    state.settings.check_key(key.as_bytes())?;
    let cleared = state.engine.clear_leases(policy, key.as_bytes()).await?;
    tracing::info!(
        target: "tollgate_server::concurrency",
        audit = true,
        action = "concurrency.clear",
        policy = policy.name(),
        key = %key,
        cleared,
        "leases cleared"
    );
    Ok(Json(LeasesCleared { cleared }))
}
