//! The store the server decides with: the embedded memory store or Redis, behind one type.
//!
//! The server picks one at start-up (`--store` or the config), so a runtime choice is needed; an
//! enum keeps every call a direct, inlinable match instead of a boxed future.
//!
//! [`AnyStore::open`] is how `serve` and `proxy` get theirs: it checks a Redis store once at
//! start-up and reports an unreachable or misconfigured one loudly (an `error` event naming the
//! class: `auth` for a wrong password, `cluster` for a cluster address at a standalone server or
//! the reverse, `connection`, `timeout`), then starts anyway and lets the failure modes decide,
//! unless [`StoreOptions::require`] asks it to refuse. A server that answers but cannot run Lua
//! scripts (scripting turned off) is refused whatever `require` says: it can never decide.
//! [`AnyStore::health`] is what `/readyz` reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use tollgate::concurrency::{Acquire, ConcurrencyPolicy, ConcurrencyStore, InFlight, LeaseId, Release};
use tollgate::overrides::{Override, OverridePage, OverrideStore, OverrideTarget};
use tollgate::store::ValidRules;
use tollgate::{
    AttemptTry, AttemptsStatus, AttemptsStore, Clock, Decision, Decisions, Error, ManualClock, MemoryStore,
    MemoryStoreBuilder, Policy, Rule, Store, SystemClock,
};
use tollgate_redis::{RedisStore, Target};

/// How the server opens its store, besides the address.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Refuse to start when the store cannot decide at start-up (`--require-store`); by default
    /// the server starts and each policy's failure mode decides until the store recovers.
    pub require: bool,
    /// The deadline of each store call (`--store-timeout`, default 50 ms).
    pub timeout: Duration,
    /// A PEM file of certificate authorities trusted for `rediss://` instead of the system's
    /// (`--store-ca-file`).
    pub ca_file: Option<PathBuf>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            require: false,
            timeout: Duration::from_millis(50),
            ca_file: None,
        }
    }
}

/// What `/readyz` says about the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// Whether the store can decide now.
    pub ready: bool,
    /// The class of the failure when not ready: `timeout`, `connection`, `auth`, `cluster`, ...
    pub class: Option<&'static str>,
    /// The failure, when not ready (no password in it).
    pub error: Option<String>,
    /// Each Redis node called so far and whether its circuit breaker is open.
    pub breakers: Vec<(String, bool)>,
}

/// Where decisions are made.
#[derive(Clone)]
pub enum AnyStore {
    /// In this process (the default), on the system clock or one moved by hand.
    Memory(Arc<MemoryStore<StoreClock>>),
    /// In Redis or Redis Cluster, shared by every server of a fleet.
    Redis(RedisStore),
}

/// The embedded store's clock: the system's, or one moved by hand, on which `tollgate test`
/// ([`policy_test`](crate::policy_test)) and replay run, so a minute's window passes at once.
/// One store type either way, and a match instead of a virtual call per read.
#[derive(Debug, Clone)]
pub enum StoreClock {
    /// The system clock.
    System(SystemClock),
    /// Moved by hand.
    Manual(ManualClock),
}

impl Clock for StoreClock {
    #[inline]
    fn now_us(&self) -> u64 {
        match self {
            StoreClock::System(clock) => clock.now_us(),
            StoreClock::Manual(clock) => clock.now_us(),
        }
    }
}

impl AnyStore {
    /// The embedded store with default bounds.
    ///
    /// ```
    /// let store = tollgate_server::AnyStore::memory();
    /// assert_eq!(store.kind(), "memory");
    /// ```
    pub fn memory() -> Self {
        AnyStore::memory_from(MemoryStore::builder())
    }

    /// The embedded store as `builder` says, on the system clock.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    ///
    /// let store = tollgate_server::AnyStore::memory_from(MemoryStore::builder().max_keys(10));
    /// assert_eq!(store.kind(), "memory");
    /// ```
    pub fn memory_from(builder: MemoryStoreBuilder) -> Self {
        let clock = StoreClock::System(SystemClock::new());
        AnyStore::Memory(Arc::new(builder.clock(clock).build()))
    }

    /// The embedded store on `clock`, moved by hand.
    pub fn manual_memory(clock: ManualClock) -> Self {
        AnyStore::Memory(Arc::new(
            MemoryStore::builder().clock(StoreClock::Manual(clock)).build(),
        ))
    }

    /// The clock an engine over this store dates its answers with: the store's own.
    pub fn clock(&self) -> Arc<dyn Clock> {
        match self {
            AnyStore::Memory(store) => Arc::new(store.clock().clone()),
            AnyStore::Redis(store) => store.local_clock(),
        }
    }

    /// A Redis store for `url` (`redis://host:port`, `redis+cluster://host:port,...` or
    /// `redis+sentinel://host:port,.../<master-name>`). It
    /// connects lazily: the server starts while Redis is away and follows each policy's failure
    /// mode until Redis answers.
    pub async fn redis(url: &str) -> Result<Self, tollgate_redis::ConnectError> {
        let store = RedisStore::builder(Target::parse(url)?).connect_lazy().await?;
        Ok(AnyStore::Redis(store))
    }

    /// The store for `url` (`None`: the embedded memory store), checked once: an unreachable or
    /// misconfigured Redis is logged at `error` with its class and, with
    /// [`StoreOptions::require`], is an error. Otherwise the server starts and the failure modes
    /// decide until Redis answers.
    ///
    /// ```
    /// use tollgate_server::{AnyStore, StoreOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// assert_eq!(AnyStore::open(None, &StoreOptions::default()).await?.kind(), "memory");
    /// // Nothing listens on port 1.
    /// let required = StoreOptions { require: true, ..StoreOptions::default() };
    /// let err = AnyStore::open(Some("redis://127.0.0.1:1"), &required).await.err().expect("refused");
    /// assert!(format!("{err:#}").contains("(connection)"), "{err:#}");
    /// assert!(AnyStore::open(Some("redis://127.0.0.1:1"), &StoreOptions::default()).await.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn open(url: Option<&str>, options: &StoreOptions) -> anyhow::Result<Self> {
        let Some(url) = url else {
            return Ok(AnyStore::memory());
        };
        let target = Target::parse(url)?;
        let shown = target.display();
        let mut builder = RedisStore::builder(target).timeout(options.timeout);
        if let Some(path) = &options.ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read the store's CA file {}", path.display()))?;
            // Checked here too, before the lazy connection, to name the file in the error.
            tollgate_redis::check_ca_pem(&pem)
                .with_context(|| format!("the store's CA file {} (--store-ca-file)", path.display()))?;
            builder = builder.tls_ca_pem(pem);
        }
        // Flattened, not a context: the connect error's message already carries its cause, which
        // a chain of causes would print a second time.
        let store = builder
            .connect_lazy()
            .await
            .map_err(|err| anyhow::anyhow!("store `{shown}`: {err}"))?;
        // A first connection (TLS, AUTH) takes longer than a call: give it a second at least.
        let within = options.timeout.max(Duration::from_secs(1));
        match store.health(within).await {
            Ok(()) => {
                // A server that cannot run Lua can never decide, so it is refused whatever
                // `--require-store` says: no wait cures it, and starting would only hand every
                // request to the failure modes.
                if let Err(err @ tollgate_redis::ConnectError::NoScripting { .. }) =
                    store.check_scripting(within).await
                {
                    tracing::error!(store = %shown, class = "script", error = %err, "rate limit store cannot run Lua scripts; refusing to start");
                    anyhow::bail!("{err}");
                }
                tracing::info!(store = %shown, "rate limit store ready");
            }
            Err(err) => {
                let class = err.class().unwrap_or("unknown");
                let cause = error_chain(&err);
                if options.require {
                    tracing::error!(store = %shown, class, error = %cause, "rate limit store unusable at start-up; refusing to start");
                    anyhow::bail!(
                        "store `{shown}` is not usable ({class}): {cause}; refusing to start because the store is required"
                    );
                }
                tracing::error!(
                    store = %shown,
                    class,
                    error = %cause,
                    "rate limit store unusable at start-up; starting anyway, failure modes decide until it answers"
                );
                eprintln!(
                    "tollgate: store `{shown}` is not usable ({class}): {cause}; starting anyway, failure modes decide until it answers"
                );
            }
        }
        Ok(AnyStore::Redis(store))
    }

    /// Whether the store can decide now and, if not, the class of what is wrong (for
    /// `/readyz`): always ready for memory; for Redis a PING through no breaker, which also
    /// proves the password and the cluster mode.
    pub async fn health(&self) -> Health {
        match self {
            AnyStore::Memory(_) => Health {
                ready: true,
                class: None,
                error: None,
                breakers: vec![],
            },
            AnyStore::Redis(store) => {
                let within = (store.deadline() * 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
                let checked = store.health(within).await;
                Health {
                    ready: checked.is_ok(),
                    class: checked.as_ref().err().and_then(Error::class),
                    error: checked.err().map(|e| error_chain(&e)),
                    breakers: store.breaker_states(),
                }
            }
        }
    }

    /// Each Redis node called so far and whether its circuit breaker is open (none for memory).
    pub fn breakers(&self) -> Vec<(String, bool)> {
        match self {
            AnyStore::Memory(_) => vec![],
            AnyStore::Redis(store) => store.breaker_states(),
        }
    }

    /// Refunds of cross-slot reservations that failed (see
    /// `tollgate_redis::StoreStats::refund_failures`); `None` for memory, which reserves nothing.
    pub fn refund_failures(&self) -> Option<u64> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.stats().refund_failures),
        }
    }

    /// How many times the store found its state older than it had seen it (see
    /// `tollgate_redis::StoreStats::state_lost`); `None` for memory, which cannot lose it.
    pub fn state_lost(&self) -> Option<u64> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.stats().state_lost),
        }
    }

    /// How many times the store followed its Sentinel master to a new address (see
    /// `tollgate_redis::StoreStats::failovers`); `None` for memory.
    pub fn failovers(&self) -> Option<u64> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(store) => Some(store.stats().failovers),
        }
    }

    /// Whether decisions are made in this process (on the system clock or a manual one).
    pub fn is_memory(&self) -> bool {
        matches!(self, AnyStore::Memory(_))
    }

    /// `memory` or `redis`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// Whether the store can decide now: [`AnyStore::health`]'s verdict.
    pub async fn ready(&self) -> bool {
        self.health().await.ready
    }
}

/// An error and its causes, `: `-separated, for one log field or message.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

/// Calls `$trait::$method` on whichever store this is.
macro_rules! dispatch {
    ($trait:ident, $self:ident, $method:ident ( $($arg:expr),* )) => {
        match $self {
            AnyStore::Memory(store) => $trait::$method(store.as_ref(), $($arg),*).await,
            AnyStore::Redis(store) => $trait::$method(store, $($arg),*).await,
        }
    };
}

/// [`dispatch!`], timed into `tollgate_store_latency_seconds`: every decision, charge and refund
/// is timed here, once, whichever door asked.
macro_rules! timed {
    ($trait:ident, $self:ident, $method:ident ( $($arg:expr),* )) => {{
        let started = std::time::Instant::now();
        let result = dispatch!($trait, $self, $method($($arg),*));
        crate::ops::metrics::store_latency(started.elapsed());
        result
    }};
}

impl Store for AnyStore {
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        timed!(Store, self, decide(rules, commit))
    }

    async fn decide_valid(&self, rules: ValidRules<'_, '_>, commit: bool) -> Result<Decisions, Error> {
        timed!(Store, self, decide_valid(rules, commit))
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        dispatch!(Store, self, reset(policy, key))
    }

    async fn check(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        timed!(Store, self, check(policy, key, cost))
    }

    async fn peek(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        timed!(Store, self, peek(policy, key, cost))
    }

    async fn refund(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        timed!(Store, self, refund(policy, key, cost))
    }

    async fn penalty_left(&self, policy: &Policy, key: &[u8]) -> Result<Option<Duration>, Error> {
        dispatch!(Store, self, penalty_left(policy, key))
    }

    async fn charge(
        &self,
        rules: &[tollgate::Rule<'_>],
    ) -> Result<tollgate::PerRule<tollgate::Charged>, Error> {
        timed!(Store, self, charge(rules))
    }
}

impl OverrideStore for AnyStore {
    async fn set_override(&self, policy: &Policy, value: &Override) -> Result<(), Error> {
        dispatch!(OverrideStore, self, set_override(policy, value))
    }

    async fn get_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> Result<Option<Override>, Error> {
        dispatch!(OverrideStore, self, get_override(policy, target))
    }

    async fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> Result<OverridePage, Error> {
        dispatch!(OverrideStore, self, list_overrides(policy, after, limit))
    }

    async fn remove_override(&self, policy: &Policy, target: &OverrideTarget) -> Result<bool, Error> {
        dispatch!(OverrideStore, self, remove_override(policy, target))
    }

    async fn override_for(&self, policy: &Policy, key: &[u8]) -> Result<Option<Override>, Error> {
        dispatch!(OverrideStore, self, override_for(policy, key))
    }
}

impl AttemptsStore for AnyStore {
    async fn increment_attempts(&self, key: &[u8], ttl: Duration) -> Result<u64, Error> {
        dispatch!(AttemptsStore, self, increment_attempts(key, ttl))
    }

    async fn get_attempts(&self, key: &[u8]) -> Result<u64, Error> {
        dispatch!(AttemptsStore, self, get_attempts(key))
    }

    async fn get_ttl(&self, key: &[u8]) -> Result<Option<Duration>, Error> {
        dispatch!(AttemptsStore, self, get_ttl(key))
    }

    async fn reset_attempts(&self, key: &[u8]) -> Result<(), Error> {
        dispatch!(AttemptsStore, self, reset_attempts(key))
    }

    async fn try_attempt(&self, key: &[u8], max_attempts: u64, ttl: Duration) -> Result<AttemptTry, Error> {
        dispatch!(AttemptsStore, self, try_attempt(key, max_attempts, ttl))
    }

    async fn check_limit(&self, key: &[u8], max_attempts: u64) -> Result<AttemptsStatus, Error> {
        dispatch!(AttemptsStore, self, check_limit(key, max_attempts))
    }
}

impl ConcurrencyStore for AnyStore {
    async fn acquire(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<Acquire, Error> {
        dispatch!(ConcurrencyStore, self, acquire(policy, key))
    }

    async fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> Result<Release, Error> {
        dispatch!(ConcurrencyStore, self, release(policy, key, lease))
    }

    async fn clear_leases(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<u64, Error> {
        dispatch!(ConcurrencyStore, self, clear_leases(policy, key))
    }

    async fn in_flight(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<InFlight, Error> {
        dispatch!(ConcurrencyStore, self, in_flight(policy, key))
    }
}
