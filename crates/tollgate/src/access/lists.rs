//! [`AccessLists`]: every allow and deny entry, indexed for a lookup on every request (see the
//! [module docs](super) for how each kind of entry is searched).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::ops::Bound;
use std::sync::Arc;

use super::{AccessEntry, EntryKind, Listed};
use crate::cidr::Cidr;

/// An entry held by the value it names, so that a set of them is looked up by the value's bytes
/// without a second copy of them.
#[derive(Debug, Clone)]
struct ByValue(Arc<AccessEntry>);

impl ByValue {
    fn bytes(&self) -> &[u8] {
        self.0.value.as_bytes()
    }
}

impl PartialEq for ByValue {
    fn eq(&self, other: &Self) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for ByValue {}

impl PartialOrd for ByValue {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByValue {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.bytes().cmp(other.bytes())
    }
}

impl std::hash::Hash for ByValue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes().hash(state)
    }
}

impl std::borrow::Borrow<[u8]> for ByValue {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

/// What a prefix or a CIDR block covers, for [`Nested`]: two spans are nested or disjoint, and
/// in their order a span comes right before the spans it covers.
trait Span: Ord + Clone {
    /// Whether `inner` is `self` or inside it.
    fn covers(&self, inner: &Self) -> bool;
}

impl Span for ByValue {
    fn covers(&self, inner: &Self) -> bool {
        inner.bytes().starts_with(self.bytes())
    }
}

/// A CIDR block as integers: its first address and prefix length (ordered by start, the wider
/// first), and its last address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Block<T> {
    start: T,
    len: u8,
    end: T,
}

impl<T: Ord + Copy> Span for Block<T> {
    fn covers(&self, inner: &Self) -> bool {
        self.start <= inner.start && inner.end <= self.end
    }
}

/// A set of spans that can grow and shrink one at a time, and the outermost of them: the spans
/// no other covers, which are disjoint, so the one that can cover a point is its predecessor
/// (one search of `outer`).
///
/// Adding a span costs O(log n), plus O(log n) for each outer span it covers (which leaves
/// `outer`); removing an outer span brings back the spans it covered that nothing else covers,
/// O(log n) each. Nothing is ever rebuilt whole.
#[derive(Debug, Clone)]
struct Nested<S: Span> {
    all: BTreeMap<S, Arc<AccessEntry>>,
    outer: BTreeMap<S, Arc<AccessEntry>>,
}

impl<S: Span> Default for Nested<S> {
    fn default() -> Self {
        Nested {
            all: BTreeMap::new(),
            outer: BTreeMap::new(),
        }
    }
}

impl<S: Span> Nested<S> {
    fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The outer span that covers `span`, if any: `span`'s predecessor in `outer`.
    fn outer_covering(&self, span: &S) -> Option<(&S, &Arc<AccessEntry>)> {
        self.outer
            .range(..=span)
            .next_back()
            .filter(|(outer, _)| outer.covers(span))
    }

    fn insert(&mut self, span: S, entry: Arc<AccessEntry>) {
        if self.all.insert(span.clone(), Arc::clone(&entry)).is_some() {
            return;
        }
        if self.outer_covering(&span).is_some() {
            return;
        }
        let covered: Vec<S> = self
            .outer
            .range(&span..)
            .take_while(|(inner, _)| span.covers(inner))
            .map(|(inner, _)| inner.clone())
            .collect();
        for inner in covered {
            self.outer.remove(&inner);
        }
        self.outer.insert(span, entry);
    }

    fn remove(&mut self, span: &S) {
        if self.all.remove(span).is_none() || self.outer.remove(span).is_none() {
            return;
        }
        // The spans it covered that are left: the outermost of them are outer now.
        let mut last: Option<&S> = None;
        for (inner, entry) in self.all.range(span..).take_while(|(inner, _)| span.covers(inner)) {
            if last.is_some_and(|last| last.covers(inner)) {
                continue;
            }
            self.outer.insert(inner.clone(), Arc::clone(entry));
            last = Some(inner);
        }
    }
}

/// One list of one scope, compiled for lookups (see the [module docs](super)).
#[derive(Debug, Clone, Default)]
struct Matcher {
    keys: HashSet<ByValue>,
    prefixes: Nested<ByValue>,
    v4: Nested<Block<u32>>,
    v6: Nested<Block<u128>>,
}

/// Where an entry goes in a [`Matcher`].
enum Place {
    Key,
    Prefix,
    V4(Block<u32>),
    V6(Block<u128>),
}

fn place(entry: &AccessEntry) -> Option<Place> {
    Some(match entry.kind {
        EntryKind::Key => Place::Key,
        EntryKind::Prefix => Place::Prefix,
        EntryKind::Cidr => {
            // Normalized by `AccessEntry::new`: it parses.
            let cidr = entry.value.parse::<Cidr>().ok()?;
            match (cidr.addr(), cidr.last()) {
                (IpAddr::V4(first), IpAddr::V4(last)) => Place::V4(Block {
                    start: u32::from(first),
                    len: cidr.len(),
                    end: u32::from(last),
                }),
                (IpAddr::V6(first), IpAddr::V6(last)) => Place::V6(Block {
                    start: u128::from(first),
                    len: cidr.len(),
                    end: u128::from(last),
                }),
                _ => return None,
            }
        }
    })
}

impl Matcher {
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.prefixes.is_empty() && self.v4.is_empty() && self.v6.is_empty()
    }

    fn insert(&mut self, entry: &Arc<AccessEntry>) {
        match place(entry) {
            Some(Place::Key) => {
                self.keys.insert(ByValue(Arc::clone(entry)));
            }
            Some(Place::Prefix) => self
                .prefixes
                .insert(ByValue(Arc::clone(entry)), Arc::clone(entry)),
            Some(Place::V4(block)) => self.v4.insert(block, Arc::clone(entry)),
            Some(Place::V6(block)) => self.v6.insert(block, Arc::clone(entry)),
            None => {}
        }
    }

    fn remove(&mut self, entry: &Arc<AccessEntry>) {
        match place(entry) {
            Some(Place::Key) => {
                self.keys.remove(entry.value.as_bytes());
            }
            Some(Place::Prefix) => self.prefixes.remove(&ByValue(Arc::clone(entry))),
            Some(Place::V4(block)) => self.v4.remove(&block),
            Some(Place::V6(block)) => self.v6.remove(&block),
            None => {}
        }
    }

    fn find(&self, key: &[u8], ip: Option<IpAddr>) -> Option<&Arc<AccessEntry>> {
        if let Some(entry) = self.keys.get(key) {
            return Some(&entry.0);
        }
        if let Some((prefix, entry)) = self
            .prefixes
            .outer
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            && key.starts_with(prefix.bytes())
        {
            return Some(entry);
        }
        match ip? {
            IpAddr::V4(v4) => in_block(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => in_block(&self.v6, u128::from(v6)),
        }
    }
}

/// The outer block holding `address`: the last one starting at or before it, if it reaches it.
fn in_block<T: Ord + Copy + Default>(blocks: &Nested<Block<T>>, address: T) -> Option<&Arc<AccessEntry>> {
    let point = Block {
        start: address,
        len: u8::MAX,
        end: T::default(),
    };
    let (block, entry) = blocks.outer.range(..=point).next_back()?;
    (address <= block.end).then_some(entry)
}

/// The allow and deny lists of one scope.
#[derive(Debug, Clone, Default)]
struct Scope {
    allow: Matcher,
    deny: Matcher,
}

impl Scope {
    fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    fn list(&mut self, list: Listed) -> &mut Matcher {
        match list {
            Listed::Allow => &mut self.allow,
            Listed::Deny => &mut self.deny,
        }
    }
}

/// Every allow and deny list, global and per policy, compiled for lookups on every request.
///
/// Entries are added and removed one at a time ([`insert`](Self::insert),
/// [`remove`](Self::remove)) in O(log n) each (an entry that covers or uncovers nested prefixes
/// or ranges also pays O(log n) for each of them), so a long list grows without ever being
/// compiled again whole; [`new`](Self::new) inserts its entries one by one. Each entry is kept
/// once, shared by every index that holds it: the lists cost about the size of their values.
///
/// ```
/// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
///
/// let mut lists = AccessLists::new([
///     AccessEntry::new(None, Listed::Allow, EntryKind::Cidr, "192.0.2.0/24")?,
///     AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "192.0.2.66")?,
///     AccessEntry::new(Some("login"), Listed::Deny, EntryKind::Prefix, "bot-")?,
/// ]);
/// let list = |lists: &AccessLists, policy: &str, key: &str| lists.lookup(policy, key.as_bytes()).map(|e| e.list());
/// assert_eq!(list(&lists, "api", "192.0.2.10"), Some(Listed::Allow));
/// assert_eq!(list(&lists, "api", "192.0.2.66"), Some(Listed::Deny), "deny wins");
/// assert_eq!(list(&lists, "login", "bot-7"), Some(Listed::Deny));
/// assert_eq!(list(&lists, "api", "bot-7"), None, "a policy's list is its own");
/// assert_eq!(list(&lists, "api", "198.51.100.1"), None);
///
/// let scraper = AccessEntry::new(Some("api"), Listed::Deny, EntryKind::Key, "scraper-42")?;
/// assert!(lists.insert(scraper.clone()));
/// assert_eq!(list(&lists, "api", "scraper-42"), Some(Listed::Deny));
/// assert!(lists.remove(&scraper));
/// assert_eq!(list(&lists, "api", "scraper-42"), None);
/// # Ok::<(), tollgate::access::AccessError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct AccessLists {
    global: Scope,
    policies: HashMap<Box<str>, Scope>,
    /// Every entry once, sorted.
    entries: BTreeSet<Arc<AccessEntry>>,
    /// How many CIDR ranges are listed: only when some are is a key parsed as an address.
    ranges: usize,
}

impl AccessLists {
    /// Compiles `entries` (duplicates are kept once).
    pub fn new(entries: impl IntoIterator<Item = AccessEntry>) -> Self {
        let mut lists = AccessLists::default();
        for entry in entries {
            lists.insert(entry);
        }
        lists
    }

    /// Adds `entry`; `false` when it was there already. O(log n) (see the type's docs).
    pub fn insert(&mut self, entry: impl Into<Arc<AccessEntry>>) -> bool {
        let entry = entry.into();
        if !self.entries.insert(Arc::clone(&entry)) {
            return false;
        }
        self.ranges += usize::from(entry.kind == EntryKind::Cidr);
        let scope = match entry.policy() {
            None => &mut self.global,
            Some(name) => self.policies.entry(name.into()).or_default(),
        };
        scope.list(entry.list).insert(&entry);
        true
    }

    /// Removes `entry`; `false` when it was not there. O(log n) (see the type's docs).
    pub fn remove(&mut self, entry: &AccessEntry) -> bool {
        let Some(entry) = self.entries.take(entry) else {
            return false;
        };
        self.ranges -= usize::from(entry.kind == EntryKind::Cidr);
        match entry.policy() {
            None => self.global.list(entry.list).remove(&entry),
            Some(name) => {
                if let Some(scope) = self.policies.get_mut(name) {
                    scope.list(entry.list).remove(&entry);
                    if scope.is_empty() {
                        self.policies.remove(name);
                    }
                }
            }
        }
        true
    }

    /// Whether `entry` is listed.
    ///
    /// ```
    /// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    ///
    /// let office = AccessEntry::new(None, Listed::Allow, EntryKind::Cidr, "192.0.2.0/24")?;
    /// let lists = AccessLists::new([office.clone()]);
    /// assert!(lists.contains(&office));
    /// # Ok::<(), tollgate::access::AccessError>(())
    /// ```
    pub fn contains(&self, entry: &AccessEntry) -> bool {
        self.entries.contains(entry)
    }

    /// True when there is no entry at all: nothing to look up.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many distinct entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry, sorted (global ones first, then by policy, list, kind and value).
    pub fn entries(&self) -> impl Iterator<Item = &AccessEntry> {
        self.entries.iter().map(|e| &**e)
    }

    /// The entry `key` matches under `policy`: a deny entry (global or the policy's) if any
    /// matches, else an allow entry, else `None`. Among entries of one list, an exact key is
    /// reported before a prefix and a prefix before a range; of nested prefixes or ranges, the
    /// outermost.
    pub fn lookup(&self, policy: &str, key: &[u8]) -> Option<&Arc<AccessEntry>> {
        if self.entries.is_empty() {
            return None;
        }
        let own = self.policies.get(policy);
        let ip = if self.ranges > 0 { parse_ip(key) } else { None };
        let deny = self
            .global
            .deny
            .find(key, ip)
            .or_else(|| own.and_then(|s| s.deny.find(key, ip)));
        deny.or_else(|| {
            self.global
                .allow
                .find(key, ip)
                .or_else(|| own.and_then(|s| s.allow.find(key, ip)))
        })
    }

    /// The global deny entry `key` matches, if any: for a key no policy decides (an Envoy
    /// descriptor that matched no limit), which only the global lists can block.
    ///
    /// ```
    /// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    ///
    /// let lists = AccessLists::new([
    ///     AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "192.0.2.0/24")?,
    ///     AccessEntry::new(Some("api"), Listed::Deny, EntryKind::Key, "bob")?,
    /// ]);
    /// assert!(lists.global_deny(b"192.0.2.5").is_some());
    /// assert!(lists.global_deny(b"bob").is_none(), "a policy's own entry");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn global_deny(&self, key: &[u8]) -> Option<&Arc<AccessEntry>> {
        if self.entries.is_empty() {
            return None;
        }
        let ip = if self.ranges > 0 { parse_ip(key) } else { None };
        self.global.deny.find(key, ip)
    }

    /// Whether any entry applies to `policy` (its own or a global one).
    pub fn applies_to(&self, policy: &str) -> bool {
        !self.global.is_empty() || self.policies.contains_key(policy)
    }
}

/// A key as an IP address, when it is one in text form: bare, with a port (`203.0.113.9:443`,
/// `[2001:db8::1]:443`) or in brackets (`[2001:db8::1]`), as clients' addresses are often
/// written; an IPv4-mapped IPv6 address as IPv4.
pub(super) fn parse_ip(key: &[u8]) -> Option<IpAddr> {
    // The longest IPv6 text is 45 bytes, 53 in brackets with a port; anything longer is not an
    // address.
    if key.len() > 53 {
        return None;
    }
    let text = std::str::from_utf8(key).ok()?;
    let ip = text
        .parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())?;
    Some(ip.to_canonical())
}
