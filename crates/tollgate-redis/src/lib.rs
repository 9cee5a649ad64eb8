//! Redis and Redis Cluster store for tollgate: the core's [`Store`](tollgate::Store), shared by
//! every instance of a fleet.
//!
//! Each decision is one atomic Lua script, a line-for-line port of the core's step functions, on
//! Redis's own clock (`TIME`) so app servers with skewed clocks agree. Keys share one hash tag per
//! (policy, key), so a cluster never answers CROSSSLOT; NOSCRIPT is reloaded and retried; a
//! deadline, a circuit breaker and a per-policy [`FailureMode`](tollgate::FailureMode) bound what
//! a slow or dead Redis costs; and a local deny cache answers keys already denied without a round
//! trip.
//!
//! # Layout
//!
//! - `store`: [`RedisStore`] and its builder: the layers around each call.
//! - `scripts` and `lua/`: the scripts, one per algorithm, plus the attempts counter and reset.
//! - `keys`: key names, hash tags and escaping.
//! - `connection`: [`Target`] and the shared multiplexed connection.
//! - `breaker`: the circuit breaker.
//! - `deny_cache`: the local deny cache.
//! - `error`: [`ConnectError`] and the classes of Redis failures, from error kinds and codes.
//!
//! # When Redis fails
//!
//! The store does not decide by itself: it returns a typed store error (class timeout,
//! connection, out of memory, auth, cluster, script or corrupt) whose `source()` is the
//! `redis::RedisError`, and the core's [`Engine`](tollgate::Engine) answers it with each policy's
//! failure mode, as it does for every store. A call that missed its deadline is never sent
//! again: it may have run.

mod breaker;
mod connection;
mod deny_cache;
mod error;
mod keys;
mod scripts;
mod store;

pub use connection::Target;
pub use error::ConnectError;
pub use store::{RedisStore, RedisStoreBuilder, StoreStats};
