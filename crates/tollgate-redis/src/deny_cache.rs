//! The local deny cache: once Redis says a key is denied until T, this instance denies it until T
//! without a round trip.
//!
//! This is what makes a one-key bot flood cheap: after the first denial, the bot's requests are
//! answered from memory. An entry says "requests of cost ≥ c are denied until T", which is exact
//! for cost c and conservative for larger costs (a larger cost never passes earlier). Smaller
//! costs go to Redis. A reset clears the entry here at once and, through a Redis pub/sub channel,
//! on every other instance (see `reset_channel`).
//!
//! An entry holds the fingerprint of the policy that denied, and answers only while the policy in
//! force has the same: a reload that changes the limit (5 to 20 a minute) makes every entry of
//! the old limit stale at once on this instance, so no denial outlives the limit it was made
//! under.
//!
//! Bounded: when full, expired entries are dropped, and if none are, the new entry is simply not
//! cached (the decision itself is unaffected).

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tollgate::{Decision, Fingerprint, Policy};

const SHARDS: usize = 16;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Denial {
    /// Costs at or above this are denied.
    pub(crate) min_cost: u64,
    /// Denied until this local time (µs).
    pub(crate) retry_at_us: u64,
    /// The budget is full again at this local time (µs).
    pub(crate) reset_at_us: u64,
    /// The policy the denial was made under.
    pub(crate) fingerprint: Fingerprint,
}

impl Denial {
    /// A denial of `cost` under `policy`, sent at local time `sent_at_us`: denied for `retry_us`,
    /// whole again after `reset_us`.
    pub(crate) fn new(policy: &Policy, cost: u64, sent_at_us: u64, retry_us: u64, reset_us: u64) -> Self {
        Denial {
            min_cost: cost,
            retry_at_us: sent_at_us.saturating_add(retry_us),
            reset_at_us: sent_at_us.saturating_add(reset_us),
            fingerprint: policy.fingerprint(),
        }
    }

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

    /// The cached denial covering a request of `cost` for `name` under `policy` at `now_us`, if
    /// any: the request's answer, counted as a hit.
    pub(crate) fn get(&self, name: &[u8], policy: &Policy, cost: u64, now_us: u64) -> Option<Denial> {
        let shard = self.shard(name).lock();
        let denial = shard.get(name)?;
        let current = denial.fingerprint == policy.fingerprint();
        let hit = (current && denial.retry_at_us > now_us && cost >= denial.min_cost).then_some(*denial);
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

    fn policy(limit: u64) -> Policy {
        let algorithm =
            tollgate::Algorithm::fixed_window(limit, Duration::from_secs(60), tollgate::Anchor::Epoch)
                .expect("algorithm");
        Policy::new("p", algorithm).expect("policy")
    }

    fn denial(min_cost: u64, retry_at_us: u64) -> Denial {
        Denial::new(&policy(5), min_cost, 0, retry_at_us, retry_at_us)
    }

    #[test]
    fn covers_the_cost_and_above_until_the_retry_time() {
        let cache = DenyCache::new(100);
        let policy = policy(5);
        cache.insert(b"k", denial(2, 100), 0);
        assert!(cache.get(b"k", &policy, 2, 99).is_some());
        assert!(cache.get(b"k", &policy, 5, 99).is_some());
        assert!(
            cache.get(b"k", &policy, 1, 99).is_none(),
            "a smaller cost may pass"
        );
        assert!(cache.get(b"k", &policy, 2, 100).is_none(), "expired");
        cache.remove(b"k");
        assert!(cache.get(b"k", &policy, 2, 50).is_none());
    }

    #[test]
    fn a_denial_made_under_another_limit_answers_nothing() {
        let cache = DenyCache::new(100);
        cache.insert(b"k", denial(1, 100), 0);
        assert!(cache.get(b"k", &policy(5), 1, 50).is_some());
        assert!(
            cache.get(b"k", &policy(20), 1, 50).is_none(),
            "the limit was raised by a reload"
        );
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
