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
//! Lookups are made on every request, so [`AccessLists`] is compiled once and only read: exact
//! keys in a hash map, prefixes in a sorted array with nested prefixes removed (so the only
//! prefix that can match a key is its predecessor in byte order: one binary search), and CIDR
//! ranges as sorted, disjoint integer ranges (two CIDR blocks are either nested or disjoint, so
//! keeping the outer of nested blocks leaves disjoint ranges: one binary search). A lookup costs
//! a few comparisons whatever the number of entries; `benches/access.rs` measures it.
//!
//! This module is pure: entries come from the config or an admin API, and the caller decides
//! where they are kept.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
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
}

/// One list of one scope, compiled for lookups (see the [module docs](self)).
#[derive(Debug, Default)]
struct Matcher {
    keys: HashMap<Box<[u8]>, Arc<AccessEntry>>,
    /// Sorted by bytes; no prefix is a prefix of another.
    prefixes: Vec<(Box<[u8]>, Arc<AccessEntry>)>,
    /// Sorted by start; disjoint.
    v4: Vec<(u32, u32, Arc<AccessEntry>)>,
    v6: Vec<(u128, u128, Arc<AccessEntry>)>,
}

impl Matcher {
    fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.prefixes.is_empty() && self.v4.is_empty() && self.v6.is_empty()
    }

    fn has_ranges(&self) -> bool {
        !self.v4.is_empty() || !self.v6.is_empty()
    }

    fn build(entries: Vec<Arc<AccessEntry>>) -> Matcher {
        let mut matcher = Matcher::default();
        let mut prefixes: Vec<(Box<[u8]>, Arc<AccessEntry>)> = Vec::new();
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for entry in entries {
            match entry.kind {
                EntryKind::Key => {
                    matcher
                        .keys
                        .entry(entry.value.as_bytes().into())
                        .or_insert_with(|| Arc::clone(&entry));
                }
                EntryKind::Prefix => prefixes.push((entry.value.as_bytes().into(), entry)),
                EntryKind::Cidr => {
                    // Normalized by `AccessEntry::new`: it parses.
                    let Ok(cidr) = entry.value.parse::<Cidr>() else {
                        continue;
                    };
                    match (cidr.addr(), cidr.last()) {
                        (IpAddr::V4(first), IpAddr::V4(last)) => {
                            v4.push((u32::from(first), u32::from(last), entry))
                        }
                        (IpAddr::V6(first), IpAddr::V6(last)) => {
                            v6.push((u128::from(first), u128::from(last), entry))
                        }
                        _ => {}
                    }
                }
            }
        }
        // A prefix that extends a shorter one adds nothing: drop it, so that the set is
        // prefix-free and only a key's predecessor can match it. Sorted, a prefix comes right
        // before the ones that extend it.
        prefixes.sort_by(|a, b| a.0.cmp(&b.0));
        for (prefix, entry) in prefixes {
            match matcher.prefixes.last() {
                Some((kept, _)) if prefix.starts_with(kept) => {}
                _ => matcher.prefixes.push((prefix, entry)),
            }
        }
        matcher.v4 = outermost(v4);
        matcher.v6 = outermost(v6);
        matcher
    }

    fn find(&self, key: &[u8], ip: Option<IpAddr>) -> Option<&Arc<AccessEntry>> {
        if let Some(entry) = self.keys.get(key) {
            return Some(entry);
        }
        if !self.prefixes.is_empty() {
            let at = self.prefixes.partition_point(|(p, _)| p.as_ref() <= key);
            if let Some((prefix, entry)) = at.checked_sub(1).map(|i| &self.prefixes[i])
                && key.starts_with(prefix)
            {
                return Some(entry);
            }
        }
        match ip? {
            IpAddr::V4(v4) => in_range(&self.v4, u32::from(v4)),
            IpAddr::V6(v6) => in_range(&self.v6, u128::from(v6)),
        }
    }
}

/// The ranges sorted by start with the nested ones dropped (CIDR ranges are nested or
/// disjoint, so what is left is disjoint).
fn outermost<T: Ord + Copy>(mut ranges: Vec<(T, T, Arc<AccessEntry>)>) -> Vec<(T, T, Arc<AccessEntry>)> {
    // Same start: the widest first.
    ranges.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut kept: Vec<(T, T, Arc<AccessEntry>)> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match kept.last() {
            Some(last) if range.1 <= last.1 => {}
            _ => kept.push(range),
        }
    }
    kept
}

fn in_range<T: Ord + Copy>(ranges: &[(T, T, Arc<AccessEntry>)], address: T) -> Option<&Arc<AccessEntry>> {
    let at = ranges.partition_point(|(start, _, _)| *start <= address);
    let (_, end, entry) = &ranges[at.checked_sub(1)?];
    (address <= *end).then_some(entry)
}

/// The allow and deny lists of one scope.
#[derive(Debug, Default)]
struct Scope {
    allow: Matcher,
    deny: Matcher,
}

impl Scope {
    fn has_ranges(&self) -> bool {
        self.allow.has_ranges() || self.deny.has_ranges()
    }
}

/// One scope's allow entries and deny entries, before they are compiled.
type AllowAndDeny = (Vec<Arc<AccessEntry>>, Vec<Arc<AccessEntry>>);

/// Every allow and deny list, global and per policy, compiled for lookups on every request.
///
/// ```
/// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
///
/// let lists = AccessLists::new([
///     AccessEntry::new(None, Listed::Allow, EntryKind::Cidr, "192.0.2.0/24")?,
///     AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "192.0.2.66")?,
///     AccessEntry::new(Some("login"), Listed::Deny, EntryKind::Prefix, "bot-")?,
/// ]);
/// let list = |policy: &str, key: &str| lists.lookup(policy, key.as_bytes()).map(|e| e.list());
/// assert_eq!(list("api", "192.0.2.10"), Some(Listed::Allow));
/// assert_eq!(list("api", "192.0.2.66"), Some(Listed::Deny), "deny wins");
/// assert_eq!(list("login", "bot-7"), Some(Listed::Deny));
/// assert_eq!(list("api", "bot-7"), None, "a policy's list is its own");
/// assert_eq!(list("api", "198.51.100.1"), None);
/// # Ok::<(), tollgate::access::AccessError>(())
/// ```
#[derive(Debug, Default)]
pub struct AccessLists {
    global: Scope,
    policies: HashMap<Box<str>, Scope>,
    /// Every entry once, sorted.
    entries: Vec<Arc<AccessEntry>>,
    /// Whether any CIDR range is listed: only then is a key parsed as an address.
    ranges: bool,
}

impl AccessLists {
    /// Compiles `entries` (duplicates are kept once).
    pub fn new(entries: impl IntoIterator<Item = AccessEntry>) -> Self {
        let mut entries: Vec<AccessEntry> = entries.into_iter().collect();
        entries.sort();
        entries.dedup();
        let entries: Vec<Arc<AccessEntry>> = entries.into_iter().map(Arc::new).collect();
        let mut by_scope: HashMap<Option<&str>, AllowAndDeny> = HashMap::new();
        for entry in &entries {
            let lists = by_scope.entry(entry.policy()).or_default();
            match entry.list {
                Listed::Allow => lists.0.push(Arc::clone(entry)),
                Listed::Deny => lists.1.push(Arc::clone(entry)),
            }
        }
        let mut lists = AccessLists::default();
        for (policy, (allow, deny)) in by_scope {
            let scope = Scope {
                allow: Matcher::build(allow),
                deny: Matcher::build(deny),
            };
            lists.ranges |= scope.has_ranges();
            match policy {
                None => lists.global = scope,
                Some(name) => {
                    lists.policies.insert(name.into(), scope);
                }
            }
        }
        lists.entries = entries;
        lists
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
    /// reported before a prefix and a prefix before a range.
    pub fn lookup(&self, policy: &str, key: &[u8]) -> Option<&Arc<AccessEntry>> {
        if self.entries.is_empty() {
            return None;
        }
        let own = self.policies.get(policy);
        let ip = if self.ranges { parse_ip(key) } else { None };
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
        let ip = if self.ranges { parse_ip(key) } else { None };
        self.global.deny.find(key, ip)
    }

    /// Whether any entry applies to `policy` (its own or a global one).
    pub fn applies_to(&self, policy: &str) -> bool {
        !(self.global.allow.is_empty() && self.global.deny.is_empty()) || self.policies.contains_key(policy)
    }
}

/// A key as an IP address, when it is one in text form; an IPv4-mapped IPv6 address as IPv4.
fn parse_ip(key: &[u8]) -> Option<IpAddr> {
    // The longest IPv6 text is 45 bytes; anything longer is not an address.
    if key.len() > 45 {
        return None;
    }
    let ip: IpAddr = std::str::from_utf8(key).ok()?.parse().ok()?;
    Some(ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

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
