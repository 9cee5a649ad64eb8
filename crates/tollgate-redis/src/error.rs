//! Errors: connecting, and turning Redis failures into the core's typed store errors.

use tollgate::{Error, StoreErrorKind};

/// Setting up a [`RedisStore`](crate::RedisStore) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The address is not one we understand.
    #[error("bad redis address `{url}`: {why}")]
    BadUrl {
        /// The address given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key prefix contains a brace, which would move the cluster hash tag.
    #[error("key prefix `{0}` must not contain `{{` or `}}`")]
    BadPrefix(String),
    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The marker our scripts put in front of a corrupt-value error.
const CORRUPT: &str = "TOLLGATE_CORRUPT";

/// Redis's answer when one of our keys holds another type (someone else wrote it).
const WRONGTYPE: &str = "WRONGTYPE";

/// Classifies a Redis failure. `Timeout` and `Connection` mean Redis is unavailable (they feed the
/// circuit breaker and the failure mode); `Corrupt` means one key holds a value we did not write.
pub(crate) fn classify(err: &redis::RedisError) -> StoreErrorKind {
    let text = err.to_string();
    if text.contains(CORRUPT) || text.contains(WRONGTYPE) {
        StoreErrorKind::Corrupt
    } else if err.is_timeout() {
        StoreErrorKind::Timeout
    } else if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        StoreErrorKind::Connection
    } else if err.is_cluster_error() || err.kind() == redis::ErrorKind::ClusterConnectionNotFound {
        StoreErrorKind::Cluster
    } else {
        StoreErrorKind::Script
    }
}

pub(crate) fn store_error(err: &redis::RedisError) -> Error {
    let kind = classify(err);
    let message = match (kind, err.to_string()) {
        // Keep only what the script said, not Lua's location prefix.
        (StoreErrorKind::Corrupt, text) => match text.find(CORRUPT) {
            Some(at) => text[at + CORRUPT.len()..].trim().to_string(),
            None => format!("a key holds a value of another type: {text}"),
        },
        (_, text) => text,
    };
    Error::store(kind, message)
}

pub(crate) fn timeout(after: std::time::Duration) -> Error {
    Error::store(
        StoreErrorKind::Timeout,
        format!("no answer from redis within {after:?}"),
    )
}

pub(crate) fn breaker_open(next_probe_in: std::time::Duration) -> Error {
    Error::store(
        StoreErrorKind::Connection,
        format!("redis unavailable; next probe in {next_probe_in:?}"),
    )
}

/// True for failures that mean Redis itself is unavailable, as opposed to one bad key.
pub(crate) fn is_unavailable(err: &Error) -> bool {
    matches!(
        err,
        Error::Store {
            kind: StoreErrorKind::Timeout | StoreErrorKind::Connection | StoreErrorKind::Cluster,
            ..
        }
    )
}
