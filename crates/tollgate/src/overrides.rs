//! Runtime overrides: another limit for one key, or for every key under a prefix, of a policy,
//! set while the service runs ("give this tenant 10 000 a minute now, without a deploy").
//!
//! An override replaces the *parameters* of the policy's algorithm for the keys it covers (the
//! limit and window of a window, the capacity and rate of a bucket, the rate and burst of GCRA);
//! it keeps the algorithm, the penalty and the state, so a key moves to its new limit with the
//! budget it has spent so far. It is validated like a configured limit (the algorithm's own
//! constructor checks the bounds) and must use the policy's algorithm, so a reloaded policy that
//! changed algorithm simply stops matching old overrides instead of misreading them.
//!
//! Overrides live in the store, beside the state they govern, so every instance sharing the store
//! applies them ([`OverrideStore`]). Which one applies to a key: an override of that exact key,
//! else the longest prefix override that the key starts with, else the policy itself. An
//! override may expire (`ttl`); after that the policy applies again.
//!
//! [`OverrideTable`] is the in-process index both stores use: the memory store keeps every
//! override in one; the Redis store keeps its cached copy of the prefix overrides in one.
//!
//! The cost of a check is still bounded by the policy's own limit
//! ([`Policy::max_cost`]): the engine validates costs before it knows the key's override.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::ops::Bound;
use std::time::Duration;

use crate::{Algorithm, Error, Policy, bounds};

/// The most prefix overrides a policy has, in any store: each instance of a networked store
/// keeps every policy's in memory and reloads them whole, so the set must stay small. Per
/// policy, so that one policy's overrides never crowd out another's.
///
/// ```
/// assert_eq!(tollgate::overrides::MAX_PREFIX_OVERRIDES, 1024);
/// ```
pub const MAX_PREFIX_OVERRIDES: usize = 1024;

/// The most exact-key overrides a policy has, in any store (the memory store and Redis alike).
///
/// ```
/// assert_eq!(tollgate::overrides::MAX_KEY_OVERRIDES, 100_000);
/// ```
pub const MAX_KEY_OVERRIDES: usize = 100_000;

/// The most overrides one [`list_overrides`](OverrideStore::list_overrides) answers: a listing is
/// read page by page, so no answer grows with the number of overrides.
///
/// ```
/// assert_eq!(tollgate::overrides::MAX_PAGE, 1000);
/// ```
pub const MAX_PAGE: usize = 1000;

/// One page of a policy's overrides: keys first then prefixes, each in byte order, and where the
/// next page starts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OverridePage {
    /// The live overrides of this page.
    pub overrides: Vec<Override>,
    /// The target to list after for the next page; `None` when this page is the last.
    pub next: Option<OverrideTarget>,
}

/// What an override covers: one key, or every key that starts with a prefix.
///
/// ```
/// use tollgate::overrides::OverrideTarget;
///
/// let tenant = OverrideTarget::prefix("tenant-42:");
/// assert!(tenant.covers(b"tenant-42:alice"));
/// assert!(!OverrideTarget::key("tenant-42").covers(b"tenant-42:alice"));
/// assert_eq!(tenant.kind(), "prefix");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OverrideTarget {
    /// Exactly this key.
    Key(Vec<u8>),
    /// Every key starting with these bytes.
    Prefix(Vec<u8>),
}

impl OverrideTarget {
    /// One key.
    pub fn key(key: impl AsRef<[u8]>) -> Self {
        OverrideTarget::Key(key.as_ref().to_vec())
    }

    /// Every key starting with `prefix`.
    pub fn prefix(prefix: impl AsRef<[u8]>) -> Self {
        OverrideTarget::Prefix(prefix.as_ref().to_vec())
    }

    /// The key or prefix bytes.
    ///
    /// ```
    /// assert_eq!(tollgate::overrides::OverrideTarget::key("k").bytes(), b"k");
    /// ```
    pub fn bytes(&self) -> &[u8] {
        match self {
            OverrideTarget::Key(b) | OverrideTarget::Prefix(b) => b,
        }
    }

    /// `key` or `prefix`.
    ///
    /// ```
    /// assert_eq!(tollgate::overrides::OverrideTarget::key("k").kind(), "key");
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            OverrideTarget::Key(_) => "key",
            OverrideTarget::Prefix(_) => "prefix",
        }
    }

    /// Whether this target covers `key`.
    pub fn covers(&self, key: &[u8]) -> bool {
        match self {
            OverrideTarget::Key(k) => k == key,
            OverrideTarget::Prefix(p) => key.starts_with(p),
        }
    }

    /// Rejects an empty target or one longer than a key may be.
    ///
    /// ```
    /// use tollgate::overrides::OverrideTarget;
    ///
    /// assert!(OverrideTarget::prefix("").validate().is_err());
    /// assert!(OverrideTarget::prefix("t:").validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        crate::store::validate_key(self.bytes())
    }
}

/// An override: what it covers, the algorithm parameters it puts in force, and for how much
/// longer (`None`: until removed).
///
/// ```
/// use std::time::Duration;
/// use tollgate::overrides::{Override, OverrideTarget};
/// use tollgate::{Algorithm, Policy, Rate};
///
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// let vip = Override::new(
///     &api,
///     OverrideTarget::key("tenant-42"),
///     Algorithm::gcra(Rate::per_second(100)?, 100)?,
///     Some(Duration::from_secs(3600)),
/// )?;
/// assert_eq!(vip.apply_to(&api).max_cost(), 100);
///
/// // An override keeps the policy's algorithm.
/// let other = Algorithm::sliding_log(5, Duration::from_secs(1))?;
/// let err = Override::new(&api, OverrideTarget::key("t"), other, None).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "an override of policy `api` must use its algorithm gcra, not sliding_log"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The key or prefix covered.
    pub target: OverrideTarget,
    /// The parameters in force for it.
    pub algorithm: Algorithm,
    /// Time left before it lapses; `None` for an override that stays until removed.
    pub expires_in: Option<Duration>,
}

impl Override {
    /// An override of `policy` for `target`, validated: the target is a usable key or prefix,
    /// the algorithm is the policy's, and the TTL is 1 ms to 1000 days.
    pub fn new(
        policy: &Policy,
        target: OverrideTarget,
        algorithm: Algorithm,
        ttl: Option<Duration>,
    ) -> Result<Self, Error> {
        target.validate()?;
        if matches!(policy.algorithm(), Algorithm::CalendarQuota(_)) {
            return Err(Error::OverrideUnsupported {
                policy: policy.name().to_owned(),
                algorithm: policy.algorithm().name(),
            });
        }
        if algorithm.name() != policy.algorithm().name() {
            return Err(Error::OverrideAlgorithm {
                policy: policy.name().to_owned(),
                expected: policy.algorithm().name(),
                got: algorithm.name(),
            });
        }
        if let Some(ttl) = ttl {
            let (min, max) = (bounds::MIN_PERIOD, bounds::MAX_PERIOD);
            if ttl < min || ttl > max {
                return Err(Error::TtlOutOfRange { value: ttl, min, max });
            }
        }
        Ok(Override {
            target,
            algorithm,
            expires_in: ttl,
        })
    }

    /// `policy` with this override's parameters: same name (so the same state), penalty and
    /// failure mode.
    pub fn apply_to(&self, policy: &Policy) -> Policy {
        policy.with_parameters(self.algorithm.clone())
    }
}

/// Where overrides are kept: every store that decides also keeps its overrides, so that they
/// apply wherever the store's state is decided.
pub trait OverrideStore: Send + Sync {
    /// Sets (or replaces) an override of `policy`. Build it with [`Override::new`], which
    /// validates it.
    fn set_override(
        &self,
        policy: &Policy,
        value: &Override,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The override of `policy` for exactly `target`, if one is set and has not lapsed.
    fn get_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> impl Future<Output = Result<Option<Override>, Error>> + Send;

    /// One page of the live overrides of `policy`: keys first then prefixes, each in byte
    /// order, starting after `after` (from the first when `None`), at most `limit` of them
    /// (taken as 1 to [`MAX_PAGE`]). [`OverridePage::next`] is where the next page starts.
    fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> impl Future<Output = Result<OverridePage, Error>> + Send;

    /// Removes the override of `policy` for exactly `target`; `true` when there was one.
    fn remove_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> impl Future<Output = Result<bool, Error>> + Send;

    /// The override that applies to `key` under `policy` now: the key's own, else the longest
    /// matching prefix's. A networked store answers from what its decisions read (for prefix
    /// overrides, its cached copy).
    fn override_for(
        &self,
        policy: &Policy,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Override>, Error>> + Send;
}

impl<S: OverrideStore + ?Sized> OverrideStore for std::sync::Arc<S> {
    fn set_override(
        &self,
        policy: &Policy,
        value: &Override,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).set_override(policy, value)
    }

    fn get_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> impl Future<Output = Result<Option<Override>, Error>> + Send {
        (**self).get_override(policy, target)
    }

    fn list_overrides(
        &self,
        policy: &Policy,
        after: Option<&OverrideTarget>,
        limit: usize,
    ) -> impl Future<Output = Result<OverridePage, Error>> + Send {
        (**self).list_overrides(policy, after, limit)
    }

    fn remove_override(
        &self,
        policy: &Policy,
        target: &OverrideTarget,
    ) -> impl Future<Output = Result<bool, Error>> + Send {
        (**self).remove_override(policy, target)
    }

    fn override_for(
        &self,
        policy: &Policy,
        key: &[u8],
    ) -> impl Future<Output = Result<Option<Override>, Error>> + Send {
        (**self).override_for(policy, key)
    }
}

/// One stored override: the parameters and when they lapse (µs on the table's clock).
#[derive(Debug, Clone)]
struct Entry {
    algorithm: Algorithm,
    expires_at_us: Option<u64>,
}

impl Entry {
    fn live(&self, now_us: u64) -> bool {
        self.expires_at_us.is_none_or(|at| at > now_us)
    }

    fn to_override(&self, target: OverrideTarget, now_us: u64) -> Override {
        Override {
            target,
            algorithm: self.algorithm.clone(),
            expires_in: self
                .expires_at_us
                .map(|at| Duration::from_micros(at.saturating_sub(now_us))),
        }
    }
}

/// One policy's prefix overrides, with the distinct prefix lengths, longest first: finding the
/// longest prefix of a key is one hash lookup per distinct length, however many prefixes there
/// are.
#[derive(Debug, Default, Clone)]
struct Prefixes {
    by_prefix: HashMap<Vec<u8>, Entry>,
    lengths: BTreeSet<usize>,
}

impl Prefixes {
    fn relength(&mut self) {
        self.lengths = self.by_prefix.keys().map(Vec::len).collect();
    }
}

/// An in-process index of overrides by policy name: exact keys in an ordered map, prefixes by
/// length. Times are µs on whatever clock the caller uses; lapsed entries are ignored and
/// dropped when met. Each policy holds at most [`MAX_KEY_OVERRIDES`] keys and
/// [`MAX_PREFIX_OVERRIDES`] prefixes.
///
/// ```
/// use tollgate::overrides::{OverrideTable, OverrideTarget};
/// use tollgate::{Algorithm, Rate};
///
/// let mut table = OverrideTable::default();
/// let gold = Algorithm::gcra(Rate::per_second(100)?, 100)?;
/// let silver = Algorithm::gcra(Rate::per_second(50)?, 50)?;
/// table.set("api", OverrideTarget::prefix("t:"), gold, None, 0)?;
/// table.set("api", OverrideTarget::prefix("t:4"), silver, Some(1_000), 0)?;
/// let found = table.find("api", b"t:42", 0).expect("the longer prefix");
/// assert_eq!(found.target, OverrideTarget::prefix("t:4"));
/// // The longer one lapses at 1 000 µs; then the shorter applies.
/// assert_eq!(table.find("api", b"t:42", 1_000).unwrap().target, OverrideTarget::prefix("t:"));
/// assert!(table.find("web", b"t:42", 0).is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct OverrideTable {
    /// Never holds an empty map.
    keys: HashMap<String, BTreeMap<Vec<u8>, Entry>>,
    /// Never holds an empty set.
    prefixes: HashMap<String, Prefixes>,
}

impl OverrideTable {
    /// True when the table holds nothing (lapsed entries not yet dropped count).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.prefixes.is_empty()
    }

    /// Sets an override; refused past [`MAX_KEY_OVERRIDES`] keys or [`MAX_PREFIX_OVERRIDES`]
    /// prefixes of the policy (its lapsed ones are dropped first).
    pub fn set(
        &mut self,
        policy: &str,
        target: OverrideTarget,
        algorithm: Algorithm,
        expires_at_us: Option<u64>,
        now_us: u64,
    ) -> Result<(), Error> {
        let entry = Entry {
            algorithm,
            expires_at_us,
        };
        let full = |kind, max| Error::TooManyOverrides {
            policy: policy.to_owned(),
            kind,
            max,
        };
        match target {
            OverrideTarget::Key(key) => {
                let held = self.keys.get(policy).map_or(0, BTreeMap::len);
                let exists = self.keys.get(policy).is_some_and(|m| m.contains_key(&key));
                if !exists && held >= MAX_KEY_OVERRIDES {
                    self.purge_policy(policy, now_us);
                    if self.keys.get(policy).map_or(0, BTreeMap::len) >= MAX_KEY_OVERRIDES {
                        return Err(full("key", MAX_KEY_OVERRIDES));
                    }
                }
                self.keys.entry(policy.to_owned()).or_default().insert(key, entry);
            }
            OverrideTarget::Prefix(prefix) => {
                let held = self.prefixes.get(policy).map_or(0, |p| p.by_prefix.len());
                let exists = self
                    .prefixes
                    .get(policy)
                    .is_some_and(|p| p.by_prefix.contains_key(&prefix));
                if !exists && held >= MAX_PREFIX_OVERRIDES {
                    self.purge_policy(policy, now_us);
                    if self.prefixes.get(policy).map_or(0, |p| p.by_prefix.len()) >= MAX_PREFIX_OVERRIDES {
                        return Err(full("prefix", MAX_PREFIX_OVERRIDES));
                    }
                }
                let prefixes = self.prefixes.entry(policy.to_owned()).or_default();
                prefixes.lengths.insert(prefix.len());
                prefixes.by_prefix.insert(prefix, entry);
            }
        }
        Ok(())
    }

    /// The live override of `policy` for exactly `target`.
    pub fn get(&self, policy: &str, target: &OverrideTarget, now_us: u64) -> Option<Override> {
        let entry = match target {
            OverrideTarget::Key(key) => self.keys.get(policy)?.get(key),
            OverrideTarget::Prefix(prefix) => self.prefixes.get(policy)?.by_prefix.get(prefix),
        }?;
        entry
            .live(now_us)
            .then(|| entry.to_override(target.clone(), now_us))
    }

    /// Removes the override of `policy` for `target`; `true` when a live one was there.
    pub fn remove(&mut self, policy: &str, target: &OverrideTarget, now_us: u64) -> bool {
        let removed = match target {
            OverrideTarget::Key(key) => {
                let Some(map) = self.keys.get_mut(policy) else {
                    return false;
                };
                let removed = map.remove(key);
                if map.is_empty() {
                    self.keys.remove(policy);
                }
                removed
            }
            OverrideTarget::Prefix(prefix) => {
                let Some(prefixes) = self.prefixes.get_mut(policy) else {
                    return false;
                };
                let removed = prefixes.by_prefix.remove(prefix);
                prefixes.relength();
                if prefixes.by_prefix.is_empty() {
                    self.prefixes.remove(policy);
                }
                removed
            }
        };
        removed.is_some_and(|e| e.live(now_us))
    }

    /// One page of the live overrides of `policy`, as
    /// [`OverrideStore::list_overrides`] describes: keys first then prefixes, each in byte
    /// order, after `after`, at most `limit` (1 to [`MAX_PAGE`]). Keys cost O(log n + limit);
    /// prefixes (at most [`MAX_PREFIX_OVERRIDES`]) are sorted for each page.
    ///
    /// ```
    /// use tollgate::overrides::{OverrideTable, OverrideTarget};
    /// use tollgate::{Algorithm, Rate};
    ///
    /// let mut table = OverrideTable::default();
    /// let more = Algorithm::gcra(Rate::per_second(100)?, 100)?;
    /// for target in [OverrideTarget::key("b"), OverrideTarget::key("a"), OverrideTarget::prefix("t:")] {
    ///     table.set("api", target, more.clone(), None, 0)?;
    /// }
    /// let first = table.page("api", None, 2, 0);
    /// assert_eq!(first.overrides.len(), 2);
    /// assert_eq!(first.next, Some(OverrideTarget::key("b")));
    /// let second = table.page("api", first.next.as_ref(), 2, 0);
    /// assert_eq!(second.overrides[0].target, OverrideTarget::prefix("t:"));
    /// assert_eq!(second.next, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn page(
        &self,
        policy: &str,
        after: Option<&OverrideTarget>,
        limit: usize,
        now_us: u64,
    ) -> OverridePage {
        let limit = limit.clamp(1, MAX_PAGE);
        // One more than the page, to know whether another follows.
        let mut listed: Vec<Override> = Vec::with_capacity(limit + 1);
        if !matches!(after, Some(OverrideTarget::Prefix(_))) {
            let from = match after {
                Some(OverrideTarget::Key(key)) => Bound::Excluded(key.as_slice()),
                _ => Bound::Unbounded,
            };
            listed.extend(
                self.keys
                    .get(policy)
                    .into_iter()
                    .flat_map(|m| m.range::<[u8], _>((from, Bound::Unbounded)))
                    .filter(|(_, e)| e.live(now_us))
                    .take(limit + 1)
                    .map(|(k, e)| e.to_override(OverrideTarget::Key(k.clone()), now_us)),
            );
        }
        if listed.len() <= limit {
            let mut prefixes: Vec<(&Vec<u8>, &Entry)> = self
                .prefixes
                .get(policy)
                .into_iter()
                .flat_map(|p| &p.by_prefix)
                .filter(|(p, e)| {
                    e.live(now_us)
                        && match after {
                            Some(OverrideTarget::Prefix(after)) => p.as_slice() > after.as_slice(),
                            _ => true,
                        }
                })
                .collect();
            prefixes.sort_unstable_by(|a, b| a.0.cmp(b.0));
            let room = limit + 1 - listed.len();
            listed.extend(
                prefixes
                    .into_iter()
                    .take(room)
                    .map(|(p, e)| e.to_override(OverrideTarget::Prefix(p.clone()), now_us)),
            );
        }
        let more = listed.len() > limit;
        listed.truncate(limit);
        OverridePage {
            next: more.then(|| listed.last().map(|o| o.target.clone())).flatten(),
            overrides: listed,
        }
    }

    /// The override that applies to `key` under `policy`: its own, else the longest live
    /// prefix's.
    pub fn find(&self, policy: &str, key: &[u8], now_us: u64) -> Option<Override> {
        if let Some(entry) = self.keys.get(policy).and_then(|m| m.get(key))
            && entry.live(now_us)
        {
            return Some(entry.to_override(OverrideTarget::Key(key.to_vec()), now_us));
        }
        self.find_prefix(policy, key, now_us)
    }

    /// The longest live prefix override of `policy` that `key` starts with.
    pub fn find_prefix(&self, policy: &str, key: &[u8], now_us: u64) -> Option<Override> {
        let prefixes = self.prefixes.get(policy)?;
        prefixes
            .lengths
            .iter()
            .rev()
            .filter(|&&len| len <= key.len())
            .find_map(|&len| {
                let prefix = &key[..len];
                prefixes
                    .by_prefix
                    .get(prefix)
                    .filter(|e| e.live(now_us))
                    .map(|e| e.to_override(OverrideTarget::Prefix(prefix.to_vec()), now_us))
            })
    }

    /// Drops every lapsed entry.
    pub fn purge(&mut self, now_us: u64) {
        let policies: Vec<String> = self.keys.keys().chain(self.prefixes.keys()).cloned().collect();
        for policy in policies {
            self.purge_policy(&policy, now_us);
        }
    }

    /// Drops the lapsed entries of one policy.
    fn purge_policy(&mut self, policy: &str, now_us: u64) {
        if let Some(map) = self.keys.get_mut(policy) {
            map.retain(|_, e| e.live(now_us));
            if map.is_empty() {
                self.keys.remove(policy);
            }
        }
        if let Some(prefixes) = self.prefixes.get_mut(policy) {
            prefixes.by_prefix.retain(|_, e| e.live(now_us));
            prefixes.relength();
            if prefixes.by_prefix.is_empty() {
                self.prefixes.remove(policy);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn gcra(n: u64) -> Algorithm {
        Algorithm::gcra(Rate::per_second(n).unwrap(), n).unwrap()
    }

    #[test]
    fn the_exact_key_wins_over_any_prefix() {
        let mut table = OverrideTable::default();
        table
            .set("p", OverrideTarget::prefix("a"), gcra(2), None, 0)
            .unwrap();
        table
            .set("p", OverrideTarget::key("ab"), gcra(3), None, 0)
            .unwrap();
        assert_eq!(table.find("p", b"ab", 0).unwrap().algorithm, gcra(3));
        assert_eq!(table.find("p", b"abc", 0).unwrap().algorithm, gcra(2));
        assert!(table.find("p", b"b", 0).is_none());
    }

    #[test]
    fn removing_a_prefix_forgets_its_length() {
        let mut table = OverrideTable::default();
        table
            .set("p", OverrideTarget::prefix("abc"), gcra(2), None, 0)
            .unwrap();
        table
            .set("p", OverrideTarget::prefix("ab"), gcra(2), None, 0)
            .unwrap();
        assert!(table.remove("p", &OverrideTarget::prefix("abc"), 0));
        assert!(!table.remove("p", &OverrideTarget::prefix("abc"), 0));
        assert_eq!(table.prefixes["p"].lengths, BTreeSet::from([2]));
        assert!(table.remove("p", &OverrideTarget::prefix("ab"), 0));
        assert!(table.is_empty());
    }

    #[test]
    fn lapsed_overrides_are_neither_found_nor_listed() {
        let mut table = OverrideTable::default();
        table
            .set("p", OverrideTarget::key("k"), gcra(2), Some(10), 0)
            .unwrap();
        assert_eq!(
            table.page("p", None, 10, 4).overrides[0].expires_in,
            Some(Duration::from_micros(6))
        );
        assert!(table.find("p", b"k", 10).is_none());
        assert!(table.page("p", None, 10, 10).overrides.is_empty());
        table.purge(10);
        assert!(table.is_empty());
    }

    #[test]
    fn prefix_overrides_are_bounded_per_policy() {
        let mut table = OverrideTable::default();
        for i in 0..MAX_PREFIX_OVERRIDES {
            table
                .set("p", OverrideTarget::prefix(i.to_string()), gcra(1), None, 0)
                .unwrap();
        }
        let err = table
            .set("p", OverrideTarget::prefix("x"), gcra(1), None, 0)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy `p` has 1024 prefix overrides, the most a policy may have"
        );
        // Replacing one that exists is not a new one.
        assert!(
            table
                .set("p", OverrideTarget::prefix("7"), gcra(2), None, 0)
                .is_ok()
        );
        // Another policy has its own room.
        assert!(
            table
                .set("q", OverrideTarget::prefix("x"), gcra(1), None, 0)
                .is_ok()
        );
    }

    #[test]
    fn key_overrides_are_bounded_per_policy_and_lapsed_ones_make_room() {
        let mut table = OverrideTable::default();
        for i in 0..MAX_KEY_OVERRIDES {
            let lapses = (i == 7).then_some(10);
            table
                .set("p", OverrideTarget::key(i.to_string()), gcra(1), lapses, 0)
                .unwrap();
        }
        let err = table
            .set("p", OverrideTarget::key("x"), gcra(1), None, 0)
            .unwrap_err();
        assert!(matches!(
            err,
            Error::TooManyOverrides {
                kind: "key",
                max: MAX_KEY_OVERRIDES,
                ..
            }
        ));
        assert!(table.set("q", OverrideTarget::key("x"), gcra(1), None, 0).is_ok());
        assert!(
            table
                .set("p", OverrideTarget::key("x"), gcra(1), None, 10)
                .is_ok(),
            "7 lapsed"
        );
    }

    #[test]
    fn pages_cover_every_live_override_once_in_order() {
        let mut table = OverrideTable::default();
        for i in 0..25 {
            table
                .set("p", OverrideTarget::key(format!("k{i:02}")), gcra(1), None, 0)
                .unwrap();
        }
        table
            .set("p", OverrideTarget::key("lapsed"), gcra(1), Some(5), 0)
            .unwrap();
        for i in 0..7 {
            table
                .set("p", OverrideTarget::prefix(format!("p{i}")), gcra(1), None, 0)
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut after: Option<OverrideTarget> = None;
        for _ in 0..10 {
            let page = table.page("p", after.as_ref(), 4, 5);
            assert!(page.overrides.len() <= 4);
            seen.extend(page.overrides.into_iter().map(|o| o.target));
            after = page.next;
            if after.is_none() {
                break;
            }
        }
        assert!(after.is_none(), "listing ended");
        let expected: Vec<OverrideTarget> = (0..25)
            .map(|i| OverrideTarget::key(format!("k{i:02}")))
            .chain((0..7).map(|i| OverrideTarget::prefix(format!("p{i}"))))
            .collect();
        assert_eq!(seen, expected);
    }
}

/// The examples of `docs/overrides.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/overrides.md")]
struct OverridesDoc;
