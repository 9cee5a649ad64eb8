//! Concurrency leases through the engine: [`Engine::acquire`], [`Engine::release`] and
//! [`Engine::clear_leases`], with the failure modes applied when the store fails.

use super::{Engine, failure};
use crate::Error;
use crate::concurrency::{Acquisition, ConcurrencyPolicy, ConcurrencyStore, LeaseId, Release};
use crate::store;

impl<S: ConcurrencyStore> Engine<S> {
    /// Takes a slot of `key` under a concurrency `policy`, applying the policy's failure mode
    /// when the store fails: `FailOpen` grants a lease held nowhere, `FailClosed` denies, and
    /// `Local` acquires from the engine's own in-memory limiter with the policy's
    /// [`local_share`](ConcurrencyPolicy::local_share) (a full limiter grants). Answers decided
    /// this way are `degraded` and carry the store's error. `Err` only for a bad key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::ConcurrencyPolicy;
    /// use tollgate::{Engine, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let exports = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30))?;
    /// let first = engine.acquire(&exports, b"alice").await?;
    /// assert!(first.acquire.is_granted() && first.store_error.is_none());
    /// assert!(!engine.acquire(&exports, b"alice").await?.acquire.is_granted());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<Acquisition, Error> {
        store::validate_key(key)?;
        match self.store.acquire(policy, key).await {
            Ok(acquire) => Ok(Acquisition {
                acquire,
                store_error: None,
            }),
            Err(err) if err.is_bad_input() => Err(err),
            Err(err) => Ok(Acquisition {
                acquire: failure::acquire(&self.fallback, policy, key),
                store_error: Some(err),
            }),
        }
    }

    /// Frees the slot of `lease`: in the engine's `Local` limiter if it was granted there while
    /// the store was away, else in the store. A store error is returned as it is: the caller
    /// logs it, and the lease ends by itself after the policy's `lease_timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::{Acquire, ConcurrencyPolicy, Release};
    /// use tollgate::{Engine, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let exports = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30))?;
    /// let Acquire::Granted(lease) = engine.acquire(&exports, b"alice").await?.acquire else { unreachable!() };
    /// assert_eq!(engine.release(&exports, b"alice", lease.id).await?, Release::Released { in_flight: 0 });
    /// assert_eq!(engine.release(&exports, b"alice", lease.id).await?, Release::NotHeld);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> Result<Release, Error> {
        store::validate_key(key)?;
        if let Some(released) = failure::release(&self.fallback, policy, key, lease) {
            return Ok(released);
        }
        self.store.release(policy, key, lease).await
    }

    /// Frees every slot of `key` at once, in the store and in the engine's `Local` limiter; see
    /// [`ConcurrencyStore::clear_leases`]. Answers the store's count of live leases dropped; a
    /// store error is returned as it is (the leases still end at their timeout).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::ConcurrencyPolicy;
    /// use tollgate::{Engine, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let exports = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(3600))?;
    /// engine.acquire(&exports, b"alice").await?;
    /// assert!(!engine.acquire(&exports, b"alice").await?.acquire.is_granted());
    /// assert_eq!(engine.clear_leases(&exports, b"alice").await?, 1);
    /// assert!(engine.acquire(&exports, b"alice").await?.acquire.is_granted());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn clear_leases(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<u64, Error> {
        store::validate_key(key)?;
        if let crate::FailureMode::Local { instances } = policy.failure_mode() {
            let _ = self.fallback.clear_leases(&policy.local_share(instances), key);
        }
        self.store.clear_leases(policy, key).await
    }
}
