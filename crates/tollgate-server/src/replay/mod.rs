//! `tollgate replay --config NEW [--baseline OLD] LOG...`: real traffic, as the decision log
//! ([`decision_log`](crate::decision_log)) kept it, decided again under a new config before it
//! is deployed.
//!
//! Each logged request is asked again at its logged time, on a memory store whose clock is
//! moved by hand ([`ManualClock`], as `tollgate test` runs scenarios), so a day of traffic
//! replays in seconds and windows, buckets and penalties see the same spacing of requests as
//! the server did:
//!
//! - a rules door's line (`http`, `proxy`) is decided by the engine, its rules built from the
//!   new config's policies as `POST /v1/check` builds them (a policy the config lacks is an
//!   `error`);
//! - an Envoy door's line (`grpc`, `json`) goes to [`RlsService::answer`], the one handler both
//!   Envoy doors call, so matching, shadow and quota modes are the new config's.
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
use tollgate::{ManualClock, Rule};
use tollgate_config::Limits;

pub use report::{Flip, Group, Report, Tally};

use crate::decision_log::{Door, LogLine, LoggedOutcome, LoggedRule};
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
/// assert_eq!(lines[0].rules[0].key, "alice");
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
        if parsed.rules.is_empty() && parsed.domain.is_none() {
            anyhow::bail!("{}: line {n}: neither rules nor an Envoy domain", path.display());
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
    /// `limits` on a fresh memory store.
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

    async fn rules(&self, line: &LogLine) -> LoggedOutcome {
        let limits = &*self.limits;
        let rule = |logged| rule_of(limits, logged);
        let verdict = if let [one] = line.rules.as_slice() {
            let Some(rule) = rule(one) else {
                return LoggedOutcome::Error;
            };
            self.state.engine.check_all(&[rule]).await
        } else {
            let Some(rules) = line.rules.iter().map(rule).collect::<Option<Vec<Rule<'_>>>>() else {
                return LoggedOutcome::Error;
            };
            self.state.engine.check_all(&rules).await
        };
        match verdict {
            Ok(verdict) => verdict.outcome().into(),
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

/// A logged rule under `limits`, built as `POST /v1/check` builds it; `None` when the policy
/// is not in `limits`.
fn rule_of<'a>(limits: &'a Limits, logged: &'a LoggedRule) -> Option<Rule<'a>> {
    limits
        .policy(&logged.policy)
        .map(|named| crate::api::rules::rule(named, &logged.key, logged.cost))
}

impl std::fmt::Debug for Replayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replayer").finish_non_exhaustive()
    }
}
