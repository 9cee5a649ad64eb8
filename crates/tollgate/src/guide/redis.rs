//! # From memory to Redis
//!
//! The memory store limits one process. To share limits across a fleet, the same policies run
//! on Redis, Redis Cluster or a master behind Redis Sentinel (Valkey too) through the
//! `tollgate-redis` crate: every decision is one Lua script on Redis's own clock, a line-for-line
//! port of this crate's step functions, and a test suite checks that memory, Redis, a cluster and
//! Sentinel give exactly the same decisions.
//!
//! ## Write the checking code once
//!
//! Code that checks through the [`Engine`](crate::Engine) (or is generic over
//! [`Store`](crate::Store)) does not change when the store does: build the engine over a
//! `MemoryStore` in tests and over a `RedisStore` in production.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rule, Store};
//!
//! /// The login door: per address and per account, all or nothing.
//! async fn may_try_login<S: Store>(
//!     engine: &Engine<S>,
//!     (per_ip, per_account): (&Policy, &Policy),
//!     ip: &str,
//!     account: &str,
//! ) -> Result<bool, tollgate::Error> {
//!     let rules = [Rule::new(per_ip, ip, 1), Rule::new(per_account, account, 1)];
//!     Ok(engine.check_all(&rules).await?.allowed())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let minute = Duration::from_secs(60);
//! let per_ip = Policy::new("login-ip", Algorithm::sliding_log(20, minute)?)?;
//! let per_account = Policy::new("login-account", Algorithm::sliding_log(3, minute)?)?;
//! let login = (&per_ip, &per_account);
//!
//! // In tests: the memory store. In production, the same function over
//! // `Engine::new(tollgate_redis::RedisStore::connect("redis://...").await?)`.
//! let engine = Engine::new(MemoryStore::new());
//! for _ in 0..3 {
//!     assert!(may_try_login(&engine, login, "198.51.100.4", "alice").await?);
//! }
//! assert!(!may_try_login(&engine, login, "198.51.100.4", "alice").await?);
//! # Ok(()) }
//! ```
//!
//! Code that calls the memory store directly moves by adding `.await`: `RedisStore` has the
//! same `check`, `peek`, `reset` and attempts calls, with the same key types (see
//! [`keys`](super::keys)):
//!
//! ```text
//! let store = tollgate_redis::RedisStore::connect("redis://192.0.2.10:6379").await?;
//! let decision = store.check(&movies, "198.51.100.4", 1).await?;
//! let tried = store.try_attempt("login:alice", 5, Duration::from_secs(3600)).await?;
//! ```
//!
//! ## What changes on Redis
//!
//! - **Time** is Redis's clock (`TIME`), so app servers with skewed clocks agree.
//! - **Failures** exist: each call has a deadline and a circuit breaker, and each policy's
//!   failure mode decides while Redis is away (see [`failure_modes`](super::failure_modes)).
//! - **Keys** are `prefix + policy + key`, escaped so that no two (policy, key) pairs meet,
//!   each with a TTL; on a cluster they carry a hash tag. By default the tag is the policy and
//!   the key ([`HashTag::PolicyAndKey`](crate::HashTag::PolicyAndKey)), spreading pairs evenly.
//!   A request limited by several policies on one cluster is then one call per slot, made all
//!   or nothing by reserving and refunding; give those policies
//!   [`HashTag::Key`](crate::HashTag::Key) and every policy of one user or tenant lands on one
//!   slot, so the request stays one call.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, HashTag, Policy, Rate};
//!
//! let minute = Duration::from_secs(60);
//! // Both keyed by tenant: one cluster slot per tenant, one script call per request.
//! let calls = Policy::new("tenant-calls", Algorithm::gcra(Rate::per_second(100)?, 200)?)?
//!     .with_hash_tag(HashTag::Key);
//! let quota = Policy::new("tenant-quota", Algorithm::sliding_window(100_000, minute * 60 * 24)?)?
//!     .with_hash_tag(HashTag::Key);
//! assert_eq!(calls.hash_tag(), quota.hash_tag());
//! # Ok::<(), tollgate::PolicyError>(())
//! ```
//!
//! - **Hot keys**: one key is one Redis slot, so one key's decisions are bounded by one Redis
//!   core. [`Policy::with_lease`](crate::Policy::with_lease) lets an instance take a slice of a
//!   hot key's budget in one call and spend it locally.
//! - **Failovers** lose what a replica had not received yet: a key may then admit up to one
//!   extra window's worth, and the store counts it (`StoreStats::state_lost`). A policy that
//!   must not overshoot waits for its replicas:
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Anchor, FailureMode, Policy};
//!
//! // Each admission returns once a replica holds it; one that none acknowledges is refused.
//! let login = Policy::new("login", Algorithm::fixed_window(5, Duration::from_secs(900), Anchor::Epoch)?)?
//!     .with_failure_mode(FailureMode::FailClosed)
//!     .with_replicas(1)?;
//! assert_eq!(login.replicas(), 1);
//! # Ok::<(), tollgate::PolicyError>(())
//! ```
//!
//! The repository's `docs/redis.md` covers the key layout, memory per key, resharding,
//! failover and acknowledged decisions, Sentinel, the tested servers (Redis 7.0, Valkey 9.1),
//! TLS and AUTH.
