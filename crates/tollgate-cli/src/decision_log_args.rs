//! The decision log flags `serve` and `proxy` share (`tollgate_server::decision_log`), each with an environment
//! variable; every flag but `--decision-log` needs it. `docs/changing-limits.md` says how the
//! log is read back by `tollgate replay`.

use std::path::PathBuf;

use clap::Args;
use tollgate_server::decision_log::{DecisionLogOptions, HashSecret, check_sample};

#[derive(Args, Debug, Clone)]
pub(crate) struct DecisionLogArgs {
    /// Log what each request asked and was answered, one JSON line each, to this file (rotated
    /// as PATH.1, PATH.2, ...), for `tollgate replay`. Off by default.
    #[arg(long, env = "TOLLGATE_DECISION_LOG", value_name = "PATH")]
    decision_log: Option<PathBuf>,
    /// The share of keys whose requests are logged, above 0 and at most 1: a kept key has
    /// every request logged.
    #[arg(long, env = "TOLLGATE_DECISION_LOG_SAMPLE", value_name = "RATE", default_value = "1",
          value_parser = sample, requires = "decision_log")]
    decision_log_sample: f64,
    /// Write keys (and Envoy descriptor values) as keyed hashes, not in clear. Replay still
    /// works: equal keys hash equally.
    #[arg(long, env = "TOLLGATE_DECISION_LOG_HASH_KEYS", requires = "decision_log")]
    decision_log_hash_keys: bool,
    /// The secret keys are hashed under, at least 16 bytes [default: random at each start, so
    /// logs of two starts cannot be joined by key].
    #[arg(long, env = "TOLLGATE_DECISION_LOG_HASH_SECRET", value_name = "SECRET",
          value_parser = secret, requires = "decision_log_hash_keys", hide_env_values = true)]
    decision_log_hash_secret: Option<HashSecret>,
    /// The largest a log file grows before it is rotated, in bytes (at least 1024).
    #[arg(long, env = "TOLLGATE_DECISION_LOG_MAX_BYTES", value_name = "BYTES",
          default_value_t = DecisionLogOptions::DEFAULT_MAX_FILE_BYTES,
          value_parser = clap::value_parser!(u64).range(DecisionLogOptions::MIN_MAX_FILE_BYTES..),
          requires = "decision_log")]
    decision_log_max_bytes: u64,
    /// How many rotated log files are kept besides the current one (0 to 1000).
    #[arg(long, env = "TOLLGATE_DECISION_LOG_FILES", value_name = "N",
          default_value_t = DecisionLogOptions::DEFAULT_ROTATED_FILES,
          value_parser = files, requires = "decision_log")]
    decision_log_files: usize,
}

/// A sample rate: a number above 0, at most 1.
fn sample(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a number above 0 and at most 1, like 0.1; got {text:?}"))?;
    check_sample(rate).map_err(|err| err.to_string())?;
    Ok(rate)
}

/// A hash secret of at least 16 bytes.
fn secret(text: &str) -> Result<HashSecret, String> {
    HashSecret::new(text).map_err(|err| err.to_string())
}

/// A number of rotated files, 0 to the library's maximum.
fn files(text: &str) -> Result<usize, String> {
    let n: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number of files, got {text:?}"))?;
    if n > DecisionLogOptions::MAX_ROTATED_FILES {
        return Err(format!(
            "at most {} rotated files are kept, got {n}",
            DecisionLogOptions::MAX_ROTATED_FILES
        ));
    }
    Ok(n)
}

impl DecisionLogArgs {
    /// The log's options, `None` without `--decision-log`. Without a given secret, hashed keys
    /// use one drawn at random for this start.
    pub(crate) fn options(self) -> Option<DecisionLogOptions> {
        let path = self.decision_log?;
        let hash_keys = self
            .decision_log_hash_keys
            .then(|| self.decision_log_hash_secret.unwrap_or_else(HashSecret::random));
        Some(DecisionLogOptions {
            sample: self.decision_log_sample,
            hash_keys,
            max_file_bytes: self.decision_log_max_bytes,
            rotated_files: self.decision_log_files,
            ..DecisionLogOptions::new(path)
        })
    }
}
