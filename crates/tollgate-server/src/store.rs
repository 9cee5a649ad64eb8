//! The store the server decides with: the embedded memory store or Redis, behind one type.
//!
//! The server picks one at start-up (`--store` or the config), so a runtime choice is needed; an
//! enum keeps every call a direct, inlinable match instead of a boxed future.

use std::sync::Arc;
use std::time::Duration;

use tollgate::{AttemptsStatus, AttemptsStore, Decision, Decisions, Error, MemoryStore, Policy, Rule, Store};
use tollgate_redis::{RedisStore, Target};

/// Where decisions are made.
#[derive(Clone)]
pub enum AnyStore {
    /// In this process (the default).
    Memory(Arc<MemoryStore>),
    /// In Redis or Redis Cluster, shared by every server of a fleet.
    Redis(RedisStore),
}

impl AnyStore {
    /// The embedded store with default bounds.
    ///
    /// ```
    /// let store = tollgate_server::store::AnyStore::memory();
    /// assert_eq!(store.kind(), "memory");
    /// ```
    pub fn memory() -> Self {
        AnyStore::Memory(Arc::new(MemoryStore::new()))
    }

    /// A Redis store for `url` (`redis://host:port` or `redis+cluster://host:port,...`). It
    /// connects lazily: the server starts while Redis is away and follows each policy's failure
    /// mode until Redis answers.
    pub async fn redis(url: &str) -> Result<Self, tollgate_redis::ConnectError> {
        let store = RedisStore::builder(Target::parse(url)?).connect_lazy().await?;
        Ok(AnyStore::Redis(store))
    }

    /// `memory` or `redis`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// Whether the store can decide now (for `/readyz`): always for memory, a PING for Redis.
    pub async fn ready(&self) -> bool {
        match self {
            AnyStore::Memory(_) => true,
            AnyStore::Redis(store) => store.ping().await.is_ok(),
        }
    }
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

impl Store for AnyStore {
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        dispatch!(Store, self, decide(rules, commit))
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        dispatch!(Store, self, reset(policy, key))
    }

    async fn check(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        dispatch!(Store, self, check(policy, key, cost))
    }

    async fn peek(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        dispatch!(Store, self, peek(policy, key, cost))
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

    async fn check_limit(&self, key: &[u8], max_attempts: u64) -> Result<AttemptsStatus, Error> {
        dispatch!(AttemptsStore, self, check_limit(key, max_attempts))
    }
}
