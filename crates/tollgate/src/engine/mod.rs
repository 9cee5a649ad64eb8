//! The decision engine: one call decides every rule of a request, the same way for every store
//! and every door (HTTP, gRPC, the tower layer, the proxy).
//!
//! A door builds one [`Request`] of what its client asked (checks, upstream's counts, peeks,
//! charges, refunds, keys only the lists judge) and makes one [`Engine::run`] call; the order of
//! the steps and the failure modes are the engine's (see [`Engine::run`]). `check_all`,
//! `peek_all`, `charge_all` and `refund` are that call for one kind of op.
//!
//! [`Engine::check_all`] takes the request's rules and:
//!
//! 1. validates each rule (a bad key or cost is the caller's error, never a store failure);
//! 2. applies the [access lists](crate::access) and [gradual enforcement](crate::enforcement)
//!    (see below);
//! 3. merges rules that spend from the same budget (same policy name and key): they count as one
//!    rule with the sum of their costs, enforced if any of them is;
//! 4. asks the store to decide the merged rules in one atomic step ([`Store::decide`]): all or
//!    nothing, penalties started on every rule that denied;
//! 5. if the store failed, whatever the class of failure (timeout, connection, out of memory,
//!    auth, script, a full memory store), applies each rule's [`FailureMode`](crate::FailureMode) here, once;
//! 6. labels every rule and the request with an [`Outcome`].
//!
//! Each rule is validated once per request: here, and the store is handed the rules as
//! [`ValidRules`] so that it need not check them again. A request of one rule that no list,
//! gradual share or `apart` touches (the common case of a middleware with one limit) skips
//! steps 2 and 3 and is labelled directly: the same answer with less work.
//!
//! # Rules decided apart
//!
//! A rule with [`Rule::apart`] set is decided on its own: the store decides it as a shadow rule
//! (it spends when it fits, and its denial stops no other rule from spending), and the engine
//! labels its denial [`Outcome::Denied`]. An [`Apart::Alone`](crate::Apart::Alone) denial denies the request; an
//! [`Apart::Quota`](crate::Apart::Quota) denial does only when every quota rule of the request is denied. A request
//! denied only by rules apart has still spent on the rules that fitted.
//!
//! # Allow and deny lists, gradual enforcement
//!
//! With [`AccessLists`] set ([`EngineBuilder::access_lists`], [`Engine::set_access_lists`]),
//! each rule's key ([`Rule::listed_key`]) is looked up under its policy before the store is
//! asked:
//!
//! - a **deny-listed** key blocks the request: the store is not asked, nothing is spent, and
//!   every rule is labelled [`Outcome::Blocked`] (the listed ones with
//!   [`listed`](RuleVerdict::listed) set), whatever its shadow flag, failure mode or budget.
//!   [`Verdict::blocked_by`] names the entry.
//! - an **allow-listed** rule is never limited but still counted: it goes to the store in the
//!   same atomic call as a shadow question (it reads its budget and spends nothing, never
//!   denies, never fails closed) and is labelled [`Outcome::Allowed`], with its real numbers.
//!
//! A rule of a policy with an [`Enforcement`](crate::Enforcement) share below 100% is made a
//! shadow rule when its key is outside the share: it is decided and recorded, and a denial is
//! [`Outcome::ShadowDenied`]. Rules not affected are passed on as given, with no allocation.
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
//!
//! # Charges
//!
//! [`Engine::charge_all`] records costs known only after the request (tokens of a model's
//! answer, bytes sent) with [`Store::charge`]: never refused for budget, a key may go into debt,
//! which a later check pays for (see [`algorithm::charge`](crate::algorithm::charge)). Only bad
//! input is an `Err`. Admission was decided by the check, so allow and deny lists, gradual
//! enforcement and the rules' `shadow`, `question` and `apart` flags do not apply: a charge
//! always records. When the store fails, each rule follows its policy's failure mode:
//!
//! - `Local`: the cost is charged to the engine's own in-memory limiter, on the policy's
//!   [`local_share`](Policy::local_share); the answer is `degraded`;
//! - `FailOpen` and `FailClosed`: the cost cannot be recorded anywhere. The answer says so: it
//!   is `degraded` (what a check would get under the failure mode: admitted, or refused), and
//!   [`Charges::unrecorded`] counts it, so the caller can count and log what was lost. A charge
//!   is never dropped silently.
//!
//! [`Charges::store_error`] carries the store's error in both cases.

mod failure;
mod leases;
mod lists;
mod request;
mod run;
mod verdict;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use self::lists::{Adjusted, Lists, relabel_allowed, request_outcome};
pub use self::request::{Done, Op, Request, Settled};
use self::verdict::Rules;
pub use self::verdict::{Outcome, RuleVerdict, Verdict};
use crate::access::AccessLists;
use crate::memory::DEFAULT_MAX_KEYS;
use crate::store::{self, Store, ValidRules};
use crate::{Charged, Clock, Decision, Decisions, Error, MemoryStore, PerRule, Policy, Rule, SystemClock};

/// The answer to [`Engine::charge_all`]: one [`Charged`] per rule, in the rules' order, and
/// what the store's failure cost.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Engine, MemoryStore, Policy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let tokens = Policy::new("tokens", Algorithm::sliding_log(100, Duration::from_secs(60))?)?;
/// let charges = engine.charge(&tokens, "tenant-a", 130).await?;
/// assert_eq!(charges.rules[0].debt, 30);
/// assert!(charges.store_error.is_none() && charges.unrecorded == 0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Charges {
    /// Per rule, in the rules' order: what a check of cost 1 would get after the charge, and
    /// the debt. `degraded` when the store failed and the failure mode answered.
    pub rules: PerRule<Charged>,
    /// The store's error, when it failed: the charges were then recorded in the engine's
    /// `Local` limiter, or (`FailOpen`, `FailClosed`) not at all.
    pub store_error: Option<Error>,
    /// How many rules' costs were recorded nowhere (the store failed, and their policies'
    /// failure mode is `FailOpen` or `FailClosed`, or the `Local` limiter was full): for the
    /// caller to count and log.
    pub unrecorded: usize,
}

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
    /// The fallback's clock, which also dates each [`Request`]'s answer.
    clock: Arc<dyn Clock>,
    access: RwLock<AccessLists>,
    /// Whether `access` has any entry: with none, no request takes its lock.
    listing: AtomicBool,
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
    access: AccessLists,
}

impl<S> EngineBuilder<S> {
    /// Key bound of the in-memory limiter the `Local` failure mode decides with (default: the
    /// memory store's default). Its memory is only used while the store is failing.
    pub fn fallback_max_keys(mut self, max_keys: usize) -> Self {
        self.fallback_max_keys = max_keys;
        self
    }

    /// The clock of that limiter and of each [`Request`]'s [`Settled::now`] (default: the
    /// system clock): the store's own clock when it has one, a manual one in tests.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The allow and deny lists to apply (default: none); see the [module docs](self).
    pub fn access_lists(mut self, lists: AccessLists) -> Self {
        self.access = lists;
        self
    }

    /// Builds the engine.
    pub fn build(self) -> Engine<S> {
        Engine {
            store: self.store,
            fallback: MemoryStore::builder()
                .max_keys(self.fallback_max_keys)
                .clock(Arc::clone(&self.clock))
                .build(),
            clock: self.clock,
            listing: AtomicBool::new(!self.access.is_empty()),
            access: RwLock::new(self.access),
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
            access: AccessLists::default(),
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

    /// Replaces the allow and deny lists; requests decided from now on use the new ones.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    /// use tollgate::{Algorithm, Engine, MemoryStore, Outcome, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let api = Policy::new("api", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// engine.set_access_lists(AccessLists::new([
    ///     AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "203.0.113.0/24")?,
    ///     AccessEntry::new(Some("api"), Listed::Allow, EntryKind::Key, "office")?,
    /// ]));
    /// let blocked = engine.check(&api, b"203.0.113.9", 1).await?;
    /// assert_eq!(blocked.outcome(), Outcome::Blocked);
    /// assert_eq!(blocked.blocked_by().unwrap().1.value(), "203.0.113.0/24");
    /// for _ in 0..3 {
    ///     // Over its limit of one, and never limited.
    ///     assert_eq!(engine.check(&api, b"office", 1).await?.outcome(), Outcome::Allowed);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_access_lists(&self, lists: AccessLists) {
        let listing = !lists.is_empty();
        *self.access.write() = lists;
        self.listing.store(listing, Ordering::Release);
    }

    /// Changes the allow and deny lists in place, for one entry added or removed at a time
    /// without compiling the lists again ([`AccessLists::insert`], [`AccessLists::remove`]:
    /// O(log n) each). Requests wait for the change, never see it half made.
    ///
    /// ```
    /// use tollgate::access::{AccessEntry, EntryKind, Listed};
    /// use tollgate::{Engine, MemoryStore};
    ///
    /// let engine = Engine::new(MemoryStore::new());
    /// let scraper = AccessEntry::new(None, Listed::Deny, EntryKind::Key, "scraper-42")?;
    /// assert!(engine.change_access_lists(|lists| lists.insert(scraper.clone())));
    /// assert!(engine.access_lists().contains(&scraper));
    /// # Ok::<(), tollgate::access::AccessError>(())
    /// ```
    pub fn change_access_lists<R>(&self, change: impl FnOnce(&mut AccessLists) -> R) -> R {
        let mut lists = self.access.write();
        let out = change(&mut lists);
        self.listing.store(!lists.is_empty(), Ordering::Release);
        out
    }

    /// The allow and deny lists in force, read-locked: changes wait until it is dropped, so
    /// drop it soon.
    pub fn access_lists(&self) -> impl std::ops::Deref<Target = AccessLists> + '_ {
        self.access.read()
    }
}

impl<S: Store> Engine<S> {
    /// Decides every rule of one request and records it if allowed; see the
    /// [module docs](self). `Err` only for bad input (an empty or oversized key, a zero cost, a
    /// cost above a policy's limit); a failing store is answered by the failure modes.
    pub async fn check_all(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        self.decide_rules(rules, true, Lists::Applied).await
    }

    /// The verdict [`check_all`](Self::check_all) would give now, recording nothing.
    pub async fn peek_all(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        self.decide_rules(rules, false, Lists::Applied).await
    }

    /// The verdict [`peek_all`](Self::peek_all) would give if there were no allow or deny list:
    /// what the limits and the budget alone say. For an answer that must not tell whether a key
    /// is listed (explain, to a caller without the admin token).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    /// use tollgate::{Algorithm, Engine, MemoryStore, Outcome, Policy, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let api = Policy::new("api", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// engine.set_access_lists(AccessLists::new([AccessEntry::new(None, Listed::Deny, EntryKind::Key, "mallory")?]));
    /// let rule = [Rule::new(&api, "mallory", 1)];
    /// assert_eq!(engine.peek_all(&rule).await?.outcome(), Outcome::Blocked);
    /// assert_eq!(engine.peek_all_unlisted(&rule).await?.outcome(), Outcome::Allowed);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn peek_all_unlisted(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        self.decide_rules(rules, false, Lists::Ignored).await
    }

    /// Decides one enforced rule: `check_all` with one rule. The key is anything that is bytes,
    /// as for [`MemoryStore::check`] and [`Rule::new`]: `&str`, `String`, `&[u8]`, `Vec<u8>`.
    ///
    /// ```
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 2)?)?;
    /// let tenant = String::from("tenant-7");
    /// assert!(engine.check(&api, "tenant-7", 1).await?.allowed());
    /// assert!(engine.check(&api, tenant.as_bytes(), 1).await?.allowed());
    /// assert!(!engine.check(&api, &tenant, 1).await?.allowed()); // the same key, third time
    /// # Ok(()) }
    /// ```
    pub async fn check(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Verdict, Error> {
        self.decide_rules(&[Rule::new(policy, key.as_ref(), cost)], true, Lists::Applied)
            .await
    }

    /// Forgets `key`'s state under `policy`, in the store and in the `Local` limiter.
    ///
    /// ```
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rate};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let login = Policy::new("login", Algorithm::gcra(Rate::per_minute(1)?, 1)?)?;
    /// engine.check(&login, "alice", 1).await?;
    /// assert!(!engine.check(&login, "alice", 1).await?.allowed());
    /// engine.reset(&login, "alice").await?; // after a successful login, say
    /// assert!(engine.check(&login, "alice", 1).await?.allowed());
    /// # Ok(()) }
    /// ```
    pub async fn reset(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let key = key.as_ref();
        let _ = self.fallback.reset(policy, key);
        self.store.reset(policy, key).await
    }

    /// Gives back up to `cost` of what `key` spent under `policy`; see [`Store::refund`]. A
    /// failing store is an `Err` (a refund has no failure mode: there is nothing to admit or
    /// deny), and the `Local` limiter is refunded too, so a key limited there while the store
    /// was away gets its budget back as well.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy};
    ///
    /// # futures_lite_block_on(async {
    /// let engine = Engine::new(MemoryStore::new());
    /// let export = Policy::new("export", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// assert!(engine.check(&export, b"tenant-a", 1).await?.allowed());
    /// assert!(engine.refund(&export, b"tenant-a", 1).await?.allowed);
    /// assert!(engine.check(&export, b"tenant-a", 1).await?.allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     match std::pin::pin!(f).poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refund(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        store::validate_check(policy, key, cost)?;
        if let crate::FailureMode::Local { instances } = policy.failure_mode() {
            // The local limiter decides on the policy's share; a cost above the share's limit
            // gives back the whole share.
            let share = policy.local_share(instances);
            let _ = self.fallback.refund(&share, key, cost.min(share.max_cost()));
        }
        self.store.refund(policy, key, cost).await
    }

    /// Records every rule's cost whatever is left, with [`Store::charge`], applying the failure
    /// modes when the store fails; see [Charges](self#charges). `Err` only for bad input (an
    /// empty or oversized key, a cost of 0 or above [`MAX_LIMIT`](crate::bounds::MAX_LIMIT)).
    /// Allow and deny lists do not apply: admission was decided by the check.
    ///
    /// ```
    /// use tollgate::{Algorithm, Engine, ManualClock, MemoryStore, Policy, Rate, Rule};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::builder().clock(ManualClock::new(0)).build());
    /// let tokens = Policy::new("tokens", Algorithm::token_bucket(1_000, Rate::per_second(100)?)?)?;
    /// let per_key = Policy::new("per-key", Algorithm::token_bucket(10_000, Rate::per_second(100)?)?)?;
    /// // Reserve an estimate of 200, then settle: the answer took 450.
    /// assert!(engine.check(&tokens, "tenant-a", 200).await?.allowed());
    /// let rules = [Rule::new(&tokens, "tenant-a", 250), Rule::new(&per_key, "key-1", 450)];
    /// let charges = engine.charge_all(&rules).await?;
    /// assert_eq!(charges.rules[0].decision.remaining, 549);
    /// assert_eq!(charges.rules[1].debt, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn charge_all(&self, rules: &[Rule<'_>]) -> Result<Charges, Error> {
        for rule in rules {
            store::validate_charge(rule)?;
        }
        match self.store.charge(rules).await {
            Ok(charged) => Ok(Charges {
                rules: charged,
                store_error: None,
                unrecorded: 0,
            }),
            Err(err) if err.is_bad_input() => Err(err),
            Err(err) => {
                let (charged, unrecorded) = failure::charge(&self.fallback, rules);
                Ok(Charges {
                    rules: charged,
                    store_error: Some(err),
                    unrecorded,
                })
            }
        }
    }

    /// Records `cost` for `key` under `policy` whatever is left: `charge_all` with one rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let bytes = Policy::new("egress", Algorithm::sliding_log(1_000, Duration::from_secs(1))?)?;
    /// assert_eq!(engine.charge(&bytes, "client-1", 1_500).await?.rules[0].debt, 500);
    /// assert!(!engine.check(&bytes, "client-1", 1).await?.allowed());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn charge(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Charges, Error> {
        self.charge_all(&[Rule::new(policy, key.as_ref(), cost)]).await
    }

    /// Validates `rules`, then [`decide_valid`](Self::decide_valid).
    async fn decide_rules(&self, rules: &[Rule<'_>], commit: bool, lists: Lists) -> Result<Verdict, Error> {
        for rule in rules {
            validate(rule)?;
        }
        self.decide_valid(rules, commit, lists).await
    }

    /// Decides validated `rules`: lists and shares applied, merged, decided by the store, failure
    /// modes applied. `Err` only for bad input the store found.
    async fn decide_valid(&self, rules: &[Rule<'_>], commit: bool, lists: Lists) -> Result<Verdict, Error> {
        if let [rule] = rules
            && self.as_given(rule, lists)
        {
            let rules = std::slice::from_ref(rule);
            let decided = self
                .store
                .decide_valid(ValidRules::validated(rules), commit)
                .await;
            return self.verdict_of_one(rule, decided, commit);
        }
        let (adjusted, allowed) = match self.adjust(rules, lists) {
            Adjusted::Rules(adjusted, allowed) => (adjusted, allowed),
            Adjusted::Blocked(blocked) => return Ok(blocked),
        };
        let mut verdict = self.decide(&adjusted, commit).await?;
        relabel_allowed(&mut verdict, &allowed, rules, &adjusted);
        Ok(verdict)
    }

    /// Whether `rule`, alone in its request, goes to the store as given: no list to apply, no
    /// gradual share to place it in, not decided apart. Nothing then needs adjusting, merging
    /// or relabelling.
    #[inline]
    fn as_given(&self, rule: &Rule<'_>, lists: Lists) -> bool {
        rule.apart.is_none()
            && (rule.shadow || rule.policy.enforcement().is_none())
            && (lists == Lists::Ignored || !self.listing.load(Ordering::Acquire))
    }

    /// The verdict of a request of one rule that [goes to the store as given](Self::as_given),
    /// from the store's answer: what [`run`](Self::run) does with it, without the steps that
    /// leave it unchanged.
    fn verdict_of_one(
        &self,
        rule: &Rule<'_>,
        decided: Result<Decisions, Error>,
        commit: bool,
    ) -> Result<Verdict, Error> {
        match decided {
            Ok(Decisions::One(decision)) => Ok(verdict_one(rule, labelled(rule, decision))),
            decided => {
                let rules = std::slice::from_ref(rule);
                let verdicts = self.settle(rules, decided, commit)?;
                Ok(verdict(rules, verdicts, None))
            }
        }
    }

    /// Decides the rules as given: merged, decided by the store, failure modes applied.
    /// `rules` are validated.
    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Verdict, Error> {
        match Merged::new(rules) {
            None => {
                let decided = self
                    .store
                    .decide_valid(ValidRules::validated(rules), commit)
                    .await;
                let verdicts = self.settle(rules, decided, commit)?;
                Ok(verdict(rules, verdicts, None))
            }
            Some(merged) => {
                let decided = self
                    .store
                    .decide_valid(ValidRules::validated(&merged.unique), commit)
                    .await;
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

/// Rejects a rule the store must not see: a bad key, a zero cost (but for a question), a cost
/// above the policy's limit.
#[inline]
fn validate(rule: &Rule<'_>) -> Result<(), Error> {
    match rule.cost {
        // A question of cost 0: is the key past its limit (see `Rule::question`)?
        0 if rule.question => store::validate_key(rule.key),
        cost => store::validate_check(rule.policy, rule.key, cost),
    }
}

/// The verdict of a request of one rule, not apart, that the store decided: [`verdict`] for
/// that case. The request's outcome is the rule's, and it spent if the rule allows.
#[inline]
fn verdict_one(rule: &Rule<'_>, mut r: RuleVerdict) -> Verdict {
    let spent = r.outcome.allows();
    if r.decision.allowed && (!spent || rule.question) {
        let d = &mut r.decision;
        d.remaining = d.remaining.saturating_add(rule.cost).min(d.limit);
        if d.remaining == d.limit {
            d.reset_after = std::time::Duration::ZERO;
        }
    }
    Verdict {
        outcome: r.outcome,
        rules: Rules::One(r),
        store_error: None,
        blocked_by: None,
        spends: spent,
    }
}

/// A rule's verdict from the store's decision.
#[inline]
fn labelled(rule: &Rule<'_>, decision: Decision) -> RuleVerdict {
    RuleVerdict {
        decision,
        outcome: if decision.allowed {
            Outcome::Allowed
        } else {
            denial(rule)
        },
        shadow: rule.never_denies(),
        listed: None,
    }
}

/// How a denial of `rule` (as the store decided it) is labelled.
#[inline]
pub(crate) fn denial(rule: &Rule<'_>) -> Outcome {
    if rule.never_denies() {
        Outcome::ShadowDenied
    } else {
        Outcome::Denied
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
    let outcome = request_outcome(rules, slice);
    // The store spent unless a rule decided with the others denied: rules apart spend on
    // their own whatever their outcome.
    let spent = rules
        .iter()
        .zip(slice.iter())
        .filter(|(rule, _)| rule.apart.is_none())
        .map(|(_, r)| r.outcome)
        .max()
        .is_none_or(Outcome::allows);
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
        blocked_by: None,
        spends: spent,
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
                    let merged = &mut unique[u];
                    merged.cost = merged.cost.saturating_add(rule.cost);
                    merged.shadow &= rule.shadow;
                    // Decided with the others if any part is; else apart as its parts are.
                    merged.apart = if merged.shadow {
                        merged.apart.or(rule.apart)
                    } else {
                        None
                    };
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
mod tests;
