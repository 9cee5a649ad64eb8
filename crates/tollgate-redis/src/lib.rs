//! Redis, Redis Cluster and Redis Sentinel store for tollgate: the core's
//! [`Store`](tollgate::Store), shared by every instance of a fleet. Valkey serves it too (the
//! suites run on Redis 7.0 and Valkey 9.1); a server without Lua scripting is refused when the
//! store opens ([`ConnectError::NoScripting`]).
//!
//! A request's rules are decided by one atomic Lua script call, whatever their algorithms: each
//! algorithm is a line-for-line port of the core's step function, and the script's driver ports
//! the core's all-or-nothing (if an enforced rule denies, nothing is spent and only the rules that
//! denied start their penalty). Scripts run on Redis's own clock (`TIME`) so app servers with
//! skewed clocks agree. On Redis 7 and later the decision and batch drivers are functions of one
//! library, called with `FCALL`, so Redis does not run the library's whole text on every call
//! (older servers get the same code as scripts). A rule's keys share one hash tag, so a cluster
//! never answers CROSSSLOT; a node that lost the library or a script (NOSCRIPT) gets it again and
//! the call is retried; a deadline and a circuit breaker bound what a slow or dead
//! Redis costs (every failure is a typed error, and the [`Engine`](tollgate::Engine) answers it
//! with each policy's [`FailureMode`](tollgate::FailureMode)); and a local deny cache answers a
//! single enforced rule already denied without a round trip.
//!
//! # Many decisions per call
//!
//! Decisions that wait for the same Redis node at the same moment (on a cluster: the same slot)
//! go out together as one call of a batch script, which decides each request in turn exactly as
//! the decision script would decide it alone: each stays atomic and independent (a denied or
//! failed request changes nothing for the others). Nothing waits for a batch to fill: each node
//! keeps at most a few calls in flight ([`RedisStoreBuilder::batch_calls_in_flight`]), a
//! decision that finds a free place goes out at once, alone, and the ones that arrive while every
//! place is taken go out together in the next call. Under low load every call is one decision;
//! under high load Redis pays a script's entry cost once per batch. Each decision keeps its own
//! deadline from when it was asked, and a decision whose deadline passed while it waited is never
//! sent. [`StoreStats::batch_calls`] counts the calls that carried more than one decision.
//!
//! # Requests whose rules span cluster slots
//!
//! On standalone Redis, and on a cluster when every rule's keys hash to one slot, a request is
//! one script call and exactly as atomic as [`MemoryStore`](tollgate::MemoryStore). Policies
//! tagged [`HashTag::Key`](tollgate::HashTag::Key) put every policy of one key (a user, a tenant)
//! on one slot, so a request limited by several of them stays one call on a cluster.
//!
//! Otherwise the store makes one call per slot, all at once, each deciding its own rules all or
//! nothing and keeping what it spent (a *reservation*). If any slot denies or fails, the slots
//! that spent run a refund script that gives back exactly their spend. What that guarantees:
//!
//! - A request passes only if every slot admitted it at once: two requests that only fit one at a
//!   time never both pass. Both may be denied, each by the other's reservation on one slot; then
//!   both give back, and the next request fits.
//! - Fixed and sliding windows and sliding logs: a denied request leaves them as they were. The
//!   refund takes the cost back out of the very window (or log entry, by its time) the reserve
//!   counted it in; if that window or entry has since expired, the spend expired with it.
//! - Token and leaky buckets and GCRA: the cost is given back, clamped to a full (or empty)
//!   budget. The bound: a request deciding between another request's reserve and refund sees the
//!   reservation, so it may be denied because of a request that was itself denied; no budget is
//!   ever spent twice or exceeded.
//! - The denied request reports what a peek says of each rule after the refund, as
//!   [`Store::decide`](tollgate::Store::decide) asks.
//! - A slot whose call fails may or may not have spent; it is never retried nor refunded (a
//!   decision is applied at most once), and the error goes to the caller; the slots that spent
//!   are refunded. A refund that fails (counted in [`StoreStats::refund_failures`] and
//!   `tollgate_store_refund_failures_total`, logged at most once a second) is never
//!   sent again either: one that timed out may still run once when its node reads it, otherwise
//!   its reservation stays spent until the state expires. So a request costs at most its own
//!   cost on each rule, even when it was denied or failed, and a refund waits no longer than any
//!   call: the store's deadline.
//!   `tests/multi_rule.rs` kills and freezes masters between a reservation and its refund.
//!
//! # Hot-key leases
//!
//! A policy built with [`Policy::with_lease`](tollgate::Policy::with_lease) (fixed window, token
//! bucket, GCRA) lets an instance that sees one of its keys hot take `k` units of the key's budget
//! in one script call (`lua/lease.lua`), debited in Redis at once, and admit from them locally
//! without round trips. With `n` instances and leases of at most `max_units`:
//!
//! - the fleet never admits more than the limit (every leased unit is spent in Redis first);
//! - at most `n × max_units` requests of cost 1 are denied, per window or refill period, that a
//!   perfect limiter would have admitted (each instance holds at most `max_units` unspent units
//!   of a key, and Redis denies only when its remainder cannot cover the cost).
//!
//! `k` follows the units this instance decided on the key over the last hold period, capped by
//! `max_units`; unused units go back with the key's next call, or end with their fixed window.
//! Resets and penalties drop leases on every instance through the reset channel. Only single
//! enforced rules that spend use leases; everything else goes to Redis and sees leased units as
//! spent. `tests/leases.rs` proves both bounds with two and three instances on Redis and on a
//! cluster; `docs/leases.md` has the details, and [`RedisStore::lease_stats`] the counts.
//!
//! # Layout
//!
//! - `store`: [`RedisStore`] and its builder. It composes the transport and the features below
//!   and implements the core's traits by calling them; the deny cache, multi-slot decisions
//!   (reserve then refund), attempts and resets are its own.
//! - `transport`: every call to Redis: the shared connection and scripts, the deadline of each
//!   call, the circuit breaker of each node (and of its replicas, for calls that wait for
//!   them), the batch lanes of decisions, and publishing on the reset channel.
//! - The features, each on the transport alone, none knowing the store:
//!   - `lease`: hot-key leases: the local lease table and the lease path of a decision;
//!   - `overrides`: runtime overrides, and this instance's copy of the prefix overrides;
//!   - `concurrency`: the core's `ConcurrencyStore`: concurrency leases in a sorted set per
//!     key, one script call per acquire and per release (`lua/concurrency.lua`);
//!   - `access`: allow and deny list entries shared by the fleet (`lua/access.lua`);
//!   - `reset_channel`: the listener that makes resets reach every instance's deny cache and
//!     leases (it publishes nothing: the transport does).
//! - The parts below them:
//!   - `batch`: the queues that gather the decisions waiting for one node (or cluster slot)
//!     into one call of the batch script, and that call's layout;
//!   - `breaker`: the circuit breakers, one per node, and one per node's replicas;
//!   - `connection`: [`Target`], the shared multiplexed connection, and at-most-once script
//!     calls, alone or followed by `WAIT`;
//!   - `sentinel`: [`SentinelTarget`], and the connection to whichever master the sentinels
//!     name, followed to its new address after a failover;
//!   - `scripts` and `lua/`: the decision script (every algorithm, one driver; its charge mode
//!     is `Store::charge`, each algorithm's `charge`, a port of `tollgate::algorithm::charge`,
//!     one call per slot), the refund script, the lease script, the attempts counter and reset;
//!   - `deny_cache`: the local deny cache;
//!   - `keys`: key names in both hash tag layouts, escaping, and cluster slots;
//!   - `error`: [`ConnectError`] and the classes of Redis failures, from error kinds and codes.
//!
//! Imports point one way, down this list, and never back: `store` imports the features and
//! `transport`; the features import `transport` and the parts (`reset_channel` also `lease`,
//! for its lease table); `transport` imports `batch`, `breaker`, `connection`, `scripts`,
//! `keys` and `error`; `batch` imports `connection`, `scripts` and `error`; `connection` imports
//! only `scripts`, `keys`, `sentinel` and `error`; `sentinel` imports only `error`; the rest
//! import no module of this crate. No module imports `store`, and no module imports the
//! crate root's re-exports.
//!
//! # When Redis fails
//!
//! The store does not decide by itself: it returns a typed store error (class timeout,
//! connection, out of memory, auth, cluster, script or corrupt) whose `source()` is the
//! `redis::RedisError`, and the core's [`Engine`](tollgate::Engine) answers it with each policy's
//! failure mode, as it does for every store. A circuit breaker per Redis node (one for standalone
//! Redis, one per cluster master) refuses calls at once while its node is failing, probes it
//! [soon after](RedisStoreBuilder::first_probe_after) the failure and then less and less often,
//! and closes on the first success; a refusal is a `connection` error naming the failure behind
//! it. [`RedisStore::health`] tells whether the store can decide now and, if not, the class of
//! what is wrong (for readiness probes and start-up reports).
//!
//! # At most once
//!
//! A decision script (alone or in a batch) that may have reached Redis is never sent again: not
//! after the store's deadline, not after a dropped connection, not by the cluster client (built
//! without retries of its own). Only answers that prove the call did not run are followed by another attempt:
//! "Function not found" and `NOSCRIPT` (the library or the script is loaded, then called again),
//! an unknown `FCALL` (the script is called instead), `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
//! `MASTERDOWN`. So, for every key:
//!
//! > admitted ≤ what Redis counts ≤ admitted + calls that failed with a timeout or connection
//! > error
//!
//! where *admitted* are the calls whose callers were told "allowed" by Redis. A call that timed
//! out may still run once Redis reads it (a stalled Redis runs what it buffered), so under
//! `fail_closed` a refused caller may have spent, and under `fail_open` a degraded admission may
//! be counted once more; never twice. `tests/at_most_once.rs` checks this bound under concurrent
//! load while Redis pauses for less and more than the deadline and while it drops the store's
//! connections mid-call, on standalone Redis and a cluster, and while standalone Redis is killed
//! and restarted (from its append-only file); and it drops a connection right after Redis ran a
//! check and before the answer left, where any retry would count the check twice.
//!
//! # Replicas and failovers
//!
//! Redis replicates asynchronously: a master that dies takes with it the writes its replicas
//! had not received, and the promoted replica hands those keys back what they spent since, up
//! to one extra window's worth per key (`tests/failover.rs` measures it). A policy built with
//! [`Policy::with_replicas`](tollgate::Policy::with_replicas) makes each decision that admits
//! wait for that many replicas: the decision script is followed by `WAIT n ms` in one pipeline
//! on the same connection (on a cluster it goes to the master of the call's slot), with the
//! policy's [`replica_wait`](tollgate::Policy::with_replica_wait) as its timeout, on top of the
//! store's deadline: under load the calls that wait on one master queue behind each other's
//! `WAIT`, so a healthy replica can acknowledge later than a call's deadline, and the wait is
//! what bounds the replica. An admission fewer replicas acknowledged is a store error of class
//! `unreplicated` (counted in [`StoreStats::unreplicated`]), which the policy's failure mode
//! answers. Denials, peeks
//! and charges never wait. Calls that wait travel on a connection of their own (Redis holds a
//! connection's later commands while its `WAIT` waits), and a breaker per node and number of
//! replicas stops waiting for replicas that fell short until a probe is acknowledged again, so a
//! missing replica costs the calls behind it nothing: they go without waiting, their denials
//! stand and their admissions count as not acknowledged.
//!
//! # Redis Sentinel
//!
//! `redis+sentinel://host:port,host:port/<master-name>` (see [`Target::parse`]) finds the master
//! through the sentinels and decides there exactly as on standalone Redis. After a call fails
//! as calls to a dead master fail, or is answered `READONLY`, the store asks the sentinels again
//! (every 100 ms until they name a master that answers, and every 5 s in any case), and the
//! calls after the answer go to the master they name: a failover, logged at `warn` and counted
//! in [`StoreStats::failovers`]. The failed call is never sent again, to either master: decisions
//! stay at most once. What the promoted replica had not received is lost, as after a cluster
//! failover, with the same bound (one extra window's worth per key) and the same notice
//! ([`StoreStats::state_lost`]); `tests/sentinel.rs` kills the master under load and measures it.
//!
//! # Resets and the deny cache
//!
//! A reset publishes the key on a pub/sub channel (`<prefix>resets`) that every store with a deny
//! cache listens on, so a cached denial disappears on every instance of the fleet, not only the
//! one that reset it (one pub/sub hop later). A store that lost its subscription empties its
//! whole deny cache when it subscribes again.
//!
//! # TLS and passwords
//!
//! `rediss://` and `rediss+cluster://` connect with TLS (rustls, with the system's certificate
//! authorities or [`RedisStoreBuilder::tls_ca_pem`], checked by [`check_ca_pem`] before any
//! connection); `redis://user:password@host:port` (or
//! `redis://:password@host:port`) authenticates, on every cluster node too.

mod access;
mod batch;
mod breaker;
mod ca;
mod concurrency;
mod connection;
mod deny_cache;
mod error;
mod keys;
mod lease;
mod overrides;
mod reset_channel;
mod scripts;
mod sentinel;
mod state_loss;
mod store;
mod transport;

pub use access::{MAX_ACCESS_BYTES, MAX_ACCESS_ENTRIES};
pub use ca::check_ca_pem;
pub use connection::Target;
pub use error::ConnectError;
pub use lease::LeaseStats;
pub use sentinel::SentinelTarget;
pub use store::{RedisStore, RedisStoreBuilder, StoreStats};

/// The examples of `docs/leases.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/leases.md")]
struct LeasesDoc;
