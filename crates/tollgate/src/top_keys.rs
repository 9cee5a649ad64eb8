//! [`TopKeys`]: the most frequent keys of a stream, in memory fixed by a capacity chosen up
//! front, however many distinct keys the stream brings.
//!
//! An operator wants to know *who* is being limited, but the keys are chosen by clients: a flood
//! of distinct keys must not grow memory, and an exact count per key would. This is the
//! Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005): keep `capacity` counters;
//! a key that has one adds to it; a new key, when every counter is taken, replaces the key with
//! the *smallest* count and inherits that count (recorded as the counter's `error`, the most it
//! may overestimate). So a heavy hitter is never pushed out by a crowd of one-off keys: each of
//! them enters at the minimum, and the minimum is at most `total / capacity`.
//!
//! Guarantees, for a stream of total weight `N` into `k` counters:
//! - every counted key's true weight lies in `count - error ..= count`;
//! - every key whose true weight is above `N / k` holds a counter;
//! - the counts add up to `N`, and there are never more than `k` counters.
//!
//! Finding the smallest counter is a scan of the `k` counters, done only when a new key arrives
//! and every counter is taken; for the small `k` this is meant for (tens to a few hundred) a
//! scan of one contiguous array is as fast as keeping a sorted structure up to date.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroUsize;

/// One counted key: `count` is an upper bound of its weight, `count - error` a lower bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter<K> {
    /// The key.
    pub key: K,
    /// The weight counted for the key, including what it inherited when it took the counter.
    pub count: u64,
    /// How much of `count` was inherited from the key it replaced: the most `count` may be above
    /// the key's true weight. Zero for a key counted since its counter was free.
    pub error: u64,
}

/// The heavy hitters of a stream of keys, in at most `capacity` counters (Space-Saving; see the
/// [module docs](self)).
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::top_keys::TopKeys;
///
/// let mut top: TopKeys<String> = TopKeys::new(NonZeroUsize::new(2).unwrap());
/// for _ in 0..5 {
///     top.add("bot", 1);
/// }
/// top.add("alice", 1);
/// top.add("bob", 1); // replaces alice, the smallest, and inherits her count
/// let counters = top.top();
/// assert_eq!(counters[0].key, "bot");
/// assert_eq!(counters[0].count, 5);
/// assert_eq!((counters[1].key.as_str(), counters[1].count, counters[1].error), ("bob", 2, 1));
/// assert_eq!(top.len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct TopKeys<K> {
    capacity: NonZeroUsize,
    counters: Vec<Counter<K>>,
    /// Where each counted key's counter is in `counters`. Hashed with std's `RandomState`
    /// (SipHash, randomly keyed), because keys are chosen by clients.
    index: HashMap<K, usize>,
    total: u64,
}

impl<K: Hash + Eq + Clone> TopKeys<K> {
    /// An empty summary with room for `capacity` counters, allocated now: memory does not grow
    /// after this, except for the keys themselves (at most `capacity` of them are held).
    pub fn new(capacity: NonZeroUsize) -> Self {
        TopKeys {
            capacity,
            counters: Vec::with_capacity(capacity.get()),
            // Twice the counters: replacing a key leaves a tombstone in the table, and once
            // they use up its spare room the table rehashes, in place only while it is at most
            // half full. With room for 2 x capacity it always is, so it never grows.
            index: HashMap::with_capacity(capacity.get().saturating_mul(2)),
            total: 0,
        }
    }

    /// Counts `weight` for `key`. A key without a counter takes a free one or, when all are
    /// taken, the one with the smallest count (whose count it inherits). A zero weight changes
    /// nothing.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::top_keys::TopKeys;
    ///
    /// let mut top: TopKeys<Box<[u8]>> = TopKeys::new(NonZeroUsize::new(8).unwrap());
    /// top.add(&b"10.0.0.1"[..], 3);
    /// assert_eq!(top.get(&b"10.0.0.1"[..]).map(|c| c.count), Some(3));
    /// ```
    pub fn add<Q>(&mut self, key: &Q, weight: u64)
    where
        Q: Hash + Eq + ?Sized,
        K: Borrow<Q> + for<'q> From<&'q Q>,
    {
        if weight == 0 {
            return;
        }
        self.total = self.total.saturating_add(weight);
        if let Some(&at) = self.index.get(key) {
            let counter = &mut self.counters[at];
            counter.count = counter.count.saturating_add(weight);
            return;
        }
        let key = K::from(key);
        if self.counters.len() < self.capacity.get() {
            self.index.insert(key.clone(), self.counters.len());
            self.counters.push(Counter {
                key,
                count: weight,
                error: 0,
            });
            return;
        }
        // Every counter is taken: the new key replaces the smallest. `counters` is not empty
        // here, since the capacity is at least one.
        let Some((at, _)) = self
            .counters
            .iter()
            .enumerate()
            .min_by_key(|(_, counter)| counter.count)
        else {
            return;
        };
        let counter = &mut self.counters[at];
        self.index.remove::<K>(&counter.key);
        self.index.insert(key.clone(), at);
        counter.key = key;
        counter.error = counter.count;
        counter.count = counter.count.saturating_add(weight);
    }

    /// The counter of `key`, if it holds one.
    pub fn get<Q>(&self, key: &Q) -> Option<&Counter<K>>
    where
        Q: Hash + Eq + ?Sized,
        K: Borrow<Q>,
    {
        self.index.get(key).map(|&at| &self.counters[at])
    }

    /// Every counter, the largest count first (ties: the smaller error first, as that count is
    /// surer, then the order the counters were taken).
    pub fn top(&self) -> Vec<&Counter<K>> {
        let mut sorted: Vec<&Counter<K>> = self.counters.iter().collect();
        sorted.sort_by(|a, b| b.count.cmp(&a.count).then(a.error.cmp(&b.error)));
        sorted
    }

    /// How many counters are taken (at most [`capacity`](Self::capacity)).
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// Whether nothing was counted yet.
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// The most counters this summary holds.
    pub fn capacity(&self) -> NonZeroUsize {
        self.capacity
    }

    /// The total weight counted (saturating), which the counts add up to.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Forgets every key, keeping the allocated room.
    pub fn clear(&mut self) {
        self.counters.clear();
        self.index.clear();
        self.total = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn summary(capacity: usize) -> TopKeys<String> {
        TopKeys::new(NonZeroUsize::new(capacity).unwrap())
    }

    #[test]
    fn counts_exactly_while_keys_fit() {
        let mut top = summary(4);
        for (key, times) in [("a", 5), ("b", 3), ("c", 7)] {
            for _ in 0..times {
                top.add(key, 1);
            }
        }
        let listed: Vec<(&str, u64, u64)> = top
            .top()
            .iter()
            .map(|c| (c.key.as_str(), c.count, c.error))
            .collect();
        assert_eq!(listed, [("c", 7, 0), ("a", 5, 0), ("b", 3, 0)]);
        assert_eq!(top.total(), 15);
    }

    #[test]
    fn a_new_key_replaces_the_smallest_and_inherits_its_count() {
        let mut top = summary(2);
        top.add("big", 10);
        top.add("small", 2);
        top.add("new", 1);
        assert!(top.get("small").is_none());
        assert_eq!(top.get("new").map(|c| (c.count, c.error)), Some((3, 2)));
        assert_eq!(top.get("big").map(|c| c.count), Some(10));
    }

    #[test]
    fn zero_weight_counts_nothing() {
        let mut top = summary(2);
        top.add("a", 0);
        assert!(top.is_empty());
        assert_eq!(top.total(), 0);
    }

    #[test]
    fn a_flood_of_distinct_keys_keeps_the_heavy_hitter_and_fixed_memory() {
        let mut top: TopKeys<Box<[u8]>> = TopKeys::new(NonZeroUsize::new(64).unwrap());
        let index_room = top.index.capacity();
        for i in 0..200_000u32 {
            if i % 10 == 0 {
                top.add(&b"bot"[..], 1);
            }
            top.add(format!("visitor-{i}").as_bytes(), 1);
        }
        assert_eq!(top.len(), 64);
        assert_eq!(top.counters.capacity(), 64);
        // The index never grows past the room it was made with: memory is fixed by the capacity.
        // (`capacity()` is what is left before a rehash, so replaced keys' tombstones lower it
        // between rehashes; a table that had grown would show more room, never less.)
        assert!(
            top.index.capacity() <= index_room,
            "{} > {index_room}",
            top.index.capacity()
        );
        assert_eq!(top.index.len(), 64);
        let first = top.top()[0];
        assert_eq!(&*first.key, b"bot");
        assert!(first.count - first.error <= 20_000 && 20_000 <= first.count);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut top = summary(3);
        top.add("a", 1);
        top.clear();
        assert!(top.is_empty() && top.get("a").is_none() && top.total() == 0);
    }

    proptest! {
        /// The Space-Saving guarantees, against exact counts.
        #[test]
        fn bounds_hold_for_any_stream(
            capacity in 1usize..8,
            stream in proptest::collection::vec((0u8..20, 1u64..5), 0..300),
        ) {
            let mut top = summary(capacity);
            let mut exact: HashMap<String, u64> = HashMap::new();
            for (key, weight) in &stream {
                let key = key.to_string();
                top.add(key.as_str(), *weight);
                *exact.entry(key).or_default() += weight;
            }
            let total: u64 = exact.values().sum();
            prop_assert_eq!(top.total(), total);
            prop_assert!(top.len() <= capacity);
            prop_assert_eq!(top.top().iter().map(|c| c.count).sum::<u64>(), total);
            for counter in top.top() {
                let truth = exact[&counter.key];
                prop_assert!(counter.count - counter.error <= truth, "{counter:?} truth {truth}");
                prop_assert!(truth <= counter.count, "{counter:?} truth {truth}");
            }
            for (key, truth) in &exact {
                if *truth * capacity as u64 > total {
                    prop_assert!(top.get(key.as_str()).is_some(), "{key} ({truth} of {total}) is missing");
                }
            }
            let counts: Vec<u64> = top.top().iter().map(|c| c.count).collect();
            prop_assert!(counts.windows(2).all(|w| w[0] >= w[1]));
        }
    }
}
