//! `RedisStore`: the core's `Store` on Redis or Redis Cluster, composed of the transport and the
//! features.
//!
//! Every operation is one script call (see `scripts`); a request's rules spanning several cluster
//! slots are one call per slot, reserve-then-refund (see the crate docs). The deny cache answers
//! a single enforced rule Redis already denied, without a round trip; every other call goes
//! through the `transport` (circuit breaker, deadline, batch lanes). Leases, overrides,
//! concurrency limits and access lists live in modules of their own, which use the transport
//! and never this module: the store builds them and calls them.
//!
//! A failure is returned as a typed store error with the Redis error as its source; the store
//! never decides by itself without Redis. The core's `Engine` applies the policy's failure mode
//! (admit, refuse, or decide locally on a share of the limit), the same way for every store.
//!
//! Input is validated with the core's checks before any of this, so bad input never reaches
//! Redis.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tollgate::access::{AccessEntry, Added};
use tollgate::attempts::Attempts;
use tollgate::concurrency::{
    Acquire, ConcurrencyPolicy, ConcurrencyStore, InFlight, LeaseId, LeaseIds, Release,
};
use tollgate::overrides::{Override, OverridePage, OverrideStore, OverrideTarget};
use tollgate::store::{self as core_store, AttemptsStore, Store};
use tollgate::{
    AttemptTry, AttemptsStatus, Charged, Clock, Decision, Decisions, Error, PerRule, Policy, Rule,
    SystemClock,
};

use crate::access;
use crate::batch;
use crate::concurrency;
use crate::connection::{ConnectOptions, ReplicaWait, Target};
use crate::deny_cache::{Denial, DenyCache};
use crate::error::{self, ConnectError, bad_reply};
use crate::keys::{self, KeyNames};
use crate::lease::{self, LeaseStats, Leases};
use crate::overrides::Overrides;
use crate::reset_channel::{self, Listener};
use crate::scripts::{ANSWER, Mode, Scripts, call_args};
use crate::transport::{self, Transport};

/// Configures and connects a [`RedisStore`].
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate_redis::{RedisStore, Target};
///
/// # async fn connect() -> Result<(), tollgate_redis::ConnectError> {
/// let store = RedisStore::builder(Target::parse("redis://127.0.0.1:6379")?)
///     .prefix("myapp:rl:")
///     .timeout(Duration::from_millis(30))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
pub struct RedisStoreBuilder {
    target: Target,
    prefix: String,
    timeout: Duration,
    first_probe_after: Duration,
    probe_interval: Duration,
    deny_cache: bool,
    clock: Option<Arc<dyn Clock>>,
    options: ConnectOptions,
    calls_in_flight: usize,
    override_refresh: Duration,
}

impl RedisStoreBuilder {
    /// Prefix of every key (default `tollgate:`). Must not contain braces.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How old this instance's copy of the prefix overrides may get before a decision reloads
    /// it (default 1 s): the bound on how long a prefix override set on another instance takes
    /// to apply here. Zero reloads it on every decision (an extra round trip each; for tests).
    /// Key overrides are read by the decision script and apply at once everywhere.
    ///
    /// ```
    /// let builder = tollgate_redis::RedisStore::builder(tollgate_redis::Target::Standalone(
    ///     "redis://127.0.0.1:6379".into(),
    /// ))
    /// .override_refresh(std::time::Duration::from_millis(250));
    /// # drop(builder);
    /// ```
    pub fn override_refresh(mut self, max_age: Duration) -> Self {
        self.override_refresh = max_age;
        self
    }

    /// Deadline of each call, a reload of the library or a script included (default 50 ms).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The longest the circuit breaker waits between probes of a Redis node that keeps failing
    /// (default 500 ms): after a failure it probes after [`first_probe_after`], then twice as
    /// long after each failed probe, up to this. Zero turns the circuit breaker off: every call
    /// then goes to Redis and reports its own failure (a timeout stays a timeout), at the price
    /// of one deadline per call while Redis hangs.
    ///
    /// [`first_probe_after`]: RedisStoreBuilder::first_probe_after
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// How soon after a node fails the circuit breaker lets one call through to probe it
    /// (default 10 ms, at most [`probe_interval`]). Short, so that a stall of a few dozen
    /// milliseconds costs about the stall and not a whole probe interval of refusals.
    ///
    /// [`probe_interval`]: RedisStoreBuilder::probe_interval
    pub fn first_probe_after(mut self, wait: Duration) -> Self {
        self.first_probe_after = wait;
        self
    }

    /// Trusts the certificate authorities in this PEM bundle for `rediss://` connections,
    /// instead of the system's. Connecting checks it first ([`crate::check_ca_pem`]): a bundle
    /// that is not PEM or holds no certificate is a [`ConnectError::BadCa`].
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.ca_pem = Some(pem.into());
        self
    }

    /// Whether to cache denials locally until their retry time (default on).
    pub fn deny_cache(mut self, enabled: bool) -> Self {
        self.deny_cache = enabled;
        self
    }

    /// How many decision calls each Redis node (each slot, on a cluster) may have in flight
    /// before the decisions that arrive wait to go out together as one batch call (default 2;
    /// 0 sends every decision on its own call). Nothing waits for a batch to fill: a decision
    /// that finds a free place is sent at once, so under low load every call carries one
    /// decision, and under high load each call carries what queued while the others were out.
    /// Each decision keeps its own deadline, from when it was asked, and is applied at most
    /// once.
    ///
    /// ```no_run
    /// use tollgate_redis::{RedisStore, Target};
    ///
    /// # async fn connect() -> Result<(), tollgate_redis::ConnectError> {
    /// let store = RedisStore::builder(Target::parse("redis://127.0.0.1:6379")?)
    ///     .batch_calls_in_flight(4)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn batch_calls_in_flight(mut self, calls: usize) -> Self {
        self.calls_in_flight = calls;
        self
    }

    /// Passes this clock's time to the scripts instead of Redis `TIME`: for deterministic tests.
    /// Production stores leave this unset, so every instance agrees on Redis's clock.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Connects and loads every script: an unreachable Redis is an error now.
    pub async fn connect(self) -> Result<RedisStore, ConnectError> {
        self.open(false).await
    }

    /// Builds the store without touching the network: it connects on first use, and until Redis
    /// answers, every call is a store error, which an `Engine` answers with each policy's
    /// failure mode. For services that must start while Redis is away. Only a bad address or
    /// prefix is an error.
    ///
    /// ```
    /// use tollgate_redis::{RedisStore, Target};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate_redis::ConnectError> {
    /// // Nothing listens on port 1; the store is built anyway.
    /// let store = RedisStore::builder(Target::parse("redis://127.0.0.1:1")?).connect_lazy().await?;
    /// assert!(store.ping().await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn connect_lazy(self) -> Result<RedisStore, ConnectError> {
        self.open(true).await
    }

    async fn open(self, lazy: bool) -> Result<RedisStore, ConnectError> {
        if self.prefix.contains(['{', '}']) {
            return Err(ConnectError::BadPrefix(self.prefix));
        }
        if let Some(pem) = &self.options.ca_pem {
            crate::ca::check_ca_pem(pem)?;
        }
        let local_clock: Arc<dyn Clock> = match &self.clock {
            Some(clock) => clock.clone(),
            None => Arc::new(SystemClock::new()),
        };
        let channel = reset_channel::channel(&self.prefix);
        let transport = Arc::new(
            Transport::open(
                &self.target,
                &self.options,
                transport::Settings {
                    timeout: self.timeout,
                    first_probe_after: self.first_probe_after,
                    probe_interval: self.probe_interval,
                    calls_in_flight: self.calls_in_flight,
                    script_clock: self.clock,
                    reset_channel: channel.clone(),
                    names: KeyNames::new(&self.prefix),
                },
                lazy,
            )
            .await?,
        );
        let deny_cache = self.deny_cache.then(|| Arc::new(DenyCache::new(100_000)));
        let leases = Arc::new(Leases::new(100_000));
        let listener = reset_channel::start_listener(
            &self.target,
            &self.options,
            channel,
            reset_channel::Forgets {
                deny_cache: deny_cache.as_ref().map(Arc::downgrade),
                leases: Arc::downgrade(&leases),
            },
            self.timeout,
            !lazy,
        )
        .await;
        let keys = KeyNames::new(&self.prefix);
        let overrides = Arc::new(Overrides::new(
            transport.clone(),
            keys.clone(),
            deny_cache.clone(),
            local_clock.clone(),
            self.override_refresh,
        ));
        if !lazy {
            // Decisions apply prefix overrides from the first one on.
            overrides.reload_prefixes().await;
        }
        let store = RedisStore {
            inner: Arc::new(Inner {
                transport,
                target: self.target,
                keys,
                deny_cache,
                _listener: listener,
                local_clock,
                stats: Counters::default(),
                leases,
                lease_ids: LeaseIds::new(),
                overrides,
            }),
        };
        Ok(store)
    }
}

/// Rate limit state in Redis or Redis Cluster, shared by every instance of a fleet. Cloning is
/// cheap and shares the connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every call to Redis (see `transport`).
    transport: Arc<Transport>,
    /// Where the store connects, for errors that name it.
    target: Target,
    keys: KeyNames,
    deny_cache: Option<Arc<DenyCache>>,
    /// Listens for the other instances' resets while the store lives.
    _listener: Option<Listener>,
    /// Time for the deny cache and the leases.
    local_clock: Arc<dyn Clock>,
    stats: Counters,
    /// This instance's hot-key leases (see `lease`).
    leases: Arc<Leases>,
    /// Ids of the concurrency leases this instance grants (see `concurrency`).
    lease_ids: LeaseIds,
    /// Runtime overrides, with this instance's copy of the prefix overrides (see `overrides`).
    overrides: Arc<Overrides>,
}

/// Running totals since the store was built, for metrics and tests.
///
/// ```
/// let stats = tollgate_redis::StoreStats::default();
/// assert_eq!(stats.redis_calls, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Script calls sent to Redis.
    pub redis_calls: u64,
    /// Calls that failed because Redis was unavailable (timeout, connection, cluster).
    pub redis_unavailable: u64,
    /// Calls refused at once by the open circuit breaker.
    pub breaker_refusals: u64,
    /// Checks answered by the local deny cache.
    pub deny_cache_hits: u64,
    /// Refund calls: a request whose rules span cluster slots was denied by one slot after
    /// another had reserved its budget.
    pub refunds: u64,
    /// Refund calls that failed, never sent again: their reservation stays spent until it
    /// expires, unless the call timed out and its node still ran it.
    pub refund_failures: u64,
    /// Resets whose message to the other instances' deny caches could not be sent.
    pub reset_publish_failures: u64,
    /// Calls of the batch script: calls that carried more than one decision (each also counts
    /// in `redis_calls`).
    pub batch_calls: u64,
    /// Decisions that went out in those calls.
    pub batched_decisions: u64,
    /// Times a decision found its Redis slot's state older than this instance had seen it:
    /// writes lost by a failover to a replica that lagged, a restart without persistence or a
    /// flush, once per slot and loss. Those keys admit again what they had spent (see
    /// `docs/redis.md`).
    pub state_lost: u64,
    /// Times the sentinels named a new master (a failover) and the store followed it: Redis
    /// behind Sentinel only, 0 otherwise. Each is also logged at `warn`.
    pub failovers: u64,
    /// Admissions of policies that wait for replicas
    /// ([`Policy::with_replicas`](tollgate::Policy::with_replicas)) that fewer replicas
    /// acknowledged within the policy's wait, or that were not waited for because the node's
    /// replicas fell short lately: each a store error of class `unreplicated`.
    pub unreplicated: u64,
}

/// The store's own totals; the transport and the deny cache keep the others.
#[derive(Default)]
struct Counters {
    unreplicated: AtomicU64,
    refunds: AtomicU64,
    refund_failures: AtomicU64,
    /// When a refund failure was last logged, in seconds since the Unix epoch.
    refund_failure_logged_s: AtomicU64,
}

impl Counters {
    /// Counts a refund that failed and logs it, at most once a second (with the running total),
    /// so a node that fails many refunds is seen without a line per request.
    fn refund_failed(&self, err: &tollgate::Error) {
        let total = self.refund_failures.fetch_add(1, Ordering::Relaxed) + 1;
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.refund_failure_logged_s.load(Ordering::Relaxed);
        if now_s > last
            && self
                .refund_failure_logged_s
                .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                error = %err,
                refund_failures = total,
                "a refund of a cross-slot reservation failed and is not sent again: the reservation stays spent until its state expires, unless its node still runs the call"
            );
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl RedisStore {
    /// This instance's clock: the one given to [`RedisStoreBuilder::clock`], else the system's.
    /// The decisions themselves are timed by Redis `TIME` unless a clock was given; an engine
    /// over the store dates its answers with this one.
    pub fn local_clock(&self) -> Arc<dyn Clock> {
        Arc::clone(&self.inner.local_clock)
    }

    /// Starts configuring a store for `target`.
    pub fn builder(target: Target) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target,
            prefix: "tollgate:".into(),
            timeout: Duration::from_millis(50),
            first_probe_after: Duration::from_millis(10),
            probe_interval: Duration::from_millis(500),
            deny_cache: true,
            clock: None,
            options: ConnectOptions::default(),
            calls_in_flight: batch::DEFAULT_CALLS_IN_FLIGHT,
            override_refresh: Duration::from_secs(1),
        }
    }

    /// Connects to `url` (`redis://...` or `redis+cluster://...`) with the defaults.
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        Self::builder(Target::parse(url)?).connect().await
    }

    /// Running totals of the hot-key lease path (policies with
    /// [`Policy::with_lease`](tollgate::Policy::with_lease)).
    pub fn lease_stats(&self) -> LeaseStats {
        self.inner.leases.stats()
    }

    /// Running totals: calls, failures, breaker refusals, deny cache hits. Degraded decisions
    /// are the `Engine`'s to count (`Verdict::degraded`): the store only reports failures.
    pub fn stats(&self) -> StoreStats {
        let c = &self.inner.stats;
        let calls = self.inner.transport.counts();
        StoreStats {
            redis_calls: calls.redis_calls,
            redis_unavailable: calls.redis_unavailable,
            breaker_refusals: calls.breaker_refusals,
            deny_cache_hits: self.inner.deny_cache.as_ref().map_or(0, |cache| cache.hits()),
            refunds: c.refunds.load(Ordering::Relaxed),
            refund_failures: c.refund_failures.load(Ordering::Relaxed),
            reset_publish_failures: calls.publish_failures,
            batch_calls: calls.batch_calls,
            batched_decisions: calls.batched_decisions,
            state_lost: self.inner.transport.state_lost(),
            failovers: calls.failovers,
            unreplicated: c.unreplicated.load(Ordering::Relaxed),
        }
    }

    /// `Ok` unless an admission that waited for `replicas` was acknowledged by fewer
    /// (`acknowledged`: how many; `None` when the call did not wait), which is counted.
    fn acknowledged(&self, replicas: ReplicaWait, acknowledged: Option<u64>) -> Result<(), Error> {
        error::acknowledged(replicas.replicas, acknowledged)
            .inspect_err(|_| bump(&self.inner.stats.unreplicated))
    }

    /// The name of the decision function in tollgate's Redis function library (what `FCALL` is
    /// called with where the server has functions: see `FUNCTION LIST`), for operators and for
    /// benchmarking the bare function. The library and its functions are named after a hash of
    /// their code, so each version of tollgate calls its own.
    ///
    /// ```
    /// assert!(tollgate_redis::RedisStore::function_name().starts_with("tollgate_"));
    /// ```
    pub fn function_name() -> String {
        Scripts::new().library.decide_function().to_owned()
    }

    /// The SHA1 of the decision script (what `EVALSHA` is called with; one script decides every
    /// algorithm), for operators looking at `SCRIPT EXISTS` or `SLOWLOG`, and for benchmarking
    /// the bare script.
    ///
    /// ```
    /// assert_eq!(tollgate_redis::RedisStore::script_sha().len(), 40);
    /// ```
    pub fn script_sha() -> String {
        Scripts::new().decide.get_hash().to_string()
    }

    /// The `EVALSHA` keys and arguments of a check of `key` under `policy`, exactly as the store
    /// sends them with Redis time (for benchmarking the bare script with `redis-benchmark`).
    ///
    /// The last key is the sequence of the state's cluster slot (see `docs/redis.md`); on a
    /// standalone server the store names slot 0's sequence instead, which costs the same.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
    /// let (keys, args) = tollgate_redis::RedisStore::script_call("tollgate:", &policy, b"k", 1);
    /// assert_eq!(keys[..2], [b"tollgate:{api:k}".to_vec(), b"tollgate:{api:k}:ovr".to_vec()]);
    /// assert!(keys[2].starts_with(b"tollgate:{") && keys[2].ends_with(b"}:seq"));
    /// assert_eq!(args[..11], ["", "1", "commit", "gcra", "1", "0", "0", "0", "100000", "5", ""]);
    /// // The version of the policy: its stamp, then generation, on_change and parameters.
    /// assert_eq!(args[11], format!("gcra/{}", policy.fingerprint()));
    /// assert_eq!(args[12], "0|keep|100000 5 ");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn script_call(prefix: &str, policy: &Policy, key: &[u8], cost: u64) -> (Vec<Vec<u8>>, Vec<String>) {
        let names = KeyNames::new(prefix);
        let rule = Rule::new(policy, key, cost);
        let mut keys = call_keys(policy, names.state(policy.hash_tag(), policy.name(), key));
        keys.push(names.sequence(keys::slot(&keys[0])));
        (
            keys,
            call_args(String::new(), Mode::Commit, [(&rule, 0)].into_iter()),
        )
    }

    /// True while a circuit breaker is open (a Redis node recently unavailable).
    pub fn is_degraded(&self) -> bool {
        self.inner.transport.any_breaker_open()
    }

    /// Each Redis node called so far (`host:port`; `cluster` for calls made before the cluster's
    /// slot map was known) and whether its circuit breaker is open, sorted by node: for a gauge.
    pub fn breaker_states(&self) -> Vec<(String, bool)> {
        self.inner.transport.breaker_states()
    }

    /// The deadline of each call.
    pub fn deadline(&self) -> Duration {
        self.inner.transport.timeout()
    }

    /// Whether Redis answers a PING within the timeout, bypassing the breaker.
    pub async fn ping(&self) -> Result<(), Error> {
        self.inner.transport.ping().await
    }

    /// Whether the store can decide now, bypassing the breaker, within `within`: Redis answers
    /// a PING (which also proves the password), and a standalone address does not point at a
    /// cluster node (whose redirections the standalone client cannot follow). A cluster address
    /// pointed at a standalone server fails with class `cluster`, like the second case. For
    /// readiness probes and start-up reports: the error's class says what is wrong.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_redis::{RedisStore, Target};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate_redis::ConnectError> {
    /// let store = RedisStore::builder(Target::parse("redis://127.0.0.1:1")?).connect_lazy().await?;
    /// let err = store.health(Duration::from_millis(200)).await.unwrap_err();
    /// assert_eq!(err.class(), Some("connection"));
    /// # Ok(()) }
    /// ```
    pub async fn health(&self, within: Duration) -> Result<(), Error> {
        self.inner.transport.health(within).await
    }

    /// Whether the server can run the store's Lua scripts, which every decision is: loads the
    /// decision script within `within`, bypassing the breaker. A server with scripting turned
    /// off (Valkey without its Lua engine, `EVAL`, `EVALSHA` or `SCRIPT` renamed away) fails with
    /// [`ConnectError::NoScripting`], which no wait cures; a server that does not answer fails
    /// with [`ConnectError::Redis`] and says nothing of its scripting. [`connect`] checks this
    /// itself; a store built with [`connect_lazy`] is checked here once Redis answers, as
    /// `tollgate serve` does at start-up.
    ///
    /// [`connect`]: RedisStoreBuilder::connect
    /// [`connect_lazy`]: RedisStoreBuilder::connect_lazy
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_redis::{ConnectError, RedisStore, Target};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), ConnectError> {
    /// let store = RedisStore::builder(Target::parse("redis://127.0.0.1:1")?).connect_lazy().await?;
    /// // Nothing listens on port 1: not an answer about scripting.
    /// let err = store.check_scripting(Duration::from_millis(200)).await.unwrap_err();
    /// assert!(matches!(err, ConnectError::Redis(_)), "{err}");
    /// # Ok(()) }
    /// ```
    pub async fn check_scripting(&self, within: Duration) -> Result<(), ConnectError> {
        self.inner
            .transport
            .check_scripting(&self.inner.target, within)
            .await
    }

    async fn decide_one(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
        commit: bool,
    ) -> Result<Decision, Error> {
        core_store::validate_key(key)?;
        let inner = &self.inner;
        let state = inner.keys.state(policy.hash_tag(), policy.name(), key);
        let local_now = inner.local_clock.now_us();
        if let Some(denial) = inner
            .deny_cache
            .as_ref()
            .and_then(|c| c.get(&state, policy, cost, local_now))
        {
            return Ok(denial.decision(policy, local_now));
        }
        let keys = call_keys(policy, state.clone());
        let rule = Rule::new(policy, key, cost);
        let mode = if commit { Mode::Commit } else { Mode::Peek };
        let args = call_args(inner.transport.script_now(), mode, [(&rule, 0)].into_iter());
        let replicas = match commit {
            true => ReplicaWait::of(policy),
            false => ReplicaWait::NONE,
        };
        match inner.transport.decide_call(keys, args, replicas).await {
            Ok(reply) => {
                let decision = outcomes(&reply.value, 1)?[0];
                if decision.allowed {
                    self.acknowledged(replicas, reply.replicas)?;
                }
                if let (Some(cache), Some(retry)) = (&inner.deny_cache, decision.retry_after) {
                    let denial = Denial::new(
                        policy,
                        cost,
                        local_now,
                        retry.as_micros() as u64,
                        decision.reset_after.as_micros() as u64,
                    );
                    cache.insert(&state, denial, local_now);
                }
                Ok(decision)
            }
            Err(err) => Err(err),
        }
    }

    /// Several rules (or one shadow rule): one script call on standalone Redis or when every
    /// rule's keys share a cluster slot; otherwise one call per slot, made all or nothing by
    /// reserve-then-refund (see the crate docs for what that guarantees). A failed call is
    /// returned as it is: the [`Engine`](tollgate::Engine) applies each rule's failure mode.
    async fn decide_many(&self, rules: &[Rule<'_>], commit: bool) -> Result<Vec<Decision>, Error> {
        let inner = &self.inner;
        let keys: Vec<Vec<Vec<u8>>> = rules
            .iter()
            .map(|rule| {
                let state = inner
                    .keys
                    .state(rule.policy.hash_tag(), rule.policy.name(), rule.key);
                call_keys(rule.policy, state)
            })
            .collect();
        let now = inner.transport.script_now();
        let mode = if commit { Mode::Commit } else { Mode::Peek };
        let groups = match inner.transport.is_cluster() {
            true => slot_groups(&keys),
            false => vec![(0..rules.len()).collect()],
        };
        if let [_] = groups[..] {
            let (outcomes, _) = self.decide_group(rules, &keys, &groups[0], &now, mode).await?;
            return Ok(outcomes);
        }
        if !commit {
            // Peeks change nothing, so each slot can look on its own.
            let replies = join_all(
                groups
                    .iter()
                    .map(|g| self.decide_group(rules, &keys, g, &now, mode)),
            )
            .await;
            let mut outcomes = vec![Decision::default(); rules.len()];
            for (group, reply) in groups.iter().zip(replies) {
                let (group_outcomes, _) = reply?;
                for (&i, outcome) in group.iter().zip(group_outcomes) {
                    outcomes[i] = outcome;
                }
            }
            return Ok(outcomes);
        }
        self.reserve_then_refund(rules, &keys, &groups, &now).await
    }

    /// Each slot decides its rules all or nothing and keeps what it spent; if any slot denied
    /// or failed, the slots that spent give it back. A slot whose call failed may have spent:
    /// that cannot be told apart from one that did not, so it is not refunded (the error goes
    /// to the caller, whose failure mode decides).
    async fn reserve_then_refund(
        &self,
        rules: &[Rule<'_>],
        keys: &[Vec<Vec<u8>>],
        groups: &[Vec<usize>],
        now: &str,
    ) -> Result<Vec<Decision>, Error> {
        let replies = join_all(
            groups
                .iter()
                .map(|g| self.decide_group(rules, keys, g, now, Mode::Reserve)),
        )
        .await;
        let mut outcomes = vec![Decision::default(); rules.len()];
        let mut failure = None;
        let mut denied = false;
        // The allowed rules of groups that spent, with their marks.
        let mut spent: Vec<Vec<(usize, u64)>> = vec![];
        for (group, reply) in groups.iter().zip(replies) {
            let (group_outcomes, marks) = match reply {
                Ok(reply) => reply,
                Err(err) => {
                    failure.get_or_insert(err);
                    continue;
                }
            };
            let group_denied = group
                .iter()
                .zip(&group_outcomes)
                .any(|(&i, o)| !rules[i].shadow && !o.allowed);
            denied |= group_denied;
            let mut spends = vec![];
            for ((&i, outcome), mark) in group.iter().zip(group_outcomes).zip(marks) {
                if !group_denied && outcome.allowed && !rules[i].question {
                    spends.push((i, mark));
                }
                outcomes[i] = outcome;
            }
            if !spends.is_empty() {
                spent.push(spends);
            }
        }
        if failure.is_none() && !denied {
            return Ok(outcomes);
        }
        let refunds = join_all(spent.iter().map(|spends| self.refund(rules, keys, spends, now))).await;
        for (spends, refund) in spent.iter().zip(refunds) {
            match refund {
                Ok(after) => {
                    for (&(i, _), outcome) in spends.iter().zip(after) {
                        outcomes[i] = outcome;
                    }
                }
                Err(err) => self.inner.stats.refund_failed(&err),
            }
        }
        match failure {
            Some(err) => Err(err),
            None => Ok(outcomes),
        }
    }

    /// One call deciding the rules `group` (indices into `rules`), which share a slot: their
    /// outcomes, and with [`Mode::Reserve`] the mark of each.
    async fn decide_group(
        &self,
        rules: &[Rule<'_>],
        keys: &[Vec<Vec<u8>>],
        group: &[usize],
        now: &str,
        mode: Mode,
    ) -> Result<(Vec<Decision>, Vec<u64>), Error> {
        let call_keys: Vec<Vec<u8>> = group.iter().flat_map(|&i| keys[i].iter().cloned()).collect();
        let args = call_args(now.to_string(), mode, group.iter().map(|&i| (&rules[i], 0)));
        // The most replicas any rule that may spend waits for, for the longest wait among them.
        let replicas = match mode {
            Mode::Commit | Mode::Reserve => group
                .iter()
                .filter(|&&i| !rules[i].question)
                .map(|&i| ReplicaWait::of(rules[i].policy))
                .fold(ReplicaWait::NONE, ReplicaWait::max),
            _ => ReplicaWait::NONE,
        };
        let replied = self
            .inner
            .transport
            .decide_call(call_keys, args, replicas)
            .await?;
        let reply = replied.value;
        let outcomes = outcomes(&reply, group.len())?;
        // The group spent (and must be acknowledged) when no enforced rule denied.
        if group
            .iter()
            .zip(&outcomes)
            .all(|(&i, o)| rules[i].shadow || o.allowed)
        {
            self.acknowledged(replicas, replied.replicas)?;
        }
        let marks = match mode {
            Mode::Reserve if reply.len() == (ANSWER + 1) * group.len() => {
                reply[ANSWER * group.len()..].to_vec()
            }
            Mode::Reserve => return Err(bad_reply(&reply)),
            _ => vec![0; group.len()],
        };
        Ok((outcomes, marks))
    }

    /// Gives back what the rules `spends` (index, mark) of one slot spent; returns what a peek
    /// says of them afterwards.
    async fn refund(
        &self,
        rules: &[Rule<'_>],
        keys: &[Vec<Vec<u8>>],
        spends: &[(usize, u64)],
        now: &str,
    ) -> Result<Vec<Decision>, Error> {
        bump(&self.inner.stats.refunds);
        let call_keys: Vec<Vec<u8>> = spends
            .iter()
            .flat_map(|&(i, _)| keys[i].iter().cloned())
            .collect();
        let args = call_args(
            now.to_string(),
            Mode::Refund,
            spends.iter().map(|&(i, mark)| (&rules[i], mark)),
        );
        let transport = &self.inner.transport;
        let reply: Vec<u64> = transport
            .call(&transport.scripts().refund, &call_keys, &args)
            .await?;
        outcomes(&reply, spends.len())
    }

    /// Runs the attempts script: the live counter (if any), the time the script used and
    /// whether this call counted an attempt. `max_attempts` matters to `try` only.
    async fn attempts(
        &self,
        key: &[u8],
        op: &str,
        ttl_us: u64,
        max_attempts: u64,
    ) -> Result<(Option<Attempts>, u64, bool), Error> {
        core_store::validate_key(key)?;
        let name = self.inner.keys.attempts(key);
        let transport = &self.inner.transport;
        let args = [
            transport.script_now(),
            op.to_string(),
            ttl_us.to_string(),
            max_attempts.to_string(),
        ];
        let reply: Vec<u64> = transport
            .call(&transport.scripts().attempts, &[name], &args)
            .await?;
        match reply[..] {
            [0, _, now_us, 0] => Ok((None, now_us, false)),
            [count, expires_at_us, now_us, counted @ (0 | 1)] => {
                Ok((Some(Attempts { count, expires_at_us }), now_us, counted == 1))
            }
            _ => Err(bad_reply(&reply)),
        }
    }

    /// Deletes keys with the reset script.
    async fn delete(&self, keys: &[Vec<u8>]) -> Result<(), Error> {
        let transport = &self.inner.transport;
        transport
            .call::<u64>(&transport.scripts().reset, keys, &[])
            .await
            .map(|_| ())
    }
}

/// KEYS of a decision script: the state hash, the sliding log's set next to it, then the key's
/// override hash.
fn call_keys(policy: &Policy, state: Vec<u8>) -> Vec<Vec<u8>> {
    let over = KeyNames::override_of(&state);
    if matches!(policy.algorithm(), tollgate::Algorithm::SlidingLog(_)) {
        let log = KeyNames::log(&state);
        vec![state, log, over]
    } else {
        vec![state, over]
    }
}

/// The decisions of `count` rules in a reply ([`ANSWER`] integers each, as `lua/decide.lua`
/// says: the limit in force is the script's, which read the key's override), and what follows
/// them (the marks of a reserve).
fn outcomes(reply: &[u64], count: usize) -> Result<Vec<Decision>, Error> {
    if reply.len() < ANSWER * count {
        return Err(bad_reply(reply));
    }
    Ok(reply[..ANSWER * count]
        .chunks_exact(ANSWER)
        .map(|r| Decision {
            allowed: r[0] == 1,
            limit: r[4],
            remaining: r[1],
            reset_after: Duration::from_micros(r[2]),
            retry_after: (r[0] != 1).then_some(Duration::from_micros(r[3])),
            degraded: false,
        })
        .collect())
}

/// The answers of `count` rules in a charge's reply ([`ANSWER`] integers each, as a decision's:
/// `lua/request.lua` says how the first carries the debt, 1 + the debt for a key in debt).
fn charges(reply: &[u64], count: usize) -> Result<Vec<Charged>, Error> {
    if reply.len() != ANSWER * count {
        return Err(bad_reply(reply));
    }
    let decisions = outcomes(reply, count)?;
    Ok(reply
        .chunks_exact(ANSWER)
        .zip(decisions)
        .map(|(r, decision)| Charged {
            decision,
            debt: r[0].saturating_sub(1),
        })
        .collect())
}

/// Rule indices grouped by the cluster slot of their keys (a rule's keys share one), in the
/// order the slots first appear.
fn slot_groups(keys: &[Vec<Vec<u8>>]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = vec![];
    for (i, names) in keys.iter().enumerate() {
        let slot = names.first().map_or(0, |name| keys::slot(name));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// Runs futures concurrently on the current task and returns their outputs in order: the calls
/// to different cluster nodes travel together instead of one after another.
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => waiting = true,
                }
            }
        }
        if waiting { Poll::Pending } else { Poll::Ready(()) }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// The same calls as [`MemoryStore`](tollgate::MemoryStore)'s, with the same key type (anything
/// that is bytes: `&str`, `String`, `&[u8]`, `Vec<u8>`), awaited: code written against the memory
/// store moves to Redis by adding `.await`. They are the [`Store`] and [`AttemptsStore`] methods,
/// which take `&[u8]` so that generic code over any store stays simple.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::{Algorithm, Policy, Rate};
/// use tollgate_redis::RedisStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://192.0.2.10:6379").await?;
///
/// let movies = Policy::new("movies", Algorithm::sliding_log(20, Duration::from_secs(60))?)?
///     .with_block_for(Duration::from_secs(60))?;
/// let decision = store.check(&movies, "198.51.100.4", 1).await?;
/// if !decision.allowed {
///     // answer 429 with Retry-After: decision.retry_after
/// }
///
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// let tenant = String::from("tenant-7");
/// let _ = store.peek(&api, &tenant, 1).await?;
///
/// // Count the try before verifying the password; a good password clears the counter.
/// let hour = Duration::from_secs(3600);
/// if store.try_attempt("login:alice", 5, hour).await?.allowed {
///     let password_ok = false;
///     if password_ok {
///         store.reset_attempts("login:alice").await?;
///     }
/// }
/// # Ok(()) }
/// ```
impl RedisStore {
    /// [`Store::check`]: decides a request of `cost` for `key` under `policy`, and records it
    /// if admitted.
    pub async fn check(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        Store::check(self, policy, key.as_ref(), cost).await
    }

    /// [`Store::peek`]: the answer `check` would give now, changing nothing.
    pub async fn peek(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        Store::peek(self, policy, key.as_ref(), cost).await
    }

    /// [`Store::reset`]: forgets `key`'s state under `policy`, penalty included, on every
    /// instance's deny cache too.
    pub async fn reset(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<(), Error> {
        Store::reset(self, policy, key.as_ref()).await
    }

    /// [`AttemptsStore::increment_attempts`]: counts a failed attempt, returns the new count.
    pub async fn increment_attempts(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<u64, Error> {
        AttemptsStore::increment_attempts(self, key.as_ref(), ttl).await
    }

    /// [`AttemptsStore::get_attempts`]: the current count, 0 when there is no counter.
    pub async fn get_attempts(&self, key: impl AsRef<[u8]>) -> Result<u64, Error> {
        AttemptsStore::get_attempts(self, key.as_ref()).await
    }

    /// [`AttemptsStore::get_ttl`]: time until the counter expires, `None` without a counter.
    pub async fn get_ttl(&self, key: impl AsRef<[u8]>) -> Result<Option<Duration>, Error> {
        AttemptsStore::get_ttl(self, key.as_ref()).await
    }

    /// [`AttemptsStore::reset_attempts`]: removes the counter.
    pub async fn reset_attempts(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        AttemptsStore::reset_attempts(self, key.as_ref()).await
    }

    /// [`AttemptsStore::try_attempt`]: counts a try only if fewer than `max_attempts` are
    /// counted, in one script call.
    pub async fn try_attempt(
        &self,
        key: impl AsRef<[u8]>,
        max_attempts: u64,
        ttl: Duration,
    ) -> Result<AttemptTry, Error> {
        AttemptsStore::try_attempt(self, key.as_ref(), max_attempts, ttl).await
    }

    /// [`AttemptsStore::check_limit`]: whether another attempt is allowed (a reading only: use
    /// [`try_attempt`](Self::try_attempt) to admit a login).
    pub async fn check_limit(
        &self,
        key: impl AsRef<[u8]>,
        max_attempts: u64,
    ) -> Result<AttemptsStatus, Error> {
        AttemptsStore::check_limit(self, key.as_ref(), max_attempts).await
    }
}

impl Store for RedisStore {
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        for rule in rules {
            core_store::validate_rule(rule)?;
        }
        // Prefix overrides come from this instance's copy (see `overrides`); key overrides are
        // read by the script.
        self.inner.overrides.refresh_prefixes().await;
        let cache = self.inner.overrides.prefixes();
        if cache.any() {
            let now_us = self.inner.local_clock.now_us();
            let policies: Vec<Option<Policy>> = rules
                .iter()
                .map(|r| cache.in_force(r.policy, r.key, now_us))
                .collect();
            if policies.iter().any(Option::is_some) {
                let rules: Vec<Rule<'_>> = rules
                    .iter()
                    .zip(&policies)
                    .map(|(rule, policy)| match policy {
                        Some(policy) => Rule { policy, ..*rule },
                        None => *rule,
                    })
                    .collect();
                return self.decide_in_force(&rules, commit).await;
            }
        }
        self.decide_in_force(rules, commit).await
    }

    async fn penalty_left(&self, policy: &Policy, key: &[u8]) -> Result<Option<Duration>, Error> {
        self.read_penalty(policy, key).await
    }

    /// The decision script in its charge mode (`lua/request.lua`, a port of
    /// [`tollgate::algorithm::charge`]): one atomic call on standalone Redis, one per slot on a
    /// cluster, each never retried once it may have run, and sent through the batch lanes like
    /// a decision. A charge is never refused, so the slots need no reserve-then-refund: each
    /// records its own. When a call fails the error is returned for the whole charge (a slot
    /// whose call failed may or may not have recorded; the other slots have), and the
    /// [`Engine`](tollgate::Engine) applies the failure modes.
    async fn charge(&self, rules: &[Rule<'_>]) -> Result<PerRule<Charged>, Error> {
        for rule in rules {
            core_store::validate_charge(rule)?;
        }
        let (unique, index) = core_store::merge_charges(rules);
        self.inner.overrides.refresh_prefixes().await;
        let cache = self.inner.overrides.prefixes();
        let now_us = self.inner.local_clock.now_us();
        let policies: Vec<Option<Policy>> = unique
            .iter()
            .map(|r| {
                cache
                    .any()
                    .then(|| cache.in_force(r.policy, r.key, now_us))
                    .flatten()
            })
            .collect();
        let unique: Vec<Rule<'_>> = unique
            .iter()
            .zip(&policies)
            .map(|(rule, policy)| match policy {
                Some(policy) => Rule { policy, ..*rule },
                None => *rule,
            })
            .collect();
        let inner = &self.inner;
        let keys: Vec<Vec<Vec<u8>>> = unique
            .iter()
            .map(|rule| {
                let state = inner
                    .keys
                    .state(rule.policy.hash_tag(), rule.policy.name(), rule.key);
                call_keys(rule.policy, state)
            })
            .collect();
        let groups = match inner.transport.is_cluster() {
            true => slot_groups(&keys),
            false => vec![(0..unique.len()).collect()],
        };
        let now = inner.transport.script_now();
        let replies = join_all(groups.iter().map(|group| {
            let call_keys: Vec<Vec<u8>> = group.iter().flat_map(|&i| keys[i].iter().cloned()).collect();
            let args = call_args(now.clone(), Mode::Charge, group.iter().map(|&i| (&unique[i], 0)));
            // A charge is never refused, so it admits nothing to wait for replicas for.
            inner.transport.decide_call(call_keys, args, ReplicaWait::NONE)
        }))
        .await;
        let mut charged = vec![Charged::default(); unique.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let reply = reply?.value;
            for (&i, answer) in group.iter().zip(charges(&reply, group.len())?) {
                charged[i] = answer;
            }
        }
        Ok(index.into_iter().map(|u| charged[u]).collect())
    }

    /// One call of the refund script in its `give_back` mode (a port of
    /// [`tollgate::algorithm::refund`]), on the key's own slot. Then, with the deny cache on,
    /// this instance's cached denial of the key is dropped and the others are told on the reset
    /// channel (one `PUBLISH`), so no instance keeps denying a key whose budget came back.
    /// Leases of the key stay: their units are still good.
    async fn refund(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        core_store::validate_check(policy, key, cost)?;
        // A prefix override from this instance's copy, as `decide` applies it; a key override is
        // read by the script.
        self.inner.overrides.refresh_prefixes().await;
        let cache = self.inner.overrides.prefixes();
        let prefixed = cache
            .any()
            .then(|| cache.in_force(policy, key, self.inner.local_clock.now_us()))
            .flatten();
        let policy = prefixed.as_ref().unwrap_or(policy);
        let state = self.inner.keys.state(policy.hash_tag(), policy.name(), key);
        let keys = call_keys(policy, state.clone());
        let rule = Rule::new(policy, key, cost);
        let transport = &self.inner.transport;
        let args = call_args(transport.script_now(), Mode::GiveBack, [(&rule, 0)].into_iter());
        let reply: Vec<u64> = transport.call(&transport.scripts().refund, &keys, &args).await?;
        let decision = outcomes(&reply, 1)?[0];
        if let Some(cache) = &self.inner.deny_cache {
            cache.remove(&state);
            let mut message = Vec::with_capacity(state.len() + 1);
            message.push(crate::reset_channel::DROP_DENIAL);
            message.extend_from_slice(&state);
            transport.publish(&message).await;
        }
        Ok(decision)
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        core_store::validate_key(key)?;
        let state = self.inner.keys.state(policy.hash_tag(), policy.name(), key);
        if let Some(cache) = &self.inner.deny_cache {
            cache.remove(&state);
        }
        self.inner.leases.forget(&state);
        let log = KeyNames::log(&state);
        self.delete(&[state.clone(), log]).await?;
        self.inner.transport.publish(&state).await;
        Ok(())
    }
}

impl RedisStore {
    /// Reads the state's penalty (`b`, µs since the Unix epoch) against the scripts' clock.
    async fn read_penalty(&self, policy: &Policy, key: &[u8]) -> Result<Option<Duration>, Error> {
        core_store::validate_key(key)?;
        let state = self.inner.keys.state(policy.hash_tag(), policy.name(), key);
        let transport = &self.inner.transport;
        transport
            .within_deadline(|mut conn| async move {
                let until: Option<u64> = redis::cmd("HGET")
                    .arg(&state)
                    .arg("b")
                    .query_async(&mut conn)
                    .await?;
                let now_us = transport.script_time_us(&mut conn).await?;
                Ok(until
                    .filter(|&u| u > now_us)
                    .map(|u| Duration::from_micros(u - now_us)))
            })
            .await
    }

    /// Decides rules whose prefix overrides are already applied.
    async fn decide_in_force(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        // A leasing policy's key may be decided from this instance's lease (see `lease`).
        if let [rule] = rules
            && commit
            && !rule.shadow
            && !rule.question
            && let Some(options) = rule.policy.lease()
        {
            let inner = &self.inner;
            let context = lease::Context {
                transport: &inner.transport,
                keys: &inner.keys,
                deny_cache: inner.deny_cache.as_deref(),
                clock: &*inner.local_clock,
            };
            return Ok(Decisions::One(
                lease::decide(&inner.leases, context, rule, options).await?,
            ));
        }
        match rules {
            [] => Ok(Decisions::None),
            // One enforced rule: the deny cache may answer without a round trip.
            [rule] if !rule.shadow && !rule.question => Ok(Decisions::One(
                self.decide_one(rule.policy, rule.key, rule.cost, commit).await?,
            )),
            _ => {
                let decisions = self.decide_many(rules, commit).await?;
                Ok(match rules.len() {
                    1 => Decisions::One(decisions.first().copied().unwrap_or_default()),
                    _ => Decisions::Many(decisions),
                })
            }
        }
    }
}

impl AttemptsStore for RedisStore {
    async fn increment_attempts(&self, key: &[u8], ttl: Duration) -> Result<u64, Error> {
        let ttl_us = validate_ttl(ttl)?;
        let (counter, _, _) = self.attempts(key, "incr", ttl_us, 0).await?;
        Ok(counter.map_or(0, |c| c.count))
    }

    async fn get_attempts(&self, key: &[u8]) -> Result<u64, Error> {
        Ok(self.attempts(key, "get", 0, 0).await?.0.map_or(0, |c| c.count))
    }

    async fn get_ttl(&self, key: &[u8]) -> Result<Option<Duration>, Error> {
        let (counter, now_us, _) = self.attempts(key, "get", 0, 0).await?;
        Ok(counter.map(|c| Duration::from_micros(c.expires_at_us.saturating_sub(now_us))))
    }

    async fn reset_attempts(&self, key: &[u8]) -> Result<(), Error> {
        core_store::validate_key(key)?;
        self.delete(&[self.inner.keys.attempts(key)]).await
    }

    async fn try_attempt(&self, key: &[u8], max_attempts: u64, ttl: Duration) -> Result<AttemptTry, Error> {
        core_store::validate_max_attempts(max_attempts)?;
        let ttl_us = validate_ttl(ttl)?;
        let (counter, now_us, counted) = self.attempts(key, "try", ttl_us, max_attempts).await?;
        // A try always leaves a live counter: a refused one found it full, a counted one made it.
        let counter = counter.ok_or_else(|| bad_reply(&[0, 0, now_us, u64::from(counted)]))?;
        Ok(AttemptTry {
            allowed: counted,
            attempts: counter.count,
            remaining: max_attempts.saturating_sub(counter.count),
            ttl: Duration::from_micros(counter.expires_at_us.saturating_sub(now_us)),
        })
    }

    async fn check_limit(&self, key: &[u8], max_attempts: u64) -> Result<AttemptsStatus, Error> {
        core_store::validate_max_attempts(max_attempts)?;
        let (counter, now_us, _) = self.attempts(key, "get", 0, 0).await?;
        Ok(Attempts::status(counter.as_ref(), now_us, max_attempts))
    }
}

fn validate_ttl(ttl: Duration) -> Result<u64, Error> {
    let (min, max) = (tollgate::bounds::MIN_PERIOD, tollgate::bounds::MAX_PERIOD);
    if ttl < min || ttl > max {
        return Err(Error::TtlOutOfRange { value: ttl, min, max });
    }
    Ok(ttl.as_micros() as u64)
}

/// Allow and deny list entries kept in Redis for the whole fleet (see `access`).
impl RedisStore {
    /// Every entry in the store with when it was added (ms since the Unix epoch), sorted, read
    /// in pages of a few hundred (each one call within the store's deadline). Fields that do
    /// not decode (written by another version) are skipped.
    pub async fn access_entries(&self) -> Result<Vec<(AccessEntry, u64)>, Error> {
        access::entries(&self.inner.transport, self.inner.keys.access_lists()).await
    }

    /// The entries' version: counted up by every add and remove of any instance, so that a copy
    /// read at one version needs no read while the version stays. `None` before the first
    /// change.
    pub async fn access_version(&self) -> Result<Option<u64>, Error> {
        access::version(&self.inner.transport, self.inner.keys.access_lists()).await
    }

    /// Adds `entry` (an entry already there keeps its time), unless the store holds
    /// [`MAX_ACCESS_ENTRIES`](access::MAX_ACCESS_ENTRIES) already or the entry would take them
    /// past [`MAX_ACCESS_BYTES`](access::MAX_ACCESS_BYTES).
    pub async fn add_access_entry(&self, entry: &AccessEntry) -> Result<Added, Error> {
        access::add(&self.inner.transport, self.inner.keys.access_lists(), entry).await
    }

    /// Removes `entry`; `false` when it was not there.
    pub async fn remove_access_entry(&self, entry: &AccessEntry) -> Result<bool, Error> {
        access::remove(&self.inner.transport, self.inner.keys.access_lists(), entry).await
    }
}

/// Concurrency limits in a sorted set per key (see `concurrency`).
impl ConcurrencyStore for RedisStore {
    async fn acquire(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<Acquire, Error> {
        let inner = &self.inner;
        concurrency::acquire(&inner.transport, &inner.keys, &inner.lease_ids, policy, key).await
    }

    async fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> Result<Release, Error> {
        concurrency::release(&self.inner.transport, &self.inner.keys, policy, key, lease).await
    }

    async fn clear_leases(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<u64, Error> {
        concurrency::clear(&self.inner.transport, &self.inner.keys, policy, key).await
    }

    async fn in_flight(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<InFlight, Error> {
        concurrency::in_flight(&self.inner.transport, &self.inner.keys, policy, key).await
    }
}

/// Runtime overrides: key overrides read by the decision script, prefix overrides from this
/// instance's copy (see `overrides`).
impl OverrideStore for RedisStore {
    async fn set_override(&self, policy: &Policy, value: &Override) -> Result<(), Error> {
        self.inner.overrides.set(policy, value).await
    }

    async fn get_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> Result<Option<Override>, Error> {
        self.inner.overrides.get(policy, target).await
    }

    async fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> Result<OverridePage, Error> {
        self.inner.overrides.list(policy, after, limit).await
    }

    async fn remove_override(&self, policy: &Policy, target: &OverrideTarget) -> Result<bool, Error> {
        self.inner.overrides.remove(policy, target).await
    }

    async fn override_for(&self, policy: &Policy, key: &[u8]) -> Result<Option<Override>, Error> {
        self.inner.overrides.of_key(policy, key).await
    }
}
