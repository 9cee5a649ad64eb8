//! The decision log: what each request asked and what it was answered, one JSON line per
//! decision, so that `tollgate replay` can run real traffic through a new config before it is
//! deployed.
//!
//! It is off unless `tollgate serve --decision-log PATH` turns it on, and it is bounded in every
//! direction an operator cares about:
//!
//! - **The decision never waits for it.** A door hands the line to a bounded queue with
//!   `try_send` and goes on; one background thread formats and writes. When the queue is full
//!   (a slow or stalled disk) the line is dropped and counted in
//!   `tollgate_decision_log_dropped_total{reason="full"}`, never queued without bound and never
//!   waited for.
//! - **Disk.** The file is rotated when the next line would take it past
//!   [`DecisionLogOptions::max_file_bytes`]: `PATH` becomes `PATH.1`, `PATH.1` becomes `PATH.2`,
//!   and so on up to [`DecisionLogOptions::rotated_files`]; the oldest is deleted. At most
//!   `(rotated_files + 1) * max_file_bytes` bytes are ever on disk. A single line longer than a
//!   whole file is dropped (`reason="too_long"`), and a failed write is dropped
//!   (`reason="io"`).
//! - **Sampling by key.** With a rate below 1, a request is kept or dropped by a hash of its
//!   keys (the ops' keys, or the Envoy descriptors' values), not by a coin toss per request:
//!   every request of a kept key is in the log, its charges and refunds included, so its
//!   replay sees the key's whole history and decides it exactly as the server did.
//! - **Keys need not be kept.** With key hashing, each key (and each Envoy descriptor value) is
//!   written as a keyed hash under a secret given at start or drawn at random per start
//!   (HMAC-SHA-256, 128 bits in hex; see `hash`).
//!
//! Every door reports through [`count::settled`](super::count::settled), once per request,
//! with the request it ran and what the engine settled (the proxy, whose tower layer decides,
//! through [`count::answered`](super::count::answered)): one path, whatever the door.
//!
//! # Layout
//!
//! - `options`: what an operator chooses, checked before the log starts ([`DecisionLogOptions`]).
//! - `line`: the line format ([`LogLine`]), and the outcome a request is logged with
//!   ([`LoggedOutcome::settled`]).
//! - `hash`: keys as keyed hashes.
//! - `writer`: the background writer and the rotating file.
//! - here: the running log ([`DecisionLog`]), the queue to the writer and sampling.

mod hash;
mod line;
mod options;
mod writer;

use std::collections::hash_map::RandomState;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, LazyLock};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;

use self::hash::KeyedHash;
pub use self::line::{Asked, Door, EnvoyAsked, LogLine, LoggedDescriptor, LoggedOp, LoggedOutcome, OpKind};
pub use self::options::{DecisionLogError, DecisionLogOptions, HashSecret, check_sample};
pub use self::writer::rotated;
use self::writer::{Counts, RotatingFile, write_lines};

/// What the doors share with the writer.
struct Shared {
    sender: SyncSender<LogLine>,
    /// Keys whose sample hash is below this are logged; `None` logs every request.
    sample_below: Option<u64>,
    sampler: RandomState,
    counts: Arc<Counts>,
}

impl Shared {
    /// The line of a request that decided something and is sampled.
    fn take(&self, door: Door, asked: Asked<'_>) -> Option<LogLine> {
        if !asked.decided() {
            return None;
        }
        if let Some(below) = self.sample_below
            && asked.sample_hash(&self.sampler) >= below
        {
            return None;
        }
        Some(asked.line(door, now_us()))
    }

    /// Queues `line` for the writer, or drops it when the queue is full.
    fn send(&self, line: LogLine) {
        // Counted before it is sent, so the writer never takes a line it was not told of.
        self.counts.queued.fetch_add(1, Ordering::Relaxed);
        match self.sender.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.counts.queued.fetch_sub(1, Ordering::Relaxed);
                self.counts.drop_line("full");
            }
            // The writer is gone (the log is being finished): nothing to count.
            Err(TrySendError::Disconnected(_)) => {
                self.counts.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// The running log: a writer thread and the queue to it. [`install`](Self::install) it for
/// the doors to write to; [`finish`](Self::finish) it to write what is queued and stop.
#[derive(Debug)]
pub struct DecisionLog {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("sample_below", &self.sample_below)
            .finish_non_exhaustive()
    }
}

/// The log the doors write to, when one is installed.
static INSTALLED: LazyLock<ArcSwapOption<Shared>> = LazyLock::new(ArcSwapOption::empty);

impl DecisionLog {
    /// Opens the file (appending) and starts the writer.
    ///
    /// ```
    /// use tollgate_server::decision_log::{DecisionLog, DecisionLogOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let log = DecisionLog::start(DecisionLogOptions::new(dir.path().join("decisions.jsonl")))?;
    /// log.finish();
    /// assert!(dir.path().join("decisions.jsonl").exists());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start(options: DecisionLogOptions) -> Result<DecisionLog, DecisionLogError> {
        Self::start_gated(options, None)
    }

    /// [`start`](Self::start), the writer waiting for `gate` before it writes anything (a
    /// stalled disk, for tests).
    fn start_gated(
        options: DecisionLogOptions,
        gate: Option<Receiver<()>>,
    ) -> Result<DecisionLog, DecisionLogError> {
        options.validate()?;
        super::metrics::start_at_zero(
            "tollgate_decision_log_dropped_total",
            "reason",
            &["full", "too_long", "io"],
        );
        let file = RotatingFile::open(&options.path, options.max_file_bytes, options.rotated_files).map_err(
            |source| DecisionLogError::Open {
                path: options.path.clone(),
                source,
            },
        )?;
        let (sender, receiver) = std::sync::mpsc::sync_channel(options.queue);
        let counts = Arc::new(Counts::default());
        let hash = options.hash_keys.as_ref().map(KeyedHash::new);
        let writer_counts = Arc::clone(&counts);
        let writer = std::thread::Builder::new()
            .name("tollgate-decision-log".into())
            .spawn(move || {
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                write_lines(&receiver, file, hash.as_ref(), &writer_counts);
            })
            .map_err(DecisionLogError::Thread)?;
        // `sample * 2^64` as a threshold on a uniform 64-bit hash.
        let sample_below =
            (options.sample < 1.0).then_some((options.sample * 18_446_744_073_709_551_616.0) as u64);
        Ok(DecisionLog {
            shared: Arc::new(Shared {
                sender,
                sample_below,
                sampler: RandomState::new(),
                counts,
            }),
            writer: Some(writer),
        })
    }

    /// Makes this the log every door writes to (see [`count::answered`](super::count::answered)).
    pub fn install(&self) {
        INSTALLED.store(Some(Arc::clone(&self.shared)));
    }

    /// Logs one decision through this log (installed or not).
    pub fn record(&self, door: Door, asked: Asked<'_>) {
        if let Some(line) = self.shared.take(door, asked) {
            self.shared.send(line);
        }
    }

    /// Lines dropped because the queue was full.
    pub fn dropped_full(&self) -> u64 {
        self.shared.counts.full.load(Ordering::Relaxed)
    }

    /// Lines written to the file so far.
    pub fn written(&self) -> u64 {
        self.shared.counts.written.load(Ordering::Relaxed)
    }

    /// Stops logging (uninstalling this log if it is the installed one), writes every queued
    /// line and closes the file. Blocks until the writer is done.
    pub fn finish(self) {
        self.finish_within(None);
    }

    /// [`finish`](Self::finish), waiting at most `deadline` for the writer: a writer held up
    /// (a stalled disk, a full pipe) is left behind, the lines it did not write counted as
    /// dropped (`io`) and logged, so a shutdown never waits on the log. Returns whether every
    /// queued line was written.
    pub fn finish_within(mut self, deadline: Option<std::time::Duration>) -> bool {
        let ours = INSTALLED
            .load()
            .as_ref()
            .is_some_and(|installed| Arc::ptr_eq(installed, &self.shared));
        if ours {
            INSTALLED.store(None);
        }
        let writer = self.writer.take();
        let counts = Arc::clone(&self.shared.counts);
        // The writer ends once every sender is gone: ours here, the installed one above.
        drop(self);
        let Some(writer) = writer else { return true };
        let Some(deadline) = deadline else {
            let _ = writer.join();
            return true;
        };
        let (done, finished) = std::sync::mpsc::channel();
        let joiner = std::thread::Builder::new()
            .name("tollgate-decision-log-join".into())
            .spawn(move || {
                let _ = writer.join();
                let _ = done.send(());
            });
        if joiner.is_err() || finished.recv_timeout(deadline).is_ok() {
            return true;
        }
        let lost = counts.queued.load(Ordering::Relaxed);
        counts.drop_lines("io", lost);
        tracing::warn!(
            lines_not_written = lost,
            waited_ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            "the decision log writer is held up (a stalled disk or a full pipe); stopping without it"
        );
        false
    }
}

/// Whether a log is installed: a door that must keep something for the line (an Envoy
/// request's descriptors, which its plan consumes) keeps it only then.
pub(crate) fn installed() -> bool {
    INSTALLED.load().is_some()
}

/// Logs what a request through `door` asked and was answered, when a log is installed and
/// samples it. When none is, this is one lock-free load.
pub(crate) fn record(door: Door, asked: Asked<'_>) {
    if let Some(shared) = INSTALLED.load().as_ref()
        && let Some(line) = shared.take(door, asked)
    {
        shared.send(line);
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use tollgate::{Outcome, Rule};

    use super::*;

    fn options(dir: &Path) -> DecisionLogOptions {
        DecisionLogOptions::new(dir.join("decisions.jsonl"))
    }

    fn read_lines(path: &Path) -> Vec<LogLine> {
        std::fs::read_to_string(path)
            .expect("read the log")
            .lines()
            .map(|line| serde_json::from_str(line).expect("a log line"))
            .collect()
    }

    fn policy() -> tollgate::Policy {
        let algorithm =
            tollgate::Algorithm::sliding_log(5, std::time::Duration::from_secs(60)).expect("algorithm");
        tollgate::Policy::new("movies", algorithm).expect("policy")
    }

    #[tokio::test]
    async fn writes_one_line_per_request_with_its_ops_and_answers() {
        use tollgate::{Engine, MemoryStore, Op, Request};
        let dir = tempfile::tempdir().expect("temp dir");
        let log = DecisionLog::start(options(dir.path())).expect("start");
        let policy = policy();
        let engine = Engine::new(MemoryStore::new());
        // A check of 2, then a charge of 6 of a limit of 5 (a debt of 3), then a refund of 1.
        let asks = [
            Request::one(Op::Check(Rule::new(&policy, "alice", 2))),
            Request::one(Op::Charge(Rule::new(&policy, "alice", 6))),
            Request::one(Op::Refund(Rule::new(&policy, "alice", 1))),
            // A peek decides nothing: no line.
            Request::one(Op::Peek(Rule::new(&policy, "alice", 1))),
        ];
        for request in &asks {
            let settled = engine.run(request).await.expect("run");
            log.record(
                Door::Http,
                Asked::Run {
                    request,
                    settled: &settled,
                    envoy: None,
                },
            );
        }
        let descriptors = [RateLimitDescriptor {
            entries: vec![
                envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry {
                    key: "remote_address".into(),
                    value: "192.0.2.7".into(),
                },
            ],
            ..Default::default()
        }];
        let request = Request::one(Op::Check(Rule::new(&policy, "remote_address_192.0.2.7", 3)));
        let settled = engine.run(&request).await.expect("run");
        log.record(
            Door::Grpc,
            Asked::Run {
                request: &request,
                settled: &settled,
                envoy: Some(EnvoyAsked {
                    domain: "edge",
                    descriptors: &descriptors,
                    hits_addend: 3,
                    outcome: LoggedOutcome::Denied,
                }),
            },
        );
        log.finish();
        let lines = read_lines(&dir.path().join("decisions.jsonl"));
        assert_eq!(lines.len(), 4);
        let op = |kind, cost, debt, recorded, answer| LoggedOp {
            op: kind,
            policy: "movies".into(),
            key: "alice".into(),
            cost,
            debt,
            recorded,
            answer,
        };
        assert_eq!(lines[0].door, Door::Http);
        assert_eq!(lines[0].ops, [op(OpKind::Check, 2, 0, None, None)]);
        assert_eq!(lines[0].outcome, LoggedOutcome::Allowed);
        assert_eq!(
            lines[1].ops,
            [op(OpKind::Charge, 6, 3, Some(true), Some(LoggedOutcome::Denied))]
        );
        assert_eq!(lines[1].outcome, LoggedOutcome::Denied, "a charge into debt");
        // 8 spent of 5 less 1 given back: still in debt.
        assert_eq!(
            lines[2].ops,
            [op(OpKind::Refund, 1, 0, None, Some(LoggedOutcome::Denied))]
        );
        assert_eq!(lines[2].outcome, LoggedOutcome::Allowed);
        // The Envoy line: the request as it came, its ops, and the door's answer.
        assert_eq!(lines[3].domain.as_deref(), Some("edge"));
        assert_eq!(lines[3].hits_addend, 3);
        assert_eq!(
            lines[3].descriptors[0].entries,
            [["remote_address".to_owned(), "192.0.2.7".to_owned()]]
        );
        assert_eq!(lines[3].ops[0].key, "remote_address_192.0.2.7");
        assert_eq!(lines[3].outcome, LoggedOutcome::Denied);
        assert!(lines[0].time_us > 1_700_000_000_000_000 && lines[3].time_us >= lines[0].time_us);
    }

    #[test]
    fn rotation_keeps_at_most_the_rotated_files_each_under_the_cap() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cap = 1024;
        let log = DecisionLog::start(DecisionLogOptions {
            max_file_bytes: cap,
            rotated_files: 2,
            ..options(dir.path())
        })
        .expect("start");
        let policy = policy();
        for n in 0..200 {
            let key = format!("user-{n:04}");
            log.record(
                Door::Http,
                Asked::Checks(&[Rule::new(&policy, &key, 1)], Outcome::Allowed),
            );
        }
        let written = {
            // Let the writer take everything before finishing (finish writes the rest anyway).
            log.finish();
            read_lines(&dir.path().join("decisions.jsonl")).len()
        };
        let path = dir.path().join("decisions.jsonl");
        let mut kept = vec![path.clone(), rotated(&path, 1), rotated(&path, 2)];
        for file in &kept {
            let size = std::fs::metadata(file).expect("a kept file").len();
            assert!(size <= cap, "{} is {size} bytes", file.display());
            assert!(size > 0, "{} is empty", file.display());
        }
        assert!(!rotated(&path, 3).exists(), "a third rotated file is kept");
        let files: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(files.len(), 3);
        // The newest lines are kept, in order, across the files: oldest file first.
        kept.reverse();
        let keys: Vec<String> = kept
            .iter()
            .flat_map(|file| read_lines(file))
            .map(|line| line.ops[0].key.clone())
            .collect();
        let last = keys.last().expect("lines");
        assert_eq!(last, "user-0199");
        let first: usize = keys[0].trim_start_matches("user-").parse().expect("a number");
        let expected: Vec<String> = (first..200).map(|n| format!("user-{n:04}")).collect();
        assert_eq!(keys, expected);
        assert!(written > 0);
    }

    #[test]
    fn a_line_longer_than_a_file_is_dropped_not_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = DecisionLog::start(DecisionLogOptions {
            max_file_bytes: 1024,
            ..options(dir.path())
        })
        .expect("start");
        let policy = policy();
        let long = "k".repeat(2000);
        log.record(
            Door::Http,
            Asked::Checks(&[Rule::new(&policy, &long, 1)], Outcome::Allowed),
        );
        log.record(
            Door::Http,
            Asked::Checks(&[Rule::new(&policy, "short", 1)], Outcome::Allowed),
        );
        let counts = Arc::clone(&log.shared.counts);
        log.finish();
        assert_eq!(counts.too_long.load(Ordering::Relaxed), 1);
        let lines = read_lines(&dir.path().join("decisions.jsonl"));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].ops[0].key, "short");
    }

    #[test]
    fn finishing_with_a_stalled_writer_waits_only_until_the_deadline_and_counts_the_lost_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        // The gate is never opened: the writer stays stalled, as on a stalled disk.
        let (_never, gate) = std::sync::mpsc::channel();
        let log = DecisionLog::start_gated(options(dir.path()), Some(gate)).expect("start");
        let policy = policy();
        for n in 0..5 {
            let key = format!("user-{n}");
            log.record(
                Door::Http,
                Asked::Checks(&[Rule::new(&policy, &key, 1)], Outcome::Allowed),
            );
        }
        let counts = Arc::clone(&log.shared.counts);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let written = log.finish_within(Some(std::time::Duration::from_millis(200)));
            let _ = done.send(written);
        });
        let all_written = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("finishing returned with the writer stalled");
        assert!(!all_written);
        assert_eq!(
            counts.io.load(Ordering::Relaxed),
            5,
            "the queued lines are counted as lost"
        );
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private_and_a_fifo_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let log = DecisionLog::start(options(dir.path())).expect("start");
        log.finish();
        let mode = std::fs::metadata(dir.path().join("decisions.jsonl"))
            .expect("file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(made.success());
        let err = DecisionLog::start(DecisionLogOptions::new(&fifo)).expect_err("a FIFO is refused");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn with_no_rotated_files_a_symlinked_path_never_truncates_its_target() {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = dir.path().join("precious.txt");
        std::fs::write(&target, "keep me\n").expect("write");
        let link = dir.path().join("decisions.jsonl");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let log = DecisionLog::start(DecisionLogOptions {
            max_file_bytes: DecisionLogOptions::MIN_MAX_FILE_BYTES,
            rotated_files: 0,
            ..DecisionLogOptions::new(&link)
        })
        .expect("start");
        let policy = policy();
        let key = "k".repeat(200);
        for _ in 0..200 {
            log.record(
                Door::Http,
                Asked::Checks(&[Rule::new(&policy, &key, 1)], Outcome::Allowed),
            );
        }
        log.finish();
        let kept = std::fs::read_to_string(&target).expect("target");
        assert!(kept.starts_with("keep me\n"), "the target was truncated");
        assert!(
            !std::fs::symlink_metadata(&link)
                .expect("path")
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_flood_with_a_stalled_writer_is_dropped_and_counted_not_waited_for() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (release, gate) = std::sync::mpsc::channel();
        let log = DecisionLog::start_gated(
            DecisionLogOptions {
                queue: 8,
                ..options(dir.path())
            },
            Some(gate),
        )
        .expect("start");
        let log = Arc::new(log);
        // The flood runs on its own thread: were a send to wait for the stalled writer, the
        // test would fail on the deadline below instead of hanging.
        let (done, flooded) = std::sync::mpsc::channel();
        let flooding = Arc::clone(&log);
        std::thread::spawn(move || {
            let policy = policy();
            for n in 0..1000 {
                let key = format!("user-{n}");
                flooding.record(
                    Door::Http,
                    Asked::Checks(&[Rule::new(&policy, &key, 1)], Outcome::Allowed),
                );
            }
            // Gone before the test takes the log back.
            drop(flooding);
            let _ = done.send(());
        });
        flooded
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the flood went through with the writer stalled");
        assert_eq!(log.dropped_full(), 1000 - 8);
        assert_eq!(log.written(), 0);
        release.send(()).expect("release the writer");
        let log = Arc::try_unwrap(log).expect("the only handle");
        log.finish();
        let lines = read_lines(&dir.path().join("decisions.jsonl"));
        let keys: Vec<_> = lines.iter().map(|l| l.ops[0].key.as_str()).collect();
        assert_eq!(keys, (0..8).map(|n| format!("user-{n}")).collect::<Vec<_>>());
    }

    #[test]
    fn hashed_keys_are_equal_for_equal_keys_and_hide_the_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let secret = HashSecret::new("sixteen byte key").expect("secret");
        let log = DecisionLog::start(DecisionLogOptions {
            hash_keys: Some(secret.clone()),
            ..options(dir.path())
        })
        .expect("start");
        let policy = policy();
        for key in ["alice", "bob", "alice"] {
            log.record(
                Door::Http,
                Asked::Checks(&[Rule::new(&policy, key, 1)], Outcome::Allowed),
            );
        }
        log.finish();
        let keys: Vec<_> = read_lines(&dir.path().join("decisions.jsonl"))
            .into_iter()
            .map(|l| l.ops[0].key.clone())
            .collect();
        assert_eq!(keys[0], keys[2]);
        assert_ne!(keys[0], keys[1]);
        assert!(!keys[0].contains("alice") && keys[0].len() == 32);
        // Another secret hashes the same key differently.
        let other = KeyedHash::new(&HashSecret::new("another secret!!").expect("secret"));
        assert_ne!(other.hex(b"alice"), keys[0]);
        assert_eq!(KeyedHash::new(&secret).hex(b"alice"), keys[0]);
    }

    #[test]
    fn sampling_keeps_every_request_of_a_kept_key() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = DecisionLog::start(DecisionLogOptions {
            sample: 0.5,
            ..options(dir.path())
        })
        .expect("start");
        let policy = policy();
        for _ in 0..5 {
            for n in 0..100 {
                let key = format!("user-{n}");
                log.record(
                    Door::Http,
                    Asked::Checks(&[Rule::new(&policy, &key, 1)], Outcome::Allowed),
                );
            }
        }
        log.finish();
        let mut per_key = std::collections::HashMap::<String, u32>::new();
        for line in read_lines(&dir.path().join("decisions.jsonl")) {
            *per_key.entry(line.ops[0].key.clone()).or_default() += 1;
        }
        assert!(per_key.values().all(|&n| n == 5), "{per_key:?}");
        // Some keys kept, some not (a 1 in 2^99 chance each way of a false failure).
        assert!(
            !per_key.is_empty() && per_key.len() < 100,
            "{} keys kept",
            per_key.len()
        );
    }

    #[test]
    fn bounds_are_checked() {
        let base = DecisionLogOptions::new("x");
        assert!(
            DecisionLogOptions {
                sample: 1.5,
                ..base.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            DecisionLogOptions {
                sample: f64::NAN,
                ..base.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            DecisionLogOptions {
                max_file_bytes: 10,
                ..base.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            DecisionLogOptions {
                rotated_files: 5000,
                ..base.clone()
            }
            .validate()
            .is_err()
        );
        assert!(DecisionLogOptions { queue: 0, ..base }.validate().is_err());
    }
}
