//! One shard of the memory store: a bounded map from encoded keys to state, and its eviction.
//!
//! Each shard is an insertion-ordered hash map (so a random slot can be picked in O(1)) behind its
//! own mutex. When a shard is at its bound and a new key arrives, it makes room in this order:
//!
//! 1. drop every expired slot (at most once per "earliest expiry", so a flood cannot make every
//!    insert scan the shard);
//! 2. sample a few slots and evict the one that expires soonest among those that are not *hot*
//!    (blocked, or out of budget: see [`hot_until_us`](crate::algorithm::hot_until_us));
//! 3. failing that, scan the shard for any slot that is not hot;
//! 4. failing that, refuse the new key: every slot is protecting a limit, and forgetting one
//!    would give an attacker a fresh budget.
//!
//! Expired slots are also swept after every `bound / 2` inserts, so memory is reclaimed without
//! the user doing anything.

use indexmap::IndexMap;
use indexmap::map::RawEntryApiV1;
use indexmap::map::raw_entry_v1::RawEntryMut;

use super::key::Lookup;
use crate::algorithm::KeyState;
use crate::attempts::Attempts;

/// Slots sampled per eviction.
const EVICTION_SAMPLES: usize = 8;

/// What a slot holds.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Limit(KeyState),
    Attempts(Attempts),
}

/// A stored value with the times eviction needs.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) value: Value,
    /// After this time (µs) the value means nothing and the slot may be dropped.
    pub(crate) expires_at_us: u64,
    /// Until this time (µs) the slot must not be evicted; 0 for none.
    pub(crate) hot_until_us: u64,
}

impl Slot {
    fn expired(&self, now_us: u64) -> bool {
        self.expires_at_us <= now_us
    }

    fn hot(&self, now_us: u64) -> bool {
        self.hot_until_us > now_us
    }
}

/// Hashes are computed once per call by the store, so the map is told them directly.
type Map = IndexMap<Box<[u8]>, Slot, std::hash::BuildHasherDefault<NoHasher>>;

/// Never used to hash (every access goes through the raw entry API with a precomputed hash); it
/// only satisfies the map's type.
#[derive(Default)]
pub(crate) struct NoHasher(u64);

impl std::hash::Hasher for NoHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

/// Refused: the shard is full of hot slots.
#[derive(Debug)]
pub(crate) struct Full;

pub(crate) struct Shard {
    map: Map,
    bound: usize,
    /// No slot expires before this time, so sweeping earlier finds nothing.
    next_expiry_us: u64,
    /// Every slot is hot until at least this time, so looking for a victim earlier is futile.
    all_hot_until_us: u64,
    inserts_since_sweep: usize,
    rng: u64,
}

impl Shard {
    pub(crate) fn new(bound: usize, seed: u64) -> Self {
        Shard {
            map: Map::default(),
            bound,
            next_expiry_us: 0,
            all_hot_until_us: 0,
            inserts_since_sweep: 0,
            rng: seed | 1,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The live slot for `lookup`, if any. An expired slot reads as absent.
    pub(crate) fn get_mut(&mut self, hash: u64, lookup: Lookup<'_>, now_us: u64) -> Option<&mut Slot> {
        let index = self
            .map
            .raw_entry_v1()
            .index_from_hash(hash, |stored| lookup.matches(stored))?;
        let slot = &mut self.map[index];
        (!slot.expired(now_us)).then_some(slot)
    }

    /// Stores `slot` for `lookup`, replacing any existing slot, making room if needed.
    pub(crate) fn put(&mut self, hash: u64, lookup: Lookup<'_>, slot: Slot, now_us: u64) -> Result<(), Full> {
        self.next_expiry_us = self.next_expiry_us.min(slot.expires_at_us);
        if !slot.hot(now_us) {
            self.all_hot_until_us = 0;
        }
        if let RawEntryMut::Occupied(mut entry) = self
            .map
            .raw_entry_mut_v1()
            .from_hash(hash, |stored| lookup.matches(stored))
        {
            *entry.get_mut() = slot;
            return Ok(());
        }
        self.make_room(now_us)?;
        match self
            .map
            .raw_entry_mut_v1()
            .from_hash(hash, |stored| lookup.matches(stored))
        {
            RawEntryMut::Vacant(entry) => {
                entry.insert_hashed_nocheck(hash, lookup.encode(), slot);
            }
            RawEntryMut::Occupied(mut entry) => *entry.get_mut() = slot,
        }
        self.inserts_since_sweep += 1;
        if self.inserts_since_sweep >= (self.bound / 2).max(1) {
            self.sweep(now_us);
        }
        Ok(())
    }

    /// Removes the slot for `lookup`.
    pub(crate) fn remove(&mut self, hash: u64, lookup: Lookup<'_>) {
        if let RawEntryMut::Occupied(entry) = self
            .map
            .raw_entry_mut_v1()
            .from_hash(hash, |stored| lookup.matches(stored))
        {
            entry.swap_remove();
        }
    }

    /// Drops every expired slot, and gives back memory after a flood has passed.
    pub(crate) fn sweep(&mut self, now_us: u64) {
        self.inserts_since_sweep = 0;
        if now_us < self.next_expiry_us {
            return;
        }
        let mut next_expiry = u64::MAX;
        self.map.retain(|_, slot| {
            let keep = !slot.expired(now_us);
            if keep {
                next_expiry = next_expiry.min(slot.expires_at_us);
            }
            keep
        });
        self.next_expiry_us = next_expiry;
        if self.map.capacity() > 64 && self.map.capacity() > 4 * self.map.len() {
            self.map.shrink_to(2 * self.map.len());
        }
    }

    fn make_room(&mut self, now_us: u64) -> Result<(), Full> {
        if self.map.len() < self.bound {
            return Ok(());
        }
        self.sweep(now_us);
        if self.map.len() < self.bound {
            return Ok(());
        }
        if now_us < self.all_hot_until_us {
            return Err(Full);
        }
        let victim = self.sample_victim(now_us).or_else(|| self.scan_victim(now_us));
        match victim {
            Some(index) => {
                self.map.swap_remove_index(index);
                Ok(())
            }
            None => {
                self.all_hot_until_us = self.map.values().map(|s| s.hot_until_us).min().unwrap_or(0);
                Err(Full)
            }
        }
    }

    /// Among a few random slots, the one that is not hot and expires soonest.
    fn sample_victim(&mut self, now_us: u64) -> Option<usize> {
        let len = self.map.len();
        let mut best: Option<(usize, u64)> = None;
        for _ in 0..EVICTION_SAMPLES.min(len) {
            let index = (self.next_random() % len as u64) as usize;
            let slot = &self.map[index];
            if !slot.hot(now_us) && best.is_none_or(|(_, e)| slot.expires_at_us < e) {
                best = Some((index, slot.expires_at_us));
            }
        }
        best.map(|(index, _)| index)
    }

    /// The first slot that is not hot, when sampling found none.
    fn scan_victim(&self, now_us: u64) -> Option<usize> {
        self.map.values().position(|slot| !slot.hot(now_us))
    }

    /// xorshift64: cheap, and only used to spread eviction samples.
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}
