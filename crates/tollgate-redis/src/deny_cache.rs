//! The local deny cache: once Redis says a key is denied until T, this instance denies it until T
//! without a round trip.
//!
//! This is what makes a one-key bot flood cheap: after the first denial, the bot's requests are
//! answered from memory. An entry says "requests of cost ≥ c are denied until T", which is exact
//! for cost c and conservative for larger costs (a larger cost never passes earlier). Smaller
//! costs go to Redis. A reset clears the entry here at once and, through a Redis pub/sub channel,
//! on every other instance (see `reset_channel`).
//!
//! Bounded: when full, expired entries are dropped, and if none are, the new entry is simply not
//! cached (the decision itself is unaffected).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tollgate::{Decision, Policy};

const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Denial {
    /// Costs at or above this are denied.
    pub(crate) min_cost: u64,
    /// Denied until this local time (µs).
    pub(crate) retry_at_us: u64,
    /// The budget is full again at this local time (µs).
    pub(crate) reset_at_us: u64,
}

impl Denial {
    /// The decision this denial answers at local time `now_us` (before its retry time).
    pub(crate) fn decision(&self, policy: &Policy, now_us: u64) -> Decision {
        Decision {
            allowed: false,
            limit: policy.max_cost(),
            remaining: 0,
            reset_after: Duration::from_micros(self.reset_at_us.saturating_sub(now_us)),
            retry_after: Some(Duration::from_micros(self.retry_at_us - now_us)),
            degraded: false,
        }
    }
}

pub(crate) struct DenyCache {
    shards: Vec<Mutex<HashMap<Vec<u8>, Denial>>>,
    hasher: RandomState,
    per_shard: usize,
    /// Requests answered from the cache.
    hits: AtomicU64,
}

impl DenyCache {
    pub(crate) fn new(max_entries: usize) -> Self {
        DenyCache {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
            per_shard: (max_entries / SHARDS).max(1),
            hits: AtomicU64::new(0),
        }
    }

    /// The cached denial covering a request of `cost` for `name` at `now_us`, if any: the
    /// request's answer, counted as a hit.
    pub(crate) fn get(&self, name: &[u8], cost: u64, now_us: u64) -> Option<Denial> {
        let shard = self.shard(name).lock();
        let denial = shard.get(name)?;
        let hit = (denial.retry_at_us > now_us && cost >= denial.min_cost).then_some(*denial);
        if hit.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        hit
    }

    /// Requests answered from the cache since it was built.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub(crate) fn insert(&self, name: &[u8], denial: Denial, now_us: u64) {
        let mut shard = self.shard(name).lock();
        if shard.len() >= self.per_shard && !shard.contains_key(name) {
            shard.retain(|_, d| d.retry_at_us > now_us);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        shard.insert(name.to_vec(), denial);
    }

    pub(crate) fn remove(&self, name: &[u8]) {
        self.shard(name).lock().remove(name);
    }

    /// Forgets every entry: after a gap in the reset channel, when a reset may have been missed.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            shard.lock().clear();
        }
    }

    fn shard(&self, name: &[u8]) -> &Mutex<HashMap<Vec<u8>, Denial>> {
        &self.shards[self.hasher.hash_one(name) as usize % SHARDS]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(min_cost: u64, retry_at_us: u64) -> Denial {
        Denial {
            min_cost,
            retry_at_us,
            reset_at_us: retry_at_us,
        }
    }

    #[test]
    fn covers_the_cost_and_above_until_the_retry_time() {
        let cache = DenyCache::new(100);
        cache.insert(b"k", denial(2, 100), 0);
        assert!(cache.get(b"k", 2, 99).is_some());
        assert!(cache.get(b"k", 5, 99).is_some());
        assert!(cache.get(b"k", 1, 99).is_none(), "a smaller cost may pass");
        assert!(cache.get(b"k", 2, 100).is_none(), "expired");
        cache.remove(b"k");
        assert!(cache.get(b"k", 2, 50).is_none());
    }

    #[test]
    fn stays_bounded() {
        let cache = DenyCache::new(SHARDS * 2);
        for i in 0..1_000u32 {
            cache.insert(&i.to_be_bytes(), denial(1, 1_000), 0);
        }
        let total: usize = cache.shards.iter().map(|s| s.lock().len()).sum();
        assert!(total <= SHARDS * 2);
    }
}
