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

mod lists;
#[cfg(test)]
mod tests;

use std::fmt;

use crate::bounds::{MAX_KEY_LEN, MAX_NAME_LEN};
use crate::cidr::{Cidr, CidrError};

pub use lists::AccessLists;

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
