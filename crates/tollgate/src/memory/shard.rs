//! One shard of the memory store: a bounded hash table of slots, and its eviction.
//!
//! Slots live inline in the table (no index indirection, short keys inline too), so finding a
//! key costs one probe of the control bytes and one read of the slot. When the shard is at its
//! bound and a new key arrives, it makes room in this order:
//!
//! 1. drop every expired slot (at most once per "earliest expiry", so a flood cannot make every
//!    insert scan the shard);
//! 2. sample a few random buckets and evict the slot that expires soonest among those that are
//!    not *hot* (blocked, or out of budget: see [`hot_until_us`](crate::algorithm::hot_until_us));
//! 3. failing that, scan the shard for any slot that is not hot;
//! 4. failing that, refuse the new key: every slot is protecting a limit, and forgetting one
//!    would give an attacker a fresh budget.
//!
//! Expired slots are also swept after every `bound / 2` inserts, so memory is reclaimed without
//! the user doing anything.
//!
//! The bound counts *units*, not slots: a slot is one unit, except a concurrency key's, which
//! is one unit per live lease it holds (at least one). Leases live inside their key's slot, about
//! 40 bytes each, and a key may hold up to `MAX_IN_FLIGHT` of them: counted as one, a store of a
//! million keys could hold a hundred billion leases. A lease is not evictable, so a shard whose
//! units are all taken by live leases refuses new keys and new leases alike.

use std::collections::hash_map::RandomState;

use hashbrown::HashTable;

use super::cell::{BucketCell, GcraCell};
use super::hot::{HotCell, Shared, Taken};
use super::key::{self, KeyBytes, Lookup, Owner};
use crate::Algorithm;
use crate::algorithm::{AlgorithmState, KeyState, gcra};
use crate::attempts::Attempts;
use crate::concurrency::step::Leases;

/// Occupied slots sampled per eviction.
const EVICTION_SAMPLES: usize = 8;

/// What a slot holds.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Limit(KeyState),
    /// A GCRA key without an active penalty, decided by compare-and-swap (see [`super::cell`]).
    Gcra(GcraCell),
    /// The same for a token bucket.
    Bucket(BucketCell),
    /// A cell of a key that was denied, in its own allocation so threads can decide it without
    /// the lock (see [`super::hot`]).
    Hot(Shared),
    Attempts(Attempts),
    /// A concurrency policy's live leases (see [`crate::concurrency`]). The slot expires with
    /// the last lease and is hot until then: forgetting live leases would admit more than the
    /// policy's `max_in_flight`.
    Leases(Box<Leases>),
}

/// A stored key and value with the times eviction needs: exactly one 64-byte cache line, so a
/// lookup touches one line of slots.
#[derive(Debug, Clone)]
#[repr(align(64))]
pub(crate) struct Slot {
    pub(crate) key: KeyBytes,
    pub(crate) owner: Owner,
    pub(crate) value: Value,
    /// From this second on (since the Unix epoch, rounded up), the value means nothing and the
    /// slot may be dropped. Whole seconds keep the slot small; a state past its reset time is
    /// equivalent to no state, so keeping it up to a second longer changes no decision. Unused
    /// while the value is a cell ([`GcraCell`], [`BucketCell`]), whose state says it exactly.
    expires_at_s: u32,
    /// Until this second (rounded up) the slot must not be evicted; 0 for never hot. Unused
    /// while the value is a cell.
    hot_until_s: u32,
}

/// A time in µs as whole seconds, rounded up (saturating in 2106).
#[inline]
fn seconds_up(us: u64) -> u32 {
    u32::try_from(us.div_ceil(1_000_000)).unwrap_or(u32::MAX)
}

#[inline]
fn micros(seconds: u32) -> u64 {
    u64::from(seconds) * 1_000_000
}

impl Slot {
    pub(crate) fn new(lookup: Lookup<'_>, value: Value, expires_at_us: u64, hot_until_us: u64) -> Self {
        Slot {
            key: KeyBytes::new(lookup.key),
            owner: lookup.owner(),
            value,
            expires_at_s: seconds_up(expires_at_us),
            hot_until_s: seconds_up(hot_until_us),
        }
    }

    #[inline]
    pub(crate) fn expired(&self, now_us: u64) -> bool {
        self.expires_at_us() <= now_us
    }

    #[inline]
    pub(crate) fn expires_at_us(&self) -> u64 {
        match &self.value {
            Value::Gcra(cell) => cell.expires_at_us(),
            Value::Bucket(cell) => cell.expires_at_us(),
            Value::Hot(shared) => shared.cell().expires_at_us(),
            _ => micros(self.expires_at_s),
        }
    }

    #[inline]
    pub(crate) fn set_expires_at_us(&mut self, us: u64) {
        self.expires_at_s = seconds_up(us);
    }

    #[inline]
    pub(crate) fn hot_until_us(&self) -> u64 {
        match &self.value {
            Value::Gcra(cell) => cell.hot_until_us(),
            Value::Bucket(cell) => cell.hot_until_us(),
            Value::Hot(shared) => shared.cell().hot_until_us(),
            _ => micros(self.hot_until_s),
        }
    }

    #[inline]
    pub(crate) fn set_hot_until_us(&mut self, us: u64) {
        self.hot_until_s = seconds_up(us);
    }

    fn hot(&self, now_us: u64) -> bool {
        self.hot_until_us() > now_us
    }

    /// Turns a cell back into a plain state with its times, for the locked path. The write lock
    /// keeps the swaps of a cell in the table away; a hot cell's memos take no lock, so it is
    /// killed first and its times are those of the state it leaves.
    #[inline(always)]
    pub(crate) fn thaw(&mut self) {
        // A plain state (every algorithm but GCRA and the token bucket) has nothing to thaw:
        // that test stays inline on every locked path, the rest is a call.
        if matches!(self.value, Value::Gcra(_) | Value::Bucket(_) | Value::Hot(_)) {
            self.thaw_cell();
        }
    }

    #[inline(never)]
    fn thaw_cell(&mut self) {
        let taken = match &self.value {
            Value::Gcra(cell) => {
                let tat_us = cell.tat_us();
                Taken {
                    state: AlgorithmState::Gcra(gcra::State { tat_us }),
                    expires_at_us: tat_us,
                    hot_until_us: cell.hot_until_at(tat_us),
                }
            }
            Value::Bucket(cell) => {
                let state = cell.state();
                Taken {
                    state: AlgorithmState::TokenBucket(state),
                    expires_at_us: cell.expires_at_of(state),
                    hot_until_us: cell.hot_until_of(state),
                }
            }
            // Killed here, so memos holding it stop deciding before the lock is released.
            Value::Hot(shared) => shared.cell().take(),
            _ => return,
        };
        self.expires_at_s = seconds_up(taken.expires_at_us);
        self.hot_until_s = seconds_up(taken.hot_until_us);
        let mut state = KeyState::default();
        state.algorithm = taken.state;
        self.value = Value::Limit(state);
    }

    /// Whether a memo may still step this slot's cell without the lock.
    #[inline]
    fn memoised(&self) -> bool {
        matches!(self.value, Value::Hot(_))
    }

    /// Moves a cell into its own allocation, so threads can decide it without the lock.
    #[inline]
    pub(crate) fn promote(&mut self) -> Option<&Shared> {
        let hot = match &self.value {
            Value::Gcra(cell) => HotCell::Gcra(cell.clone()),
            Value::Bucket(cell) => HotCell::Bucket(cell.clone()),
            _ => return None,
        };
        self.value = Value::Hot(Shared::new(hot));
        match &self.value {
            Value::Hot(shared) => Some(shared),
            _ => None,
        }
    }

    /// Hands a GCRA or token bucket state with no active penalty to the lock-free path. A
    /// blocked key stays a plain state until its block is over, so the penalty is always decided
    /// under the lock. So does a key with an offense count (cells keep none): escalating
    /// penalties are decided under the lock until the count is forgotten.
    #[inline]
    pub(crate) fn freeze(&mut self, algorithm: &Algorithm, now_us: u64) {
        let Value::Limit(state) = &self.value else {
            return;
        };
        if state.blocked_until_us() > now_us || state.offenses() > 0 {
            return;
        }
        let cell = match (algorithm, &state.algorithm) {
            (Algorithm::Gcra(params), AlgorithmState::Gcra(s)) => {
                Value::Gcra(GcraCell::new(params, s.tat_us))
            }
            (Algorithm::TokenBucket(params), AlgorithmState::TokenBucket(s)) => {
                match BucketCell::new(params, *s) {
                    Some(cell) => Value::Bucket(cell),
                    None => return,
                }
            }
            _ => return,
        };
        self.value = cell;
    }
}

/// Refused: the shard is full of hot slots.
#[derive(Debug)]
pub(crate) struct Full;

pub(crate) struct Shard {
    table: HashTable<Slot>,
    hasher: RandomState,
    /// The most units (see the module docs) the shard holds.
    bound: usize,
    /// Units beyond one per slot: the sum of [`weight`] - 1 over the slots.
    extra_units: usize,
    /// No slot expires before this time, so sweeping earlier finds nothing.
    next_expiry_us: u64,
    /// Every slot is hot until at least this time, so looking for a victim earlier is futile.
    all_hot_until_us: u64,
    inserts_since_sweep: usize,
    rng: u64,
}

impl Shard {
    pub(crate) fn new(bound: usize, hasher: RandomState, seed: u64) -> Self {
        Shard {
            table: HashTable::new(),
            hasher,
            bound,
            extra_units: 0,
            next_expiry_us: 0,
            all_hot_until_us: 0,
            inserts_since_sweep: 0,
            rng: seed | 1,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Units held: one per slot, plus a concurrency key's leases past its first.
    pub(crate) fn units(&self) -> usize {
        self.table.len() + self.extra_units
    }

    /// Runs `change` on the slot of `lookup`, if any, keeping the shard's count of units right
    /// whatever it does to the slot's leases. Every change to a slot's leases goes through here.
    pub(crate) fn update<R>(
        &mut self,
        hash: u64,
        lookup: Lookup<'_>,
        change: impl FnOnce(&mut Slot) -> R,
    ) -> Option<R> {
        let slot = self
            .table
            .find_mut(hash, |slot| lookup.matches(&slot.owner, &slot.key))?;
        let before = weight(slot);
        let out = change(slot);
        self.extra_units = self.extra_units + weight(slot) - before;
        Some(out)
    }

    /// Makes sure the shard is within its bound after a change through [`update`](Self::update)
    /// added units, evicting as [`insert`](Self::insert) would (never a slot `spare` is true
    /// for); `Full` when it cannot.
    pub(crate) fn fit(&mut self, now_us: u64, spare: impl Fn(&Slot) -> bool) -> Result<(), Full> {
        self.make_room(now_us, &spare, 0)
    }

    /// The slot of `lookup`, expired or not, for the read-locked path.
    #[inline]
    pub(crate) fn find(&self, hash: u64, lookup: Lookup<'_>) -> Option<&Slot> {
        self.table
            .find(hash, |slot| lookup.matches(&slot.owner, &slot.key))
    }

    /// The slot of `lookup`, expired or not.
    #[inline]
    pub(crate) fn find_mut(&mut self, hash: u64, lookup: Lookup<'_>) -> Option<&mut Slot> {
        self.table
            .find_mut(hash, |slot| lookup.matches(&slot.owner, &slot.key))
    }

    /// Records that a slot (or one of its leases) now expires at `expires_at_us` (sweeps must
    /// not skip it).
    #[inline]
    pub(crate) fn note_expiry(&mut self, expires_at_us: u64) {
        self.next_expiry_us = self.next_expiry_us.min(expires_at_us);
    }

    /// Records that a slot stopped being hot, so the shard may have a victim again.
    #[inline]
    pub(crate) fn note_cooled(&mut self) {
        self.all_hot_until_us = 0;
    }

    /// Stores a slot for a key that has none, making room if needed.
    pub(crate) fn insert(&mut self, hash: u64, slot: Slot, now_us: u64) -> Result<(), Full> {
        self.insert_sparing(hash, slot, now_us, |_| false)
    }

    /// [`insert`](Self::insert), never evicting a slot for which `spare` is true: the other keys
    /// of a request being decided together must stay put while it inserts.
    pub(crate) fn insert_sparing(
        &mut self,
        hash: u64,
        slot: Slot,
        now_us: u64,
        spare: impl Fn(&Slot) -> bool,
    ) -> Result<(), Full> {
        self.make_room(now_us, &spare, weight(&slot))?;
        self.note_expiry(reclaim_at_us(&slot));
        // Every slot is hot until `all_hot_until_us` no longer holds if this one cools sooner.
        self.all_hot_until_us = self.all_hot_until_us.min(slot.hot_until_us());
        self.extra_units += weight(&slot) - 1;
        let hasher = &self.hasher;
        self.table.insert_unique(hash, slot, |s| slot_hash(hasher, s));
        self.inserts_since_sweep += 1;
        if self.inserts_since_sweep >= (self.bound / 2).max(1) {
            self.sweep(now_us);
        }
        Ok(())
    }

    /// Removes the slot of `lookup`, if any.
    pub(crate) fn remove(&mut self, hash: u64, lookup: Lookup<'_>) {
        if let Ok(entry) = self
            .table
            .find_entry(hash, |slot| lookup.matches(&slot.owner, &slot.key))
        {
            let (slot, _) = entry.remove();
            self.extra_units -= weight(&slot) - 1;
        }
    }

    /// Drops every expired slot and every expired lease, and gives memory back after a flood
    /// has passed.
    pub(crate) fn sweep(&mut self, now_us: u64) {
        self.inserts_since_sweep = 0;
        if now_us < self.next_expiry_us {
            return;
        }
        let mut next_expiry = u64::MAX;
        let mut extra_units = 0;
        self.table.retain(|slot| {
            // A memo may admit from a hot cell right up to its death: judge the state the cell
            // leaves, or an admission made after the expiry was read would go with the slot.
            if slot.memoised() && slot.expired(now_us) {
                slot.thaw();
            }
            let keep = !slot.expired(now_us);
            if keep {
                if let Value::Leases(leases) = &mut slot.value {
                    leases.drop_expired(now_us);
                }
                extra_units += weight(slot) - 1;
                next_expiry = next_expiry.min(reclaim_at_us(slot));
            }
            keep
        });
        self.extra_units = extra_units;
        self.next_expiry_us = next_expiry;
        if self.table.capacity() > 64 && self.table.capacity() > 4 * self.table.len() {
            let hasher = &self.hasher;
            self.table
                .shrink_to(2 * self.table.len(), |s| slot_hash(hasher, s));
        }
    }

    /// Makes the shard hold at most `bound - need` units, so that `need` more fit.
    fn make_room(&mut self, now_us: u64, spare: &impl Fn(&Slot) -> bool, need: usize) -> Result<(), Full> {
        if self.units() + need <= self.bound {
            return Ok(());
        }
        self.sweep(now_us);
        // Each victim frees at least one unit, and there are at most `need + 1` too many (one
        // lease past the bound, or a new slot of a few units): a bounded number of evictions,
        // and at most one more turn for each memoised slot thawed on the way.
        while self.units() + need > self.bound {
            if now_us < self.all_hot_until_us {
                return Err(Full);
            }
            let victim = self
                .sample_victim(now_us, spare)
                .or_else(|| self.scan_victim(now_us, spare));
            match victim {
                Some(bucket) => {
                    // A memo may have spent the victim's last unit since it was judged cold:
                    // judge the state its cell leaves, and look again if that state is hot.
                    if let Some(slot) = self.table.get_bucket_mut(bucket)
                        && slot.memoised()
                    {
                        slot.thaw();
                        if slot.hot(now_us) {
                            continue;
                        }
                    }
                    if let Ok(entry) = self.table.get_bucket_entry(bucket) {
                        let (slot, _) = entry.remove();
                        self.extra_units -= weight(&slot) - 1;
                    }
                }
                None => {
                    self.all_hot_until_us = self.table.iter().map(|s| s.hot_until_us()).min().unwrap_or(0);
                    return Err(Full);
                }
            }
        }
        Ok(())
    }

    /// Among a few random occupied buckets, the one that is not hot and expires soonest.
    fn sample_victim(&mut self, now_us: u64, spare: &impl Fn(&Slot) -> bool) -> Option<usize> {
        let buckets = self.table.num_buckets() as u64;
        let mut best: Option<(usize, u64)> = None;
        let mut sampled = 0;
        // The table is at least a little under half full, so this finds enough occupied buckets.
        for _ in 0..EVICTION_SAMPLES * 4 {
            let bucket = (self.next_random() % buckets) as usize;
            let Some(slot) = self.table.get_bucket(bucket) else {
                continue;
            };
            let expires_at_us = slot.expires_at_us();
            if !slot.hot(now_us) && !spare(slot) && best.is_none_or(|(_, e)| expires_at_us < e) {
                best = Some((bucket, expires_at_us));
            }
            sampled += 1;
            if sampled == EVICTION_SAMPLES {
                break;
            }
        }
        best.map(|(bucket, _)| bucket)
    }

    /// The first bucket holding a slot that is not hot, when sampling found none.
    fn scan_victim(&self, now_us: u64, spare: &impl Fn(&Slot) -> bool) -> Option<usize> {
        (0..self.table.num_buckets()).find(|&bucket| {
            self.table
                .get_bucket(bucket)
                .is_some_and(|slot| !slot.hot(now_us) && !spare(slot))
        })
    }

    /// xorshift64: cheap, and only used to spread eviction samples.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

/// The units a slot counts for toward the bound: one per live lease of a concurrency key (at
/// least one), one for anything else.
fn weight(slot: &Slot) -> usize {
    match &slot.value {
        Value::Leases(leases) => leases.len().max(1),
        _ => 1,
    }
}

/// When a sweep first has something of `slot` to drop: the slot itself when it expires, or
/// before that a concurrency key's earliest lease.
fn reclaim_at_us(slot: &Slot) -> u64 {
    match &slot.value {
        Value::Leases(leases) if !leases.is_empty() => leases.first_expiry_us(),
        _ => slot.expires_at_us(),
    }
}

/// A stored slot's hash, for the table's rehashing.
fn slot_hash(hasher: &RandomState, slot: &Slot) -> u64 {
    key::hash(hasher, key::owner_tag(slot.owner.as_ref()), slot.key.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }

    #[test]
    fn times_round_up_to_whole_seconds() {
        let lookup = Lookup::attempts(b"k");
        let slot = Slot::new(lookup, Value::Limit(KeyState::default()), 1_000_001, 0);
        assert_eq!(slot.expires_at_us(), 2_000_000);
        assert!(!slot.expired(1_999_999));
        assert!(slot.expired(2_000_000));
        assert!(!slot.hot(0));
    }
}
