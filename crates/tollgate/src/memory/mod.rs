//! `MemoryStore`: the embedded default. Sharded, bounded, no global lock.
//!
//! Keys are spread over up to 64 shards by a keyed SipHash; each shard has its own lock, so
//! checks of different keys rarely wait on each other, and checks of one key are serialised,
//! which makes every check exact under any number of threads. The rules of one request are
//! decided under the write locks of all the shards they touch, taken in shard order (so two
//! requests can never wait on each other in a cycle): no other request sees them half-applied.
//! The store holds at most `max_keys` keys (1 048 576 by default), a concurrency key counting
//! once per live lease; see the `shard` module for what it evicts when full and what it never
//! evicts.
//!
//! One rule of a GCRA or token bucket policy, the common case, takes a faster road: the key's
//! state is one atomic word in its slot (`cell`), decided by compare-and-swap under the shard's
//! *read* lock, so checks of one key run side by side and still admit exactly what the algorithm
//! allows. A key that is being denied moves its cell into its own allocation that each thread
//! remembers, and is then decided without hashing or locking at all (`hot`). A first insert, a
//! penalty, another algorithm, several rules, reset and eviction take the write lock as before.

mod cell;
mod hot;
mod key;
mod lock;
mod shard;

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use self::cell::Step;
use self::key::Lookup;
use self::lock::{RwLock, RwLockWriteGuard};
use self::shard::{Full, Shard, Slot, Value};
use crate::Algorithm;
use crate::algorithm::{self, KeyState, StepDecision};
use crate::attempts::{self, Attempts};
use crate::concurrency::{
    self, Acquire, ConcurrencyPolicy, ConcurrencyStore, Lease, LeaseId, LeaseIds, Release,
};
use crate::overrides::{Override, OverridePage, OverrideStore, OverrideTable, OverrideTarget};
use crate::store::{self, AttemptsStore, Store, ValidRules};
use crate::{
    AttemptTry, AttemptsStatus, Charged, Clock, Decision, Decisions, Error, PerRule, Policy, Rule,
    SystemClock,
};

/// The default bound on stored keys.
///
/// ```
/// assert_eq!(tollgate::memory::DEFAULT_MAX_KEYS, 1_048_576);
/// ```
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

const MAX_SHARDS: usize = 64;

/// A shard padded to its own cache lines, so two cores locking neighbouring shards do not fight
/// over one line.
#[repr(align(128))]
struct Padded(RwLock<Shard>);

/// The embedded in-memory store.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
///
/// let store = MemoryStore::new();
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
/// let decision = store.check(&policy, "203.0.113.7", 1)?;
/// assert!(decision.allowed);
/// assert_eq!(decision.remaining, 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryStore<C: Clock = SystemClock> {
    shards: Box<[Padded]>,
    hasher: RandomState,
    clock: C,
    max_keys: usize,
    lease_ids: LeaseIds,
    /// Runtime overrides ([`crate::overrides`]); `any_overrides` lets a store without any skip
    /// the lock on every check.
    overrides: RwLock<OverrideTable>,
    any_overrides: AtomicBool,
}

/// Configures a [`MemoryStore`].
///
/// ```
/// use tollgate::{ManualClock, MemoryStore};
///
/// let store = MemoryStore::builder().max_keys(10_000).clock(ManualClock::new(0)).build();
/// assert_eq!(store.max_keys(), 10_000);
/// ```
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C: Clock = SystemClock> {
    max_keys: usize,
    clock: C,
}

impl MemoryStore {
    /// A store with the default bound and the system clock.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::new();
    /// assert_eq!(store.max_keys(), tollgate::memory::DEFAULT_MAX_KEYS);
    /// ```
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Starts configuring a store.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::builder().max_keys(500).build();
    /// assert_eq!(store.max_keys(), 500);
    /// ```
    pub fn builder() -> MemoryStoreBuilder {
        MemoryStoreBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            clock: SystemClock::new(),
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// The most keys (policy keys and attempts counters together) the store holds. At least 1.
    /// A concurrency key counts once per live lease it holds (at least once): its leases are
    /// kept in its slot, so each is memory a client can make the store hold.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::builder().max_keys(0).build().max_keys(), 1);
    /// ```
    /// The bound is split across shards, so a shard can fill a little before the whole store
    /// does; the total never exceeds `max_keys`.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys.max(1);
        self
    }

    /// The clock, e.g. a [`ManualClock`](crate::ManualClock) in tests.
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, MemoryStore};
    ///
    /// let clock = ManualClock::new(42);
    /// let _store = MemoryStore::builder().clock(clock.clone()).build();
    /// assert_eq!(clock.now_us(), 42);
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryStoreBuilder<C2> {
        MemoryStoreBuilder {
            max_keys: self.max_keys,
            clock,
        }
    }

    /// Builds the store.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::builder().build();
    /// assert!(store.is_empty());
    /// ```
    pub fn build(self) -> MemoryStore<C> {
        // At least 64 keys per shard, so that the split wastes little of the bound; a power of
        // two, so picking a shard is a mask rather than a division.
        let shard_count = prev_power_of_two((self.max_keys / 64).clamp(1, MAX_SHARDS));
        let hasher = RandomState::new();
        let shards = (0..shard_count)
            .map(|i| {
                let bound = self.max_keys / shard_count + usize::from(i < self.max_keys % shard_count);
                Padded(RwLock::new(Shard::new(bound, hasher.clone(), hasher.hash_one(i))))
            })
            .collect();
        MemoryStore {
            shards,
            hasher,
            clock: self.clock,
            max_keys: self.max_keys,
            lease_ids: LeaseIds::new(),
            overrides: RwLock::new(OverrideTable::default()),
            any_overrides: AtomicBool::new(false),
        }
    }
}

impl<C: Clock> MemoryStore<C> {
    /// The clock the store decides on: an engine over the store dates its answers with the
    /// same one ([`EngineBuilder::clock`](crate::EngineBuilder::clock)).
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The bound on stored keys.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::builder().max_keys(1_000).build().max_keys(), 1_000);
    /// ```
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys stored now, expired ones not yet reclaimed included.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::new();
    /// assert_eq!(store.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().len()).sum()
    }

    /// True when no key is stored.
    ///
    /// ```
    /// assert!(tollgate::MemoryStore::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every expired key now. Never needed for correctness or for the bound (expired keys
    /// are reclaimed as new keys arrive); useful before measuring memory.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let policy = Policy::new("api", Algorithm::sliding_log(5, Duration::from_secs(1))?)?;
    /// store.check(&policy, "k", 1)?;
    /// clock.advance(Duration::from_secs(1));
    /// store.purge_expired();
    /// assert!(store.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn purge_expired(&self) {
        let now_us = self.clock.now_us();
        for shard in self.shards.iter() {
            shard.0.write().sweep(now_us);
        }
    }

    /// Decides a request of `cost` for `key` under `policy` and records it if admitted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Anchor, MemoryStore, Policy};
    ///
    /// let store = MemoryStore::new();
    /// let policy = Policy::new("export", Algorithm::fixed_window(10, Duration::from_secs(60), Anchor::FirstHit)?)?;
    /// assert!(store.check(&policy, "tenant-a", 10)?.allowed);
    /// assert!(!store.check(&policy, "tenant-a", 1)?.allowed);
    /// assert!(store.check(&policy, "tenant-b", 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        let key = key.as_ref();
        store::validate_check(policy, key, cost)?;
        self.decide_one(&self.in_force(policy, key), key, cost, true)
    }

    /// The answer [`check`](Self::check) would give now, changing nothing.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    ///
    /// let store = MemoryStore::new();
    /// let policy = Policy::new("api", Algorithm::token_bucket(3, Rate::per_second(1)?)?)?;
    /// assert_eq!(store.peek(&policy, "k", 1)?.remaining, 2);
    /// assert_eq!(store.peek(&policy, "k", 1)?.remaining, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        let key = key.as_ref();
        store::validate_check(policy, key, cost)?;
        self.decide_one(&self.in_force(policy, key), key, cost, false)
    }

    /// Decides the rules of one request together, as [`Store::decide`] describes: all or
    /// nothing, under the locks of every shard they touch.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rule};
    ///
    /// let store = MemoryStore::new();
    /// let per_ip = Policy::new("ip", Algorithm::sliding_log(10, Duration::from_secs(60))?)?;
    /// let per_user = Policy::new("user", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// let rules = [Rule::new(&per_ip, "198.51.100.4", 1), Rule::new(&per_user, "bob", 1)];
    /// assert!(store.decide(&rules, true)?.as_slice().iter().all(|d| d.allowed));
    /// // The user's budget is gone, so the second request is denied and the IP spends nothing.
    /// let second = store.decide(&rules, true)?;
    /// assert!(!second.as_slice()[1].allowed);
    /// assert_eq!(store.peek(&per_ip, "198.51.100.4", 1)?.remaining, 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        for rule in rules {
            store::validate_rule(rule)?;
        }
        self.decide_valid(ValidRules::validated(rules), commit)
    }

    /// [`decide`](Self::decide) without validating again what the engine validated.
    #[inline]
    fn decide_valid(&self, rules: ValidRules<'_, '_>, commit: bool) -> Result<Decisions, Error> {
        let rules = rules.rules();
        if self.any_overrides.load(Ordering::Acquire) && rules.len() > 1 {
            let policies: Vec<Cow<'_, Policy>> =
                rules.iter().map(|r| self.in_force(r.policy, r.key)).collect();
            let rules: Vec<Rule<'_>> = rules
                .iter()
                .zip(&policies)
                .map(|(rule, policy)| Rule { policy, ..*rule })
                .collect();
            return self.decide_many(&rules, commit).map(Decisions::Many);
        }
        match rules {
            [] => Ok(Decisions::None),
            [rule] => Ok(Decisions::One(self.decide_one(
                &self.in_force(rule.policy, rule.key),
                rule.key,
                rule.cost,
                commit && !rule.question,
            )?)),
            _ => self.decide_many(rules, commit).map(Decisions::Many),
        }
    }

    /// Forgets `key`'s state under `policy`, penalty included.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, MemoryStore, Policy};
    ///
    /// let store = MemoryStore::new();
    /// let policy = Policy::new("api", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// store.check(&policy, "k", 1)?;
    /// store.reset(&policy, "k")?;
    /// assert!(store.check(&policy, "k", 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        self.remove(Lookup::limit(policy.shared_name(), key));
        Ok(())
    }

    /// Gives back up to `cost` of what `key` spent under `policy`, within the algorithm's meaning
    /// (see [`algorithm::refund`]), and answers what a check of cost 1 would get now (as
    /// [`peek`](Self::peek) with cost 1: `remaining` counts after that one request). A key with
    /// nothing stored has nothing to give back. `cost` is 1 to the policy's limit. A key with an
    /// [override](crate::overrides) is refunded and answered under the override, as it is checked.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Anchor, MemoryStore, Policy};
    ///
    /// let store = MemoryStore::new();
    /// let export = Policy::new("export", Algorithm::fixed_window(3, Duration::from_secs(3600), Anchor::Epoch)?)?;
    /// store.check(&export, "tenant-a", 3)?;
    /// // The export failed on our side: give its cost back. The answer is a peek of cost 1.
    /// let after = store.refund(&export, "tenant-a", 3)?;
    /// assert!(after.allowed);
    /// assert_eq!(after.remaining, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, policy: &Policy, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        let key = key.as_ref();
        store::validate_check(policy, key, cost)?;
        // The key's override, as a check applies it: a bucket refills up to the override's
        // capacity, and the answer shows the override's limit.
        let in_force = self.in_force(policy, key);
        let policy = in_force.as_ref();
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).write();
        let now_us = self.clock.now_us();
        if let Some(slot) = shard.find_mut(hash, lookup) {
            // A cell (or a hot key's cell) back to a plain state: the write lock is held, so no
            // compare-and-swap races this, and memos of a hot cell stop deciding.
            slot.thaw();
            if !slot.expired(now_us) && matches!(slot.value, Value::Limit(_)) {
                let later = match settle(slot, policy, now_us, true) {
                    Settled::Later(later) => Some(later),
                    _ => None,
                };
                if let Value::Limit(state) = &mut slot.value {
                    algorithm::refund(later.as_ref().unwrap_or(policy), state, now_us, cost);
                }
            }
        }
        // The answer is a peek, which also hands the state back to the lock-free path.
        let outcome =
            decide_in(&mut shard, hash, lookup, policy, 1, false, now_us).map_err(|_| self.full())?;
        Ok(Decision::from_step(outcome, policy.max_cost()))
    }

    /// Records every rule's cost whatever is left, as [`Store::charge`] describes: never
    /// refused for budget, under the locks of every shard the rules touch. A key in debt is hot
    /// (see [`algorithm::hot_until_us`]) until a check of cost 1 would pass again, so it is never
    /// evicted to make room before its debt is paid. A full store (every key in the way hot)
    /// refuses the whole charge with [`Error::StoreFull`], recording nothing.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy, Rate, Rule};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let bytes = Policy::new("egress", Algorithm::gcra(Rate::per_second(1_000)?, 1_000)?)?;
    /// let charged = store.charge(&[Rule::new(&bytes, "client-9", 1_500)])?;
    /// assert_eq!(charged[0].debt, 500);
    /// // Half a second pays the debt back, one more millisecond brings a unit.
    /// assert_eq!(store.check(&bytes, "client-9", 1)?.retry_after, Some(Duration::from_millis(501)));
    /// clock.advance(Duration::from_millis(501));
    /// assert!(store.check(&bytes, "client-9", 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn charge(&self, rules: &[Rule<'_>]) -> Result<PerRule<Charged>, Error> {
        for rule in rules {
            store::validate_charge(rule)?;
        }
        if let [rule] = rules {
            return Ok(PerRule::One(self.charge_one(
                &self.in_force(rule.policy, rule.key),
                rule.key,
                rule.cost,
            )?));
        }
        let (unique, index) = store::merge_charges(rules);
        let policies: Vec<Cow<'_, Policy>> = unique.iter().map(|r| self.in_force(r.policy, r.key)).collect();
        let lookups: Vec<(Lookup<'_>, u64, usize)> = unique
            .iter()
            .map(|rule| {
                let lookup = Lookup::limit(rule.policy.shared_name(), rule.key);
                let hash = lookup.hash(&self.hasher);
                (lookup, hash, self.shard_index(hash))
            })
            .collect();
        let mut order: Vec<usize> = lookups.iter().map(|&(_, _, shard)| shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<RwLockWriteGuard<'_, Shard>> =
            order.iter().map(|&i| self.shards[i].0.write()).collect();
        let now_us = self.clock.now_us();

        // Every key gets its slot first, so a full store refuses the charge whole.
        let spare = |slot: &Slot| lookups.iter().any(|(l, _, _)| l.matches(&slot.owner, &slot.key));
        let mut placed: Vec<usize> = Vec::new();
        for (i, &(lookup, hash, shard)) in lookups.iter().enumerate() {
            let shard = pick(&mut guards, &order, shard);
            if shard.find_mut(hash, lookup).is_some() {
                continue;
            }
            // A placeholder the charge below fills in place; live for a µs, so that the sweep
            // an insert may run does not take it back.
            let slot = Slot::new(lookup, Value::Limit(KeyState::default()), now_us + 1, 0);
            match shard.insert_sparing(hash, slot, now_us, spare) {
                Ok(()) => placed.push(i),
                Err(Full) => {
                    for &j in &placed {
                        let (lookup, hash, shard) = lookups[j];
                        pick(&mut guards, &order, shard).remove(hash, lookup);
                    }
                    return Err(self.full());
                }
            }
        }
        let mut charged = Vec::with_capacity(unique.len());
        for ((rule, policy), &(lookup, hash, shard)) in unique.iter().zip(&policies).zip(&lookups) {
            let shard = pick(&mut guards, &order, shard);
            let outcome = charge_in(shard, hash, lookup, policy, rule.cost, now_us)
                .unwrap_or_else(|Full| unreachable!("placed just above"));
            charged.push(Charged {
                decision: Decision::from_step(outcome.decision, policy.max_cost()),
                debt: outcome.debt,
            });
        }
        Ok(index.into_iter().map(|u| charged[u]).collect())
    }

    /// Counts a failed attempt; see [`AttemptsStore::increment_attempts`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let store = tollgate::MemoryStore::new();
    /// assert_eq!(store.increment_attempts("login:bob", Duration::from_secs(3600))?, 1);
    /// assert_eq!(store.increment_attempts("login:bob", Duration::from_secs(3600))?, 2);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn increment_attempts(&self, key: impl AsRef<[u8]>, ttl: Duration) -> Result<u64, Error> {
        let ttl_us = attempts::ttl_us(ttl)?;
        self.update_attempts(key.as_ref(), |live, now_us| {
            let counter = Attempts::increment(live, now_us, ttl_us);
            (Some(counter), counter.count)
        })
    }

    /// Counts a try only if fewer than `max_attempts` are counted, under the key's shard lock;
    /// see [`AttemptsStore::try_attempt`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let store = tollgate::MemoryStore::new();
    /// let hour = Duration::from_secs(3600);
    /// // Before verifying the password: a refused try is not even looked at.
    /// for _ in 0..3 {
    ///     assert!(store.try_attempt("login:bob", 3, hour)?.allowed);
    /// }
    /// let locked = store.try_attempt("login:bob", 3, hour)?;
    /// assert!(!locked.allowed);
    /// // After a good password, the account starts afresh.
    /// store.reset_attempts("login:bob")?;
    /// assert_eq!(store.try_attempt("login:bob", 3, hour)?.attempts, 1);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn try_attempt(
        &self,
        key: impl AsRef<[u8]>,
        max_attempts: u64,
        ttl: Duration,
    ) -> Result<AttemptTry, Error> {
        store::validate_max_attempts(max_attempts)?;
        let ttl_us = attempts::ttl_us(ttl)?;
        self.update_attempts(key.as_ref(), |live, now_us| {
            Attempts::try_once(live, now_us, max_attempts, ttl_us)
        })
    }

    /// Runs `step` on the live counter of `key` (if any) under its shard's write lock and stores
    /// the counter it returns, if it returns one: one atomic step for every attempts write.
    fn update_attempts<R>(
        &self,
        key: &[u8],
        step: impl FnOnce(Option<&Attempts>, u64) -> (Option<Attempts>, R),
    ) -> Result<R, Error> {
        store::validate_key(key)?;
        let lookup = Lookup::attempts(key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).write();
        let now_us = self.clock.now_us();
        if let Some(slot) = shard.find_mut(hash, lookup) {
            let live = match &slot.value {
                Value::Attempts(counter) if !slot.expired(now_us) => Some(*counter),
                _ => None,
            };
            let (next, answer) = step(live.as_ref(), now_us);
            if let Some(counter) = next {
                slot.value = Value::Attempts(counter);
                slot.set_expires_at_us(counter.expires_at_us);
                shard.note_expiry(counter.expires_at_us);
            }
            return Ok(answer);
        }
        let (next, answer) = step(None, now_us);
        if let Some(counter) = next {
            let slot = Slot::new(lookup, Value::Attempts(counter), counter.expires_at_us, 0);
            shard.insert(hash, slot, now_us).map_err(|_| self.full())?;
        }
        Ok(answer)
    }

    /// The attempts count, 0 when there is no counter.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::new().get_attempts("nobody")?, 0);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn get_attempts(&self, key: impl AsRef<[u8]>) -> Result<u64, Error> {
        Ok(self.attempts(key.as_ref())?.map_or(0, |c| c.count))
    }

    /// Time until the attempts counter expires, `None` when there is none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, MemoryStore};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// store.increment_attempts("k", Duration::from_secs(60))?;
    /// clock.advance(Duration::from_secs(15));
    /// assert_eq!(store.get_ttl("k")?, Some(Duration::from_secs(45)));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn get_ttl(&self, key: impl AsRef<[u8]>) -> Result<Option<Duration>, Error> {
        let now_us = self.clock.now_us();
        Ok(self
            .attempts(key.as_ref())?
            .map(|c| Duration::from_micros(c.expires_at_us.saturating_sub(now_us))))
    }

    /// Removes the attempts counter.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let store = tollgate::MemoryStore::new();
    /// store.increment_attempts("k", Duration::from_secs(60))?;
    /// store.reset_attempts("k")?;
    /// assert_eq!(store.get_attempts("k")?, 0);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn reset_attempts(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        self.remove(Lookup::attempts(key));
        Ok(())
    }

    /// Whether another attempt is allowed under `max_attempts`; see [`AttemptsStatus`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let store = tollgate::MemoryStore::new();
    /// for _ in 0..3 {
    ///     store.increment_attempts("login:eve", Duration::from_secs(3600))?;
    /// }
    /// assert!(!store.check_limit("login:eve", 3)?.allowed);
    /// assert!(store.check_limit("login:someone-else", 3)?.allowed);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn check_limit(&self, key: impl AsRef<[u8]>, max_attempts: u64) -> Result<AttemptsStatus, Error> {
        store::validate_max_attempts(max_attempts)?;
        let key = key.as_ref();
        store::validate_key(key)?;
        let now_us = self.clock.now_us();
        let counter = self.attempts(key)?;
        Ok(Attempts::status(counter.as_ref(), now_us, max_attempts))
    }

    /// Takes a slot of `key` under a concurrency `policy` if one is free; see
    /// [`ConcurrencyStore::acquire`]. The key's leases live in its slot, which counts toward
    /// `max_keys` once per live lease and is never evicted while a lease is live: a store whose
    /// bound is taken by live leases refuses a new lease with [`Error::StoreFull`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::{Acquire, ConcurrencyPolicy};
    /// use tollgate::{ManualClock, MemoryStore};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let exports = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30))?;
    /// assert!(store.acquire(&exports, "alice")?.is_granted());
    /// let Acquire::Denied(full) = store.acquire(&exports, "alice")? else { unreachable!() };
    /// assert_eq!(full.retry_after, Duration::from_secs(30));
    /// // Never released: the lease ends by itself.
    /// clock.advance(Duration::from_secs(30));
    /// assert!(store.acquire(&exports, "alice")?.is_granted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, policy: &ConcurrencyPolicy, key: impl AsRef<[u8]>) -> Result<Acquire, Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let id = self.lease_ids.next();
        let (max, timeout_us) = (policy.max_in_flight(), policy.lease_timeout_us());
        let mut shard = self.shard(hash).write();
        let now_us = self.clock.now_us();
        let stepped = shard.update(hash, lookup, |slot| {
            if !matches!(slot.value, Value::Leases(_)) {
                slot.value = Value::Leases(Box::default());
            }
            let Value::Leases(leases) = &mut slot.value else {
                unreachable!("set to leases just above")
            };
            let step = concurrency::step::acquire(leases, now_us, max, timeout_us, id);
            let (first_us, last_us) = (leases.first_expiry_us(), leases.last_expiry_us());
            slot.set_expires_at_us(last_us);
            slot.set_hot_until_us(last_us);
            (step, first_us)
        });
        let step = match stepped {
            Some((step, first_us)) => {
                shard.note_expiry(first_us);
                // A new lease is one more unit of the bound: make room for it, or take it back.
                if step.granted
                    && shard
                        .fit(now_us, |slot| lookup.matches(&slot.owner, &slot.key))
                        .is_err()
                {
                    shard.update(hash, lookup, |slot| {
                        if let Value::Leases(leases) = &mut slot.value {
                            concurrency::step::release(leases, now_us, id);
                        }
                    });
                    return Err(self.full());
                }
                step
            }
            None => {
                let mut leases = Box::<concurrency::step::Leases>::default();
                let step = concurrency::step::acquire(&mut leases, now_us, max, timeout_us, id);
                let last_us = leases.last_expiry_us();
                let slot = Slot::new(lookup, Value::Leases(leases), last_us, last_us);
                shard.insert(hash, slot, now_us).map_err(|_| self.full())?;
                step
            }
        };
        let wait = std::time::Duration::from_micros(step.at_us.saturating_sub(now_us));
        Ok(match step.granted {
            true => Acquire::Granted(Lease {
                id,
                expires_in: wait,
                in_flight: step.in_flight,
                limit: max,
                degraded: false,
            }),
            false => Acquire::Denied(concurrency::Full {
                in_flight: step.in_flight,
                limit: max,
                retry_after: wait,
                degraded: false,
            }),
        })
    }

    /// The key's live leases, changing nothing; see [`ConcurrencyStore::in_flight`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::ConcurrencyPolicy;
    /// use tollgate::{ManualClock, MemoryStore};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let exports = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(30))?;
    /// store.acquire(&exports, "alice")?;
    /// clock.advance(Duration::from_secs(10));
    /// let seen = store.in_flight(&exports, "alice")?;
    /// assert_eq!((seen.in_flight, seen.limit), (1, 2));
    /// assert_eq!(seen.next_expiry, Some(Duration::from_secs(20)));
    /// assert_eq!(seen.last_expiry, Some(Duration::from_secs(20)));
    /// assert_eq!(store.in_flight(&exports, "bob")?.in_flight, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight(
        &self,
        policy: &ConcurrencyPolicy,
        key: impl AsRef<[u8]>,
    ) -> Result<concurrency::InFlight, Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let shard = self.shard(hash).read();
        let now_us = self.clock.now_us();
        let (in_flight, span) = match shard.find(hash, lookup).map(|slot| &slot.value) {
            Some(Value::Leases(leases)) => concurrency::step::in_flight(leases, now_us),
            _ => (0, None),
        };
        let after = |at_us: u64| std::time::Duration::from_micros(at_us - now_us);
        Ok(concurrency::InFlight {
            in_flight,
            limit: policy.max_in_flight(),
            next_expiry: span.map(|(first, _)| after(first)),
            last_expiry: span.map(|(_, last)| after(last)),
        })
    }

    /// Frees the slot of `lease`; see [`ConcurrencyStore::release`]. A key left without leases
    /// gives its slot back at once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::{Acquire, ConcurrencyPolicy, LeaseId, Release};
    ///
    /// let store = tollgate::MemoryStore::new();
    /// let exports = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30))?;
    /// let Acquire::Granted(lease) = store.acquire(&exports, "alice")? else { unreachable!() };
    /// assert_eq!(store.release(&exports, "alice", lease.id)?, Release::Released { in_flight: 0 });
    /// assert!(store.is_empty());
    /// assert_eq!(store.release(&exports, "alice", LeaseId::new(1))?, Release::NotHeld);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: impl AsRef<[u8]>,
        lease: LeaseId,
    ) -> Result<Release, Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).write();
        let now_us = self.clock.now_us();
        let released = shard.update(hash, lookup, |slot| {
            let Value::Leases(leases) = &mut slot.value else {
                return None;
            };
            let (released, in_flight) = concurrency::step::release(leases, now_us, lease);
            let last_us = leases.last_expiry_us();
            slot.set_expires_at_us(last_us);
            slot.set_hot_until_us(last_us);
            Some((released, in_flight))
        });
        let Some(Some((released, in_flight))) = released else {
            return Ok(Release::NotHeld);
        };
        if in_flight == 0 {
            shard.remove(hash, lookup);
        }
        // The slot's hot time may have moved earlier: the shard may have a victim sooner.
        shard.note_cooled();
        Ok(match released {
            true => Release::Released { in_flight },
            false => Release::NotHeld,
        })
    }

    /// Frees every slot of `key` at once; see [`ConcurrencyStore::clear_leases`]. The key's
    /// slot is given back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::concurrency::{Acquire, ConcurrencyPolicy, Release};
    ///
    /// let store = tollgate::MemoryStore::new();
    /// let exports = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(3600))?;
    /// let Acquire::Granted(lost) = store.acquire(&exports, "alice")? else { unreachable!() };
    /// store.acquire(&exports, "alice")?;
    /// assert!(!store.acquire(&exports, "alice")?.is_granted());
    /// assert_eq!(store.clear_leases(&exports, "alice")?, 2);
    /// assert!(store.is_empty());
    /// assert!(store.acquire(&exports, "alice")?.is_granted());
    /// assert_eq!(store.release(&exports, "alice", lost.id)?, Release::NotHeld);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear_leases(&self, policy: &ConcurrencyPolicy, key: impl AsRef<[u8]>) -> Result<u64, Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).write();
        let now_us = self.clock.now_us();
        let cleared = shard.update(hash, lookup, |slot| match &mut slot.value {
            Value::Leases(leases) => concurrency::step::clear(leases, now_us),
            _ => 0,
        });
        if cleared.is_some() {
            shard.remove(hash, lookup);
            shard.note_cooled();
        }
        Ok(cleared.unwrap_or(0))
    }

    /// One rule: the key hashed once, one shard lock, no allocation. A stored GCRA or token
    /// bucket key without an active penalty is decided under the shard's read lock by compare-and-swap (see
    /// [`cell`]); everything else (a first insert, a penalty, another algorithm) under its write
    /// lock.
    #[inline]
    fn decide_one(&self, policy: &Policy, key: &[u8], cost: u64, commit: bool) -> Result<Decision, Error> {
        let lookup = Lookup::limit(policy.shared_name(), key);
        let fast = matches!(policy.algorithm(), Algorithm::Gcra(_) | Algorithm::TokenBucket(_));
        let store = self.shards.as_ptr() as usize;
        // The memo comes first: a hot key needs neither the hash nor the shard.
        if fast && let Some(outcome) = hot::check(store, lookup, policy, &self.clock, cost, commit) {
            return Ok(Decision::from_step(outcome, policy.max_cost()));
        }
        let hash = lookup.hash(&self.hasher);
        let lock = self.shard(hash);
        if fast {
            let penalty = policy.block_for_us().is_some();
            let step = {
                let shard = lock.read();
                shard
                    .find(hash, lookup)
                    .map(|slot| match (&slot.value, policy.algorithm()) {
                        (Value::Gcra(cell), Algorithm::Gcra(params)) if cell.fits(params) => {
                            (cell.step(params, penalty, &self.clock, cost, commit), false)
                        }
                        (Value::Bucket(cell), Algorithm::TokenBucket(params)) if cell.fits(params) => {
                            (cell.step(params, penalty, &self.clock, cost, commit), false)
                        }
                        (Value::Hot(shared), _) => {
                            let step = shared.cell().step(policy, &self.clock, cost, commit);
                            if let Step::Done(_) = step {
                                hot::remember(store, lookup, shared);
                            }
                            (step, true)
                        }
                        _ => (Step::Locked, false),
                    })
            };
            if let Some((Step::Done(outcome), hot)) = step {
                if commit && !outcome.allowed && !hot {
                    // Denied: the key is hot. Later checks of it skip the lock.
                    if let Some(shared) = lock
                        .write()
                        .find_mut(hash, lookup)
                        .and_then(|slot| slot.promote())
                    {
                        hot::remember(store, lookup, shared);
                    }
                }
                return Ok(Decision::from_step(outcome, policy.max_cost()));
            }
        }
        let mut shard = lock.write();
        // Read the clock under the lock, so one key's checks see time in order.
        let now_us = self.clock.now_us();
        let outcome =
            decide_in(&mut shard, hash, lookup, policy, cost, commit, now_us).map_err(|_| self.full())?;
        Ok(Decision::from_step(outcome, policy.max_cost()))
    }

    /// One rule's charge: the key hashed once, one shard lock, nothing to merge or to place
    /// ahead (a full store refuses it before anything is recorded). A stored GCRA or token
    /// bucket key is charged under the shard's read lock by compare-and-swap, as it is checked
    /// (see [`cell`]).
    fn charge_one(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Charged, Error> {
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let lock = self.shard(hash);
        if matches!(policy.algorithm(), Algorithm::Gcra(_) | Algorithm::TokenBucket(_)) {
            let penalty = policy.block_for_us().is_some();
            let shard = lock.read();
            let charged = shard
                .find(hash, lookup)
                .map(|slot| match (&slot.value, policy.algorithm()) {
                    (Value::Gcra(cell), Algorithm::Gcra(params)) if cell.fits(params) => {
                        cell.charge(params, penalty, &self.clock, cost)
                    }
                    (Value::Bucket(cell), Algorithm::TokenBucket(params)) if cell.fits(params) => {
                        cell.charge(params, penalty, &self.clock, cost)
                    }
                    _ => cell::Charge::Locked,
                });
            if let Some(cell::Charge::Done(outcome)) = charged {
                return Ok(Charged {
                    decision: Decision::from_step(outcome.decision, policy.max_cost()),
                    debt: outcome.debt,
                });
            }
        }
        let mut shard = lock.write();
        let now_us = self.clock.now_us();
        let outcome = charge_in(&mut shard, hash, lookup, policy, cost, now_us).map_err(|_| self.full())?;
        Ok(Charged {
            decision: Decision::from_step(outcome.decision, policy.max_cost()),
            debt: outcome.debt,
        })
    }

    /// `policy` as it applies to `key`: with the key's override, if one is set.
    #[inline]
    fn in_force<'p>(&self, policy: &'p Policy, key: &[u8]) -> Cow<'p, Policy> {
        if !self.any_overrides.load(Ordering::Acquire) {
            return Cow::Borrowed(policy);
        }
        let found = self
            .overrides
            .read()
            .find(policy.name(), key, self.clock.now_us());
        match found {
            Some(o) if o.algorithm.name() == policy.algorithm().name() => Cow::Owned(o.apply_to(policy)),
            _ => Cow::Borrowed(policy),
        }
    }

    /// How long `key` stays blocked by a `block_for` penalty; see [`Store::penalty_left`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, ManualClock, MemoryStore, Policy};
    ///
    /// let clock = ManualClock::new(0);
    /// let store = MemoryStore::builder().clock(clock.clone()).build();
    /// let login = Policy::new("login", Algorithm::sliding_log(1, Duration::from_secs(60))?)?
    ///     .with_block_for(Duration::from_secs(600))?;
    /// store.check(&login, "ann", 1)?;
    /// assert_eq!(store.penalty_left(&login, "ann")?, None);
    /// store.check(&login, "ann", 1)?;
    /// clock.advance(Duration::from_secs(100));
    /// assert_eq!(store.penalty_left(&login, "ann")?, Some(Duration::from_secs(500)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn penalty_left(&self, policy: &Policy, key: impl AsRef<[u8]>) -> Result<Option<Duration>, Error> {
        let key = key.as_ref();
        store::validate_key(key)?;
        let lookup = Lookup::limit(policy.shared_name(), key);
        let hash = lookup.hash(&self.hasher);
        let shard = self.shard(hash).read();
        let now_us = self.clock.now_us();
        // A blocked key is always a plain state: cells never hold a penalty.
        Ok(match shard.find(hash, lookup).map(|slot| &slot.value) {
            Some(Value::Limit(state)) if state.blocked_until_us() > now_us => {
                Some(Duration::from_micros(state.blocked_until_us() - now_us))
            }
            _ => None,
        })
    }

    /// Sets an override; see [`OverrideStore::set_override`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::overrides::{Override, OverrideTarget};
    /// use tollgate::{Algorithm, MemoryStore, Policy};
    ///
    /// let store = MemoryStore::new();
    /// let export = Policy::new("export", Algorithm::sliding_log(1, Duration::from_secs(60))?)?;
    /// let more = Algorithm::sliding_log(3, Duration::from_secs(60))?;
    /// store.set_override(&export, &Override::new(&export, OverrideTarget::prefix("tenant-7:"), more, None)?)?;
    /// assert_eq!(store.check(&export, "tenant-7:bob", 1)?.remaining, 2);
    /// assert_eq!(store.check(&export, "tenant-8:eve", 1)?.remaining, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_override(&self, policy: &Policy, value: &Override) -> Result<(), Error> {
        let checked = Override::new(
            policy,
            value.target.clone(),
            value.algorithm.clone(),
            value.expires_in,
        )?;
        let now_us = self.clock.now_us();
        let expires_at_us = checked
            .expires_in
            .map(|ttl| now_us.saturating_add(ttl.as_micros() as u64));
        self.overrides.write().set(
            policy.name(),
            checked.target,
            checked.algorithm,
            expires_at_us,
            now_us,
        )?;
        self.any_overrides.store(true, Ordering::Release);
        Ok(())
    }

    /// The override for exactly `target`; see [`OverrideStore::get_override`].
    pub fn get_override(&self, policy: &Policy, target: &OverrideTarget) -> Result<Option<Override>, Error> {
        target.validate()?;
        Ok(self
            .overrides
            .read()
            .get(policy.name(), target, self.clock.now_us()))
    }

    /// One page of the live overrides of `policy`; see [`OverrideStore::list_overrides`].
    pub fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> Result<OverridePage, Error> {
        Ok(self
            .overrides
            .read()
            .page(policy.name(), after, limit, self.clock.now_us()))
    }

    /// Removes an override; see [`OverrideStore::remove_override`].
    pub fn remove_override(&self, policy: &Policy, target: &OverrideTarget) -> Result<bool, Error> {
        target.validate()?;
        let mut table = self.overrides.write();
        let removed = table.remove(policy.name(), target, self.clock.now_us());
        if table.is_empty() {
            self.any_overrides.store(false, Ordering::Release);
        }
        Ok(removed)
    }

    /// The override in force for `key`; see [`OverrideStore::override_for`].
    pub fn override_for(&self, policy: &Policy, key: &[u8]) -> Result<Option<Override>, Error> {
        store::validate_key(key)?;
        Ok(self
            .overrides
            .read()
            .find(policy.name(), key, self.clock.now_us()))
    }

    /// Several rules: every shard they touch is locked, in shard order, then the rules are
    /// peeked, and committed only as [`Store::decide`] says. New keys get their slots before
    /// anything is recorded, so a full store refuses the request without half-applying it.
    fn decide_many(&self, rules: &[Rule<'_>], commit: bool) -> Result<Vec<Decision>, Error> {
        let lookups: Vec<(Lookup<'_>, u64, usize)> = rules
            .iter()
            .map(|rule| {
                let lookup = Lookup::limit(rule.policy.shared_name(), rule.key);
                let hash = lookup.hash(&self.hasher);
                (lookup, hash, self.shard_index(hash))
            })
            .collect();
        let mut order: Vec<usize> = lookups.iter().map(|&(_, _, shard)| shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<RwLockWriteGuard<'_, Shard>> =
            order.iter().map(|&i| self.shards[i].0.write()).collect();
        let now_us = self.clock.now_us();

        let mut outcomes = Vec::with_capacity(rules.len());
        for (rule, &(lookup, hash, shard)) in rules.iter().zip(&lookups) {
            let outcome = decide_in(
                pick(&mut guards, &order, shard),
                hash,
                lookup,
                rule.policy,
                rule.cost,
                false,
                now_us,
            )
            .map_err(|_| self.full())?;
            outcomes.push(outcome);
        }
        let denied = rules
            .iter()
            .zip(&outcomes)
            .any(|(rule, o)| !rule.shadow && !o.allowed);
        if commit {
            // Allowed: every rule spends. Denied: only a denial with a penalty records anything.
            // A question records nothing either way.
            let records: Vec<bool> = rules
                .iter()
                .zip(&outcomes)
                .map(|(rule, o)| {
                    !rule.question && (!denied || (!o.allowed && rule.policy.block_for_us().is_some()))
                })
                .collect();
            let spare = |slot: &Slot| lookups.iter().any(|(l, _, _)| l.matches(&slot.owner, &slot.key));
            let mut placed: Vec<usize> = Vec::new();
            for (i, &(lookup, hash, shard)) in lookups.iter().enumerate() {
                let shard = pick(&mut guards, &order, shard);
                if !records[i] || shard.find_mut(hash, lookup).is_some() {
                    continue;
                }
                // An expired placeholder: the commit below reuses it in place.
                let slot = Slot::new(lookup, Value::Limit(KeyState::default()), now_us, 0);
                match shard.insert_sparing(hash, slot, now_us, spare) {
                    Ok(()) => placed.push(i),
                    Err(Full) if denied => {}
                    Err(Full) => {
                        for &j in &placed {
                            let (lookup, hash, shard) = lookups[j];
                            pick(&mut guards, &order, shard).remove(hash, lookup);
                        }
                        return Err(self.full());
                    }
                }
            }
            for (i, (rule, &(lookup, hash, shard))) in rules.iter().zip(&lookups).enumerate() {
                if !records[i] {
                    continue;
                }
                let shard = pick(&mut guards, &order, shard);
                if shard.find_mut(hash, lookup).is_none() {
                    // A penalty that found no room: the request is denied anyway.
                    continue;
                }
                if let Ok(outcome) = decide_in(shard, hash, lookup, rule.policy, rule.cost, true, now_us) {
                    outcomes[i] = outcome;
                }
            }
        }
        Ok(rules
            .iter()
            .zip(outcomes)
            .map(|(rule, outcome)| Decision::from_step(outcome, rule.policy.max_cost()))
            .collect())
    }

    fn attempts(&self, key: &[u8]) -> Result<Option<Attempts>, Error> {
        store::validate_key(key)?;
        let lookup = Lookup::attempts(key);
        let hash = lookup.hash(&self.hasher);
        let shard = self.shard(hash).read();
        let now_us = self.clock.now_us();
        Ok(match shard.find(hash, lookup) {
            Some(Slot {
                value: Value::Attempts(counter),
                ..
            }) => Attempts::live(Some(counter), now_us),
            _ => None,
        })
    }

    fn remove(&self, lookup: Lookup<'_>) {
        let hash = lookup.hash(&self.hasher);
        self.shard(hash).write().remove(hash, lookup);
    }

    /// Picks a shard from hash bits the map inside does not use (it takes the low bits for the
    /// bucket and the top 7 for its tag), so keys of one shard still spread over its buckets.
    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        &self.shards[self.shard_index(hash)].0
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 50) as usize & (self.shards.len() - 1)
    }

    /// The store's lease id source, shared with the engine's failure modes.
    pub(crate) fn lease_ids(&self) -> &LeaseIds {
        &self.lease_ids
    }

    fn full(&self) -> Error {
        Error::StoreFull {
            max_keys: self.max_keys,
        }
    }
}

impl<C: Clock> ConcurrencyStore for MemoryStore<C> {
    const ANSWERS_AT_ONCE: bool = true;

    async fn acquire(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<Acquire, Error> {
        MemoryStore::acquire(self, policy, key)
    }

    async fn release(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
        lease: LeaseId,
    ) -> Result<Release, Error> {
        MemoryStore::release(self, policy, key, lease)
    }

    async fn clear_leases(&self, policy: &ConcurrencyPolicy, key: &[u8]) -> Result<u64, Error> {
        MemoryStore::clear_leases(self, policy, key)
    }

    async fn in_flight(
        &self,
        policy: &ConcurrencyPolicy,
        key: &[u8],
    ) -> Result<concurrency::InFlight, Error> {
        MemoryStore::in_flight(self, policy, key)
    }
}

/// The locked shard `index` among `guards`, which hold the shards of `order`.
#[inline]
fn pick<'g>(guards: &'g mut [RwLockWriteGuard<'_, Shard>], order: &[usize], index: usize) -> &'g mut Shard {
    let at = order.binary_search(&index).unwrap_or_default();
    &mut guards[at]
}

/// Decides one key in its locked shard: finds or (on a commit that leaves state) inserts its
/// slot, runs the policy's step, and keeps the slot's expiry and hotness current.
#[inline]
fn decide_in(
    shard: &mut Shard,
    hash: u64,
    lookup: Lookup<'_>,
    policy: &Policy,
    cost: u64,
    commit: bool,
    now_us: u64,
) -> Result<StepDecision, Full> {
    if let Some(slot) = shard.find_mut(hash, lookup) {
        slot.thaw();
        let expired = slot.expired(now_us);
        if expired && !commit {
            slot.freeze(policy.algorithm(), now_us);
            return Ok(algorithm::decide(
                policy,
                &mut KeyState::default(),
                now_us,
                cost,
                false,
            ));
        }
        if expired || !matches!(slot.value, Value::Limit(_)) {
            restart_as_limit(slot);
        }
        match settle(slot, policy, now_us, commit) {
            Settled::Current => {}
            Settled::Later(later) => return decide_in(shard, hash, lookup, &later, cost, commit, now_us),
            // Only looked at: answered from the migrated copy, the slot left as it was (and
            // not handed to the lock-free path, which would decide it without migrating).
            Settled::Copy(mut state) => {
                return Ok(algorithm::decide(policy, &mut state, now_us, cost, false));
            }
        }
        let hot_until_us = slot.hot_until_us();
        let Value::Limit(state) = &mut slot.value else {
            unreachable!("set to a limit just above")
        };
        let outcome = algorithm::decide(policy, state, now_us, cost, commit);
        if !commit {
            slot.freeze(policy.algorithm(), now_us);
            return Ok(outcome);
        }
        let next_hot_us = next_hot_until_us(policy, state, now_us, &outcome, hot_until_us);
        let keep_until_us = algorithm::keep_until_us(policy, state, now_us);
        slot.set_hot_until_us(next_hot_us);
        let expires_at_us = (now_us + outcome.reset_after_us).max(keep_until_us);
        slot.set_expires_at_us(expires_at_us);
        let cooled = hot_until_us > now_us && next_hot_us <= now_us;
        slot.freeze(policy.algorithm(), now_us);
        shard.note_expiry(expires_at_us);
        if cooled {
            shard.note_cooled();
        }
        return Ok(outcome);
    }
    let mut state = KeyState::default();
    let outcome = algorithm::decide(policy, &mut state, now_us, cost, commit);
    let expires_at_us =
        (now_us + outcome.reset_after_us).max(algorithm::keep_until_us(policy, &state, now_us));
    if commit && expires_at_us > now_us {
        let hot_until_us = next_hot_until_us(policy, &mut state, now_us, &outcome, 0);
        let mut slot = Slot::new(lookup, Value::Limit(state), expires_at_us, hot_until_us);
        slot.freeze(policy.algorithm(), now_us);
        shard.insert(hash, slot, now_us)?;
    }
    Ok(outcome)
}

/// Charges one key in its locked shard: finds or inserts its slot (a full shard refuses before
/// anything is recorded), records the cost, and keeps the slot's expiry and hotness current. In
/// debt (or blocked), a check of cost 1 is refused until its `retry_after`: the key is hot, so
/// it is never evicted to make room before its debt is paid.
fn charge_in(
    shard: &mut Shard,
    hash: u64,
    lookup: Lookup<'_>,
    policy: &Policy,
    cost: u64,
    now_us: u64,
) -> Result<algorithm::StepCharge, Full> {
    let Some(slot) = shard.find_mut(hash, lookup) else {
        let mut state = KeyState::default();
        let outcome = algorithm::charge(policy, &mut state, now_us, cost);
        let hot_until_us = now_us + outcome.decision.retry_after_us.unwrap_or(0);
        let expires_at_us = (now_us + outcome.decision.reset_after_us)
            .max(algorithm::keep_until_us(policy, &state, now_us))
            .max(now_us + 1);
        let mut slot = Slot::new(lookup, Value::Limit(state), expires_at_us, hot_until_us);
        slot.freeze(policy.algorithm(), now_us);
        shard.insert(hash, slot, now_us)?;
        return Ok(outcome);
    };
    slot.thaw();
    if slot.expired(now_us) || !matches!(slot.value, Value::Limit(_)) {
        restart_as_limit(slot);
    }
    if let Settled::Later(later) = settle(slot, policy, now_us, true) {
        return charge_in(shard, hash, lookup, &later, cost, now_us);
    }
    let was_hot_until_us = slot.hot_until_us();
    let Value::Limit(state) = &mut slot.value else {
        unreachable!("set to a limit just above")
    };
    let outcome = algorithm::charge(policy, state, now_us, cost);
    let hot_until_us = now_us + outcome.decision.retry_after_us.unwrap_or(0);
    let expires_at_us =
        (now_us + outcome.decision.reset_after_us).max(algorithm::keep_until_us(policy, state, now_us));
    slot.set_hot_until_us(hot_until_us);
    slot.set_expires_at_us(expires_at_us);
    slot.freeze(policy.algorithm(), now_us);
    shard.note_expiry(expires_at_us);
    if was_hot_until_us > now_us && hot_until_us <= now_us {
        shard.note_cooled();
    }
    Ok(outcome)
}

/// How a slot's state stands to the version of the policy deciding it (see
/// [`migrate`](algorithm::migrate)).
enum Settled {
    /// Written by this version, by one with the same algorithm and parameters, or migrated to
    /// this version just now: decide as is.
    Current,
    /// Written by a later version of the policy (one loaded after this one): decided under
    /// that version's numbers, never migrated back.
    Later(Policy),
    /// Written by an earlier version and only looked at: the state the migration would leave,
    /// worked out on a copy to answer from; the slot keeps the old state.
    Copy(KeyState),
}

/// Brings a slot holding a limit state up to `policy`'s version before anything reads it: a
/// state written under other parameters of the same policy name is migrated in place as
/// `policy` declares, and the slot then belongs to this version. Only a call that `writes` (a
/// check, a charge, a refund) migrates: a peek, an explain or a question works the migration
/// out on a copy and answers from it, so looking at a key never changes what it carries into
/// a later version (a peek between two reloads would otherwise decide what the second one
/// finds). The Redis scripts do the same. A key with an override in force keeps its state: the
/// override's numbers decide it before and after.
fn settle(slot: &mut Slot, policy: &Policy, now_us: u64, writes: bool) -> Settled {
    let (Some(owner), Value::Limit(state)) = (&slot.owner, &mut slot.value) else {
        return Settled::Current;
    };
    let name = policy.shared_name();
    if std::sync::Arc::ptr_eq(owner, name) {
        return Settled::Current;
    }
    let (Some(old), Some(new)) = (&owner.version, &name.version) else {
        return Settled::Current;
    };
    if old.fingerprint == new.fingerprint {
        return Settled::Current;
    }
    if old.generation > new.generation {
        return match policy.as_version(owner) {
            Some(later) => Settled::Later(later),
            None => Settled::Current,
        };
    }
    let migrates = *policy.algorithm() == new.algorithm;
    if !writes {
        // An override in force decides the state as it is, before and after.
        if !migrates {
            return Settled::Current;
        }
        let mut copy = state.clone();
        algorithm::migrate::migrate(&old.algorithm, policy, &mut copy, now_us);
        return Settled::Copy(copy);
    }
    let mut lives_until_us = 0;
    if migrates {
        algorithm::migrate::migrate(&old.algorithm, policy, state, now_us);
        // A refund that migrates sets no expiry of its own, so the slot lives at least as long
        // as the migrated state needs (as a charge of it would set), or the units it carried
        // over would be forgotten with the old state's expiry. The Redis scripts do the same.
        let answer = algorithm::decide(policy, state, now_us, 1, false);
        lives_until_us =
            (now_us + answer.reset_after_us).max(algorithm::keep_until_us(policy, state, now_us));
    }
    slot.owner = Some(name.clone());
    if lives_until_us > slot.expires_at_us() {
        slot.set_expires_at_us(lives_until_us);
    }
    Settled::Current
}

/// Makes a slot whose state means nothing (expired, or of another kind) a fresh limit state, in
/// place: no second lookup, and a sliding log keeps its buffer.
fn restart_as_limit(slot: &mut Slot) {
    match &mut slot.value {
        Value::Limit(state) => state.clear(),
        other => *other = Value::Limit(KeyState::default()),
    }
    slot.set_hot_until_us(0);
}

fn prev_power_of_two(n: usize) -> usize {
    1 << n.ilog2()
}

/// Until when a slot is hot (see [`algorithm::hot_until_us`]), computed only when it can have
/// changed: a blocked key is hot until its block ends, a key with budget left is not hot, and a
/// denial without a new block changed nothing, so a slot already hot stays hot until the same time.
#[inline]
fn next_hot_until_us(
    policy: &Policy,
    state: &mut KeyState,
    now_us: u64,
    outcome: &algorithm::StepDecision,
    hot_until_us: u64,
) -> u64 {
    if state.blocked_until_us() > now_us {
        return state.blocked_until_us();
    }
    if outcome.remaining > 0 {
        return 0;
    }
    if !outcome.allowed && hot_until_us > now_us {
        return hot_until_us;
    }
    algorithm::hot_until_us(policy, state, now_us)
}

impl<C: Clock> Store for MemoryStore<C> {
    const ANSWERS_AT_ONCE: bool = true;

    async fn decide(&self, rules: &[Rule<'_>], commit: bool) -> Result<Decisions, Error> {
        MemoryStore::decide(self, rules, commit)
    }

    async fn decide_valid(&self, rules: ValidRules<'_, '_>, commit: bool) -> Result<Decisions, Error> {
        MemoryStore::decide_valid(self, rules, commit)
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        MemoryStore::reset(self, policy, key)
    }

    async fn check(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        MemoryStore::check(self, policy, key, cost)
    }

    async fn peek(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        MemoryStore::peek(self, policy, key, cost)
    }

    async fn refund(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        MemoryStore::refund(self, policy, key, cost)
    }

    async fn penalty_left(&self, policy: &Policy, key: &[u8]) -> Result<Option<Duration>, Error> {
        MemoryStore::penalty_left(self, policy, key)
    }

    async fn charge(&self, rules: &[Rule<'_>]) -> Result<PerRule<Charged>, Error> {
        MemoryStore::charge(self, rules)
    }
}

impl<C: Clock> OverrideStore for MemoryStore<C> {
    async fn set_override(&self, policy: &Policy, value: &Override) -> Result<(), Error> {
        MemoryStore::set_override(self, policy, value)
    }

    async fn get_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> Result<Option<Override>, Error> {
        MemoryStore::get_override(self, policy, target)
    }

    async fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> Result<OverridePage, Error> {
        MemoryStore::list_overrides(self, policy, after, limit)
    }

    async fn remove_override(&self, policy: &Policy, target: &OverrideTarget) -> Result<bool, Error> {
        MemoryStore::remove_override(self, policy, target)
    }

    async fn override_for(&self, policy: &Policy, key: &[u8]) -> Result<Option<Override>, Error> {
        MemoryStore::override_for(self, policy, key)
    }
}

impl<C: Clock> AttemptsStore for MemoryStore<C> {
    async fn increment_attempts(&self, key: &[u8], ttl: Duration) -> Result<u64, Error> {
        MemoryStore::increment_attempts(self, key, ttl)
    }

    async fn get_attempts(&self, key: &[u8]) -> Result<u64, Error> {
        MemoryStore::get_attempts(self, key)
    }

    async fn get_ttl(&self, key: &[u8]) -> Result<Option<Duration>, Error> {
        MemoryStore::get_ttl(self, key)
    }

    async fn reset_attempts(&self, key: &[u8]) -> Result<(), Error> {
        MemoryStore::reset_attempts(self, key)
    }

    async fn try_attempt(&self, key: &[u8], max_attempts: u64, ttl: Duration) -> Result<AttemptTry, Error> {
        MemoryStore::try_attempt(self, key, max_attempts, ttl)
    }

    async fn check_limit(&self, key: &[u8], max_attempts: u64) -> Result<AttemptsStatus, Error> {
        MemoryStore::check_limit(self, key, max_attempts)
    }
}
