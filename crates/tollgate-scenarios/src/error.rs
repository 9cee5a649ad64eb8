//! What can go wrong in a scenario: bad arguments (caught before any work starts), a store that
//! cannot be reached or fails, and a chart that cannot be drawn or written.

use std::path::PathBuf;

/// A scenario could not run or could not write its output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A numeric argument is out of its accepted range.
    #[error("--{arg} must be {expected}, got {value}")]
    BadArgument {
        /// The argument, without dashes, e.g. `limit`.
        arg: &'static str,
        /// What is accepted, e.g. `at least 1`.
        expected: &'static str,
        /// The value given, as text.
        value: String,
    },
    /// The chart path does not end in `.png`.
    #[error("chart path `{}` must end in .png", .0.display())]
    ChartNotPng(PathBuf),
    /// The chart's directory does not exist.
    #[error("chart directory `{}` does not exist (for chart `{}`)", .dir.display(), .path.display())]
    ChartDirMissing {
        /// The directory.
        dir: PathBuf,
        /// The chart path given.
        path: PathBuf,
    },
    /// A Redis address is not one the bench accepts.
    #[error("--{arg} `{url}`: {why}")]
    BadRedisUrl {
        /// `redis` or `redis-cluster`.
        arg: &'static str,
        /// The address given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// A policy could not be built from the arguments.
    #[error("policy {name}: {source}")]
    Policy {
        /// The algorithm's name.
        name: &'static str,
        /// Why.
        #[source]
        source: tollgate::PolicyError,
    },
    /// A store failed a check (not a denial: an error).
    #[error("{store} store: {source}")]
    Store {
        /// Which store.
        store: &'static str,
        /// The store's error.
        #[source]
        source: tollgate::Error,
    },
    /// Redis could not be reached.
    #[error("{store} at {url}: {source}")]
    Connect {
        /// `redis` or `redis cluster`.
        store: &'static str,
        /// The address given.
        url: String,
        /// Why.
        #[source]
        source: tollgate_redis::ConnectError,
    },
    /// A Redis command the bench uses to measure the store (INFO, CLUSTER NODES, MEMORY
    /// USAGE) failed.
    #[error("{store}: {what}: {source}")]
    RedisInfo {
        /// `redis` or `redis cluster`.
        store: &'static str,
        /// The command and node.
        what: String,
        /// Why.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered a measuring command with something the bench cannot read.
    #[error("{store}: {what}")]
    BadReply {
        /// `redis` or `redis cluster`.
        store: &'static str,
        /// The command, node and reply.
        what: String,
    },
    /// The markdown report could not be written to `--out`.
    #[error("cannot write `{}`: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The async runtime for the throughput scenario could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Drawing or writing the chart failed.
    #[error("cannot draw chart `{}`: {why}", .path.display())]
    Chart {
        /// The chart path.
        path: PathBuf,
        /// What failed.
        why: String,
    },
}
