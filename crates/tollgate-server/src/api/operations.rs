//! What an operator or an orchestrator asks the HTTP port: Prometheus metrics, liveness, and
//! readiness (whether this instance should get traffic, with the store's health and the class of
//! its failure).
//!
//! Readiness decides which instances a load balancer sends requests to, so it answers what
//! moving traffic away from this instance would change. A store shared by a fleet fails for every
//! instance at once: taking this one out moves its clients to others that fail the same way, and
//! a readiness that followed the store would empty the whole Service in one Redis blip, turning
//! the answers the failure modes give (a local limit, an admission) into refused connections.
//! So `/readyz` stays ready while the store fails as long as every enforced limit's failure mode
//! answers without the store (`local`, `fail_open`); it answers `503` when a `fail_closed` limit
//! would have to refuse (another instance whose store answers can decide it), and from the start
//! of a shutdown. `/readyz?strict=true` is the store check alone, for those who would rather
//! pull an instance whose store fails whatever the limits say.
//!
//! `/metrics` (on the HTTP port and the debug port alike) names request keys in one metric only,
//! `tollgate_top_offender_denials`; like every other answer that names keys, it is served only
//! to a caller with the admin token when one is set, so a scrape without it gets the rest.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::ApiError;
use crate::ops::metrics;
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

/// One circuit breaker of the store.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Breaker {
    /// The node: `host:port`.
    pub node: String,
    /// Open: calls to it are refused at once.
    pub open: bool,
}

/// Whether this instance should get traffic, and the store's health, from `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// This instance should get traffic: it is not shutting down, and the store can decide now
    /// or (unless `strict`) every enforced limit's failure mode answers without it.
    pub ready: bool,
    /// `memory` or `redis` (one server or a cluster).
    pub store: &'static str,
    /// The store can decide now.
    pub store_ready: bool,
    /// A shutdown has started (the shutdown delay or the drain): never ready again.
    pub stopping: bool,
    /// The enforced limits that fail closed: while the store fails they can only refuse, and
    /// make this instance not ready.
    pub fail_closed: Vec<String>,
    /// When the store is not ready: `timeout`, `connection`, `auth`, `cluster`, ...
    pub class: Option<&'static str>,
    /// When the store is not ready: what failed.
    pub error: Option<String>,
    /// Each node's breaker (none for the memory store).
    pub breakers: Vec<Breaker>,
}

/// The query of `GET /readyz`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReadyQuery {
    /// Ready only while the store can decide, whatever the failure modes.
    strict: Option<bool>,
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    description = "Every metric. `tollgate_top_offender_denials`, whose `key` label names request \
                   keys, is included only with `Authorization: Bearer <admin token>` when the \
                   server has an admin token.",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"))
)]
pub(crate) async fn render_metrics(State(state): State<SharedState>, headers: HeaderMap) -> String {
    metrics::store_breakers(&state.store.breakers());
    if let Some(lost) = state.store.state_lost() {
        metrics::store_state_lost(lost);
    }
    if let Some(failures) = state.store.refund_failures() {
        metrics::store_refund_failures(failures);
    }
    if let Some(failovers) = state.store.failovers() {
        metrics::store_failovers(failovers);
    }
    let mut text = metrics::install().render();
    if super::auth::authorize_admin(&state, &headers).is_ok() {
        metrics::render_top_offenders(&mut text);
    }
    text
}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    summary = "Liveness",
    responses((status = 200, description = "The process serves", body = String, content_type = "text/plain"))
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    summary = "Readiness",
    description = "Whether this instance should get traffic. Not ready from the start of a \
                   shutdown, and while the store fails if an enforced limit fails closed; a \
                   store failure that every limit's failure mode answers leaves it ready, since \
                   a store shared by the fleet fails for every instance alike. `strict=true`: \
                   ready only while the store can decide.",
    params(
        ("strict" = Option<bool>, Query, description = "Ready only while the store can decide, whatever the failure modes (default false)"),
    ),
    responses(
        (status = 200, description = "Ready: send it traffic", body = Readiness),
        (status = 400, description = "Unusable query", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Not ready: shutting down, or the store fails and a limit cannot be answered without it (with `strict`: the store fails)", body = Readiness),
    )
)]
/// Ready unless shutting down, or the store fails while a limit cannot answer without it (with
/// `strict`: while the store fails). The body names the store's failure class (`timeout`,
/// `connection`, `auth`, `cluster`, ...), so an operator sees a wrong password or a wrong
/// cluster mode without reading logs.
pub(crate) async fn ready(
    State(state): State<SharedState>,
    query: Result<Query<ReadyQuery>, QueryRejection>,
) -> Response {
    let strict = match query {
        Ok(Query(query)) => query.strict.unwrap_or(false),
        Err(err) => return ApiError::bad_request(err.body_text()).into_response(),
    };
    let health = state.store.health().await;
    metrics::store_breakers(&health.breakers);
    let breakers = health
        .breakers
        .iter()
        .map(|(node, open)| Breaker {
            node: node.clone(),
            open: *open,
        })
        .collect();
    let fail_closed: Vec<String> = state
        .limits
        .load()
        .fail_closed()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let stopping = state.is_stopping();
    let answers = health.ready || (!strict && fail_closed.is_empty());
    let body = Readiness {
        ready: answers && !stopping,
        store: state.store.kind(),
        store_ready: health.ready,
        stopping,
        fail_closed,
        class: health.class,
        error: health.error,
        breakers,
    };
    let status = match body.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body)).into_response()
}
