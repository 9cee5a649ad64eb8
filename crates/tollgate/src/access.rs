//! Allow and deny lists: keys that are never limited, and keys that are always refused, whatever
//! their budget says.
//!
//! Operators ask for both in the same breath: "never limit our office, always block that range".
//! An entry names a key three ways:
//!
//! - a **CIDR** range, IPv4 or IPv6 (`203.0.113.0/24`, `2001:db8::/32`; a bare address is its
//!   own `/32` or `/128`), matched by keys that are an IP address in text form (an IPv4-mapped
//!   IPv6 address is matched as its IPv4 address);
//! - an exact **key** (`office-gateway`);
//! - a key **prefix** (`internal:`): every key that starts with it.
//!
//! Each entry is on the allow or the deny list, and applies either to one policy or to every
//! policy (global). **Deny wins**: a key on any deny list that applies is refused even if it is
//! also on an allow list, so a broad allow (`10.0.0.0/8`) cannot hide a narrow block.
//!
//! The [`Engine`](crate::Engine) applies the lists before the store is asked (see its docs):
//! a denied rule refuses the whole request with [`Outcome::Blocked`](crate::Outcome::Blocked),
//! spending nothing; an allowed rule is decided as a question in shadow mode (it reads the
//! budget and spends nothing, so it is counted and reports its numbers, but it never denies).
//!
//! Lookups are made on every request, so [`AccessLists`] is indexed for them: exact keys in a
//! hash set, prefixes in an ordered set of the outermost ones (nested prefixes set aside, so the
//! only prefix that can match a key is its predecessor in byte order: one search), and CIDR
//! ranges as ordered, disjoint integer ranges (two CIDR blocks are either nested or disjoint, so
//! keeping the outer of nested blocks leaves disjoint ranges: one search). A lookup costs a few
//! comparisons whatever the number of entries; `benches/access.rs` measures it. The indexes are
//! ordered trees rather than sorted arrays so that an entry added or removed through an admin API
//! costs O(log n), never a rebuild of the whole lists.
//!
//! This module is pure: entries come from the config or an admin API, and the caller decides
//! where they are kept.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::IpAddr;
use std::ops::Bound;
use std::sync::Arc;

use crate::bounds::{MAX_KEY_LEN, MAX_NAME_LEN};
use crate::cidr::{Cidr, CidrError};

/// Which list an entry is on.
///
/// ```
/// use tollgate::access::Listed;
///
/// assert_eq!("deny".parse::<Listed>()?, Listed::Deny);
/// assert_eq!(Listed::Allow.as_str(), "allow");
/// # Ok::<(), tollgate::access::AccessError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Listed {
    /// Never limited (but still counted).
    Allow,
    /// Always refused.
    Deny,
}

impl Listed {
    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Listed::Allow => "allow",
            Listed::Deny => "deny",
        }
    }
}

impl std::str::FromStr for Listed {
    type Err = AccessError;

    fn from_str(text: &str) -> Result<Self, AccessError> {
        match text {
            "allow" => Ok(Listed::Allow),
            "deny" => Ok(Listed::Deny),
            _ => Err(AccessError::UnknownList(text.to_owned())),
        }
    }
}

/// How an entry names keys.
///
/// ```
/// use tollgate::access::EntryKind;
///
/// assert_eq!("prefix".parse::<EntryKind>()?, EntryKind::Prefix);
/// assert_eq!(EntryKind::Cidr.as_str(), "cidr");
/// # Ok::<(), tollgate::access::AccessError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// An IPv4 or IPv6 range.
    Cidr,
    /// One key, exactly.
    Key,
    /// Every key starting with the value.
    Prefix,
}

impl EntryKind {
    /// `cidr`, `key` or `prefix`.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Cidr => "cidr",
            EntryKind::Key => "key",
            EntryKind::Prefix => "prefix",
        }
    }
}

impl std::str::FromStr for EntryKind {
    type Err = AccessError;

    fn from_str(text: &str) -> Result<Self, AccessError> {
        match text {
            "cidr" => Ok(EntryKind::Cidr),
            "key" => Ok(EntryKind::Key),
            "prefix" => Ok(EntryKind::Prefix),
            _ => Err(AccessError::UnknownKind(text.to_owned())),
        }
    }
}

/// Why an entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// A list other than `allow` or `deny`.
    #[error("unknown list `{0}`: expected `allow` or `deny`")]
    UnknownList(String),
    /// A kind other than `cidr`, `key` or `prefix`.
    #[error("unknown entry kind `{0}`: expected `cidr`, `key` or `prefix`")]
    UnknownKind(String),
    /// An empty value.
    #[error("the value must not be empty")]
    Empty,
    /// A value longer than a key may be.
    #[error("the value is {len} bytes, above the maximum of {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A policy name that no policy can have.
    #[error("policy name must be 1 to {max} bytes, got {len}")]
    BadPolicy {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// Not a CIDR range.
    #[error("expected an IP address or a CIDR range like 203.0.113.0/24 or 2001:db8::/32, got \"{0}\"")]
    BadCidr(String),
    /// A range with bits set after its prefix: almost always a typo for the network.
    #[error("\"{given}\" has bits set after the /{len}; the range is {network}")]
    HostBits {
        /// As written.
        given: String,
        /// Its prefix length.
        len: u8,
        /// The range it is in.
        network: String,
    },
    /// An encoded entry ([`AccessEntry::encode`]) that does not decode.
    #[error("not an encoded access list entry: {0:?}")]
    BadEncoding(String),
}

/// One entry of an allow or deny list: which policy (or every one), which list, and the keys.
///
/// Built with [`AccessEntry::new`], which validates and normalizes the value (a CIDR range is
/// written as its network and prefix length, `2001:DB8::1` as `2001:db8::1/128`), so two
/// entries naming the same keys compare equal.
///
/// ```
/// use tollgate::access::{AccessEntry, EntryKind, Listed};
///
/// let office = AccessEntry::new(None, Listed::Allow, EntryKind::Cidr, "192.0.2.0/24")?;
/// assert_eq!(office.value(), "192.0.2.0/24");
/// let host = AccessEntry::new(Some("login"), Listed::Deny, EntryKind::Cidr, "2001:DB8::1")?;
/// assert_eq!(host.value(), "2001:db8::1/128");
/// assert_eq!(host.policy(), Some("login"));
/// let typo = AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "203.0.113.7/24").unwrap_err();
/// assert_eq!(typo.to_string(), "\"203.0.113.7/24\" has bits set after the /24; the range is 203.0.113.0/24");
/// # Ok::<(), tollgate::access::AccessError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccessEntry {
    policy: Option<Box<str>>,
    list: Listed,
    kind: EntryKind,
    value: Box<str>,
}

impl AccessEntry {
    /// An entry of `list` for `policy` (`None`: every policy). A `cidr` value is an IPv4 or IPv6
    /// address or range; a `key` or `prefix` value is 1 to [`MAX_KEY_LEN`] bytes.
    pub fn new(
        policy: Option<&str>,
        list: Listed,
        kind: EntryKind,
        value: &str,
    ) -> Result<Self, AccessError> {
        if let Some(name) = policy
            && (name.is_empty() || name.len() > MAX_NAME_LEN)
        {
            return Err(AccessError::BadPolicy {
                len: name.len(),
                max: MAX_NAME_LEN,
            });
        }
        if value.is_empty() {
            return Err(AccessError::Empty);
        }
        if value.len() > MAX_KEY_LEN {
            return Err(AccessError::TooLong {
                len: value.len(),
                max: MAX_KEY_LEN,
            });
        }
        let value: Box<str> = match kind {
            EntryKind::Cidr => value
                .parse::<Cidr>()
                .map_err(|err| match err {
                    CidrError::HostBits { input, len, network } => AccessError::HostBits {
                        given: input,
                        len,
                        network: network.to_string(),
                    },
                    err => AccessError::BadCidr(err.input().to_owned()),
                })?
                .to_string()
                .into(),
            EntryKind::Key | EntryKind::Prefix => value.into(),
        };
        Ok(AccessEntry {
            policy: policy.map(Into::into),
            list,
            kind,
            value,
        })
    }

    /// The policy it applies to; `None` for every policy.
    pub fn policy(&self) -> Option<&str> {
        self.policy.as_deref()
    }

    /// The list it is on.
    pub fn list(&self) -> Listed {
        self.list
    }

    /// How it names keys.
    pub fn kind(&self) -> EntryKind {
        self.kind
    }

    /// The range, key or prefix, normalized.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// One line of text that [`decode`](Self::decode) reads back, for a store to keep entries
    /// in: `<list>:<kind>:<policy length>:<policy><value>` (an empty policy for a global entry).
    /// The length makes it unambiguous whatever bytes the policy and the value hold.
    ///
    /// ```
    /// use tollgate::access::{AccessEntry, EntryKind, Listed};
    ///
    /// let entry = AccessEntry::new(Some("login"), Listed::Deny, EntryKind::Prefix, "bot:")?;
    /// assert_eq!(entry.encode(), "deny:prefix:5:loginbot:");
    /// assert_eq!(AccessEntry::decode(&entry.encode())?, entry);
    /// # Ok::<(), tollgate::access::AccessError>(())
    /// ```
    pub fn encode(&self) -> String {
        let policy = self.policy().unwrap_or("");
        format!(
            "{}:{}:{}:{policy}{}",
            self.list.as_str(),
            self.kind.as_str(),
            policy.len(),
            self.value
        )
    }

    /// The length of [`encode`](Self::encode)'s text, without making it: what a store counts
    /// an entry for against its byte bound.
    ///
    /// ```
    /// use tollgate::access::{AccessEntry, EntryKind, Listed};
    ///
    /// let entry = AccessEntry::new(Some("login"), Listed::Deny, EntryKind::Prefix, "bot:")?;
    /// assert_eq!(entry.encoded_len(), entry.encode().len());
    /// # Ok::<(), tollgate::access::AccessError>(())
    /// ```
    pub fn encoded_len(&self) -> usize {
        let policy = self.policy().map_or(0, str::len);
        let digits = policy.checked_ilog10().map_or(1, |d| d as usize + 1);
        self.list.as_str().len() + self.kind.as_str().len() + digits + 3 + policy + self.value.len()
    }

    /// Reads what [`encode`](Self::encode) wrote, validating it again.
    pub fn decode(text: &str) -> Result<Self, AccessError> {
        let bad = || AccessError::BadEncoding(text.chars().take(64).collect());
        let mut parts = text.splitn(4, ':');
        let (Some(list), Some(kind), Some(len), Some(rest)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let len: usize = len.parse().map_err(|_| bad())?;
        if !rest.is_char_boundary(len.min(rest.len())) || len > rest.len() {
            return Err(bad());
        }
        let (policy, value) = rest.split_at(len);
        let policy = (!policy.is_empty()).then_some(policy);
        AccessEntry::new(policy, list.parse()?, kind.parse()?, value)
    }
}

impl fmt::Display for AccessEntry {
    /// `deny cidr 203.0.113.0/24 (policy login)`, or `(global)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} ", self.list.as_str(), self.kind.as_str(), self.value)?;
        match self.policy() {
            Some(policy) => write!(f, "(policy {policy})"),
            None => f.write_str("(global)"),
        }
    }
}

/// What adding an entry to a store of entries did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// It is in now.
    New,
    /// It was in already.
    AlreadyThere,
    /// Nothing written: the store holds `held` entries, the most it keeps.
    Full {
        /// How many it holds.
        held: u64,
    },
    /// Nothing written: the entries the store holds take `held_bytes` (as
    /// [`encoded_len`](AccessEntry::encoded_len) counts them), and this one would take them past
    /// `max_bytes`.
    TooLarge {
        /// The bytes the entries take.
        held_bytes: u64,
        /// The most the store keeps.
        max_bytes: u64,
    },
}

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

/// One list of one scope, compiled for lookups (see the [module docs](self)).
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
fn parse_ip(key: &[u8]) -> Option<IpAddr> {
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

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    #[test]
    fn keys_with_a_port_or_brackets_are_read_as_their_address() {
        let v4: IpAddr = "203.0.113.9".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        for (key, ip) in [
            ("203.0.113.9", Some(v4)),
            ("203.0.113.9:443", Some(v4)),
            ("::ffff:203.0.113.9", Some(v4)),
            ("[::ffff:203.0.113.9]:80", Some(v4)),
            ("2001:db8::1", Some(v6)),
            ("[2001:db8::1]", Some(v6)),
            ("[2001:db8::1]:443", Some(v6)),
            ("203.0.113.9:", None),
            ("[203.0.113.9", None),
            ("user:203.0.113.9", None),
        ] {
            assert_eq!(super::parse_ip(key.as_bytes()), ip, "{key}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    fn entry(policy: Option<&str>, list: Listed, kind: EntryKind, value: &str) -> AccessEntry {
        AccessEntry::new(policy, list, kind, value).unwrap()
    }

    #[test]
    fn cidr_ranges_match_their_addresses_only() {
        let lists = AccessLists::new([
            entry(None, Listed::Deny, EntryKind::Cidr, "203.0.113.0/24"),
            entry(None, Listed::Deny, EntryKind::Cidr, "2001:db8:1::/48"),
        ]);
        let denied = |key: &str| lists.lookup("p", key.as_bytes()).is_some();
        assert!(denied("203.0.113.0") && denied("203.0.113.255"));
        assert!(!denied("203.0.112.255") && !denied("203.0.114.0"));
        assert!(denied("2001:db8:1::7") && denied("2001:db8:1:ffff::1"));
        assert!(!denied("2001:db8:2::1"));
        assert!(
            denied("::ffff:203.0.113.9"),
            "an IPv4-mapped address is its IPv4 address"
        );
        assert!(!denied("203.0.113.9x") && !denied("user-203.0.113.9"));
    }

    #[test]
    fn nested_ranges_and_prefixes_keep_matching() {
        let lists = AccessLists::new([
            entry(None, Listed::Deny, EntryKind::Cidr, "10.0.0.0/8"),
            entry(None, Listed::Deny, EntryKind::Cidr, "10.1.2.0/24"),
            entry(None, Listed::Deny, EntryKind::Cidr, "10.200.0.0/16"),
            entry(None, Listed::Deny, EntryKind::Prefix, "a"),
            entry(None, Listed::Deny, EntryKind::Prefix, "ab1"),
            entry(None, Listed::Deny, EntryKind::Prefix, "zz"),
        ]);
        let found = |key: &str| lists.lookup("p", key.as_bytes()).map(|e| e.value().to_owned());
        assert_eq!(found("10.1.2.3").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(found("10.255.0.1").as_deref(), Some("10.0.0.0/8"));
        assert_eq!(
            found("ab2").as_deref(),
            Some("a"),
            "not only the predecessor `ab1`"
        );
        assert_eq!(found("zzz").as_deref(), Some("zz"));
        assert_eq!(found("z"), None);
        assert_eq!(found("b"), None);
    }

    #[test]
    fn deny_wins_over_allow_in_any_scope() {
        let lists = AccessLists::new([
            entry(Some("api"), Listed::Allow, EntryKind::Key, "office"),
            entry(None, Listed::Deny, EntryKind::Prefix, "off"),
            entry(None, Listed::Allow, EntryKind::Key, "partner"),
            entry(Some("api"), Listed::Deny, EntryKind::Key, "partner"),
        ]);
        let list = |policy: &str, key: &str| lists.lookup(policy, key.as_bytes()).map(|e| e.list());
        assert_eq!(list("api", "office"), Some(Listed::Deny));
        assert_eq!(list("api", "partner"), Some(Listed::Deny));
        assert_eq!(list("login", "partner"), Some(Listed::Allow));
    }

    #[test]
    fn bad_values_are_refused_with_a_reason() {
        let err = |kind, value: &str| {
            AccessEntry::new(None, Listed::Deny, kind, value)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(err(EntryKind::Key, ""), "the value must not be empty");
        assert_eq!(
            err(EntryKind::Cidr, "203.0.113.0/33"),
            "expected an IP address or a CIDR range like 203.0.113.0/24 or 2001:db8::/32, got \"203.0.113.0/33\""
        );
        assert!(err(EntryKind::Cidr, "203.0.113.0/+8").starts_with("expected an IP"));
        assert!(err(EntryKind::Cidr, "example.com").starts_with("expected an IP"));
        assert_eq!(
            err(EntryKind::Cidr, "2001:db8::1/32"),
            "\"2001:db8::1/32\" has bits set after the /32; the range is 2001:db8::/32"
        );
        assert!(AccessEntry::new(Some(""), Listed::Deny, EntryKind::Key, "k").is_err());
        assert_eq!(
            AccessEntry::decode("deny:key:99:x").unwrap_err(),
            AccessError::BadEncoding("deny:key:99:x".into())
        );
        assert!(AccessEntry::decode("maybe:key:0:x").is_err());
    }

    #[test]
    fn a_zero_length_range_matches_everything_of_its_family() {
        let lists = AccessLists::new([entry(None, Listed::Allow, EntryKind::Cidr, "0.0.0.0/0")]);
        assert!(lists.lookup("p", b"198.51.100.1").is_some());
        assert!(lists.lookup("p", b"2001:db8::1").is_none());
    }

    proptest! {
        /// The compiled lookup agrees with checking every entry one by one.
        #[test]
        fn lookup_agrees_with_a_scan(
            prefixes in proptest::collection::vec("[ab]{1,4}", 0..12),
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..12),
            keys in proptest::collection::vec("[ab]{0,6}", 1..20),
            addresses in proptest::collection::vec(any::<u32>(), 1..20),
        ) {
            let mut entries = Vec::new();
            for p in &prefixes {
                entries.push(entry(None, Listed::Deny, EntryKind::Prefix, p));
            }
            for (bits, len) in &nets {
                let net = crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(*bits)), *len);
                entries.push(entry(None, Listed::Deny, EntryKind::Cidr, &format!("{net}/{len}")));
            }
            let lists = AccessLists::new(entries);
            for key in keys.iter().filter(|k| !k.is_empty()) {
                let scan = prefixes.iter().any(|p| key.starts_with(p.as_str()));
                prop_assert_eq!(lists.lookup("p", key.as_bytes()).is_some(), scan, "{}", key);
            }
            for address in addresses {
                let block = |bits: u32, len: u8| crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(bits)), len);
                let scan = nets.iter().any(|&(bits, len)| block(address, len) == block(bits, len));
                let text = Ipv4Addr::from(address).to_string();
                prop_assert_eq!(lists.lookup("p", text.as_bytes()).is_some(), scan, "{}", text);
            }
        }
    }
}

#[cfg(test)]
mod change_tests {
    use std::net::Ipv4Addr;

    use super::*;
    use proptest::prelude::*;

    fn entry(kind: EntryKind, value: &str) -> AccessEntry {
        AccessEntry::new(None, Listed::Deny, kind, value).unwrap()
    }

    #[test]
    fn removing_an_outer_entry_brings_back_what_it_covered() {
        let mut lists = AccessLists::default();
        for (kind, value) in [
            (EntryKind::Prefix, "ab"),
            (EntryKind::Prefix, "abc"),
            (EntryKind::Prefix, "abd"),
            (EntryKind::Prefix, "a"),
            (EntryKind::Cidr, "10.1.0.0/16"),
            (EntryKind::Cidr, "10.1.2.0/24"),
            (EntryKind::Cidr, "10.0.0.0/8"),
        ] {
            assert!(lists.insert(entry(kind, value)));
        }
        assert!(!lists.insert(entry(EntryKind::Prefix, "a")), "once");
        let found =
            |lists: &AccessLists, key: &str| lists.lookup("p", key.as_bytes()).map(|e| e.value().to_owned());
        assert_eq!(found(&lists, "abcd").as_deref(), Some("a"));
        assert_eq!(found(&lists, "10.1.2.3").as_deref(), Some("10.0.0.0/8"));
        assert!(lists.remove(&entry(EntryKind::Prefix, "a")));
        assert!(lists.remove(&entry(EntryKind::Cidr, "10.0.0.0/8")));
        assert!(!lists.remove(&entry(EntryKind::Cidr, "10.0.0.0/8")));
        assert_eq!(found(&lists, "abcd").as_deref(), Some("ab"));
        assert_eq!(found(&lists, "b"), None);
        assert_eq!(found(&lists, "10.1.2.3").as_deref(), Some("10.1.0.0/16"));
        assert_eq!(found(&lists, "10.2.0.1"), None);
        assert!(lists.remove(&entry(EntryKind::Prefix, "ab")));
        assert_eq!(found(&lists, "abcd").as_deref(), Some("abc"));
        assert_eq!(found(&lists, "abd!").as_deref(), Some("abd"));
        assert_eq!(found(&lists, "abe"), None);
        assert_eq!(lists.len(), 4);
    }

    #[test]
    fn twenty_thousand_entries_are_added_one_at_a_time() {
        let mut lists = AccessLists::default();
        for i in 0..20_000u32 {
            let kind = [EntryKind::Key, EntryKind::Prefix, EntryKind::Cidr][i as usize % 3];
            let value = match kind {
                EntryKind::Cidr => Ipv4Addr::from(0x0a00_0000 + i).to_string(),
                _ => format!("user-{i}:"),
            };
            assert!(lists.insert(entry(kind, &value)));
        }
        assert_eq!(lists.len(), 20_000);
        assert!(lists.lookup("p", b"user-19998:").is_some(), "a key");
        assert!(
            lists.lookup("p", b"user-19998:x").is_none(),
            "a key, not a prefix"
        );
        assert!(lists.lookup("p", b"user-19999:x").is_some(), "a prefix");
        assert!(
            lists.lookup("p", b"10.0.78.29").is_some(),
            "an address: 19 997 is 78 × 256 + 29"
        );
        assert!(lists.lookup("p", b"10.0.78.30").is_none());
    }

    #[derive(Debug, Clone)]
    enum Change {
        Add(usize),
        Remove(usize),
    }

    proptest! {
        /// After any sequence of additions and removals, the lookup agrees with checking every
        /// entry left one by one.
        #[test]
        fn changes_agree_with_a_scan(
            prefixes in proptest::collection::vec("[ab]{1,4}", 1..10),
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 1..10),
            changes in proptest::collection::vec(
                prop_oneof![(0usize..20).prop_map(Change::Add), (0usize..20).prop_map(Change::Remove)],
                0..40,
            ),
            keys in proptest::collection::vec("[ab]{1,6}", 1..20),
            addresses in proptest::collection::vec(any::<u32>(), 1..20),
        ) {
            let block = |bits: u32, len: u8| crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(bits)), len);
            let candidates: Vec<AccessEntry> = prefixes
                .iter()
                .map(|p| entry(EntryKind::Prefix, p))
                .chain(nets.iter().map(|&(bits, len)| entry(EntryKind::Cidr, &format!("{}/{len}", block(bits, len)))))
                .collect();
            let mut lists = AccessLists::default();
            let mut held: BTreeSet<AccessEntry> = BTreeSet::new();
            for change in changes {
                match change {
                    Change::Add(i) => {
                        let e = &candidates[i % candidates.len()];
                        prop_assert_eq!(lists.insert(e.clone()), held.insert(e.clone()));
                    }
                    Change::Remove(i) => {
                        let e = &candidates[i % candidates.len()];
                        prop_assert_eq!(lists.remove(e), held.remove(e));
                    }
                }
            }
            prop_assert_eq!(lists.len(), held.len());
            for key in &keys {
                let scan = held.iter().any(|e| e.kind() == EntryKind::Prefix && key.starts_with(e.value()));
                prop_assert_eq!(lists.lookup("p", key.as_bytes()).is_some(), scan, "{}", key);
            }
            for &address in &addresses {
                let scan = held.iter().filter(|e| e.kind() == EntryKind::Cidr).any(|e| {
                    let cidr: Cidr = e.value().parse().unwrap();
                    cidr.contains(IpAddr::V4(Ipv4Addr::from(address)))
                });
                let text = Ipv4Addr::from(address).to_string();
                prop_assert_eq!(lists.lookup("p", text.as_bytes()).is_some(), scan, "{}", text);
            }
        }
    }
}

#[cfg(test)]
mod mapped_tests {
    use super::*;

    #[test]
    fn an_ipv4_mapped_range_blocks_both_spellings_of_its_addresses() {
        let entry = AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "::ffff:198.51.100.0/120").unwrap();
        assert_eq!(entry.value(), "198.51.100.0/24");
        let lists = AccessLists::new([entry]);
        assert!(lists.lookup("p", b"198.51.100.7").is_some());
        assert!(lists.lookup("p", b"::ffff:198.51.100.7").is_some());
        assert!(lists.lookup("p", b"198.51.101.7").is_none());
    }
}
