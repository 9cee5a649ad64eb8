//! The debug port: envoyproxy/ratelimit's `/rlconfig` (the loaded configuration as text, see
//! [`Limits::dump`](tollgate_config::Limits::dump)) and tollgate's `/metrics`, on a listener of
//! their own that is off unless asked for (`--debug-addr`, or upstream's `DEBUG_PORT`).
//!
//! Upstream serves it on `0.0.0.0:6070` always, with Go's profiler beside it. Here it is opt-in,
//! because the configuration it prints can tell an outsider what is limited and how much: keep
//! it on a loopback or an internal address (`serve` logs a warning when it is not). `GET /` lists the endpoints, as upstream's does.
//! The profiler and upstream's `/stats` (expvar) have no counterpart; `/metrics` is the HTTP
//! port's own handler, so the same Prometheus text, with the top offenders' keys only for a
//! caller with the admin token when one is set.

use axum::Router;
use axum::extract::State;
use axum::routing::get;

use crate::runtime::SharedState;

/// The endpoints, with upstream's wording where upstream has them.
const INDEX: &str = "\
/dashboard: live dashboard (data at /dashboard/data, admin token when set)
/metrics: prometheus metrics
/rlconfig: print out the currently loaded configuration for debugging
";

/// The debug routes over `state`.
pub(crate) fn router(state: SharedState) -> Router {
    Router::new()
        .route("/", get(|| async { INDEX }))
        .route("/rlconfig", get(rlconfig))
        .route("/metrics", get(crate::api::operations::render_metrics))
        .with_state(state.clone())
        .merge(crate::api::dashboard::router(state))
}

/// The limits being served now: a reload shows at once.
async fn rlconfig(State(state): State<SharedState>) -> String {
    state.limits.load().dump()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn rlconfig_prints_the_limits_in_force() -> Result<(), Box<dyn std::error::Error>> {
        use crate::runtime::{AnyStore, AppState, Settings};
        use axum::body::Body;
        use axum::http::Request;

        use tower::ServiceExt;

        let limits = tollgate_config::parse(
            "edge.yaml",
            "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
        )?;
        let app = router(AppState::new(limits, AnyStore::memory(), Settings::default()));
        let answer = app
            .oneshot(Request::get("/rlconfig").body(Body::empty())?)
            .await?;
        let body = axum::body::to_bytes(answer.into_body(), 4096).await?;
        assert_eq!(
            body,
            "edge.path: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n"
        );
        Ok(())
    }
}
