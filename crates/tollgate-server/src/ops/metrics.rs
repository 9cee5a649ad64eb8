//! Prometheus metrics: what was decided, what shadow mode would have denied, how the store is
//! doing, and how config reloads went. Names are stable; dashboards depend on them.
//!
//! The recorder is installed once per process; handlers call the small functions here so metric
//! names live in one place.
//!
//! Memory is bounded whether or not anyone scrapes: every histogram has fixed buckets, and the
//! raw samples the exporter buffers before sorting them into buckets are drained (its "upkeep")
//! every [`UPKEEP_EVERY`] samples on the recording path and every second by a background thread,
//! not only when `/metrics` is rendered. Without that an unscraped instance grows by about
//! 17 bytes per check (`tests/memory.rs` measures it). Outcome labels are [`tollgate::Outcome::as_str`] and store error
//! kinds [`tollgate::Error::class`], so HTTP and gRPC report the same bounded set of values.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tollgate::Error;
use tollgate_tower::LogSampler;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Histogram samples recorded between two drains on the recording path: at 8 bytes a sample, at
/// most half a MiB waits at any time, whatever the traffic.
pub const UPKEEP_EVERY: u64 = 65_536;

static SAMPLES: AtomicU64 = AtomicU64::new(0);

/// Installs the recorder (once; later calls reuse it) and returns the handle `/metrics` renders.
/// Also starts the thread that drains buffered samples every second.
pub fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        // Buckets for every histogram (`Matcher::Prefix("tollgate_")`), so none becomes a
        // summary: a summary's quantiles come from samples, a histogram's from fixed counters.
        let latency_buckets = [
            0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
        ];
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Prefix("tollgate_".into()),
                &latency_buckets,
            )
            .and_then(|b| b.set_buckets(&latency_buckets))
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let handle = match builder.install_recorder() {
            Ok(handle) => handle,
            // Another recorder is already installed (a test process): render an empty one.
            Err(_) => PrometheusBuilder::new().build_recorder().handle(),
        };
        let upkeep = handle.clone();
        // A thread, not a task: `install` may be called outside a runtime. If it cannot be
        // started, the drain on the recording path still bounds memory.
        let _ = std::thread::Builder::new()
            .name("tollgate-metrics-upkeep".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                    upkeep.run_upkeep();
                }
            });
        start_at_zero("tollgate_config_reloads_total", "outcome", &["ok", "failed"]);
        handle
    })
}

/// Registers the counter `name` at 0 for each of `values` of `label`, before any event.
///
/// An alert on a rare event (a failed reload, a refused connection, a NACKed push) watches the
/// counter with `increase()`, which sees an event only as a step between two samples: a series
/// that first appears at 1, with its first event, shows no step, and that event would fire no
/// alert. Started at 0, the first event is a step like any other.
pub(crate) fn start_at_zero(name: &'static str, label: &'static str, values: &[&'static str]) {
    for value in values {
        metrics::counter!(name, label => *value).increment(0);
    }
}

/// Counts one histogram sample; every [`UPKEEP_EVERY`]th drains the buffered ones.
fn sampled() {
    if SAMPLES.fetch_add(1, Ordering::Relaxed) % UPKEEP_EVERY == UPKEEP_EVERY - 1
        && let Some(handle) = HANDLE.get()
    {
        handle.run_upkeep();
    }
}

/// An acquisition of a concurrency policy: `outcome` is `granted`, `denied`, `degraded` (the
/// store failed and the failure mode granted or denied) or `error` (the store failed under
/// `fail_closed`).
pub(crate) fn concurrency_acquire(policy: &str, outcome: &'static str) {
    metrics::counter!("tollgate_concurrency_acquisitions_total", "policy" => policy.to_owned(), "outcome" => outcome)
        .increment(1);
}

/// A release of a concurrency lease: `outcome` is `released`, `not_held` (released before,
/// expired, or never granted) or `failed` (the store failed: the lease ends at its timeout).
/// A failed release is also logged at `warn`, at most once a second.
pub(crate) fn concurrency_release(policy: &str, outcome: &'static str, err: Option<&Error>) {
    metrics::counter!("tollgate_concurrency_releases_total", "policy" => policy.to_owned(), "outcome" => outcome)
        .increment(1);
    if let Some(err) = err {
        store_error(err);
        if RELEASE_LOG.due() {
            tracing::warn!(
                policy,
                class = err.class().unwrap_or("input"),
                error = %err,
                "concurrency release failed; the lease ends at its lease_timeout (sampled: at most one line a second)"
            );
        }
    }
}

static RELEASE_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// How many of each policy's most denied keys `tollgate_top_offender_denials` shows.
pub const TOP_OFFENDERS_SHOWN: usize = 10;

/// Appends `tollgate_top_offender_denials{policy, rank, key}` to a Prometheus text exposition:
/// for each policy with denials, its [`TOP_OFFENDERS_SHOWN`] most denied keys (from the
/// dashboard's fixed-size summary) and their counts. Written at each scrape from the summary, so
/// a key that drops out of the top is gone from the next scrape: the series are bounded by
/// policies × [`TOP_OFFENDERS_SHOWN`], whatever the key churn. This is the one metric with
/// request keys in a label, capped this way; `/metrics` appends it only for a caller with the
/// admin token when one is set.
pub(crate) fn render_top_offenders(text: &mut String) {
    use std::fmt::Write as _;
    let recorder = &super::recorder::RECORDER;
    let policies = recorder.policies_with_denials();
    if policies.is_empty() {
        return;
    }
    text.push_str("# HELP tollgate_top_offender_denials Denials of each policy's most denied keys on this instance (a capped top-k)
");
    text.push_str(
        "# TYPE tollgate_top_offender_denials gauge
",
    );
    for policy in policies {
        let top = recorder.top_denied(&policy, TOP_OFFENDERS_SHOWN);
        for (rank, (key, count, _)) in top.keys.iter().enumerate() {
            let _ = writeln!(
                text,
                "tollgate_top_offender_denials{{policy=\"{}\",rank=\"{}\",key=\"{}\"}} {count}",
                label_value(&policy),
                rank + 1,
                label_value(&String::from_utf8_lossy(key)),
            );
        }
    }
}

/// A Prometheus label value: `\`, `"` and line feeds escaped.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A refund (`POST /v1/refund`) the store carried out: one per call, and the cost given back.
pub(crate) fn refund(policy: &str, cost: u64) {
    metrics::counter!("tollgate_refunds_total", "policy" => policy.to_owned()).increment(1);
    metrics::counter!("tollgate_refunded_cost_total", "policy" => policy.to_owned()).increment(cost);
}

/// A charge of `cost` under `policy`; `recorded` false when a failing store lost it (the
/// failure mode could not record it), which is also logged, sampled.
pub(crate) fn charge(policy: &str, cost: u64, recorded: bool) {
    metrics::counter!("tollgate_charges_total", "policy" => policy.to_owned()).increment(1);
    metrics::counter!("tollgate_charged_cost_total", "policy" => policy.to_owned()).increment(cost);
    if !recorded {
        metrics::counter!("tollgate_charges_unrecorded_total", "policy" => policy.to_owned()).increment(1);
        if UNRECORDED_LOG.due() {
            tracing::warn!(
                policy,
                cost,
                "a charge was not recorded: the store failed (sampled: at most one line a second)"
            );
        }
    }
}

static UNRECORDED_LOG: tollgate_tower::LogSampler = tollgate_tower::LogSampler::new(Duration::from_secs(1));

/// How long one store call took.
pub fn store_latency(elapsed: Duration) {
    metrics::histogram!("tollgate_store_latency_seconds").record(elapsed.as_secs_f64());
    sampled();
}

/// A store call that failed, by [`Error::class`] (`timeout`, `connection`, `full`, ...). Also
/// logged at `warn`, at most once a second per class, so an operator sees a sick store in the
/// logs without a line per request, and one class failing often (timeouts while Redis stalls)
/// does not hide another (admissions the replicas did not acknowledge).
pub(crate) fn store_error(err: &Error) {
    if let Some(class) = err.class() {
        metrics::counter!("tollgate_store_errors_total", "kind" => class).increment(1);
        let sampler = STORE_ERROR_CLASSES
            .iter()
            .position(|known| *known == class)
            .map_or(&STORE_ERROR_LOGS[STORE_ERROR_CLASSES.len()], |i| {
                &STORE_ERROR_LOGS[i]
            });
        if sampler.due() {
            tracing::warn!(
                class,
                error = %err,
                "rate limit store failed; failure modes decide (sampled: at most one line a second per class)"
            );
        }
    }
}

/// The classes [`Error::class`] names, each logged on its own; any other shares the last sampler.
const STORE_ERROR_CLASSES: [&str; 9] = [
    "timeout",
    "connection",
    "out_of_memory",
    "auth",
    "script",
    "cluster",
    "corrupt",
    "unreplicated",
    "full",
];

static STORE_ERROR_LOGS: [LogSampler; STORE_ERROR_CLASSES.len() + 1] =
    [const { LogSampler::new(Duration::from_secs(1)) }; STORE_ERROR_CLASSES.len() + 1];

/// A connection accepted on `listener` (`http`, `grpc`, `proxy`, `admin`).
pub(crate) fn connection_opened(listener: &'static str) {
    metrics::gauge!("tollgate_open_connections", "listener" => listener).increment(1.0);
}

/// A connection of `listener` closed, whatever closed it.
pub(crate) fn connection_closed(listener: &'static str) {
    metrics::gauge!("tollgate_open_connections", "listener" => listener).decrement(1.0);
}

/// A connection refused because `listener` had its maximum open; logged at most once a second.
pub(crate) fn connection_refused(listener: &'static str) {
    metrics::counter!("tollgate_connections_refused_total", "listener" => listener).increment(1);
}

/// The log line for refused connections, at most once a second.
pub(crate) fn warn_sampled_refusal(listener: &'static str) {
    if REFUSAL_LOG.due() {
        tracing::warn!(listener, "connection limit reached; refusing new connections");
    }
}

static REFUSAL_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// A connection closed at accept because its client address held the most connections it may
/// on `listener`; logged at most once a second (without the address: it is a client's).
pub(crate) fn connection_refused_per_address(listener: &'static str) {
    metrics::counter!("tollgate_connections_refused_per_address_total", "listener" => listener).increment(1);
    if PER_ADDRESS_LOG.due() {
        tracing::warn!(
            listener,
            "a client address reached its connection limit; closing its new connections"
        );
    }
}

static PER_ADDRESS_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// A connection or request cut off by a timeout: `reason` is `first_byte`, `idle`, `body` (or
/// `header`, which the HTTP parser enforces and does not report).
pub(crate) fn connection_timed_out(listener: &'static str, reason: &'static str) {
    metrics::counter!("tollgate_timeouts_total", "listener" => listener, "reason" => reason).increment(1);
}

/// A request refused by a listener limit before any handler ran (414, 431, 413, 408).
pub(crate) fn request_refused(listener: &'static str, status: axum::http::StatusCode) {
    metrics::counter!("tollgate_requests_refused_total", "listener" => listener, "status" => status.as_str().to_owned())
        .increment(1);
}

/// An accept that failed for a reason other than the peer going away (out of file descriptors),
/// logged at most once a second.
pub(crate) fn accept_failed(listener: &'static str, err: &std::io::Error) {
    metrics::counter!("tollgate_accept_errors_total", "listener" => listener).increment(1);
    if ACCEPT_LOG.due() {
        tracing::warn!(listener, error = %err, "accept failed; pausing before the next accept");
    }
}

static ACCEPT_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// A TLS handshake on `listener` that failed (a client speaking plaintext, one without the
/// client certificate the listener requires, or with one it does not accept); logged at `warn`,
/// at most once a second. A handshake cut off by the first-byte timeout is counted in
/// `tollgate_timeouts_total{reason="tls_handshake"}` instead.
pub(crate) fn tls_handshake_failed(listener: &'static str, err: &std::io::Error) {
    metrics::counter!("tollgate_tls_handshake_errors_total", "listener" => listener).increment(1);
    if HANDSHAKE_LOG.due() {
        tracing::warn!(listener, error = %err, "TLS handshake failed");
    }
}

static HANDSHAKE_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// A reload of a listener's TLS files, successful or not.
pub(crate) fn tls_reload(ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!("tollgate_tls_reloads_total", "outcome" => outcome).increment(1);
}

/// A proxied request the upstream did not answer: `kind` is `connect`, `connect_timeout`,
/// `response_timeout` or `protocol`. Logged at `warn`, at most once a second.
pub(crate) fn upstream_error(kind: &'static str, upstream: &str, err: &dyn std::fmt::Display) {
    metrics::counter!("tollgate_upstream_errors_total", "kind" => kind).increment(1);
    if UPSTREAM_LOG.due() {
        tracing::warn!(kind, upstream, error = %err, "upstream request failed");
    }
}

static UPSTREAM_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// The watcher woke up for a debounced burst of file events (changed or not): an idle config
/// directory keeps this still.
pub(crate) fn config_watch_event() {
    metrics::counter!("tollgate_config_watch_events_total").increment(1);
}

/// The watcher saw the config's bytes change (each one is followed by a reload).
pub(crate) fn config_change_seen() {
    metrics::counter!("tollgate_config_changes_seen_total").increment(1);
}

/// The state of each Redis node's circuit breaker: `tollgate_store_breaker_open{node}` is 1 while
/// open, 0 while closed. Nodes are a cluster's masters, a bounded set.
pub(crate) fn store_breakers(states: &[(String, bool)]) {
    for (node, open) in states {
        metrics::gauge!("tollgate_store_breaker_open", "node" => node.clone())
            .set(f64::from(u8::from(*open)));
    }
}

/// How many times the Redis store found its state older than it had seen it (state a failover,
/// a restart without persistence or a flush lost; see `tollgate_redis::StoreStats::state_lost`):
/// `tollgate_store_state_lost_total`, the store's own running count.
pub(crate) fn store_state_lost(lost: u64) {
    metrics::counter!("tollgate_store_state_lost_total").absolute(lost);
}

/// How many times the Redis store followed its Sentinel master to a new address (see
/// `tollgate_redis::StoreStats::failovers`): `tollgate_store_failovers_total`, the store's own
/// running count (0 without Sentinel).
pub(crate) fn store_failovers(failovers: u64) {
    metrics::counter!("tollgate_store_failovers_total").absolute(failovers);
}

/// The store's refunds of cross-slot reservations that failed (see
/// `tollgate_redis::StoreStats::refund_failures`): `tollgate_store_refund_failures_total`, the
/// store's own running count.
pub(crate) fn store_refund_failures(failures: u64) {
    metrics::counter!("tollgate_store_refund_failures_total").absolute(failures);
}

/// What the proxy's routes decided so far (the layers' running counts, which survive reloads):
/// `tollgate_proxy_requests_total{outcome}` with `allowed`, `denied`, `failed_closed` (a store
/// failure met `fail_closed`: 503), `rejected_key` (no usable key: 400) and `blocked` (a deny
/// list: 403), and the requests on
/// which the store failed, a failure mode decided, or a shadow rule would have denied.
pub(crate) fn proxy_decisions(stats: &tollgate_tower::StatsSnapshot) {
    for (outcome, count) in [
        ("allowed", stats.allowed),
        ("denied", stats.denied),
        ("failed_closed", stats.failed_closed),
        ("rejected_key", stats.rejected_keys),
        ("blocked", stats.blocked),
    ] {
        metrics::counter!("tollgate_proxy_requests_total", "outcome" => outcome).absolute(count);
    }
    metrics::counter!("tollgate_proxy_store_errors_total").absolute(stats.store_errors);
    metrics::counter!("tollgate_proxy_degraded_total").absolute(stats.degraded);
    metrics::counter!("tollgate_proxy_shadow_denied_total").absolute(stats.shadow_denied);
}

/// A config reload, successful or not.
pub(crate) fn config_reload(ok: bool) {
    let outcome = if ok { "ok" } else { "failed" };
    metrics::counter!("tollgate_config_reloads_total", "outcome" => outcome).increment(1);
}

/// statsd lines sent.
pub(crate) fn statsd_sent(lines: u64) {
    metrics::counter!("tollgate_statsd_sent_lines_total").increment(lines);
}

/// statsd lines dropped: the timing buffer full, the server unreachable, a write failed.
pub(crate) fn statsd_dropped(lines: u64) {
    metrics::counter!("tollgate_statsd_dropped_lines_total").increment(lines);
}

/// Whether the xDS stream is open (1) or being reconnected (0).
pub(crate) fn xds_connected(open: bool) {
    metrics::gauge!("tollgate_xds_connected").set(if open { 1.0 } else { 0.0 });
}

/// An xDS push answered: ACKed (served) or NACKed (refused, the previous limits kept).
pub(crate) fn xds_push(acked: bool) {
    let outcome = if acked { "acked" } else { "nacked" };
    metrics::counter!("tollgate_xds_pushes_total", "outcome" => outcome).increment(1);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::Path;

    /// Every `"tollgate_..."` string literal naming a metric in the files under `dir`.
    fn metric_names(dir: &Path, names: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                metric_names(&path, names);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let source = std::fs::read_to_string(&path).unwrap();
                for literal in source.split("\"tollgate_").skip(1) {
                    let name: String = literal
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    let is_metric = ["_total", "_seconds", "_open", "_connections", "_denials"]
                        .iter()
                        .any(|end| name.ends_with(end));
                    if literal[name.len()..].starts_with('"') && is_metric {
                        names.insert(format!("tollgate_{name}"));
                    }
                }
            }
        }
    }

    #[test]
    fn every_metric_has_a_row_in_docs_metrics_md() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut names = BTreeSet::new();
        metric_names(&root.join("src"), &mut names);
        assert!(names.contains("tollgate_decisions_total"), "found {names:?}");
        assert!(
            names.contains("tollgate_envoy_total_hits_total"),
            "found {names:?}"
        );
        let doc = std::fs::read_to_string(root.join("../../docs/metrics.md")).unwrap();
        let missing: Vec<_> = names
            .iter()
            .filter(|name| !doc.contains(&format!("| `{name}` |")))
            .collect();
        assert!(missing.is_empty(), "docs/metrics.md has no row for {missing:?}");
    }
}
