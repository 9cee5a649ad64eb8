//! The HTTP API's router: every route of the [API](super) in one table, and what applies to all
//! of them (problem answers for bare errors, the body limit). Features define their handlers in
//! their own files; only this file knows them all.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};

use super::error::ApiError;
use super::{admin, attempts, charge, check, concurrency, limits, openapi, operations, overrides};
use crate::runtime::SharedState;
use crate::runtime::problem::bare_errors;

/// The API's routes over `state`. Tests drive it with `oneshot`; the binary serves it.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/v1/check", post(check::check))
        .route("/v1/refund", post(limits::refund))
        .route("/v1/charge", post(charge::charge))
        .route(
            "/v1/limits/{policy}/{key}",
            get(check::peek).delete(limits::reset),
        )
        .route("/v1/concurrency/{policy}/{key}", delete(concurrency::clear))
        .route(
            "/v1/concurrency/{policy}/{key}/acquire",
            post(concurrency::acquire),
        )
        .route(
            "/v1/concurrency/{policy}/{key}/release",
            post(concurrency::release),
        )
        .route(
            "/v1/attempts/{purpose}/{key}",
            post(attempts::count_attempt)
                .get(attempts::attempts)
                .delete(attempts::clear_attempts),
        )
        .route(
            "/v1/attempts/{purpose}/{key}/check",
            get(attempts::check_attempts),
        )
        .route("/v1/attempts/{purpose}/{key}/try", post(attempts::try_attempt))
        .route(
            "/v1/admin/access",
            get(admin::list).post(admin::add).delete(admin::remove),
        )
        .route("/v1/admin/top-offenders", get(admin::top_offenders))
        .route("/metrics", get(operations::render_metrics))
        .route("/healthz", get(operations::healthz))
        .route("/readyz", get(operations::ready))
        .route("/openapi.json", get(openapi::openapi_json))
        .merge(overrides::routes())
        .merge(crate::api::explain::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(axum::middleware::from_fn(bare_errors))
        .layer(DefaultBodyLimit::max(state.settings.listeners.max_body_bytes))
        .with_state(state)
}
