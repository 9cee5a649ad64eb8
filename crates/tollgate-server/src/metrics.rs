//! Prometheus metrics: what was decided, what shadow mode would have denied, how the store is
//! doing, and how config reloads went. Names are stable; dashboards depend on them.
//!
//! The recorder is installed once per process; handlers call the small functions here so metric
//! names live in one place.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the recorder (once; later calls reuse it) and returns the handle `/metrics` renders.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let latency_buckets = [
            0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
        ];
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full("tollgate_store_latency_seconds".into()),
                &latency_buckets,
            )
            .unwrap_or_else(|_| PrometheusBuilder::new());
        match builder.install_recorder() {
            Ok(handle) => handle,
            // Another recorder is already installed (a test process): render an empty one.
            Err(_) => PrometheusBuilder::new().build_recorder().handle(),
        }
    })
}

/// A decision: `outcome` is `allowed`, `denied` or `shadow_denied` (would have been denied).
pub fn decision(policy: &str, outcome: &'static str) {
    metrics::counter!("tollgate_decisions_total", "policy" => policy.to_owned(), "outcome" => outcome)
        .increment(1);
}

/// A decision a failure mode took because the store could not.
pub fn degraded(policy: &str) {
    metrics::counter!("tollgate_degraded_decisions_total", "policy" => policy.to_owned()).increment(1);
}

/// How long one store call took.
pub fn store_latency(elapsed: Duration) {
    metrics::histogram!("tollgate_store_latency_seconds").record(elapsed.as_secs_f64());
}

/// A store call that failed, by kind (`timeout`, `connection`, ...).
pub fn store_error(kind: &str) {
    metrics::counter!("tollgate_store_errors_total", "kind" => kind.to_owned()).increment(1);
}

/// A config reload, successful or not.
pub fn config_reload(ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!("tollgate_config_reloads_total", "outcome" => outcome).increment(1);
}
