//! The `Store` seam: the operations every backend (memory, Redis) offers, with the same meaning.
//!
//! Each operation is one atomic step in the backend. Methods are `async` so a networked store can
//! implement them; the memory store's futures are ready at once, and it also offers the same
//! methods synchronously. Input is validated by the shared functions here before any backend
//! work, so every store rejects the same input with the same error.

use std::future::Future;
use std::time::Duration;

use crate::{AttemptsStatus, Decision, Error, Policy, bounds};

/// A place where rate limit state lives.
///
/// Being rate limited is `Ok(Decision { allowed: false, .. })`; `Err` means the input was unusable
/// or the store failed, and a caller applies its failure policy.
///
/// ```
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
/// use std::time::Duration;
/// use tollgate::{Algorithm, MemoryStore, Policy, Store};
///
/// async fn allow_login_attempt<S: Store>(store: &S, user: &str) -> Result<bool, tollgate::Error> {
///     Ok(store.check_limit(user.as_bytes(), 5).await?.allowed)
/// }
///
/// let store = MemoryStore::new();
/// // MemoryStore's futures are ready at once, so one poll is enough here.
/// let mut cx = Context::from_waker(Waker::noop());
/// let Poll::Ready(allowed) = pin!(allow_login_attempt(&store, "alice")).poll(&mut cx) else {
///     unreachable!()
/// };
/// assert!(allowed?);
/// # use std::future::Future;
/// # Ok::<(), tollgate::Error>(())
/// ```
pub trait Store: Send + Sync {
    /// Decides a request of `cost` for `key` under `policy`, and records it if admitted.
    fn check(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// The answer `check` would give now, changing nothing.
    fn peek(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Forgets `key`'s state under `policy`, penalty included.
    fn reset(&self, policy: &Policy, key: &[u8]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Counts a failed attempt and returns the new count. A new counter lives for `ttl`; later
    /// increments do not extend it.
    fn increment_attempts(
        &self,
        key: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    /// The current count, 0 when there is no counter.
    fn get_attempts(&self, key: &[u8]) -> impl Future<Output = Result<u64, Error>> + Send;

    /// Time until the counter expires, `None` when there is no counter.
    fn get_ttl(&self, key: &[u8]) -> impl Future<Output = Result<Option<Duration>, Error>> + Send;

    /// Removes the counter (after a successful login, say).
    fn reset_attempts(&self, key: &[u8]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Whether another attempt is allowed: true while the count is below `max_attempts`.
    fn check_limit(
        &self,
        key: &[u8],
        max_attempts: u64,
    ) -> impl Future<Output = Result<AttemptsStatus, Error>> + Send;
}

/// Rejects an empty key or one longer than [`MAX_KEY_LEN`](bounds::MAX_KEY_LEN). Any bytes are
/// accepted otherwise.
///
/// ```
/// use tollgate::store::validate_key;
///
/// assert!(validate_key(b"user:{42} \n\xff").is_ok());
/// assert!(validate_key(b"").is_err());
/// ```
#[inline]
pub fn validate_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if key.len() > bounds::MAX_KEY_LEN {
        return Err(Error::KeyTooLong {
            len: key.len(),
            max: bounds::MAX_KEY_LEN,
        });
    }
    Ok(())
}

/// Rejects a bad key, a zero cost, or a cost above what `policy` can ever admit at once.
///
/// ```
/// use tollgate::store::validate_check;
/// use tollgate::{Algorithm, Error, Policy, Rate};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// assert!(validate_check(&policy, b"k", 5).is_ok());
/// assert!(matches!(validate_check(&policy, b"k", 6), Err(Error::CostTooLarge { max: 5, .. })));
/// assert!(matches!(validate_check(&policy, b"k", 0), Err(Error::ZeroCost)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn validate_check(policy: &Policy, key: &[u8], cost: u64) -> Result<(), Error> {
    validate_key(key)?;
    if cost == 0 {
        return Err(Error::ZeroCost);
    }
    if cost > policy.max_cost() {
        return Err(Error::CostTooLarge {
            cost,
            max: policy.max_cost(),
            policy: policy.name().to_owned(),
        });
    }
    Ok(())
}

/// Rejects `max_attempts == 0`.
///
/// ```
/// assert!(tollgate::store::validate_max_attempts(0).is_err());
/// ```
pub fn validate_max_attempts(max_attempts: u64) -> Result<(), Error> {
    if max_attempts == 0 {
        return Err(Error::ZeroMaxAttempts);
    }
    Ok(())
}
