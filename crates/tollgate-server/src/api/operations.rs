//! What an operator or an orchestrator asks the HTTP port: Prometheus metrics, liveness, and
//! readiness (the store's health, naming the class of its failure).
//!
//! `/metrics` (on the HTTP port and the debug port alike) names request keys in one metric only,
//! `tollgate_top_offender_denials`; like every other answer that names keys, it is served only
//! to a caller with the admin token when one is set, so a scrape without it gets the rest.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::ops::metrics;
use crate::runtime::SharedState;

/// One circuit breaker of the store.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Breaker {
    /// The node: `host:port`.
    pub node: String,
    /// Open: calls to it are refused at once.
    pub open: bool,
}

/// The store's health, from `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// The store can decide now.
    pub ready: bool,
    /// `memory` or `redis` (one server or a cluster).
    pub store: &'static str,
    /// When not ready: `timeout`, `connection`, `auth`, `cluster`, ...
    pub class: Option<&'static str>,
    /// When not ready: what failed.
    pub error: Option<String>,
    /// Each node's breaker (none for the memory store).
    pub breakers: Vec<Breaker>,
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
    responses(
        (status = 200, description = "The store can decide now", body = Readiness),
        (status = 503, description = "It cannot: the failure's class and every node's breaker", body = Readiness),
    )
)]
/// Ready when the store can decide now; otherwise 503 with the class of the store's failure
/// (`timeout`, `connection`, `auth`, `cluster`, ...), so an operator sees a wrong password or a
/// wrong cluster mode without reading logs.
pub(crate) async fn ready(State(state): State<SharedState>) -> Response {
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
    let body = Readiness {
        ready: health.ready,
        store: state.store.kind(),
        class: health.class,
        error: health.error,
        breakers,
    };
    let status = match health.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body)).into_response()
}
