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
//!   keys (the rules' keys, or the Envoy descriptors' values), not by a coin toss per request:
//!   every request of a kept key is in the log, so its replay sees the key's whole history and
//!   decides it exactly as the server did.
//! - **Keys need not be kept.** With key hashing, each key (and each Envoy descriptor value) is
//!   written as a keyed hash (HMAC-SHA-256, 128 bits in hex) under a secret given at start or
//!   drawn at random per start. Equal keys hash equally, so a replay of a hashed log decides
//!   exactly as a replay of the clear one would; only a log's lines written under the same
//!   secret can be joined by key. Hashing runs on the writer thread, not in the request.
//!
//! Every door reports through [`count::answered`](super::count::answered) (a rules door:
//! `POST /v1/check`, the proxy) or [`count::asked`](super::count::asked) and
//! [`Pending::answered`] (the Envoy doors, gRPC and `POST /json`, which know the answer only
//! at the end): one path, whatever the door.
//!
//! A line (fields with their default value are left out):
//!
//! ```json
//! {"time_us":1732665600000000,"door":"http","rules":[{"policy":"movies","key":"alice","cost":1}],"outcome":"allowed"}
//! {"time_us":1732665600000100,"door":"grpc","domain":"edge","descriptors":[{"entries":[["remote_address","192.0.2.7"]]}],"hits_addend":1,"outcome":"denied"}
//! ```

use std::collections::hash_map::RandomState;
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, LazyLock};
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tollgate::{Outcome, Rule};

/// Where the log goes and how much of it is kept.
#[derive(Debug, Clone)]
pub struct DecisionLogOptions {
    /// The file written to; rotated files are `PATH.1` (newest) to `PATH.N`.
    pub path: PathBuf,
    /// The share of keys whose requests are logged: above 0, at most 1 (every request).
    pub sample: f64,
    /// Write keys as keyed hashes under this secret instead of in clear.
    pub hash_keys: Option<HashSecret>,
    /// The largest a file grows before it is rotated, in bytes.
    pub max_file_bytes: u64,
    /// How many rotated files are kept besides the one being written.
    pub rotated_files: usize,
    /// Lines waiting for the writer; past this they are dropped and counted.
    pub queue: usize,
}

impl DecisionLogOptions {
    /// The default size of a file before it is rotated: 64 MiB.
    pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;
    /// The smallest size of a file accepted: 1 KiB.
    pub const MIN_MAX_FILE_BYTES: u64 = 1024;
    /// The default number of rotated files kept: 4.
    pub const DEFAULT_ROTATED_FILES: usize = 4;
    /// The most rotated files kept.
    pub const MAX_ROTATED_FILES: usize = 1000;
    /// The default queue between the doors and the writer: 65,536 lines.
    pub const DEFAULT_QUEUE: usize = 65_536;

    /// Every request to `path`, keys in clear, 4 rotated files of 64 MiB.
    ///
    /// ```
    /// use tollgate_server::decision_log::DecisionLogOptions;
    ///
    /// let options = DecisionLogOptions::new("/var/log/tollgate/decisions.jsonl");
    /// assert_eq!(options.sample, 1.0);
    /// assert!(options.validate().is_ok());
    /// ```
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DecisionLogOptions {
            path: path.into(),
            sample: 1.0,
            hash_keys: None,
            max_file_bytes: Self::DEFAULT_MAX_FILE_BYTES,
            rotated_files: Self::DEFAULT_ROTATED_FILES,
            queue: Self::DEFAULT_QUEUE,
        }
    }

    /// Checks the bounds: a sample rate in (0, 1], files of at least
    /// [`MIN_MAX_FILE_BYTES`](Self::MIN_MAX_FILE_BYTES), at most
    /// [`MAX_ROTATED_FILES`](Self::MAX_ROTATED_FILES) rotated files, a queue of at least one.
    pub fn validate(&self) -> Result<(), DecisionLogError> {
        check_sample(self.sample)?;
        if self.max_file_bytes < Self::MIN_MAX_FILE_BYTES {
            return Err(DecisionLogError::Bound(format!(
                "a decision log file must be allowed at least {} bytes, not {}",
                Self::MIN_MAX_FILE_BYTES,
                self.max_file_bytes
            )));
        }
        if self.rotated_files > Self::MAX_ROTATED_FILES {
            return Err(DecisionLogError::Bound(format!(
                "at most {} rotated decision log files are kept, not {}",
                Self::MAX_ROTATED_FILES,
                self.rotated_files
            )));
        }
        if self.queue == 0 {
            return Err(DecisionLogError::Bound(
                "the decision log queue must hold at least one line".into(),
            ));
        }
        Ok(())
    }
}

/// Checks a sample rate: above 0, at most 1.
///
/// ```
/// use tollgate_server::decision_log::check_sample;
///
/// assert!(check_sample(0.1).is_ok());
/// assert_eq!(
///     check_sample(0.0).unwrap_err().to_string(),
///     "the sample rate must be above 0 and at most 1, like 0.1; got 0"
/// );
/// ```
pub fn check_sample(rate: f64) -> Result<(), DecisionLogError> {
    if rate > 0.0 && rate <= 1.0 {
        Ok(())
    } else {
        Err(DecisionLogError::Bound(format!(
            "the sample rate must be above 0 and at most 1, like 0.1; got {rate}"
        )))
    }
}

/// Why the decision log could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionLogError {
    /// An option is out of its bounds.
    #[error("{0}")]
    Bound(String),
    /// The hash secret is too short to keep keys from being guessed.
    #[error("the hash secret must be at least {min} bytes, got {got}", min = HashSecret::MIN_LEN)]
    ShortSecret {
        /// Its length.
        got: usize,
    },
    /// The file cannot be opened for appending.
    #[error("decision log {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The writer thread cannot be started.
    #[error("cannot start the decision log writer: {0}")]
    Thread(io::Error),
}

/// The secret keys are hashed under: given, so that logs of several starts can be joined by
/// key, or drawn at random for one start.
#[derive(Clone)]
pub struct HashSecret(Vec<u8>);

impl std::fmt::Debug for HashSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashSecret(..)")
    }
}

impl HashSecret {
    /// The shortest secret accepted, in bytes.
    pub const MIN_LEN: usize = 16;

    /// A given secret of at least [`MIN_LEN`](Self::MIN_LEN) bytes.
    ///
    /// ```
    /// use tollgate_server::decision_log::HashSecret;
    ///
    /// assert!(HashSecret::new("a secret of 16 b").is_ok());
    /// assert!(HashSecret::new("short").is_err());
    /// ```
    pub fn new(secret: impl Into<Vec<u8>>) -> Result<Self, DecisionLogError> {
        let secret = secret.into();
        if secret.len() < Self::MIN_LEN {
            return Err(DecisionLogError::ShortSecret { got: secret.len() });
        }
        Ok(HashSecret(secret))
    }

    /// 32 random bytes, from the operating system's randomness (as seeded into std's
    /// `RandomState`), for one start.
    pub fn random() -> Self {
        let mut secret = Vec::with_capacity(32);
        for i in 0u64..4 {
            secret.extend_from_slice(&RandomState::new().hash_one(i).to_le_bytes());
        }
        HashSecret(secret)
    }
}

/// HMAC-SHA-256 (RFC 2104) under one secret, its two padded keys hashed once.
struct KeyedHash {
    inner: Sha256,
    outer: Sha256,
}

impl KeyedHash {
    fn new(secret: &HashSecret) -> Self {
        let mut block = [0u8; 64];
        if secret.0.len() > block.len() {
            block[..32].copy_from_slice(&Sha256::digest(&secret.0));
        } else {
            block[..secret.0.len()].copy_from_slice(&secret.0);
        }
        let pad = |byte: u8| {
            let mut hasher = Sha256::new();
            hasher.update(block.map(|b| b ^ byte));
            hasher
        };
        KeyedHash {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// The first 128 bits of the HMAC of `data`, in lower-case hex.
    fn hex(&self, data: &[u8]) -> String {
        let mut inner = self.inner.clone();
        inner.update(data);
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        let mac = outer.finalize();
        let mut hex = String::with_capacity(32);
        for byte in &mac[..16] {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
        }
        hex
    }
}

/// The door a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Door {
    /// `POST /v1/check`.
    Http,
    /// The Envoy rate limit service over gRPC.
    Grpc,
    /// The Envoy rate limit service over HTTP, `POST /json`.
    Json,
    /// `tollgate proxy`'s routes.
    Proxy,
}

impl Door {
    /// The door's name, as lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Grpc => "grpc",
            Door::Json => "json",
            Door::Proxy => "proxy",
        }
    }
}

/// What a request was answered, in the three terms a replay compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggedOutcome {
    /// Let through (allowed, only a shadow rule would have denied, or a failure mode allowed).
    Allowed,
    /// Refused: over a limit, or on a deny list.
    Denied,
    /// The store failed and a `fail_closed` policy refused.
    Error,
}

impl LoggedOutcome {
    /// The outcome's name, as lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            LoggedOutcome::Allowed => "allowed",
            LoggedOutcome::Denied => "denied",
            LoggedOutcome::Error => "error",
        }
    }
}

impl From<Outcome> for LoggedOutcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Allowed | Outcome::ShadowDenied | Outcome::Degraded => LoggedOutcome::Allowed,
            Outcome::Denied | Outcome::Blocked => LoggedOutcome::Denied,
            Outcome::Error => LoggedOutcome::Error,
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When it was decided, in microseconds since the Unix epoch.
    pub time_us: u64,
    /// Through which door.
    pub door: Door,
    /// A rules door's rules (`http`, `proxy`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<LoggedRule>,
    /// An Envoy door's domain (`grpc`, `json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// An Envoy door's descriptors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<LoggedDescriptor>,
    /// An Envoy request's `hits_addend` (0, the default, counts as 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hits_addend: u32,
    /// What it was answered.
    pub outcome: LoggedOutcome,
}

/// A rule of a rules door.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedRule {
    /// The policy's name.
    pub policy: String,
    /// The key, or its keyed hash.
    pub key: String,
    /// The cost.
    pub cost: u64,
}

/// An Envoy descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedDescriptor {
    /// Its entries, `[key, value]` (the value hashed when keys are).
    pub entries: Vec<[String; 2]>,
    /// Its own `hits_addend`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: it gives its hits back.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refund: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What a door was asked, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// A rules door's rules.
    Rules(&'a [Rule<'a>]),
    /// An Envoy request.
    Envoy {
        /// The domain.
        domain: &'a str,
        /// The descriptors as they came.
        descriptors: &'a [RateLimitDescriptor],
        /// The request's `hits_addend`.
        hits_addend: u32,
    },
}

impl Asked<'_> {
    /// The hash sampling goes by: every key (or descriptor value) of the request.
    fn sample_hash(&self, hasher: &RandomState) -> u64 {
        let mut h = hasher.build_hasher();
        match self {
            Asked::Rules(rules) => rules.iter().for_each(|rule| h.write(rule.key)),
            Asked::Envoy { descriptors, .. } => descriptors
                .iter()
                .flat_map(|d| &d.entries)
                .for_each(|entry| h.write(entry.value.as_bytes())),
        }
        h.finish()
    }

    /// The line, but for the outcome.
    fn line(&self, door: Door, time_us: u64) -> LogLine {
        let mut line = LogLine {
            time_us,
            door,
            rules: Vec::new(),
            domain: None,
            descriptors: Vec::new(),
            hits_addend: 0,
            outcome: LoggedOutcome::Allowed,
        };
        match *self {
            Asked::Rules(rules) => {
                line.rules = rules
                    .iter()
                    .map(|rule| LoggedRule {
                        policy: rule.policy.name().to_owned(),
                        key: String::from_utf8_lossy(rule.key).into_owned(),
                        cost: rule.cost,
                    })
                    .collect();
            }
            Asked::Envoy {
                domain,
                descriptors,
                hits_addend,
            } => {
                line.domain = Some(domain.to_owned());
                line.hits_addend = hits_addend;
                line.descriptors = descriptors
                    .iter()
                    .map(|d| LoggedDescriptor {
                        entries: d
                            .entries
                            .iter()
                            .map(|e| [e.key.clone(), e.value.clone()])
                            .collect(),
                        hits_addend: d.hits_addend.map(|a| a.value),
                        refund: d.is_negative_hits,
                    })
                    .collect();
            }
        }
        line
    }
}

/// What the doors share with the writer.
struct Shared {
    sender: SyncSender<LogLine>,
    /// Keys whose sample hash is below this are logged; `None` logs every request.
    sample_below: Option<u64>,
    sampler: RandomState,
    counts: Arc<Counts>,
}

/// Lines dropped, by reason, and written; also in Prometheus.
#[derive(Debug, Default)]
struct Counts {
    full: AtomicU64,
    too_long: AtomicU64,
    io: AtomicU64,
    written: AtomicU64,
    /// Lines queued and not yet taken by the writer.
    queued: AtomicU64,
}

impl Counts {
    fn drop_line(&self, reason: &'static str) {
        self.drop_lines(reason, 1);
    }

    fn drop_lines(&self, reason: &'static str, n: u64) {
        let count = match reason {
            "full" => &self.full,
            "too_long" => &self.too_long,
            _ => &self.io,
        };
        count.fetch_add(n, Ordering::Relaxed);
        metrics::counter!("tollgate_decision_log_dropped_total", "reason" => reason).increment(n);
    }
}

impl Shared {
    /// The line of a sampled request, its outcome to be filled in.
    fn take(&self, door: Door, asked: Asked<'_>) -> Option<LogLine> {
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
    pub fn record(&self, door: Door, asked: Asked<'_>, outcome: LoggedOutcome) {
        if let Some(mut line) = self.shared.take(door, asked) {
            line.outcome = outcome;
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

/// The line of a request through `door`, when a log is installed and samples it: hand it its
/// outcome with [`Pending::answered`] once known.
pub(crate) fn asked(door: Door, asked: Asked<'_>) -> Option<Pending> {
    let installed = INSTALLED.load();
    let shared = installed.as_ref()?;
    shared.take(door, asked).map(Pending)
}

/// A sampled request's line, waiting for its outcome.
#[derive(Debug)]
pub struct Pending(LogLine);

impl Pending {
    /// Queues the line with `outcome` for the installed log's writer.
    pub fn answered(mut self, outcome: LoggedOutcome) {
        self.0.outcome = outcome;
        if let Some(shared) = INSTALLED.load().as_ref() {
            shared.send(self.0);
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The writer's loop: each line hashed (if asked), encoded and written; the file flushed
/// whenever the queue runs empty, so a quiet server's log is on disk within a moment.
fn write_lines(
    receiver: &Receiver<LogLine>,
    mut file: RotatingFile,
    hash: Option<&KeyedHash>,
    counts: &Counts,
) {
    let mut buffer = Vec::with_capacity(512);
    loop {
        let mut line = match receiver.try_recv() {
            Ok(line) => line,
            Err(TryRecvError::Empty) => {
                if file.flush().is_err() {
                    counts.drop_line("io");
                }
                match receiver.recv() {
                    Ok(line) => line,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        counts.queued.fetch_sub(1, Ordering::Relaxed);
        if let Some(hash) = hash {
            hash_keys(&mut line, hash);
        }
        buffer.clear();
        if serde_json::to_writer(&mut buffer, &line).is_err() {
            counts.drop_line("io");
            continue;
        }
        buffer.push(b'\n');
        match file.write_line(&buffer) {
            Ok(true) => {
                counts.written.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("tollgate_decision_log_lines_total").increment(1);
            }
            Ok(false) => counts.drop_line("too_long"),
            Err(err) => {
                counts.drop_line("io");
                if IO_LOG.due() {
                    tracing::warn!(error = %err, "cannot write the decision log (sampled: at most one line a minute)");
                }
            }
        }
    }
    if file.flush().is_err() {
        counts.drop_line("io");
    }
}

static IO_LOG: tollgate_tower::LogSampler =
    tollgate_tower::LogSampler::new(std::time::Duration::from_secs(60));

/// Replaces every key and descriptor value by its keyed hash.
fn hash_keys(line: &mut LogLine, hash: &KeyedHash) {
    for rule in &mut line.rules {
        rule.key = hash.hex(rule.key.as_bytes());
    }
    for descriptor in &mut line.descriptors {
        for [_, value] in &mut descriptor.entries {
            *value = hash.hex(value.as_bytes());
        }
    }
}

/// A file that is rotated before a line would take it past `max_bytes`, keeping `keep`
/// rotated files.
struct RotatingFile {
    path: PathBuf,
    file: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    keep: usize,
}

impl RotatingFile {
    fn open(path: &Path, max_bytes: u64, keep: usize) -> io::Result<RotatingFile> {
        // A FIFO or a device would block the open or the writes; a directory cannot be written.
        if let Ok(meta) = std::fs::metadata(path)
            && !meta.is_file()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file (a FIFO, a device or a directory): the decision log writes to a file it can rotate",
            ));
        }
        let file = create_options().append(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(RotatingFile {
            path: path.to_owned(),
            file: BufWriter::with_capacity(64 * 1024, file),
            size,
            max_bytes,
            keep,
        })
    }

    /// Writes `line` whole; `false` when it alone is longer than a file may be.
    fn write_line(&mut self, line: &[u8]) -> io::Result<bool> {
        let len = line.len() as u64;
        if len > self.max_bytes {
            return Ok(false);
        }
        if self.size + len > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += len;
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    /// `PATH.{n}` becomes `PATH.{n+1}` (the last one is replaced), `PATH` becomes `PATH.1`, and
    /// a new empty `PATH` is opened.
    fn rotate(&mut self) -> io::Result<()> {
        self.file.flush()?;
        if self.keep > 0 {
            for n in (1..self.keep).rev() {
                match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                    Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                    _ => {}
                }
            }
            std::fs::rename(&self.path, rotated(&self.path, 1))?;
        } else {
            // Nothing is kept: the file is removed and made again, never truncated in place,
            // so a symlinked path loses the link, not the file it pointed to.
            match std::fs::remove_file(&self.path) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        let file = create_options().write(true).truncate(true).open(&self.path)?;
        self.file = BufWriter::with_capacity(64 * 1024, file);
        self.size = 0;
        Ok(())
    }
}

/// How the log's files are created: readable by their owner only (mode 0600), since lines hold
/// keys (addresses, user ids) unless they are hashed.
fn create_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// `PATH.n`, the `n`th newest rotated file of `path`.
///
/// ```
/// use std::path::Path;
/// use tollgate_server::decision_log::rotated;
///
/// assert_eq!(rotated(Path::new("/var/log/decisions.jsonl"), 2), Path::new("/var/log/decisions.jsonl.2"));
/// ```
pub fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn writes_one_line_per_decision_with_what_replay_needs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = DecisionLog::start(options(dir.path())).expect("start");
        let policy = policy();
        let rules = [Rule::new(&policy, "alice", 2)];
        log.record(Door::Http, Asked::Rules(&rules), LoggedOutcome::Denied);
        let descriptors = [RateLimitDescriptor {
            entries: vec![
                envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry {
                    key: "remote_address".into(),
                    value: "192.0.2.7".into(),
                },
            ],
            ..Default::default()
        }];
        log.record(
            Door::Grpc,
            Asked::Envoy {
                domain: "edge",
                descriptors: &descriptors,
                hits_addend: 3,
            },
            LoggedOutcome::Allowed,
        );
        log.finish();
        let lines = read_lines(&dir.path().join("decisions.jsonl"));
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].door, Door::Http);
        assert_eq!(
            lines[0].rules,
            [LoggedRule {
                policy: "movies".into(),
                key: "alice".into(),
                cost: 2
            }]
        );
        assert_eq!(lines[0].outcome, LoggedOutcome::Denied);
        assert_eq!(lines[1].domain.as_deref(), Some("edge"));
        assert_eq!(lines[1].hits_addend, 3);
        assert_eq!(
            lines[1].descriptors[0].entries,
            [["remote_address".to_owned(), "192.0.2.7".to_owned()]]
        );
        assert!(lines[0].time_us > 1_700_000_000_000_000 && lines[1].time_us >= lines[0].time_us);
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
                Asked::Rules(&[Rule::new(&policy, &key, 1)]),
                LoggedOutcome::Allowed,
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
            .map(|line| line.rules[0].key.clone())
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
            Asked::Rules(&[Rule::new(&policy, &long, 1)]),
            LoggedOutcome::Allowed,
        );
        log.record(
            Door::Http,
            Asked::Rules(&[Rule::new(&policy, "short", 1)]),
            LoggedOutcome::Allowed,
        );
        let counts = Arc::clone(&log.shared.counts);
        log.finish();
        assert_eq!(counts.too_long.load(Ordering::Relaxed), 1);
        let lines = read_lines(&dir.path().join("decisions.jsonl"));
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].rules[0].key, "short");
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
                Asked::Rules(&[Rule::new(&policy, &key, 1)]),
                LoggedOutcome::Allowed,
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
                Asked::Rules(&[Rule::new(&policy, &key, 1)]),
                LoggedOutcome::Allowed,
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
                    Asked::Rules(&[Rule::new(&policy, &key, 1)]),
                    LoggedOutcome::Allowed,
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
        let keys: Vec<_> = lines.iter().map(|l| l.rules[0].key.as_str()).collect();
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
                Asked::Rules(&[Rule::new(&policy, key, 1)]),
                LoggedOutcome::Allowed,
            );
        }
        log.finish();
        let keys: Vec<_> = read_lines(&dir.path().join("decisions.jsonl"))
            .into_iter()
            .map(|l| l.rules[0].key.clone())
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
    fn keyed_hash_is_hmac_sha256() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let hash = KeyedHash::new(&HashSecret(b"Jefe".to_vec()));
        assert_eq!(
            hash.hex(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c7"
        );
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
                    Asked::Rules(&[Rule::new(&policy, &key, 1)]),
                    LoggedOutcome::Allowed,
                );
            }
        }
        log.finish();
        let mut per_key = std::collections::HashMap::<String, u32>::new();
        for line in read_lines(&dir.path().join("decisions.jsonl")) {
            *per_key.entry(line.rules[0].key.clone()).or_default() += 1;
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
