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

use crate::{AttemptTry, AttemptsStatus, Charged, Decision, Decisions, Error, PerRule, Policy, Rule, bounds};

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
    /// Whether every future this store returns is ready at its first poll: it never waits (the
    /// memory store). A caller may then poll once in place instead of boxing or awaiting (the
    /// tower layer does). False unless a store says otherwise.
    const ANSWERS_AT_ONCE: bool = false;

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

    /// [`decide`](Self::decide) for rules the [`Engine`](crate::Engine) has already validated,
    /// so that each request's rules are validated once: a store whose `decide` validates its
    /// input may skip that here. Only the engine can make [`ValidRules`]. The default calls
    /// `decide`.
    fn decide_valid(
        &self,
        rules: ValidRules<'_, '_>,
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send {
        self.decide(rules.rules(), commit)
    }

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

    /// Records every rule's cost whatever is left of its budget, in one atomic step: a
    /// *charge*, for a cost known only after the request (tokens of a model's answer, bytes
    /// sent). A charge is never refused for budget: a key without enough left goes into debt,
    /// which its algorithm pays back the way it forgets spending (see
    /// [`algorithm::charge`](crate::algorithm::charge) and each algorithm's *Debt*), and until
    /// then a check of it is refused with the exact `retry_after`. A charge starts no
    /// `block_for` penalty (the next refused check does) and lifts none.
    ///
    /// - Rules naming the same (policy, key) add up. A rule's `shadow`, `question` and `apart`
    ///   flags are ignored: a charge always records.
    /// - Costs are 1 to [`MAX_LIMIT`](bounds::MAX_LIMIT), above the policy's own limit if need
    ///   be; keys are validated as for checks ([`validate_charge`]).
    /// - The answers come back in the rules' order: for each, what a check of cost 1 would get
    ///   right after the charge, and the debt ([`Charged`]).
    ///
    /// A networked store that splits the rules over several calls (one per cluster slot) needs
    /// no refunds: a charge is never refused, so each call records its own.
    ///
    /// The default refuses with [`Error::ChargeUnsupported`], for stores that cannot charge.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy, Rule, Store};
    ///
    /// # futures_lite_block_on(async {
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let tokens = Policy::new("llm-tokens", Algorithm::fixed_window(1_000, Duration::from_secs(60), tollgate::Anchor::Epoch)?)?;
    /// // Reserve an estimate, then settle at the actual cost once the answer is known.
    /// assert!(Store::check(&store, &tokens, b"tenant-a", 500).await?.allowed);
    /// let charged = Store::charge(&store, &[Rule::new(&tokens, "tenant-a", 700)]).await?;
    /// assert_eq!(charged[0].debt, 200);
    /// assert!(!Store::check(&store, &tokens, b"tenant-a", 1).await?.allowed);
    /// clock.advance(Duration::from_secs(60)); // the window's end clears the debt
    /// assert!(Store::check(&store, &tokens, b"tenant-a", 1).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     match std::pin::pin!(f).poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn charge(&self, rules: &[Rule<'_>]) -> impl Future<Output = Result<PerRule<Charged>, Error>> + Send {
        let policy = rules
            .first()
            .map(|r| r.policy.name().to_owned())
            .unwrap_or_default();
        async move { Err(Error::ChargeUnsupported { policy }) }
    }
}

// A store shared with the rest of an application (say, to reset a key after a login) is a
/// store too, so an [`Engine`](crate::Engine) can own an `Arc` of it.
impl<S: Store + ?Sized> Store for std::sync::Arc<S> {
    const ANSWERS_AT_ONCE: bool = S::ANSWERS_AT_ONCE;

    fn decide(
        &self,
        rules: &[Rule<'_>],
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send {
        (**self).decide(rules, commit)
    }

    fn decide_valid(
        &self,
        rules: ValidRules<'_, '_>,
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send {
        (**self).decide_valid(rules, commit)
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

    fn charge(&self, rules: &[Rule<'_>]) -> impl Future<Output = Result<PerRule<Charged>, Error>> + Send {
        (**self).charge(rules)
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

    /// Counts a try only if fewer than `max_attempts` are counted, in one atomic step: of any
    /// number of parallel tries, exactly as many as were left are allowed. A new counter lives
    /// for `ttl`; later tries do not extend it. Call it before verifying a password and
    /// [`reset_attempts`](AttemptsStore::reset_attempts) on success; a refused try changes
    /// nothing.
    fn try_attempt(
        &self,
        key: &[u8],
        max_attempts: u64,
        ttl: Duration,
    ) -> impl Future<Output = Result<AttemptTry, Error>> + Send;

    /// Whether another attempt is allowed: true while the count is below `max_attempts`. Only a
    /// reading: parallel callers all see the same answer before any of them counts, so use
    /// [`try_attempt`](AttemptsStore::try_attempt) to admit a login.
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
    // A question of cost 0 asks whether the key is past its limit (in debt): a budget exactly
    // spent is not. Anything that spends costs at least 1.
    if rule.cost == 0 && !rule.question {
        return Err(Error::ZeroCost);
    }
    Ok(())
}

/// Rules that passed the checks of [`Store::decide`] (keys by [`validate_key`], costs of at
/// least 1 unless a question), for [`Store::decide_valid`]. Made only by the
/// [`Engine`](crate::Engine), after it validated them; anyone can read them.
#[derive(Debug, Clone, Copy)]
pub struct ValidRules<'r, 'a> {
    rules: &'r [Rule<'a>],
}

impl<'r, 'a> ValidRules<'r, 'a> {
    /// `rules`, which the caller has validated (with [`validate_rule`] or stricter).
    #[inline]
    pub(crate) fn validated(rules: &'r [Rule<'a>]) -> Self {
        debug_assert!(rules.iter().all(|rule| validate_rule(rule).is_ok()));
        ValidRules { rules }
    }

    /// The rules.
    #[inline]
    pub fn rules(&self) -> &'r [Rule<'a>] {
        self.rules
    }
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

/// Rejects a bad key, a zero cost, or a cost above [`MAX_LIMIT`](bounds::MAX_LIMIT) in a rule
/// handed to [`Store::charge`]. Unlike a check's, a charge's cost may exceed the policy's limit.
///
/// ```
/// use tollgate::store::validate_charge;
/// use tollgate::{Algorithm, Error, Policy, Rate, Rule};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// assert!(validate_charge(&Rule::new(&policy, "k", 50)).is_ok());
/// assert!(matches!(validate_charge(&Rule::new(&policy, "k", 2_000_000_000)), Err(Error::CostTooLarge { .. })));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[inline]
pub fn validate_charge(rule: &Rule<'_>) -> Result<(), Error> {
    validate_rule(rule)?;
    if rule.cost > bounds::MAX_LIMIT {
        return Err(Error::CostTooLarge {
            cost: rule.cost,
            max: bounds::MAX_LIMIT,
            policy: rule.policy.name().to_owned(),
        });
    }
    Ok(())
}

/// The rules of a charge with those naming the same (policy name, key) added up: one rule per
/// budget, and for each of the caller's rules the index of its budget's.
///
/// ```
/// use tollgate::store::merge_charges;
/// use tollgate::{Algorithm, Policy, Rate, Rule};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// let rules = [Rule::new(&policy, "a", 2), Rule::new(&policy, "b", 1), Rule::new(&policy, "a", 3)];
/// let (unique, index) = merge_charges(&rules);
/// assert_eq!(unique.iter().map(|r| r.cost).collect::<Vec<_>>(), [5, 1]);
/// assert_eq!(index, [0, 1, 0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn merge_charges<'a>(rules: &[Rule<'a>]) -> (Vec<Rule<'a>>, Vec<usize>) {
    let mut unique: Vec<Rule<'a>> = Vec::with_capacity(rules.len());
    let mut index = Vec::with_capacity(rules.len());
    for rule in rules {
        match unique
            .iter()
            .position(|u| u.key == rule.key && u.policy.name() == rule.policy.name())
        {
            Some(u) => {
                unique[u].cost = unique[u].cost.saturating_add(rule.cost);
                index.push(u);
            }
            None => {
                index.push(unique.len());
                unique.push(Rule::new(rule.policy, rule.key, rule.cost));
            }
        }
    }
    (unique, index)
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
