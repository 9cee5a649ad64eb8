//! Errors, split by when they can happen.
//!
//! A [`PolicyError`] is raised while a policy is being built, so a bad limit is caught at start-up
//! rather than on the first request. An [`Error`] is raised by a store operation: either the input
//! was unusable (zero cost, empty key, ...) or the store itself failed. Being rate limited is never
//! an error; it is an `Ok` [`Decision`](crate::Decision) with `allowed == false`.

use std::time::Duration;

/// A policy parameter that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A count (limit, capacity, burst, rate) is zero.
    #[error("{field} must be at least 1")]
    Zero {
        /// The parameter, e.g. `limit`.
        field: &'static str,
    },
    /// A count is larger than this algorithm supports.
    #[error("{field} is {value}, above the maximum of {max}")]
    TooLarge {
        /// The parameter, e.g. `limit`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// A window, period or penalty is shorter than 1 ms or longer than the supported maximum.
    #[error("{field} is {value:?}, outside the supported range {min:?} to {max:?}")]
    DurationOutOfRange {
        /// The parameter, e.g. `window`.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The shortest accepted duration.
        min: Duration,
        /// The longest accepted duration.
        max: Duration,
    },
    /// A duration that must be a whole number of milliseconds is not.
    #[error("{field} is {value:?}, which is not a whole number of milliseconds")]
    NotWholeMilliseconds {
        /// The parameter, e.g. `window`.
        field: &'static str,
        /// The value given.
        value: Duration,
    },
    /// A rate asks for more than one request per microsecond, finer than the clock can measure.
    #[error("rate of {count} per {per:?} is finer than one request per microsecond")]
    RateTooFine {
        /// Requests per period.
        count: u64,
        /// The period.
        per: Duration,
    },
    /// Refilling (or draining) the whole bucket would take longer than the supported maximum.
    #[error("{field} of {size} at this rate takes {needed:?} to refill, above the maximum of {max:?}")]
    HorizonTooLong {
        /// The parameter, e.g. `capacity`.
        field: &'static str,
        /// The size given.
        size: u64,
        /// How long a full refill would take.
        needed: Duration,
        /// The longest accepted refill time.
        max: Duration,
    },
    /// Leases were asked for on an algorithm that cannot lease units exactly.
    #[error(
        "lease is not supported by {algorithm}: only fixed_window, token_bucket and gcra can lease units"
    )]
    LeaseNotSupported {
        /// The policy's algorithm.
        algorithm: &'static str,
    },
    /// A number is outside its accepted range.
    #[error("{field} is {value}, outside the accepted range {min} to {max}")]
    OutOfRange {
        /// The parameter, e.g. `block_for.factor`.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The smallest accepted value.
        min: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// An escalating penalty has a step shorter than the one before it.
    #[error("block_for step {step} ({value:?}) is shorter than the step before it ({before:?})")]
    PenaltyShrinks {
        /// The step, counted from 1.
        step: usize,
        /// Its length.
        value: Duration,
        /// The length of the step before it.
        before: Duration,
    },
    /// A calendar quota names a time zone the tz database does not know.
    #[error("unknown time zone \"{name}\": expected an IANA name like \"Europe/Paris\"")]
    UnknownTimeZone {
        /// The name given.
        name: String,
    },
    /// A policy asks for replica acknowledgement and leases, which admit without a store call.
    #[error(
        "replicas cannot be combined with lease: an instance admits from its leased units without a store call that could wait for replicas"
    )]
    ReplicasWithLease,
    /// The policy name is empty or too long.
    #[error("policy name must be 1 to {max} bytes, got {len}")]
    BadName {
        /// Length of the name given, in bytes.
        len: usize,
        /// The longest accepted name, in bytes.
        max: usize,
    },
}

/// What a store operation failed on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cost is zero; a check must ask for at least one unit.
    #[error("cost must be at least 1")]
    ZeroCost,
    /// The cost is more than the policy can ever admit at once, so it would be denied forever.
    #[error("cost {cost} is above {max}, the most policy `{policy}` can ever admit at once")]
    CostTooLarge {
        /// The cost asked for.
        cost: u64,
        /// The policy's limit, capacity or burst.
        max: u64,
        /// The policy's name.
        policy: String,
    },
    /// The key is empty.
    #[error("key must not be empty")]
    EmptyKey,
    /// The key is longer than the store accepts.
    #[error("key is {len} bytes, above the maximum of {max}")]
    KeyTooLong {
        /// Length of the key given, in bytes.
        len: usize,
        /// The longest accepted key, in bytes.
        max: usize,
    },
    /// `check_limit` was asked with `max_attempts == 0`, which can never allow anything.
    #[error("max_attempts must be at least 1")]
    ZeroMaxAttempts,
    /// An attempts TTL is outside the supported range.
    #[error("ttl is {value:?}, outside the supported range {min:?} to {max:?}")]
    TtlOutOfRange {
        /// The TTL given.
        value: Duration,
        /// The shortest accepted TTL.
        min: Duration,
        /// The longest accepted TTL.
        max: Duration,
    },
    /// The store cannot give budget back.
    #[error("this store cannot refund (policy `{policy}`)")]
    RefundUnsupported {
        /// The policy of the refund.
        policy: String,
    },
    /// The store cannot record charges.
    #[error("this store cannot charge (policy `{policy}`)")]
    ChargeUnsupported {
        /// The policy of the first rule charged.
        policy: String,
    },
    /// The policy's algorithm takes no runtime overrides (a calendar quota: its periods are
    /// placed by the policy's time zone, which an override could not move on every store alike).
    #[error("policy `{policy}` uses {algorithm}, which takes no runtime overrides")]
    OverrideUnsupported {
        /// The policy's name.
        policy: String,
        /// The policy's algorithm.
        algorithm: &'static str,
    },
    /// An override was given another algorithm than its policy's.
    #[error("an override of policy `{policy}` must use its algorithm {expected}, not {got}")]
    OverrideAlgorithm {
        /// The policy's name.
        policy: String,
        /// The policy's algorithm.
        expected: &'static str,
        /// The override's algorithm.
        got: &'static str,
    },
    /// The policy has as many overrides of this kind (`key` or `prefix`) as a policy may.
    #[error("policy `{policy}` has {max} {kind} overrides, the most a policy may have")]
    TooManyOverrides {
        /// The policy.
        policy: String,
        /// `key` or `prefix`.
        kind: &'static str,
        /// The bound.
        max: usize,
    },
    /// The memory store is at its key bound and every key in the way is currently limited or
    /// blocked. Forgetting one of them would hand its owner a fresh budget, so the new key is
    /// refused instead; the caller's failure policy decides what to do.
    #[error("memory store is full: {max_keys} keys, none of them evictable right now")]
    StoreFull {
        /// The configured key bound.
        max_keys: usize,
    },
    /// A backing store (such as Redis) failed.
    #[error("store {kind} error: {source}")]
    Store {
        /// The class of failure, for failure modes, logs and metrics.
        kind: StoreErrorKind,
        /// What the store (or its client) reported.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// The class of a backing store failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store did not answer in time.
    Timeout,
    /// The store could not be reached, dropped the connection, or is known to be down.
    Connection,
    /// The store refused to write: out of memory.
    OutOfMemory,
    /// The store refused us: wrong password or missing permission.
    Auth,
    /// A server-side script failed.
    Script,
    /// A cluster could not route the call.
    Cluster,
    /// A stored value is not one this crate wrote.
    Corrupt,
    /// The store applied a decision that admits, but fewer of its replicas than the policy asks
    /// for acknowledged it in time ([`Policy::with_replicas`](crate::Policy::with_replicas)): it
    /// could be lost in a failover.
    Unreplicated,
}

impl std::fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreErrorKind::Timeout => "timeout",
            StoreErrorKind::Connection => "connection",
            StoreErrorKind::OutOfMemory => "out of memory",
            StoreErrorKind::Auth => "auth",
            StoreErrorKind::Script => "script",
            StoreErrorKind::Cluster => "cluster",
            StoreErrorKind::Corrupt => "corrupt value",
            StoreErrorKind::Unreplicated => "unreplicated",
        })
    }
}

impl Error {
    /// A store failure of class `kind`, keeping `source` for logs.
    ///
    /// ```
    /// use tollgate::{Error, StoreErrorKind};
    ///
    /// let err = Error::store(StoreErrorKind::Timeout, "no answer within 50ms");
    /// assert_eq!(err.to_string(), "store timeout error: no answer within 50ms");
    /// assert_eq!(err.class(), Some("timeout"));
    /// ```
    pub fn store(
        kind: StoreErrorKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Store {
            kind,
            source: source.into(),
        }
    }

    /// The class of a store failure as a short label (`timeout`, `connection`, `out_of_memory`,
    /// `auth`, `script`, `cluster`, `corrupt`, `unreplicated`, `full`), `None` for bad input. A bounded set, for
    /// metrics.
    ///
    /// ```
    /// assert_eq!(tollgate::Error::StoreFull { max_keys: 1 }.class(), Some("full"));
    /// assert_eq!(tollgate::Error::ZeroCost.class(), None);
    /// ```
    pub fn class(&self) -> Option<&'static str> {
        match self {
            Error::StoreFull { .. } => Some("full"),
            Error::Store { kind, .. } => Some(match kind {
                StoreErrorKind::Timeout => "timeout",
                StoreErrorKind::Connection => "connection",
                StoreErrorKind::OutOfMemory => "out_of_memory",
                StoreErrorKind::Auth => "auth",
                StoreErrorKind::Script => "script",
                StoreErrorKind::Cluster => "cluster",
                StoreErrorKind::Corrupt => "corrupt",
                StoreErrorKind::Unreplicated => "unreplicated",
            }),
            _ => None,
        }
    }

    /// True when the caller's input was unusable, as opposed to the store failing.
    ///
    /// ```
    /// let err = tollgate::Error::ZeroCost;
    /// assert!(err.is_bad_input());
    /// ```
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, Error::StoreFull { .. } | Error::Store { .. })
    }
}
