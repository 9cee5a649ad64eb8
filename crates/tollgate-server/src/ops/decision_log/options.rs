//! What an operator chooses of the decision log, checked before it starts: where it goes, how
//! much of it is kept (sample rate, file size, rotated files, queue), and the secret keys are
//! hashed under. Every bound is checked here, so the running log never meets one it cannot
//! keep.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;
use std::path::PathBuf;

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
pub struct HashSecret(pub(super) Vec<u8>);

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
