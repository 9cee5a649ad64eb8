//! Concurrency limits: at most `max_in_flight` requests of one key in flight at a time ("at most
//! 5 concurrent exports per user").
//!
//! A rate limit counts requests as they *start*; a concurrency limit counts requests that have
//! started and not yet *finished*. So it needs two calls: [`acquire`](ConcurrencyStore::acquire)
//! before the work, which answers with a [`LeaseId`] (or a denial with a retry hint), and
//! [`release`](ConcurrencyStore::release) after it. A caller that crashes never releases, so
//! every lease also ends by itself after the policy's `lease_timeout`: a lost release costs one
//! slot for at most that long, never forever.
//!
//! The state of a key is the set of its live leases with their expiry times. [`step`] holds the
//! two operations as pure functions on that set, which the memory store runs under the key's
//! lock and the Redis store's `lua/concurrency.lua` ports line for line (a sorted set of lease
//! ids scored by expiry).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::concurrency::{Acquire, ConcurrencyPolicy, Release};
//! use tollgate::MemoryStore;
//!
//! let store = MemoryStore::new();
//! // At most 2 exports in flight per user; a lease never released frees itself after 30 s.
//! let exports = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(30))?;
//! let Acquire::Granted(first) = store.acquire(&exports, "alice")? else { unreachable!() };
//! let Acquire::Granted(_second) = store.acquire(&exports, "alice")? else { unreachable!() };
//! let Acquire::Denied(full) = store.acquire(&exports, "alice")? else { unreachable!() };
//! assert_eq!(full.in_flight, 2);
//! assert!(full.retry_after <= Duration::from_secs(30));
//!
//! assert_eq!(store.release(&exports, "alice", first.id)?, Release::Released { in_flight: 1 });
//! assert_eq!(store.release(&exports, "alice", first.id)?, Release::NotHeld);
//! assert!(store.acquire(&exports, "alice")?.is_granted());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Concurrency policies are a kind of their own, apart from [`Policy`](crate::Policy): a check
//! spends and forgets, an acquisition must be given back, so the two never share a call. They
//! cannot appear in a [`Rule`](crate::Rule), and their state never meets a rate policy's of the
//! same name.

use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::bounds;
use crate::policy::PolicyName;
use crate::{Error, FailureMode, HashTag, PolicyError};

/// The largest `max_in_flight`. The memory store keeps one entry per live lease in the key's
/// slot, and Redis one sorted set member, so this bounds the memory of one key.
///
/// ```
/// use std::time::Duration;
/// use tollgate::concurrency::{ConcurrencyPolicy, MAX_IN_FLIGHT};
///
/// assert!(ConcurrencyPolicy::new("p", MAX_IN_FLIGHT + 1, Duration::from_secs(1)).is_err());
/// ```
pub const MAX_IN_FLIGHT: u64 = 100_000;

/// The longest `lease_timeout`: one day. A lease whose holder vanished keeps its slot until its
/// timeout, so the timeout is how long one lost release (a crash, a client that never calls back)
/// can cost a slot; work that runs longer than a day should renew its place in its own queue, not
/// hold a lease. An admin can also free a key's slots at once
/// ([`ConcurrencyStore::clear_leases`]).
///
/// ```
/// use std::time::Duration;
/// use tollgate::concurrency::{ConcurrencyPolicy, MAX_LEASE_TIMEOUT};
///
/// assert_eq!(MAX_LEASE_TIMEOUT, Duration::from_secs(24 * 3600));
/// assert!(ConcurrencyPolicy::new("p", 1, MAX_LEASE_TIMEOUT).is_ok());
/// assert!(ConcurrencyPolicy::new("p", 1, MAX_LEASE_TIMEOUT + Duration::from_millis(1)).is_err());
/// ```
pub const MAX_LEASE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// A concurrency policy: a name, how many leases one key may hold at once, and how long a lease
/// lives when it is never released.
///
/// ```
/// use std::time::Duration;
/// use tollgate::concurrency::ConcurrencyPolicy;
/// use tollgate::FailureMode;
///
/// let exports = ConcurrencyPolicy::new("exports", 5, Duration::from_secs(30))?
///     .with_failure_mode(FailureMode::FailClosed);
/// assert_eq!(exports.max_in_flight(), 5);
/// assert_eq!(exports.lease_timeout(), Duration::from_secs(30));
/// assert!(ConcurrencyPolicy::new("exports", 0, Duration::from_secs(30)).is_err());
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConcurrencyPolicy {
    name: Arc<PolicyName>,
    max_in_flight: u64,
    lease_timeout_us: u64,
    on_store_failure: FailureMode,
    hash_tag: HashTag,
}

impl ConcurrencyPolicy {
    /// A policy named `name` (1 to 255 bytes) admitting at most `max_in_flight` (1 to
    /// [`MAX_IN_FLIGHT`]) leases per key, each ending by itself after `lease_timeout` (1 ms to
    /// [`MAX_LEASE_TIMEOUT`], whole milliseconds).
    pub fn new(
        name: impl AsRef<str>,
        max_in_flight: u64,
        lease_timeout: Duration,
    ) -> Result<Self, PolicyError> {
        let name = name.as_ref();
        if name.is_empty() || name.len() > bounds::MAX_NAME_LEN {
            return Err(PolicyError::BadName {
                len: name.len(),
                max: bounds::MAX_NAME_LEN,
            });
        }
        let max_in_flight = bounds::count("max_in_flight", max_in_flight, MAX_IN_FLIGHT)?;
        if lease_timeout < bounds::MIN_PERIOD || lease_timeout > MAX_LEASE_TIMEOUT {
            return Err(PolicyError::DurationOutOfRange {
                field: "lease_timeout",
                value: lease_timeout,
                min: bounds::MIN_PERIOD,
                max: MAX_LEASE_TIMEOUT,
            });
        }
        let lease_timeout_us = bounds::as_us(lease_timeout);
        if !lease_timeout_us.is_multiple_of(1_000) {
            // Redis expires keys in milliseconds: a lease must end on one.
            return Err(PolicyError::NotWholeMilliseconds {
                field: "lease_timeout",
                value: lease_timeout,
            });
        }
        Ok(ConcurrencyPolicy {
            name: Arc::new(PolicyName::concurrency(name)),
            max_in_flight,
            lease_timeout_us,
            on_store_failure: FailureMode::default(),
            hash_tag: HashTag::default(),
        })
    }

    /// Sets what the [`Engine`](crate::Engine) answers an acquisition when the store fails; see
    /// [`Engine::acquire`](crate::Engine::acquire).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{FailureMode, concurrency::ConcurrencyPolicy};
    ///
    /// let p = ConcurrencyPolicy::new("p", 1, Duration::from_secs(1))?.with_failure_mode(FailureMode::FailOpen);
    /// assert_eq!(p.failure_mode(), FailureMode::FailOpen);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_failure_mode(mut self, mode: FailureMode) -> Self {
        self.on_store_failure = mode;
        self
    }

    /// Chooses what names this policy's shard in a networked store; see [`HashTag`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{HashTag, concurrency::ConcurrencyPolicy};
    ///
    /// let p = ConcurrencyPolicy::new("p", 1, Duration::from_secs(1))?.with_hash_tag(HashTag::Key);
    /// assert_eq!(p.hash_tag(), HashTag::Key);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_hash_tag(mut self, hash_tag: HashTag) -> Self {
        self.hash_tag = hash_tag;
        self
    }

    /// The name, which namespaces this policy's state in a store.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("exports", 1, std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.name(), "exports");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn name(&self) -> &str {
        self.name.text()
    }

    #[inline]
    pub(crate) fn shared_name(&self) -> &Arc<PolicyName> {
        &self.name
    }

    /// The most leases one key holds at once.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 3, std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.max_in_flight(), 3);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight
    }

    /// How long a lease lives when it is not released.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 3, std::time::Duration::from_secs(9))?;
    /// assert_eq!(p.lease_timeout(), std::time::Duration::from_secs(9));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn lease_timeout(&self) -> Duration {
        Duration::from_micros(self.lease_timeout_us)
    }

    /// [`lease_timeout`](Self::lease_timeout) in microseconds.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 3, std::time::Duration::from_millis(5))?;
    /// assert_eq!(p.lease_timeout_us(), 5_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn lease_timeout_us(&self) -> u64 {
        self.lease_timeout_us
    }

    /// What the engine does for this policy when the store fails.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 3, std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.failure_mode(), tollgate::FailureMode::default());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn failure_mode(&self) -> FailureMode {
        self.on_store_failure
    }

    /// What names this policy's shard in a networked store.
    ///
    /// ```
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 3, std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.hash_tag(), tollgate::HashTag::PolicyAndKey);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn hash_tag(&self) -> HashTag {
        self.hash_tag
    }

    /// This policy's share for one of `instances` instances (`max_in_flight / instances`, at
    /// least 1): what the `Local` failure mode admits on each instance while the store is away.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 10, std::time::Duration::from_secs(1))?;
    /// assert_eq!(p.local_share(NonZeroU32::new(4).unwrap()).max_in_flight(), 2);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn local_share(&self, instances: std::num::NonZeroU32) -> ConcurrencyPolicy {
        ConcurrencyPolicy {
            max_in_flight: (self.max_in_flight / u64::from(instances.get())).max(1),
            ..self.clone()
        }
    }
}

/// A lease's id: 128 bits, written as 32 lower-case hex digits. Unique per store that made it,
/// and unpredictable, so a client cannot release another client's lease by guessing.
///
/// ```
/// use tollgate::concurrency::LeaseId;
///
/// let id: LeaseId = "000000000000000000000000000000ff".parse()?;
/// assert_eq!(id.as_u128(), 255);
/// assert_eq!(id.to_string(), "000000000000000000000000000000ff");
/// assert!("ff".parse::<LeaseId>().is_err());
/// # Ok::<(), tollgate::concurrency::BadLeaseId>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(u128);

impl LeaseId {
    /// The id with this value.
    ///
    /// ```
    /// assert_eq!(tollgate::concurrency::LeaseId::new(7).as_u128(), 7);
    /// ```
    pub const fn new(value: u128) -> Self {
        LeaseId(value)
    }

    /// The id's value.
    ///
    /// ```
    /// assert_eq!(tollgate::concurrency::LeaseId::new(7).as_u128(), 7);
    /// ```
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A lease id that is not 32 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a lease id is 32 hexadecimal digits, got {given:?}")]
pub struct BadLeaseId {
    /// The text given (cut to 64 characters).
    pub given: String,
}

impl FromStr for LeaseId {
    type Err = BadLeaseId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadLeaseId {
            given: s.chars().take(64).collect(),
        };
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        u128::from_str_radix(s, 16).map(LeaseId).map_err(|_| bad())
    }
}

/// Makes lease ids: the low 64 bits are a count masked with a random word (a bijection, so
/// unique for this source), the high 64 a keyed hash of the count (unpredictable, and different
/// for every source, so two instances sharing a Redis meet with probability 2^-64 per pair of
/// ids).
///
/// ```
/// use tollgate::concurrency::LeaseIds;
///
/// let ids = LeaseIds::new();
/// assert_ne!(ids.next(), ids.next());
/// ```
#[derive(Debug)]
pub struct LeaseIds {
    hasher: std::collections::hash_map::RandomState,
    mask: u64,
    next: AtomicU64,
}

impl Default for LeaseIds {
    fn default() -> Self {
        let hasher = std::collections::hash_map::RandomState::new();
        LeaseIds {
            mask: hasher.hash_one("lease id mask"),
            hasher,
            next: AtomicU64::new(0),
        }
    }
}

impl LeaseIds {
    /// A new source with its own random key.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next id.
    pub fn next(&self) -> LeaseId {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        LeaseId((u128::from(self.hasher.hash_one(n)) << 64) | u128::from(n ^ self.mask))
    }
}

/// The answer to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// A slot is yours until you release it or it expires.
    Granted(Lease),
    /// Every slot is taken.
    Denied(Full),
}

impl Acquire {
    /// True for [`Acquire::Granted`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = tollgate::concurrency::ConcurrencyPolicy::new("p", 1, Duration::from_secs(1))?;
    /// let store = tollgate::MemoryStore::new();
    /// assert!(store.acquire(&p, "k")?.is_granted());
    /// assert!(!store.acquire(&p, "k")?.is_granted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_granted(&self) -> bool {
        matches!(self, Acquire::Granted(_))
    }
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// What to give [`release`](ConcurrencyStore::release).
    pub id: LeaseId,
    /// Time until the lease ends by itself.
    pub expires_in: Duration,
    /// Leases of the key live now, this one included.
    pub in_flight: u64,
    /// The policy's `max_in_flight` (of the local share, when degraded).
    pub limit: u64,
    /// True when the store could not decide and the policy's failure mode did.
    pub degraded: bool,
}

/// A denied acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    /// Leases of the key live now.
    pub in_flight: u64,
    /// The policy's `max_in_flight`.
    pub limit: u64,
    /// Time until the oldest lease expires: a slot is free by then at the latest (sooner when a
    /// holder releases).
    pub retry_after: Duration,
    /// True when the store could not decide and the policy's failure mode did.
    pub degraded: bool,
}

/// A key's leases as they stand, read without taking a slot: what an acquisition would find
/// now. Explain shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Leases of the key live now.
    pub in_flight: u64,
    /// The policy's `max_in_flight`.
    pub limit: u64,
    /// Time until the oldest live lease expires; `None` when no lease is live.
    pub next_expiry: Option<Duration>,
    /// Time until the newest live lease expires, when every slot is free at the latest;
    /// `None` when no lease is live.
    pub last_expiry: Option<Duration>,
}

/// The answer to a release. Releasing a lease that is not held is a normal answer, not an error:
/// the lease was already released, expired, or never existed, and either way it holds no slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The lease was live and its slot is free now.
    Released {
        /// Leases of the key still live.
        in_flight: u64,
    },
    /// No live lease has this id.
    NotHeld,
}

/// Where concurrency leases live. Each call is one atomic step in the backend.
///
/// ```
/// use std::time::Duration;
/// use tollgate::concurrency::{Acquire, ConcurrencyPolicy, ConcurrencyStore, Release};
///
/// async fn export<S: ConcurrencyStore>(store: &S, policy: &ConcurrencyPolicy) -> Result<bool, tollgate::Error> {
///     let Acquire::Granted(lease) = store.acquire(policy, b"alice").await? else {
///         return Ok(false);
///     };
///     // ... the work ...
///     Ok(store.release(policy, b"alice", lease.id).await? != Release::NotHeld)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = ConcurrencyPolicy::new("exports", 5, Duration::from_secs(30))?;
/// assert!(export(&tollgate::MemoryStore::new(), &policy).await?);
/// # Ok(())
/// # }
/// ```
pub trait ConcurrencyStore: Send + Sync {
    /// Whether every future this store returns is ready at its first poll, as for
    /// [`Store::ANSWERS_AT_ONCE`](crate::Store::ANSWERS_AT_ONCE).
    const ANSWERS_AT_ONCE: bool = false;

    /// Takes a slot of `key` under `policy` if one is free. Expired leases are dropped first.
    /// The key is checked with [`validate_key`](crate::store::validate_key).
    fn acquire(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<Acquire, Error>> + Send;

    /// Frees the slot of `lease`, if it is still live.
    fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> impl Future<Output = Result<Release, Error>> + Send;

    /// Frees every slot of `key` at once, and answers how many live leases it dropped: an
    /// operator's way out when holders vanished and their leases would hold the key until
    /// their timeout. A holder releasing one of them later gets [`Release::NotHeld`].
    fn clear_leases(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// The key's live leases, read without changing anything (expired ones are not counted, and
    /// not dropped either).
    fn in_flight(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<InFlight, Error>> + Send;
}

impl<S: ConcurrencyStore + ?Sized> ConcurrencyStore for Arc<S> {
    const ANSWERS_AT_ONCE: bool = S::ANSWERS_AT_ONCE;

    fn acquire(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<Acquire, Error>> + Send {
        (**self).acquire(policy, key)
    }

    fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> impl Future<Output = Result<Release, Error>> + Send {
        (**self).release(policy, key, lease)
    }

    fn clear_leases(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        (**self).clear_leases(policy, key)
    }

    fn in_flight(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> impl Future<Output = Result<InFlight, Error>> + Send {
        (**self).in_flight(policy, key)
    }
}

/// What the [`Engine`](crate::Engine) answers an acquisition: the answer, and the store's error
/// when the failure mode gave it.
#[derive(Debug)]
pub struct Acquisition {
    /// The answer.
    pub acquire: Acquire,
    /// The store's error, when it failed and the failure mode answered (for logs and metrics).
    pub store_error: Option<Error>,
}

/// The two operations as pure functions on a key's leases; the memory store runs them under the
/// key's lock and `lua/concurrency.lua` ports them line for line.
pub mod step {
    use super::LeaseId;

    /// One key's live leases: (id, expires at in µs since the Unix epoch), in no order.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Leases {
        held: Vec<(LeaseId, u64)>,
    }

    /// What [`acquire`] decided.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Acquired {
        /// Whether the lease was added.
        pub granted: bool,
        /// Live leases after the step.
        pub in_flight: u64,
        /// Granted: the new lease's expiry. Denied: the earliest expiry among the live leases.
        pub at_us: u64,
    }

    impl Leases {
        /// Live leases as last stored (expired ones not yet dropped included).
        ///
        /// ```
        /// assert_eq!(tollgate::concurrency::step::Leases::default().len(), 0);
        /// ```
        pub fn len(&self) -> usize {
            self.held.len()
        }

        /// True when no lease is stored.
        ///
        /// ```
        /// assert!(tollgate::concurrency::step::Leases::default().is_empty());
        /// ```
        pub fn is_empty(&self) -> bool {
            self.held.is_empty()
        }

        /// The latest expiry, 0 when empty: the key's state means nothing after it.
        ///
        /// ```
        /// assert_eq!(tollgate::concurrency::step::Leases::default().last_expiry_us(), 0);
        /// ```
        pub fn last_expiry_us(&self) -> u64 {
            self.held.iter().map(|&(_, e)| e).max().unwrap_or(0)
        }

        /// The earliest expiry, 0 when empty: when the store has a lease of this key to drop.
        pub(crate) fn first_expiry_us(&self) -> u64 {
            self.held.iter().map(|&(_, e)| e).min().unwrap_or(0)
        }

        /// Drops the leases that expired at `now_us` (an expiry equal to now has expired).
        pub(crate) fn drop_expired(&mut self, now_us: u64) {
            self.held.retain(|&(_, expires_at_us)| expires_at_us > now_us);
        }
    }

    /// Acquires at `now_us`: drops expired leases, then adds `id` expiring at `now_us +
    /// timeout_us` if fewer than `max_in_flight` are live.
    ///
    /// ```
    /// use tollgate::concurrency::{LeaseId, step};
    ///
    /// let mut leases = step::Leases::default();
    /// let first = step::acquire(&mut leases, 0, 1, 10, LeaseId::new(1));
    /// assert!(first.granted);
    /// let second = step::acquire(&mut leases, 4, 1, 10, LeaseId::new(2));
    /// assert_eq!((second.granted, second.in_flight, second.at_us), (false, 1, 10));
    /// assert!(step::acquire(&mut leases, 10, 1, 10, LeaseId::new(3)).granted, "the first expired");
    /// ```
    pub fn acquire(
        leases: &mut Leases,
        now_us: u64,
        max_in_flight: u64,
        timeout_us: u64,
        id: LeaseId,
    ) -> Acquired {
        leases.drop_expired(now_us);
        let count = leases.held.len() as u64;
        if count < max_in_flight {
            let expires_at_us = now_us + timeout_us;
            leases.held.push((id, expires_at_us));
            return Acquired {
                granted: true,
                in_flight: count + 1,
                at_us: expires_at_us,
            };
        }
        let earliest = leases.held.iter().map(|&(_, e)| e).min().unwrap_or(now_us);
        Acquired {
            granted: false,
            in_flight: count,
            at_us: earliest,
        }
    }

    /// The leases live at `now_us` and the earliest and latest of their expiries, changing
    /// nothing: what [`acquire`] would find.
    ///
    /// ```
    /// use tollgate::concurrency::{LeaseId, step};
    ///
    /// let mut leases = step::Leases::default();
    /// assert_eq!(step::in_flight(&leases, 0), (0, None));
    /// step::acquire(&mut leases, 0, 2, 10, LeaseId::new(1));
    /// step::acquire(&mut leases, 5, 2, 10, LeaseId::new(2));
    /// assert_eq!(step::in_flight(&leases, 6), (2, Some((10, 15))));
    /// assert_eq!(step::in_flight(&leases, 10), (1, Some((15, 15))), "an expiry equal to now has expired");
    /// ```
    pub fn in_flight(leases: &Leases, now_us: u64) -> (u64, Option<(u64, u64)>) {
        let live = leases.held.iter().map(|&(_, e)| e).filter(|&e| e > now_us);
        live.fold((0, None), |(count, span), e| {
            let span = span.map_or((e, e), |(first, last): (u64, u64)| (first.min(e), last.max(e)));
            (count + 1, Some(span))
        })
    }

    /// Releases `id` at `now_us`: drops expired leases, then `id` if it is live. Returns
    /// whether it was, and the live leases left.
    ///
    /// ```
    /// use tollgate::concurrency::{LeaseId, step};
    ///
    /// let mut leases = step::Leases::default();
    /// step::acquire(&mut leases, 0, 2, 10, LeaseId::new(1));
    /// assert_eq!(step::release(&mut leases, 5, LeaseId::new(1)), (true, 0));
    /// assert_eq!(step::release(&mut leases, 5, LeaseId::new(1)), (false, 0));
    /// step::acquire(&mut leases, 0, 2, 10, LeaseId::new(2));
    /// assert_eq!(step::release(&mut leases, 10, LeaseId::new(2)), (false, 0), "expired");
    /// ```
    pub fn release(leases: &mut Leases, now_us: u64, id: LeaseId) -> (bool, u64) {
        leases.drop_expired(now_us);
        let before = leases.held.len();
        leases.held.retain(|&(held, _)| held != id);
        let released = leases.held.len() < before;
        (released, leases.held.len() as u64)
    }

    /// Clears the key at `now_us`: drops every lease, and answers how many were live.
    ///
    /// ```
    /// use tollgate::concurrency::{LeaseId, step};
    ///
    /// let mut leases = step::Leases::default();
    /// step::acquire(&mut leases, 0, 3, 10, LeaseId::new(1));
    /// step::acquire(&mut leases, 5, 3, 10, LeaseId::new(2));
    /// assert_eq!(step::clear(&mut leases, 12), 1, "the first expired at 10");
    /// assert!(leases.is_empty());
    /// ```
    pub fn clear(leases: &mut Leases, now_us: u64) -> u64 {
        leases.drop_expired(now_us);
        let live = leases.held.len() as u64;
        leases.held.clear();
        live
    }
}

#[cfg(test)]
mod tests {
    use super::step::{self, Leases};
    use super::*;

    #[test]
    fn a_key_never_holds_more_than_max_in_flight() {
        let mut leases = Leases::default();
        let mut granted = 0;
        for i in 0..50u64 {
            // Time moves 1 µs per attempt: no lease of 100 µs expires during the first 100.
            let a = step::acquire(&mut leases, i, 7, 100, LeaseId::new(u128::from(i)));
            assert!(a.in_flight <= 7);
            granted += u64::from(a.granted);
        }
        assert_eq!(granted, 7);
    }

    #[test]
    fn the_retry_hint_is_the_earliest_expiry() {
        let mut leases = Leases::default();
        step::acquire(&mut leases, 100, 2, 1_000, LeaseId::new(1));
        step::acquire(&mut leases, 300, 2, 1_000, LeaseId::new(2));
        let denied = step::acquire(&mut leases, 500, 2, 1_000, LeaseId::new(3));
        assert_eq!((denied.granted, denied.at_us), (false, 1_100));
        step::release(&mut leases, 600, LeaseId::new(1));
        assert_eq!(
            step::acquire(&mut leases, 600, 2, 1_000, LeaseId::new(3)).at_us,
            1_600
        );
    }

    #[test]
    fn lease_ids_round_trip_through_text() {
        let ids = LeaseIds::new();
        for _ in 0..10 {
            let id = ids.next();
            assert_eq!(id.to_string().parse::<LeaseId>(), Ok(id));
        }
        for bad in [
            "",
            "g0000000000000000000000000000000",
            "+0000000000000000000000000000000",
            "0",
        ] {
            assert!(bad.parse::<LeaseId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_timeout_must_be_whole_milliseconds() {
        let err = ConcurrencyPolicy::new("p", 1, Duration::from_micros(1_500)).unwrap_err();
        assert!(matches!(
            err,
            PolicyError::NotWholeMilliseconds {
                field: "lease_timeout",
                ..
            }
        ));
    }
}
