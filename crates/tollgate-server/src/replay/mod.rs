//! `tollgate replay --config NEW [--baseline OLD] LOG...`: real traffic, as the decision log
//! ([`decision_log`](crate::decision_log)) kept it, decided again under a new config before it
//! is deployed.
//!
//! Each logged request is asked again at its logged time, on a memory store whose clock is
//! moved by hand ([`ManualClock`], as `tollgate test` runs scenarios; the engine reads the same
//! clock, so what it dates, deny-all resets included, is virtual time too), so a day of
//! traffic replays in seconds and windows, buckets and penalties see the same spacing of
//! requests as the server did:
//!
//! - a rules door's line (`http`, `proxy`) is run again as one [`Engine::run`] of its logged
//!   ops, checks, charges and refunds alike, each built from the new config's policy as the
//!   JSON API builds it (a policy the config lacks is an `error`), and its outcome worked out
//!   as the server worked it out ([`LoggedOutcome::settled`]): a charge leaves its debt for
//!   the checks after it, a refund gives back;
//! - an Envoy door's line (`grpc`, `json`) goes to [`RlsService::answer`], the one handler both
//!   Envoy doors call, so matching, shadow and quota modes are the new config's, and the plan
//!   it makes of the descriptors is again one [`Engine::run`] (charges and refunds included).
//!
//! [`Engine::run`]: tollgate::Engine::run
//!
//! The baseline is another config replayed the same way (`--baseline`), or, without one, the
//! outcomes the server logged. The logged outcomes are what really happened, but they were
//! decided on state the log may not hold (requests before the log began, keys left out by
//! sampling, other instances sharing a Redis store); replaying the current config as
//! `--baseline` compares like with like.
//!
//! Replay allocates per request only what a door needs: a rules line is decided from the
//! line's own strings, one rule on the stack; an Envoy line builds the protocol request the
//! handler takes.

mod report;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tollgate::{ManualClock, Request};
use tollgate_config::Limits;

pub use report::{Flip, Group, Report, Tally};

use crate::decision_log::{Door, LogLine, LoggedOp, LoggedOutcome};
use crate::envoy::grpc::RlsService;
use crate::envoy::grpc::proto::rate_limit_response::Code;
use crate::envoy::grpc::proto::{
    RateLimitDescriptor, RateLimitRequest, UInt64Value, rate_limit_descriptor::Entry,
};
use crate::runtime::store::AnyStore;
use crate::runtime::{AppState, Settings, SharedState};

/// What `tollgate replay` runs.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The config to try.
    pub config: PathBuf,
    /// The config to compare with; the logged outcomes when `None`.
    pub baseline: Option<PathBuf>,
    /// Log files, oldest first.
    pub logs: Vec<PathBuf>,
    /// How many flipped requests the report lists.
    pub shown: usize,
}

/// Loads the configs and the logs, replays, and reports; see the [module docs](self).
pub async fn run(options: &ReplayOptions) -> anyhow::Result<Report> {
    let new = tollgate_config::load(&options.config)?;
    let baseline = options
        .baseline
        .as_deref()
        .map(tollgate_config::load)
        .transpose()?;
    let lines = read_logs(&options.logs)?;
    let mut report = replay(&lines, new, baseline, options.shown).await;
    report.config = options.config.display().to_string();
    report.baseline = options.baseline.as_ref().map(|p| p.display().to_string());
    Ok(report)
}

/// Every line of `paths`, in order of time (lines of one time keep their file order).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let log = dir.path().join("decisions.jsonl");
/// std::fs::write(&log, concat!(
///     r#"{"time_us":2,"door":"http","rules":[{"policy":"movies","key":"bob","cost":1}],"outcome":"denied"}"#, "\n",
///     r#"{"time_us":1,"door":"http","rules":[{"policy":"movies","key":"alice","cost":1}],"outcome":"allowed"}"#, "\n",
/// ))?;
/// let lines = tollgate_server::replay::read_logs(&[log])?;
/// assert_eq!(lines[0].ops[0].key, "alice");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_logs(paths: &[PathBuf]) -> anyhow::Result<Vec<LogLine>> {
    let mut lines = Vec::new();
    for path in paths {
        read_log(path, &mut lines)?;
    }
    // Doors log concurrently, so a file is in time order only roughly.
    lines.sort_by_key(|line| line.time_us);
    Ok(lines)
}

/// The longest line read: far above any line the decision log writes (16 rules of 8 KiB keys),
/// and a bound on what a file that is not a decision log (`/dev/zero`, a binary) can make replay
/// hold in memory before it is refused.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

fn read_log(path: &Path, lines: &mut Vec<LogLine>) -> anyhow::Result<()> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let mut buffer = Vec::new();
    for n in 1.. {
        buffer.clear();
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .with_context(|| format!("{}", path.display()))?;
        if read == 0 {
            break;
        }
        if buffer.last() == Some(&b'\n') {
            buffer.pop();
        } else if buffer.len() > MAX_LINE_BYTES {
            anyhow::bail!(
                "{}: line {n}: longer than {MAX_LINE_BYTES} bytes: not a decision log line",
                path.display()
            );
        }
        if buffer.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed: LogLine = serde_json::from_slice(&buffer)
            .with_context(|| format!("{}: line {n}: not a decision log line", path.display()))?;
        if parsed.ops.is_empty() && parsed.domain.is_none() {
            anyhow::bail!("{}: line {n}: neither ops nor an Envoy domain", path.display());
        }
        lines.push(parsed);
    }
    Ok(())
}

/// Replays `lines` under `new`, and under `baseline` (or against the logged outcomes), listing
/// the first `shown` flipped requests.
pub async fn replay(lines: &[LogLine], new: Limits, baseline: Option<Limits>, shown: usize) -> Report {
    let mut new = Replayer::new(new);
    let mut baseline = baseline.map(Replayer::new);
    let mut report = Report::new(shown);
    for line in lines {
        let before = match &mut baseline {
            Some(baseline) => baseline.decide(line).await,
            None => line.outcome,
        };
        let after = new.decide(line).await;
        report.add(line, before, after);
    }
    report
}

/// One config on its own memory store and manual clock.
pub struct Replayer {
    clock: ManualClock,
    limits: Arc<Limits>,
    state: SharedState,
    rls: RlsService,
}

impl Replayer {
    /// `limits` on a fresh memory store, the store and the engine on one manual clock.
    pub fn new(limits: Limits) -> Self {
        let clock = ManualClock::new(0);
        let store = AnyStore::manual_memory(clock.clone());
        let state = AppState::new(limits, store, Settings::default());
        let limits = state.limits.load_full();
        let rls = RlsService::new(Arc::clone(&state));
        Replayer {
            clock,
            limits,
            state,
            rls,
        }
    }

    /// Asks `line`'s request again at its logged time.
    pub async fn decide(&mut self, line: &LogLine) -> LoggedOutcome {
        self.clock.set_us(line.time_us);
        match line.door {
            Door::Http | Door::Proxy => self.rules(line).await,
            Door::Grpc | Door::Json => self.envoy(line).await,
        }
    }

    /// A rules line: its ops in one engine call (one op allocates nothing), its outcome as
    /// the server worked it out.
    async fn rules(&self, line: &LogLine) -> LoggedOutcome {
        let limits = &*self.limits;
        let Some(request) = line
            .ops
            .iter()
            .map(|logged| op_of(limits, logged))
            .collect::<Option<Request<'_>>>()
        else {
            return LoggedOutcome::Error;
        };
        match self.state.engine.run(&request).await {
            Ok(settled) => LoggedOutcome::settled(&request, &settled),
            Err(_) => LoggedOutcome::Error,
        }
    }

    async fn envoy(&self, line: &LogLine) -> LoggedOutcome {
        let request = RateLimitRequest {
            domain: line.domain.clone().unwrap_or_default(),
            descriptors: line
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|[key, value]| Entry {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                    is_negative_hits: d.refund,
                    ..Default::default()
                })
                .collect(),
            hits_addend: line.hits_addend,
        };
        match self.rls.answer(request).await {
            Ok(response) if response.overall_code == Code::OverLimit as i32 => LoggedOutcome::Denied,
            Ok(_) => LoggedOutcome::Allowed,
            Err(_) => LoggedOutcome::Error,
        }
    }
}

/// A logged op under `limits`, built as the JSON API builds it; `None` when the policy is not
/// in `limits`.
fn op_of<'a>(limits: &'a Limits, logged: &'a LoggedOp) -> Option<tollgate::Op<'a>> {
    limits
        .policy(&logged.policy)
        .map(|named| crate::api::rules::op(logged.op, named, &logged.key, logged.cost))
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envoy(value: &str) -> RateLimitRequest {
        RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "remote_address".into(),
                    value: value.into(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        }
    }

    #[tokio::test]
    async fn a_deny_all_limit_resets_at_the_end_of_its_unit_in_virtual_time() {
        let limits = tollgate_config::parse(
            "edge.yaml",
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 0}\n",
        )
        .expect("config");
        let replayer = Replayer::new(limits);
        // 08:00:00.5 UTC: the day ends 57,599.5 s later, 57,600 s in whole seconds. On the
        // system's clock it would be whatever is left of today.
        replayer.clock.set_us(1_800_000_000_500_000);
        let answer = replayer.rls.answer(envoy("192.0.2.7")).await.expect("answer");
        assert_eq!(answer.overall_code, Code::OverLimit as i32);
        let reset = answer.statuses[0]
            .duration_until_reset
            .as_ref()
            .expect("a reset")
            .seconds;
        assert_eq!(reset, 57_600);
    }

    #[tokio::test]
    async fn a_charge_leaves_its_debt_for_the_check_after_it() {
        let limits = tollgate_config::parse(
            "tokens.yaml",
            "policies:\n  tokens: {algorithm: sliding_log, limit: 10, window: 1h}\n",
        )
        .expect("config");
        let mut replayer = Replayer::new(limits);
        let line = |time_us: u64, op: &str, cost: u64| -> LogLine {
            serde_json::from_value(serde_json::json!({
                "time_us": time_us,
                "door": "http",
                "ops": [{"op": op, "policy": "tokens", "key": "tenant-a", "cost": cost}],
                "outcome": "allowed",
            }))
            .expect("a line")
        };
        let start = 1_800_000_000_000_000;
        assert_eq!(
            replayer.decide(&line(start, "charge", 12)).await,
            LoggedOutcome::Denied
        );
        assert_eq!(
            replayer.decide(&line(start + 1, "check", 1)).await,
            LoggedOutcome::Denied
        );
        // 12 of 10 less 3 given back: 9, room for one more.
        assert_eq!(
            replayer.decide(&line(start + 2, "refund", 3)).await,
            LoggedOutcome::Allowed
        );
        assert_eq!(
            replayer.decide(&line(start + 3, "check", 1)).await,
            LoggedOutcome::Allowed
        );
        assert_eq!(
            replayer.decide(&line(start + 4, "check", 1)).await,
            LoggedOutcome::Denied
        );
    }
}
