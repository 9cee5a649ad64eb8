//! The decision engine: one call decides every rule of a request, the same way for every store
//! and every door (HTTP, gRPC, the tower layer, the proxy).
//!
//! [`Engine::check_all`] takes the request's rules and:
//!
//! 1. validates each rule (a bad key or cost is the caller's error, never a store failure);
//! 2. merges rules that spend from the same budget (same policy name and key): they count as one
//!    rule with the sum of their costs, enforced if any of them is;
//! 3. asks the store to decide the merged rules in one atomic step ([`Store::decide`]): all or
//!    nothing, penalties started on every rule that denied;
//! 4. if the store failed, whatever the class of failure (timeout, connection, out of memory,
//!    auth, script, a full memory store), applies each rule's [`FailureMode`](crate::FailureMode) here, once;
//! 5. labels every rule and the request with an [`Outcome`].
//!
//! # Failure modes
//!
//! When the store fails, every rule is decided by its policy's failure mode, and the results
//! are combined as usual (one enforced denial denies the request):
//!
//! - `FailOpen`: allowed, `degraded`;
//! - `FailClosed`: the request fails with [`Outcome::Error`] (a door answers 503 or
//!   `UNAVAILABLE`); a shadow rule is never closed, it is treated as `FailOpen`;
//! - `Local`: the rules are decided together by the engine's own in-memory limiter on each
//!   policy's [`local_share`](Policy::local_share). If that limiter is full too, the rule is
//!   let through.
//!
//! When a rule fails closed, nothing is recorded in the local limiter either.

mod failure;
mod verdict;

pub(crate) use self::failure::FAIL_CLOSED_RETRY;

use std::sync::Arc;

use self::verdict::Rules;
pub use self::verdict::{Outcome, RuleVerdict, Verdict};
use crate::concurrency::{self, Acquisition, ConcurrencyPolicy, ConcurrencyStore, LeaseId, Release};
use crate::memory::DEFAULT_MAX_KEYS;
use crate::store::{self, Store};
use crate::{Clock, Decision, Decisions, Error, FailureMode, MemoryStore, Policy, Rule, SystemClock};

/// Decides requests against a store, with failure modes and outcome labels.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Engine, MemoryStore, Outcome, Policy, Rule};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let login = Policy::new("login", Algorithm::sliding_log(1, Duration::from_secs(60))?)?
///     .with_block_for(Duration::from_secs(300))?;
/// assert_eq!(engine.check(&login, b"alice", 1).await?.outcome(), Outcome::Allowed);
/// let denied = engine.check(&login, b"alice", 1).await?;
/// assert_eq!(denied.outcome(), Outcome::Denied);
/// assert_eq!(denied.retry_after(), Some(Duration::from_secs(300)));
/// # Ok(())
/// # }
/// ```
pub struct Engine<S> {
    store: S,
    fallback: MemoryStore<Arc<dyn Clock>>,
}

/// Configures an [`Engine`].
///
/// ```
/// use tollgate::{Engine, ManualClock, MemoryStore};
///
/// let engine = Engine::builder(MemoryStore::new())
///     .fallback_max_keys(10_000)
///     .clock(ManualClock::new(0))
///     .build();
/// assert_eq!(engine.fallback_max_keys(), 10_000);
/// ```
pub struct EngineBuilder<S> {
    store: S,
    fallback_max_keys: usize,
    clock: Arc<dyn Clock>,
}

impl<S> EngineBuilder<S> {
    /// Key bound of the in-memory limiter the `Local` failure mode decides with (default: the
    /// memory store's default). Its memory is only used while the store is failing.
    pub fn fallback_max_keys(mut self, max_keys: usize) -> Self {
        self.fallback_max_keys = max_keys;
        self
    }

    /// The clock of that limiter (default: the system clock), a manual one in tests.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the engine.
    pub fn build(self) -> Engine<S> {
        Engine {
            store: self.store,
            fallback: MemoryStore::builder()
                .max_keys(self.fallback_max_keys)
                .clock(self.clock)
                .build(),
        }
    }
}

impl<S> Engine<S> {
    /// An engine over `store` with the defaults.
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// Starts configuring an engine over `store`.
    pub fn builder(store: S) -> EngineBuilder<S> {
        EngineBuilder {
            store,
            fallback_max_keys: DEFAULT_MAX_KEYS,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// The store decisions are made in.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The key bound of the `Local` failure mode's limiter.
    pub fn fallback_max_keys(&self) -> usize {
        self.fallback.max_keys()
    }
}

impl<S: Store> Engine<S> {
    /// Decides every rule of one request and records it if allowed; see the
    /// [module docs](self). `Err` only for bad input (an empty or oversized key, a zero cost, a
    /// cost above a policy's limit); a failing store is answered by the failure modes.
    pub async fn check_all(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        self.run(rules, true).await
    }

    /// The verdict [`check_all`](Self::check_all) would give now, recording nothing.
    pub async fn peek_all(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        self.run(rules, false).await
    }

    /// Decides one enforced rule: `check_all` with one rule.
    pub async fn check(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Verdict, Error> {
        self.run(&[Rule::new(policy, key, cost)], true).await
    }

    /// Forgets `key`'s state under `policy`, in the store and in the `Local` limiter.
    pub async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        let _ = self.fallback.reset(policy, key);
        self.store.reset(policy, key).await
    }

    async fn run(&self, rules: &[Rule<'_>], commit: bool) -> Result<Verdict, Error> {
        for rule in rules {
            store::validate_check(rule.policy, rule.key, rule.cost)?;
        }
        match Merged::new(rules) {
            None => {
                let decided = self.store.decide(rules, commit).await;
                let verdicts = self.settle(rules, decided, commit)?;
                Ok(verdict(rules, verdicts, None))
            }
            Some(merged) => {
                let decided = self.store.decide(&merged.unique, commit).await;
                let verdicts = self.settle(&merged.unique, decided, commit)?;
                Ok(verdict(&merged.unique, verdicts, Some(&merged.index)))
            }
        }
    }

    /// Labels the store's answer, or applies the failure modes to its error.
    fn settle(
        &self,
        rules: &[Rule<'_>],
        decided: Result<Decisions, Error>,
        commit: bool,
    ) -> Result<(Rules, Option<Error>), Error> {
        match decided {
            Ok(Decisions::One(decision)) if rules.len() == 1 => {
                Ok((Rules::One(labelled(&rules[0], decision)), None))
            }
            Ok(decisions) => Ok((
                Rules::Many(
                    rules
                        .iter()
                        .zip(decisions.as_slice())
                        .map(|(rule, &decision)| labelled(rule, decision))
                        .collect(),
                ),
                None,
            )),
            Err(err) if err.is_bad_input() => Err(err),
            Err(err) => Ok((
                Rules::Many(failure::decide(&self.fallback, rules, commit)),
                Some(err),
            )),
        }
    }
}

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
            Err(err) => {
                let acquire = match concurrency::failed(policy, self.fallback.lease_ids()) {
                    Some(acquire) => acquire,
                    None => {
                        let FailureMode::Local { instances } = policy.failure_mode() else {
                            unreachable!("the other modes answered above")
                        };
                        let share = policy.local_share(instances);
                        match self.fallback.acquire(&share, key) {
                            Ok(acquire) => acquire.degraded(),
                            // Full of live leases: let it through, as a full limiter does for checks.
                            Err(_) => concurrency::failed(
                                &policy.clone().with_failure_mode(FailureMode::FailOpen),
                                self.fallback.lease_ids(),
                            )
                            .unwrap_or_else(|| unreachable!("fail_open always answers")),
                        }
                    }
                };
                Ok(Acquisition {
                    acquire,
                    store_error: Some(err),
                })
            }
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
        if let FailureMode::Local { instances } = policy.failure_mode()
            && let Ok(released @ Release::Released { .. }) =
                self.fallback.release(&policy.local_share(instances), key, lease)
        {
            return Ok(released);
        }
        self.store.release(policy, key, lease).await
    }
}

/// A rule's verdict from the store's decision.
#[inline]
fn labelled(rule: &Rule<'_>, decision: Decision) -> RuleVerdict {
    RuleVerdict {
        decision,
        outcome: match (decision.allowed, rule.shadow) {
            (true, _) => Outcome::Allowed,
            (false, true) => Outcome::ShadowDenied,
            (false, false) => Outcome::Denied,
        },
        shadow: rule.shadow,
    }
}

/// The request's verdict from its rules' verdicts: the request's outcome is the most severe of
/// its rules'. `index` maps the caller's rules to merged ones.
fn verdict(
    rules: &[Rule<'_>],
    (mut verdicts, store_error): (Rules, Option<Error>),
    index: Option<&[usize]>,
) -> Verdict {
    let slice = match &mut verdicts {
        Rules::One(r) => std::slice::from_mut(r),
        Rules::Many(v) => v.as_mut_slice(),
    };
    let outcome = slice.iter().map(|r| r.outcome).max().unwrap_or(Outcome::Allowed);
    let spent = outcome.allows();
    // Nothing was spent (a denied request, or a question): a rule that would have allowed
    // reports its budget as it stands.
    for (rule, r) in rules.iter().zip(slice.iter_mut()) {
        if r.decision.allowed && (!spent || rule.question) {
            let d = &mut r.decision;
            d.remaining = d.remaining.saturating_add(rule.cost).min(d.limit);
            // The reset time was that of the spend that did not happen: an upper bound, and
            // exactly zero when the budget is whole.
            if d.remaining == d.limit {
                d.reset_after = std::time::Duration::ZERO;
            }
        }
    }
    if let Some(index) = index {
        // Back to the caller's rules, one verdict each, even when they all merged into one.
        let merged = match &verdicts {
            Rules::One(r) => std::slice::from_ref(r),
            Rules::Many(v) => v.as_slice(),
        };
        verdicts = Rules::Many(index.iter().map(|&u| merged[u]).collect());
    }
    Verdict {
        outcome,
        rules: verdicts,
        store_error,
    }
}

/// A request's rules with those that spend from the same budget merged.
struct Merged<'a> {
    /// One rule per budget, costs summed, enforced if any of its parts is.
    unique: Vec<Rule<'a>>,
    /// The caller's rule `i` is `unique[index[i]]`.
    index: Vec<usize>,
}

impl<'a> Merged<'a> {
    /// `None` when no two rules share a budget (the common case: nothing to allocate).
    fn new(rules: &[Rule<'a>]) -> Option<Self> {
        let shared = rules
            .iter()
            .enumerate()
            .any(|(i, a)| rules[..i].iter().any(|b| a.same_budget(b)));
        if !shared {
            return None;
        }
        let mut unique: Vec<Rule<'a>> = Vec::with_capacity(rules.len());
        let mut index = Vec::with_capacity(rules.len());
        for rule in rules {
            match unique.iter().position(|u| u.same_budget(rule)) {
                Some(u) => {
                    unique[u].cost = unique[u].cost.saturating_add(rule.cost);
                    unique[u].shadow &= rule.shadow;
                    index.push(u);
                }
                None => {
                    index.push(unique.len());
                    unique.push(*rule);
                }
            }
        }
        Some(Merged { unique, index })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Algorithm;

    #[tokio::test]
    async fn a_rule_given_twice_has_a_verdict_for_each_and_spends_both_costs_or_nothing() {
        let engine = Engine::new(MemoryStore::new());
        let policy = Policy::new("p", Algorithm::sliding_log(3, Duration::from_secs(60)).unwrap()).unwrap();
        let twice = [Rule::new(&policy, "k", 1), Rule::new(&policy, "k", 1)];
        let verdict = engine.check_all(&twice).await.unwrap();
        assert!(verdict.allowed());
        assert_eq!(verdict.rules().len(), 2);
        assert_eq!(verdict.rules()[1].decision.remaining, 1);
        let denied = engine.check_all(&twice).await.unwrap();
        assert_eq!(denied.outcome(), Outcome::Denied);
        assert_eq!(denied.rules().len(), 2);
        assert!(denied.rules().iter().all(|r| r.outcome == Outcome::Denied));
        assert!(
            engine.check(&policy, b"k", 1).await.unwrap().allowed(),
            "nothing was spent"
        );
    }
}
