//! Policies: a name, an algorithm with its parameters ([`Algorithm`], from the
//! [`algorithm`](crate::algorithm) module), an optional penalty, and what a networked store does
//! with them.
//!
//! Everything is validated when constructed, so a policy that exists can be used: no check will
//! ever fail because of the policy itself. The name namespaces the stored state, so two policies
//! applied to the same key (say `"login"` and `"api"` on one user id) never share a counter.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::PolicyError;
use crate::algorithm::migrate::OnChange;
use crate::algorithm::{Algorithm, PolicyParts};
use crate::bounds::{self, MAX_NAME_LEN};
use crate::enforcement::Enforcement;
use crate::fingerprint::Fingerprint;
use crate::lease::LeaseOptions;
use crate::penalty::Penalty;

/// A named rule: which algorithm with which parameters, and an optional penalty.
///
/// Cloning is cheap (the name is shared). A policy's state is found by its name: two policies
/// with the same name (say, one rebuilt from a reloaded config) share their counters in a store,
/// and nothing outlives the last policy and stored key that use a name.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Policy};
///
/// // 20 requests per minute per client, and a client that goes over is shut out for 60 s.
/// let policy = Policy::new("movies", Algorithm::sliding_log(20, Duration::from_secs(60))?)?
///     .with_block_for(Duration::from_secs(60))?;
/// assert_eq!(policy.name(), "movies");
/// assert_eq!(policy.block_for(), Some(Duration::from_secs(60)));
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Policy {
    name: Arc<PolicyName>,
    algorithm: Algorithm,
    /// What a change of `algorithm` does to the keys already counted (see
    /// [`migrate`](crate::algorithm::migrate)).
    on_change: OnChange,
    penalty: Option<Penalty>,
    on_store_failure: FailureMode,
    hash_tag: HashTag,
    lease: Option<LeaseOptions>,
    enforcement: Option<Enforcement>,
    /// Replicas a networked store waits for after an admission; 0 for none.
    replicas: u8,
    /// How long it waits for them, on top of its own deadline.
    replica_wait: Duration,
}

/// Which part of a policy's key names the shard a networked store keeps it on (the Redis Cluster
/// hash tag). The memory store ignores it.
///
/// A request's rules can only be decided in one atomic call when their keys live together. With
/// [`PolicyAndKey`](HashTag::PolicyAndKey) (the default) each (policy, key) pair spreads on its
/// own, which balances a cluster best; with [`Key`](HashTag::Key) every policy applied to the
/// same key (a user id, a tenant) lands on the same shard, so a request limited per user by
/// several policies is one call even on a cluster.
///
/// ```
/// use tollgate::{Algorithm, HashTag, Policy, Rate};
///
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// assert_eq!(api.hash_tag(), HashTag::PolicyAndKey);
/// assert_eq!(api.with_hash_tag(HashTag::Key).hash_tag(), HashTag::Key);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashTag {
    /// The policy name and the key together: pairs spread evenly.
    #[default]
    PolicyAndKey,
    /// The key alone: every policy on one key shares a shard.
    Key,
}

/// What a networked store does for this policy when it cannot decide (the store is down, slow or
/// refusing). Decisions taken this way are marked [`degraded`](crate::Decision::degraded).
/// The memory store cannot be unreachable and ignores it.
///
/// ```
/// use std::num::NonZeroU32;
/// use tollgate::FailureMode;
///
/// let mode = FailureMode::Local { instances: NonZeroU32::new(4).unwrap() };
/// assert_eq!(mode.to_string(), "local (limit / 4)");
/// assert_eq!(FailureMode::default(), FailureMode::Local { instances: NonZeroU32::MIN });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureMode {
    /// Admit every request: availability first (public catalogues, search).
    FailOpen,
    /// Deny every request: protection first (logins, payments).
    FailClosed,
    /// Keep limiting with an in-memory limiter on this instance, with the limit divided by
    /// `instances` (the number of instances sharing the store), so a fleet stays near the global
    /// limit while the store is away. The default, with `instances = 1`.
    Local {
        /// How many instances share the store.
        instances: NonZeroU32,
    },
}

impl Default for FailureMode {
    fn default() -> Self {
        FailureMode::Local {
            instances: NonZeroU32::MIN,
        }
    }
}

impl std::fmt::Display for FailureMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureMode::FailOpen => f.write_str("fail_open"),
            FailureMode::FailClosed => f.write_str("fail_closed"),
            FailureMode::Local { instances } => write!(f, "local (limit / {instances})"),
        }
    }
}

impl Policy {
    /// A policy named `name` (1 to 255 bytes, any characters) using `algorithm`.
    ///
    /// ```
    /// let algorithm = tollgate::Algorithm::sliding_log(5, std::time::Duration::from_secs(1))?;
    /// assert!(tollgate::Policy::new("", algorithm).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn new(name: impl AsRef<str>, algorithm: Algorithm) -> Result<Self, PolicyError> {
        let name = name.as_ref();
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(PolicyError::BadName {
                len: name.len(),
                max: MAX_NAME_LEN,
            });
        }
        Ok(Policy {
            name: Arc::new(PolicyName::new(name, &algorithm)),
            algorithm,
            on_change: OnChange::default(),
            penalty: None,
            on_store_failure: FailureMode::default(),
            hash_tag: HashTag::default(),
            lease: None,
            enforcement: None,
            replicas: 0,
            replica_wait: Policy::DEFAULT_REPLICA_WAIT,
        })
    }

    /// Adds a penalty: once a check of a key is denied, every check of that key is denied until
    /// `block_for` has passed since that denial. Checks denied by the block itself do not extend
    /// it. `block_for` is 1 ms to 1000 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Policy};
    ///
    /// let policy = Policy::new("x", Algorithm::sliding_log(1, Duration::from_secs(1))?)?;
    /// assert!(policy.with_block_for(Duration::ZERO).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_block_for(mut self, block_for: Duration) -> Result<Self, PolicyError> {
        self.penalty = Some(Penalty::fixed(block_for)?);
        Ok(self)
    }

    /// Adds a penalty that can grow for repeat offenders: see [`Penalty`]. A one-step penalty
    /// is [`with_block_for`](Self::with_block_for).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, MemoryStore, ManualClock, Penalty, Policy};
    ///
    /// let minute = Duration::from_secs(60);
    /// let policy = Policy::new("login", Algorithm::sliding_log(1, Duration::from_secs(1))?)?
    ///     .with_penalty(Penalty::sequence([minute, 10 * minute, 60 * minute])?.remember_for(24 * 60 * minute)?);
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// assert!(store.check(&policy, "bob", 1)?.allowed);
    /// assert_eq!(store.check(&policy, "bob", 1)?.retry_after, Some(minute));
    /// clock.advance(minute);
    /// // The first block is over; the next offense is a repeat and blocks for 10 minutes.
    /// assert!(store.check(&policy, "bob", 1)?.allowed);
    /// assert_eq!(store.check(&policy, "bob", 1)?.retry_after, Some(10 * minute));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_penalty(mut self, penalty: Penalty) -> Self {
        self.penalty = Some(penalty);
        self
    }

    /// The penalty, if any.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?
    ///     .with_block_for(std::time::Duration::from_secs(2))?;
    /// assert_eq!(policy.penalty().map(|p| p.steps().len()), Some(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn penalty(&self) -> Option<&Penalty> {
        self.penalty.as_ref()
    }

    /// Sets what a networked store does when it cannot decide; see [`FailureMode`].
    ///
    /// ```
    /// use tollgate::{Algorithm, FailureMode, Policy, Rate};
    ///
    /// let login = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?
    ///     .with_failure_mode(FailureMode::FailClosed);
    /// assert_eq!(login.failure_mode(), FailureMode::FailClosed);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_failure_mode(mut self, mode: FailureMode) -> Self {
        self.on_store_failure = mode;
        self
    }

    /// Chooses what names this policy's shard in a networked store; see [`HashTag`].
    ///
    /// ```
    /// use tollgate::{Algorithm, HashTag, Policy, Rate};
    ///
    /// let per_user = Policy::new("user", Algorithm::gcra(Rate::per_second(5)?, 5)?)?.with_hash_tag(HashTag::Key);
    /// assert_eq!(per_user.hash_tag(), HashTag::Key);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_hash_tag(mut self, hash_tag: HashTag) -> Self {
        self.hash_tag = hash_tag;
        self
    }

    /// Lets a networked store lease this policy's budget on hot keys; see [`LeaseOptions`] and
    /// the [`lease`](crate::lease) module. Only for the fixed window, the token bucket and GCRA,
    /// and `max_units` may not exceed the policy's limit, capacity or burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Anchor, LeaseOptions, Policy};
    ///
    /// let api = Policy::new("api", Algorithm::fixed_window(10_000, Duration::from_secs(1), Anchor::Epoch)?)?
    ///     .with_lease(LeaseOptions::new(100)?)?;
    /// assert_eq!(api.lease().map(|l| l.max_units()), Some(100));
    ///
    /// let log = Policy::new("log", Algorithm::sliding_log(100, Duration::from_secs(1))?)?;
    /// let err = log.with_lease(LeaseOptions::new(10)?).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "lease is not supported by sliding_log: only fixed_window, token_bucket and gcra can lease units"
    /// );
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_lease(mut self, lease: LeaseOptions) -> Result<Self, PolicyError> {
        if self.replicas > 0 {
            return Err(PolicyError::ReplicasWithLease);
        }
        match self.algorithm {
            Algorithm::FixedWindow(_) | Algorithm::TokenBucket(_) | Algorithm::Gcra(_) => {}
            _ => {
                return Err(PolicyError::LeaseNotSupported {
                    algorithm: self.algorithm.name(),
                });
            }
        }
        if lease.max_units() > self.algorithm.limit() {
            return Err(PolicyError::TooLarge {
                field: "lease.max_units",
                value: lease.max_units(),
                max: self.algorithm.limit(),
            });
        }
        self.lease = Some(lease);
        Ok(self)
    }

    /// Makes a networked store hold back each admission of this policy until `replicas`
    /// replicas of the node that decided have its write, so that a failover cannot hand a key
    /// back budget it already spent (the Redis store sends `WAIT replicas ms` after the decision,
    /// on the same connection, for at most the policy's
    /// [`replica_wait`](Self::with_replica_wait), which adds to the store's deadline). An
    /// admission not acknowledged in time is a store failure of class `unreplicated`, which the
    /// policy's [`FailureMode`] answers (the decision was applied on the node all the same).
    /// Denials and peeks do not wait. 0, the default, waits for none; at most
    /// [`MAX_REPLICAS`](bounds::MAX_REPLICAS). Memory stores have no replicas and ignore it.
    /// Leases admit without a store call, so a leasing policy cannot wait for replicas.
    ///
    /// ```
    /// use tollgate::{Algorithm, FailureMode, Policy, Rate};
    ///
    /// let login = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?
    ///     .with_failure_mode(FailureMode::FailClosed)
    ///     .with_replicas(1)?;
    /// assert_eq!(login.replicas(), 1);
    /// assert!(login.with_replicas(17).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> Result<Self, PolicyError> {
        if replicas > bounds::MAX_REPLICAS {
            return Err(PolicyError::OutOfRange {
                field: "replicas",
                value: u64::from(replicas),
                min: 0,
                max: u64::from(bounds::MAX_REPLICAS),
            });
        }
        if replicas > 0 && self.lease.is_some() {
            return Err(PolicyError::ReplicasWithLease);
        }
        self.replicas = u8::try_from(replicas).unwrap_or(u8::MAX);
        Ok(self)
    }

    /// How many replicas a networked store waits for after an admission (0: none); see
    /// [`Policy::with_replicas`].
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.replicas(), 0);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn replicas(&self) -> u32 {
        u32::from(self.replicas)
    }

    /// How long a networked store waits for a policy's replicas unless it says otherwise:
    /// 250 ms, far above what a healthy replica takes to acknowledge even when many decisions
    /// queue for it, and short enough that a replica gone missing holds up only the decision that
    /// finds it out (the store then stops waiting for it until a probe is acknowledged).
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::DEFAULT_REPLICA_WAIT.as_millis(), 250);
    /// ```
    pub const DEFAULT_REPLICA_WAIT: Duration = Duration::from_millis(250);

    /// Sets how long a networked store waits for the [`replicas`](Self::with_replicas) of the
    /// node that decided to acknowledge an admission: 1 ms to
    /// [`MAX_REPLICA_WAIT`](bounds::MAX_REPLICA_WAIT), in whole milliseconds (Redis's `WAIT`
    /// counts in them), by default [`DEFAULT_REPLICA_WAIT`](Self::DEFAULT_REPLICA_WAIT). The
    /// wait is the acknowledgement's own: a decision that waits may take the store's deadline
    /// plus this, so a replica that acknowledges later than the deadline under load is still in
    /// time. Size it above the longest acknowledgement a healthy replica takes (see
    /// `docs/redis.md`): an admission it misses is refused as `unreplicated` by a `fail_closed`
    /// policy. It means nothing without `replicas`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let login = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?
    ///     .with_replicas(1)?
    ///     .with_replica_wait(Duration::from_millis(500))?;
    /// assert_eq!(login.replica_wait(), Duration::from_millis(500));
    /// assert!(login.clone().with_replica_wait(Duration::from_secs(6)).is_err());
    /// assert!(login.with_replica_wait(Duration::from_micros(1_500)).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_replica_wait(mut self, wait: Duration) -> Result<Self, PolicyError> {
        let (min, max) = (Duration::from_millis(1), bounds::MAX_REPLICA_WAIT);
        if wait < min || wait > max {
            return Err(PolicyError::DurationOutOfRange {
                field: "replica_wait",
                value: wait,
                min,
                max,
            });
        }
        if !wait.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(PolicyError::NotWholeMilliseconds {
                field: "replica_wait",
                value: wait,
            });
        }
        self.replica_wait = wait;
        Ok(self)
    }

    /// How long a networked store waits for the policy's replicas after an admission; see
    /// [`Policy::with_replica_wait`].
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.replica_wait(), tollgate::Policy::DEFAULT_REPLICA_WAIT);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn replica_wait(&self) -> Duration {
        self.replica_wait
    }

    /// Enforces this policy for a share of its keys only, and runs it in shadow mode for the
    /// others; see [`enforcement`](crate::enforcement). A full share is the same as none.
    ///
    /// ```
    /// use tollgate::{Algorithm, Enforcement, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?
    ///     .with_enforcement(Enforcement::percent(10)?);
    /// assert_eq!(api.enforcement().map(|e| e.basis_points()), Some(1_000));
    /// let full = api.clone().with_enforcement(Enforcement::percent(100)?);
    /// assert!(full.enforcement().is_none());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_enforcement(mut self, enforcement: Enforcement) -> Self {
        self.enforcement = (!enforcement.is_full()).then_some(enforcement);
        self
    }

    /// The enforced share when it is below every key; `None` when every key is enforced.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert!(policy.enforcement().is_none());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn enforcement(&self) -> Option<Enforcement> {
        self.enforcement
    }

    /// The lease options, when leasing is on.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert!(policy.lease().is_none());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn lease(&self) -> Option<&LeaseOptions> {
        self.lease.as_ref()
    }

    /// What names this policy's shard in a networked store.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.hash_tag(), tollgate::HashTag::PolicyAndKey);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn hash_tag(&self) -> HashTag {
        self.hash_tag
    }

    /// What a networked store does when it cannot decide.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.failure_mode(), tollgate::FailureMode::default());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn failure_mode(&self) -> FailureMode {
        self.on_store_failure
    }

    /// This policy's share for one of `instances` instances: every limit, capacity, burst and
    /// rate divided by `instances` (never below 1), same name and penalty. Used by the `Local`
    /// failure mode.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let policy = Policy::new("api", Algorithm::sliding_log(100, Duration::from_secs(60))?)?;
    /// assert_eq!(policy.local_share(NonZeroU32::new(4).unwrap()).max_cost(), 25);
    /// let gcra = Policy::new("g", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
    /// let share = gcra.local_share(NonZeroU32::new(10).unwrap());
    /// assert_eq!(share.max_cost(), 1);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn local_share(&self, instances: NonZeroU32) -> Policy {
        Policy {
            algorithm: self.algorithm.divided(u64::from(instances.get())),
            // The share is decided locally: there is nothing to lease from.
            lease: None,
            ..self.clone()
        }
    }

    /// This policy with `algorithm`'s parameters: the same name (so the same state), penalty,
    /// failure mode and hash tag. Used for [overrides](crate::overrides), which check first that
    /// `algorithm` is this policy's algorithm. A lease is kept only when it still fits the new
    /// limit.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
    /// let vip = api.with_parameters(Algorithm::gcra(Rate::per_second(100)?, 50)?);
    /// assert_eq!((vip.name(), vip.max_cost()), ("api", 50));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_parameters(&self, algorithm: Algorithm) -> Policy {
        let lease = self.lease.filter(|l| l.max_units() <= algorithm.limit());
        Policy {
            algorithm,
            lease,
            ..self.clone()
        }
    }

    /// Declares what a later change of this policy's algorithm or parameters does to the keys
    /// it already counts: see [`OnChange`] (the default is [`OnChange::Keep`]). The declaration
    /// of the policy a key is decided under after the change is the one that applies.
    ///
    /// ```
    /// use tollgate::algorithm::migrate::OnChange;
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?.with_on_change(OnChange::Scale);
    /// assert_eq!(api.on_change(), OnChange::Scale);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_on_change(mut self, on_change: OnChange) -> Self {
        self.on_change = on_change;
        self
    }

    /// What a change of this policy's algorithm or parameters does to its keys.
    pub fn on_change(&self) -> OnChange {
        self.on_change
    }

    /// Sets the generation of this version of the policy: when two versions of one policy name
    /// meet on a key (instances of a fleet that reloaded at different moments), the state written
    /// by the later generation is never migrated back by the earlier one, which decides such a
    /// key under the later version's numbers. A config loader sets it to the time the config
    /// was loaded, in milliseconds since the Unix epoch; the default is 0.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?.with_generation(1_790_000_000_000);
    /// assert_eq!(api.generation(), 1_790_000_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn with_generation(mut self, generation: u64) -> Self {
        if let Some(version) = &mut Arc::make_mut(&mut self.name).version {
            version.generation = generation;
        }
        self
    }

    /// The fingerprint of this policy's algorithm and parameters (see
    /// [`Fingerprint`]), computed once when the policy was made.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
    /// assert_eq!(api.fingerprint(), api.algorithm().fingerprint());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn fingerprint(&self) -> Fingerprint {
        self.name
            .version
            .as_ref()
            .map_or_else(|| self.algorithm.fingerprint(), |v| v.fingerprint)
    }

    /// This version's generation (see [`with_generation`](Self::with_generation)).
    pub fn generation(&self) -> u64 {
        self.name.version.as_ref().map_or(0, |v| v.generation)
    }

    /// The algorithm and parameters this version of the policy was made with: what its
    /// [`fingerprint`](Self::fingerprint) is of, and what a state written under this version
    /// means. An override changes [`algorithm`](Self::algorithm), not this.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
    /// let vip = api.with_parameters(Algorithm::gcra(Rate::per_second(100)?, 50)?);
    /// assert_eq!(vip.version_algorithm(), api.algorithm());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn version_algorithm(&self) -> &Algorithm {
        self.name
            .version
            .as_ref()
            .map_or(&self.algorithm, |v| &v.algorithm)
    }

    /// The name, which namespaces this policy's state in a store.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.name(), "api");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name.text
    }

    /// This policy as the version `name` was made for decides: its algorithm and parameters
    /// under that name (see [`PolicyName`]); `None` for a name without a version.
    pub(crate) fn as_version(&self, name: &Arc<PolicyName>) -> Option<Policy> {
        let version = name.version.as_ref()?;
        let mut policy = self.with_parameters(version.algorithm.clone());
        policy.name = name.clone();
        Some(policy)
    }

    /// The shared name, which the memory store keeps beside each key it stores for this policy.
    #[inline]
    pub(crate) fn shared_name(&self) -> &Arc<PolicyName> {
        &self.name
    }

    /// The algorithm and its parameters.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.algorithm().name(), "gcra");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// The block of a first offense, if the policy has a penalty.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?;
    /// assert_eq!(policy.block_for(), None);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn block_for(&self) -> Option<Duration> {
        self.block_for_us().map(Duration::from_micros)
    }

    /// The block of a first offense in microseconds, if the policy has a penalty.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 1)?)?
    ///     .with_block_for(std::time::Duration::from_secs(2))?;
    /// assert_eq!(policy.block_for_us(), Some(2_000_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn block_for_us(&self) -> Option<u64> {
        self.penalty.as_ref().map(|p| p.block_for_us(1))
    }

    /// The most one check may cost: the algorithm's limit, capacity or burst.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Algorithm::gcra(tollgate::Rate::per_second(1)?, 4)?)?;
    /// assert_eq!(policy.max_cost(), 4);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn max_cost(&self) -> u64 {
        self.algorithm.limit()
    }
}

impl PolicyParts for Policy {
    #[inline]
    fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    #[inline]
    fn penalty(&self) -> Option<&Penalty> {
        self.penalty.as_ref()
    }

    #[inline]
    fn on_change(&self) -> OnChange {
        self.on_change
    }
}

/// A policy's name, shared by the policy's clones and the memory store's slots, with a hash of it
/// computed once. A rate policy's name also carries the version of the policy it was made for
/// (its algorithm and generation): the memory store's slot keeps the name of the version that
/// last wrote it, which is how a reload that changed the algorithm is noticed and the state
/// migrated (see [`migrate`](crate::algorithm::migrate)).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PolicyName {
    text: Box<str>,
    /// The algorithm and parameters this name was made with, and their order among versions;
    /// `None` for a concurrency policy, which keeps no algorithm state.
    pub(crate) version: Option<Version>,
    /// FNV-1a of `text` (and of the kind): not keyed, since names come from the operator, not
    /// from clients; the store mixes it into its keyed hash of the client's key.
    pub(crate) hash: u64,
    /// A concurrency policy's name: its slots never meet a rate policy's of the same text.
    concurrency: bool,
}

/// One version of a rate policy: see [`PolicyName`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Version {
    pub(crate) algorithm: Algorithm,
    pub(crate) fingerprint: Fingerprint,
    /// Orders versions of one name across a fleet (see [`Policy::with_generation`]).
    pub(crate) generation: u64,
}

impl PolicyName {
    fn new(text: &str, algorithm: &Algorithm) -> Self {
        let mut name = Self::of_kind(text, false);
        name.version = Some(Version {
            algorithm: algorithm.clone(),
            fingerprint: algorithm.fingerprint(),
            generation: 0,
        });
        name
    }

    /// The name of a [`ConcurrencyPolicy`](crate::concurrency::ConcurrencyPolicy).
    pub(crate) fn concurrency(text: &str) -> Self {
        Self::of_kind(text, true)
    }

    fn of_kind(text: &str, concurrency: bool) -> Self {
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, b| {
            (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
        PolicyName {
            text: text.into(),
            hash: hash ^ (u64::from(concurrency) << 1),
            version: None,
            concurrency,
        }
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// True when `other` names the same policy: the same allocation (the common case, one
    /// pointer compare) or the same text and kind (a policy rebuilt by a reload).
    #[inline]
    pub(crate) fn same(self: &Arc<Self>, other: &Arc<Self>) -> bool {
        Arc::ptr_eq(self, other)
            || (self.hash == other.hash && self.concurrency == other.concurrency && self.text == other.text)
    }
}

impl std::fmt::Debug for PolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.text, f)
    }
}
