//! `MemoryStore`: the embedded default. Sharded, bounded, no global lock.
//!
//! Keys are spread over up to 64 shards by a keyed SipHash; each shard has its own mutex, so
//! checks of different keys rarely wait on each other, and checks of one key are serialised,
//! which makes every check exact under any number of threads. The store holds at most
//! `max_keys` keys (1 048 576 by default); see [`shard`] for what it evicts when full and what it
//! never evicts.

mod key;
mod shard;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use parking_lot::Mutex;

use self::key::{ATTEMPTS, Lookup};
use self::shard::{Shard, Slot, Value};
use crate::algorithm::{self, KeyState};
use crate::attempts::{self, Attempts};
use crate::store::{self, Store};
use crate::{AttemptsStatus, Clock, Decision, Error, Policy, SystemClock};

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
struct Padded(Mutex<Shard>);

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
                Padded(Mutex::new(Shard::new(bound, hasher.clone(), hasher.hash_one(i))))
            })
            .collect();
        MemoryStore {
            shards,
            hasher,
            clock: self.clock,
            max_keys: self.max_keys,
        }
    }
}

impl<C: Clock> MemoryStore<C> {
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
        self.shards.iter().map(|s| s.0.lock().len()).sum()
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
            shard.0.lock().sweep(now_us);
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
        self.decide(policy, key.as_ref(), cost, true)
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
        self.decide(policy, key.as_ref(), cost, false)
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
        self.remove(Lookup::new(policy.namespace(), key));
        Ok(())
    }

    /// Counts a failed attempt; see [`Store::increment_attempts`].
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
        let key = key.as_ref();
        store::validate_key(key)?;
        let ttl_us = attempts::ttl_us(ttl)?;
        let lookup = Lookup::new(ATTEMPTS, key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).lock();
        let now_us = self.clock.now_us();
        if let Some(slot) = shard.find_mut(hash, lookup) {
            let live = match &slot.value {
                Value::Attempts(counter) if !slot.expired(now_us) => Some(*counter),
                _ => None,
            };
            let counter = Attempts::increment(live.as_ref(), now_us, ttl_us);
            slot.value = Value::Attempts(counter);
            slot.set_expires_at_us(counter.expires_at_us);
            shard.note_expiry(counter.expires_at_us);
            return Ok(counter.count);
        }
        let counter = Attempts::increment(None, now_us, ttl_us);
        let slot = Slot::new(lookup, Value::Attempts(counter), counter.expires_at_us, 0);
        shard.insert(hash, slot, now_us).map_err(|_| self.full())?;
        Ok(counter.count)
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
        self.remove(Lookup::new(ATTEMPTS, key));
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

    fn decide(&self, policy: &Policy, key: &[u8], cost: u64, commit: bool) -> Result<Decision, Error> {
        store::validate_check(policy, key, cost)?;
        let lookup = Lookup::new(policy.namespace(), key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).lock();
        // Read the clock under the lock, so one key's checks see time in order.
        let now_us = self.clock.now_us();
        let limit = policy.max_cost();
        if let Some(slot) = shard.find_mut(hash, lookup) {
            let expired = slot.expired(now_us);
            if expired && !commit {
                let outcome = algorithm::decide(policy, &mut KeyState::default(), now_us, cost, false);
                return Ok(Decision::from_outcome(outcome, limit));
            }
            if expired || !matches!(slot.value, Value::Limit(_)) {
                // Reuse the slot in place: no second lookup, and a sliding log keeps its buffer.
                match &mut slot.value {
                    Value::Limit(state) => state.clear(),
                    other => *other = Value::Limit(KeyState::default()),
                }
                slot.set_hot_until_us(0);
            }
            let hot_until_us = slot.hot_until_us();
            let Value::Limit(state) = &mut slot.value else {
                unreachable!("set to a limit just above")
            };
            let outcome = algorithm::decide(policy, state, now_us, cost, commit);
            if !commit {
                return Ok(Decision::from_outcome(outcome, limit));
            }
            let next_hot_us = next_hot_until_us(policy, state, now_us, &outcome, hot_until_us);
            slot.set_hot_until_us(next_hot_us);
            let expires_at_us = now_us + outcome.reset_after_us;
            slot.set_expires_at_us(expires_at_us);
            let cooled = hot_until_us > now_us && next_hot_us <= now_us;
            shard.note_expiry(expires_at_us);
            if cooled {
                shard.note_cooled();
            }
            return Ok(Decision::from_outcome(outcome, limit));
        }
        let mut state = KeyState::default();
        let outcome = algorithm::decide(policy, &mut state, now_us, cost, commit);
        if commit && outcome.reset_after_us > 0 {
            let hot_until_us = next_hot_until_us(policy, &mut state, now_us, &outcome, 0);
            let slot = Slot::new(
                lookup,
                Value::Limit(state),
                now_us + outcome.reset_after_us,
                hot_until_us,
            );
            shard.insert(hash, slot, now_us).map_err(|_| self.full())?;
        }
        Ok(Decision::from_outcome(outcome, limit))
    }

    fn attempts(&self, key: &[u8]) -> Result<Option<Attempts>, Error> {
        store::validate_key(key)?;
        let lookup = Lookup::new(ATTEMPTS, key);
        let hash = lookup.hash(&self.hasher);
        let mut shard = self.shard(hash).lock();
        let now_us = self.clock.now_us();
        Ok(match shard.find_mut(hash, lookup) {
            Some(Slot {
                value: Value::Attempts(counter),
                ..
            }) => Attempts::live(Some(counter), now_us),
            _ => None,
        })
    }

    fn remove(&self, lookup: Lookup<'_>) {
        let hash = lookup.hash(&self.hasher);
        self.shard(hash).lock().remove(hash, lookup);
    }

    /// Picks a shard from hash bits the map inside does not use (it takes the low bits for the
    /// bucket and the top 7 for its tag), so keys of one shard still spread over its buckets.
    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[(hash >> 50) as usize & (self.shards.len() - 1)].0
    }

    fn full(&self) -> Error {
        Error::StoreFull {
            max_keys: self.max_keys,
        }
    }
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
    outcome: &algorithm::Outcome,
    hot_until_us: u64,
) -> u64 {
    if state.blocked_until_us > now_us {
        return state.blocked_until_us;
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
    async fn check(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        MemoryStore::check(self, policy, key, cost)
    }

    async fn peek(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        MemoryStore::peek(self, policy, key, cost)
    }

    async fn reset(&self, policy: &Policy, key: &[u8]) -> Result<(), Error> {
        MemoryStore::reset(self, policy, key)
    }

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

    async fn check_limit(&self, key: &[u8], max_attempts: u64) -> Result<AttemptsStatus, Error> {
        MemoryStore::check_limit(self, key, max_attempts)
    }
}
