//! The store seams: [`Store`] decides the rules of a request in one atomic step, and
//! [`AttemptsStore`] keeps the attempts counters of brute-force protection.
//!
//! Each operation is one atomic step in the backend. Methods are `async` so a networked store can
//! implement them; the memory store's futures are ready at once, and it also offers the same
//! methods synchronously. Input is validated by the shared functions here before any backend
//! work, so every store rejects the same input with the same error.
//!
//! A store decides; it does not apply failure modes or shadow labels to its own errors. That is
//! the [`Engine`](crate::Engine)'s job, done once for every store.

use std::future::Future;
use std::time::Duration;

use crate::{AttemptsStatus, Decision, Decisions, Error, Policy, Rule, bounds};

/// A place where rate limit state lives.
///
/// Being rate limited is `Ok(Decision { allowed: false, .. })`; `Err` means the input was unusable
/// or the store failed.
///
/// ```
/// use std::pin::pin;
/// use std::task::{Context, Poll, Waker};
/// use tollgate::{Algorithm, MemoryStore, Policy, Rate, Rule, Store};
///
/// async fn both<S: Store>(store: &S, api: &Policy, login: &Policy) -> Result<bool, tollgate::Error> {
///     let rules = [Rule::new(api, "198.51.100.4", 1), Rule::new(login, "alice", 1)];
///     let decisions = store.decide(&rules, true).await?;
///     Ok(decisions.as_slice().iter().all(|d| d.allowed))
/// }
///
/// let store = MemoryStore::new();
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// let login = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?;
/// // MemoryStore's futures are ready at once, so one poll is enough here.
/// let mut cx = Context::from_waker(Waker::noop());
/// let Poll::Ready(allowed) = pin!(both(&store, &api, &login)).poll(&mut cx) else {
///     unreachable!()
/// };
/// assert!(allowed?);
/// # use std::future::Future;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Store: Send + Sync {
    /// Decides every rule of one request at once, atomically: no other request sees the rules
    /// half-applied.
    ///
    /// - With `commit`, when no enforced rule denies, every rule is recorded (each spends its
    ///   cost); when one does, nothing is spent on any rule, and only the `block_for` penalties
    ///   of the rules that denied start. Without `commit` (a peek) nothing changes.
    /// - A question ([`Rule::question`]) is decided like the others, on the state before the
    ///   request, and takes part in the all-or-nothing, but is never recorded.
    /// - Rules that spend name distinct (policy, key) pairs; the [`Engine`](crate::Engine) merges
    ///   duplicates before calling (a question may share its pair with a rule that spends). A cost above the policy's limit is decided (it is denied),
    ///   not refused: a merged cost can exceed it.
    /// - Keys are validated with [`validate_key`] and costs must be at least 1.
    ///
    /// The decisions come back in the rules' order.
    fn decide(
        &self,
        rules: &[Rule<'_>],
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send;

    /// Forgets `key`'s state under `policy`, penalty included.
    fn reset(&self, policy: &Policy, key: &[u8]) -> impl Future<Output = Result<(), Error>> + Send;

    /// Decides a request of `cost` for `key` under `policy`, and records it if admitted: the
    /// one-rule case of [`decide`](Self::decide), with the cost checked against the policy.
    fn check(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        async move {
            validate_check(policy, key, cost)?;
            let decisions = self.decide(&[Rule::new(policy, key, cost)], true).await?;
            Ok(only(decisions))
        }
    }

    /// How long `key` stays blocked by its policy's `block_for` penalty, `None` when it is not
    /// blocked (or the store cannot tell: the default). Reads only; for explaining a denial.
    fn penalty_left(
        &self,
        policy: &Policy,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Duration>, Error>> + Send {
        let _ = (policy, key);
        async { Ok(None) }
    }

    /// The answer `check` would give now, changing nothing.
    fn peek(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        async move {
            validate_check(policy, key, cost)?;
            let decisions = self.decide(&[Rule::new(policy, key, cost)], false).await?;
            Ok(only(decisions))
        }
    }
    /// Gives back up to `cost` of what `key` spent under `policy` (a request that was admitted
    /// and then failed on the caller's side, say), within the algorithm's meaning (see
    /// [`algorithm::refund`](crate::algorithm::refund)), and answers what a check of cost 1
    /// would get now. A penalty already started stays. `cost` is 1 to the policy's limit.
    ///
    /// The default refuses with [`Error::RefundUnsupported`], for stores that cannot give back.
    fn refund(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        let _ = (key, cost);
        let policy = policy.name().to_owned();
        async move { Err(Error::RefundUnsupported { policy }) }
    }
}

// A store shared with the rest of an application (say, to reset a key after a login) is a
/// store too, so an [`Engine`](crate::Engine) can own an `Arc` of it.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    fn decide(
        &self,
        rules: &[Rule<'_>],
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send {
        (**self).decide(rules, commit)
    }

    fn reset(&self, policy: &Policy, key: &[u8]) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).reset(policy, key)
    }

    fn check(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).check(policy, key, cost)
    }

    fn peek(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).peek(policy, key, cost)
    }

    fn refund(
        &self,
        policy: &Policy,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).refund(policy, key, cost)
    }

    fn penalty_left(
        &self,
        policy: &Policy,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Duration>, Error>> + Send {
        (**self).penalty_left(policy, key)
    }
}

/// The decision of a one-rule call.
fn only(decisions: Decisions) -> Decision {
    decisions.as_slice().first().copied().unwrap_or_default()
}

/// Where attempts counters live: failed logins per account, say. Kept apart from [`Store`]
/// because a counter is not a rate limit: it only counts, and the caller decides what a count
/// means.
pub trait AttemptsStore: Send + Sync {
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

/// Rejects a bad key or a zero cost in a rule handed to [`Store::decide`].
///
/// ```
/// use tollgate::store::validate_rule;
/// use tollgate::{Algorithm, Policy, Rate, Rule};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// assert!(validate_rule(&Rule::new(&policy, "k", 6)).is_ok());
/// assert!(validate_rule(&Rule::new(&policy, "", 1)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn validate_rule(rule: &Rule<'_>) -> Result<(), Error> {
    validate_key(rule.key)?;
    if rule.cost == 0 {
        return Err(Error::ZeroCost);
    }
    Ok(())
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
