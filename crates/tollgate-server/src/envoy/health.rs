//! Health as envoyproxy/ratelimit reports it, so the probes of its deployments keep working:
//! the standard gRPC health service (`grpc.health.v1.Health`, from `tonic-health`) on the gRPC
//! port, and `GET /healthcheck` on the HTTP port (`200 OK`, or `500` when unhealthy).
//!
//! The server is healthy while its store answers and it is not shutting down. The memory store
//! always answers; a Redis store is pinged every [`PROBE_INTERVAL`] by [`watch_store`] and is
//! unhealthy from the first failed ping until the next good one, and at start until the first
//! good one (as upstream, whose Redis component starts unhealthy). On shutdown the status turns
//! `NOT_SERVING` before the listeners drain (at the start of the shutdown delay, when there is
//! one), so a load balancer stops sending new calls; then, as the drain starts, the open `Watch`
//! streams are ended, so they do not hold the drain open.
//!
//! Being unhealthy does not stop answers: `ShouldRateLimit` keeps deciding with each limit's
//! failure mode while Redis is away. Health tells the orchestrator, not the callers.
//!
//! The status is the same under three service names: `""` (the whole server, the name a probe
//! asks for by default), `ratelimit` (upstream's name) and
//! `envoy.service.ratelimit.v3.RateLimitService` (the served API's full name).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use crate::runtime::store::AnyStore;

/// The service names the status is reported under; see the [module docs](self).
pub(crate) const SERVICE_NAMES: [&str; 3] = ["", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"];

/// How often [`watch_store`] pings a Redis store.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long one ping may take before it counts as failed.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's health, shared by the gRPC health service, `/healthcheck` and the store probe.
/// Clones share one state.
#[derive(Clone, Debug)]
pub struct Health {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    reporter: HealthReporter,
    store_ok: AtomicBool,
    stopping: AtomicBool,
    /// Set once `shut_down` removed the statuses.
    cleared: AtomicBool,
    /// `store_ok && !stopping`, as last reported.
    serving: AtomicBool,
    /// Orders updates, so two concurrent ones cannot report in the opposite order.
    updates: tokio::sync::Mutex<()>,
}

impl Health {
    /// Health with the store answering (`store_ok`) or not yet; not shutting down.
    pub async fn new(store_ok: bool) -> Self {
        let health = Health {
            inner: Arc::new(Inner {
                reporter: HealthReporter::new(),
                store_ok: AtomicBool::new(store_ok),
                stopping: AtomicBool::new(false),
                cleared: AtomicBool::new(false),
                serving: AtomicBool::new(store_ok),
                updates: tokio::sync::Mutex::new(()),
            }),
        };
        health.report(true).await;
        health
    }

    /// Whether the server reports itself healthy now.
    pub fn is_serving(&self) -> bool {
        self.inner.serving.load(Ordering::Acquire)
    }

    /// Records whether the store answered, and reports the resulting status.
    pub async fn set_store(&self, ok: bool) {
        self.inner.store_ok.store(ok, Ordering::Release);
        self.report(false).await;
    }

    /// Reports `NOT_SERVING` for good, while the service keeps answering health checks: the
    /// start of a shutdown, during its delay (see [`Settings::shutdown_delay`](crate::Settings)).
    pub async fn stop_serving(&self) {
        self.inner.stopping.store(true, Ordering::Release);
        self.report(false).await;
    }

    /// Reports `NOT_SERVING` for good, then ends the `Watch` streams (each sees `NOT_SERVING`
    /// first), so a graceful shutdown is not held open by health watchers.
    pub async fn shut_down(&self) {
        self.stop_serving().await;
        let _guard = self.inner.updates.lock().await;
        self.inner.cleared.store(true, Ordering::Release);
        let mut reporter = self.inner.reporter.clone();
        for name in SERVICE_NAMES {
            reporter.clear_service_status(name).await;
        }
    }

    /// The `grpc.health.v1.Health` service to add to a tonic server.
    pub fn grpc_service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.inner.reporter.clone()))
    }

    fn stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::Acquire)
    }

    /// Reports the status to the health service when it changed (or `always`), so a `Watch`
    /// stream sees each change once, not every probe.
    async fn report(&self, always: bool) {
        let _guard = self.inner.updates.lock().await;
        if self.inner.cleared.load(Ordering::Acquire) {
            // Shut down: the statuses are gone, and stay gone.
            return;
        }
        let serving = self.inner.store_ok.load(Ordering::Acquire) && !self.stopping();
        if self.inner.serving.swap(serving, Ordering::AcqRel) == serving && !always {
            return;
        }
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in SERVICE_NAMES {
            self.inner.reporter.set_service_status(name, status).await;
        }
    }
}

/// Pings `store` every [`PROBE_INTERVAL`] and reports the result to `health` until `stop`
/// completes. The memory store always answers: it is reported once.
pub(crate) async fn watch_store(health: Health, store: AnyStore, stop: impl Future<Output = ()>) {
    let mut stop = std::pin::pin!(stop);
    if store.is_memory() {
        health.set_store(true).await;
        return;
    }
    loop {
        let ok = tokio::time::timeout(PROBE_TIMEOUT, store.ready())
            .await
            .unwrap_or(false);
        let was_ok = health.inner.store_ok.load(Ordering::Acquire);
        if was_ok && !ok {
            tracing::warn!(
                store = store.kind(),
                "store does not answer: health is not serving"
            );
        } else if !was_ok && ok {
            tracing::info!(store = store.kind(), "store answers: health is serving");
        }
        health.set_store(ok).await;
        tokio::select! {
            () = tokio::time::sleep(PROBE_INTERVAL) => {}
            () = &mut stop => return,
        }
    }
}

/// `GET /healthcheck`, as upstream: `200` with body `OK` when healthy, else `500`.
pub(crate) fn router(health: Health) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .with_state(health)
}

async fn healthcheck(State(health): State<Health>) -> Response {
    if health.is_serving() {
        "OK".into_response()
    } else {
        let detail = if health.stopping() {
            "shutting down"
        } else {
            "the store does not answer"
        };
        crate::runtime::problem::problem(StatusCode::INTERNAL_SERVER_ERROR, detail, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn health_follows_the_store_until_shutdown() {
        let health = Health::new(true).await;
        assert!(health.is_serving());
        health.set_store(false).await;
        assert!(!health.is_serving());
        health.set_store(true).await;
        assert!(health.is_serving());
        health.shut_down().await;
        assert!(!health.is_serving(), "never healthy again once shutting down");
    }
}
