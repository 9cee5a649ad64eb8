//! How a (policy, key) pair is stored and found without allocating on lookup.
//!
//! A slot stores its owner (the policy's shared name, or none for an attempts counter) and the
//! key bytes, so two different pairs can never share a slot, whatever bytes the key holds. There
//! is no registry of names: a slot keeps its policy's name alive, and a policy rebuilt with the
//! same name (a reload) finds the same slots. Keys up to 14 bytes (user ids, short tokens, most IPv4
//! addresses) are stored inside the slot itself: no second allocation, and no second cache miss
//! when comparing. Longer keys sit behind a thin pointer, so a slot still fits one cache line.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use crate::policy::PolicyName;

/// Keys this long or shorter live inside the slot.
const INLINE: usize = 14;

/// Who a slot belongs to: a policy, or `None` for an attempts counter. One thin pointer.
pub(crate) type Owner = Option<Arc<PolicyName>>;

/// Key bytes, inline when short: 16 bytes either way.
#[derive(Debug, Clone)]
pub(crate) enum KeyBytes {
    Inline {
        len: u8,
        bytes: [u8; INLINE],
    },
    // A thin pointer (8 bytes, where `Box<[u8]>` takes 16) keeps the whole slot in 64 bytes.
    #[allow(clippy::box_collection)]
    Heap(Box<Vec<u8>>),
}

impl KeyBytes {
    #[inline]
    pub(crate) fn new(key: &[u8]) -> Self {
        if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            KeyBytes::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            KeyBytes::Heap(Box::new(key.to_vec()))
        }
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            KeyBytes::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyBytes::Heap(bytes) => bytes,
        }
    }
}

/// An owner and key as given by the caller.
#[derive(Clone, Copy)]
pub(crate) struct Lookup<'a> {
    pub(crate) owner: Option<&'a Arc<PolicyName>>,
    pub(crate) key: &'a [u8],
}

impl<'a> Lookup<'a> {
    /// The state of `key` under the policy named `owner`.
    #[inline]
    pub(crate) fn limit(owner: &'a Arc<PolicyName>, key: &'a [u8]) -> Self {
        Lookup {
            owner: Some(owner),
            key,
        }
    }

    /// The attempts counter of `key`.
    #[inline]
    pub(crate) fn attempts(key: &'a [u8]) -> Self {
        Lookup { owner: None, key }
    }

    /// The pair's hash under `hasher`: keyed SipHash, because attackers choose keys and a fixed
    /// fast hash would let them aim every key at one bucket.
    #[inline]
    pub(crate) fn hash(&self, hasher: &impl BuildHasher) -> u64 {
        hash(hasher, owner_tag(self.owner), self.key)
    }

    /// True when a slot holding `owner` and `key` belongs to this pair.
    #[inline]
    pub(crate) fn matches(&self, owner: &Owner, key: &KeyBytes) -> bool {
        let same_owner = match (self.owner, owner) {
            (Some(a), Some(b)) => a.same(b),
            (None, None) => true,
            _ => false,
        };
        same_owner && key.as_slice() == self.key
    }

    /// The owner to store in a new slot.
    #[inline]
    pub(crate) fn owner(&self) -> Owner {
        self.owner.cloned()
    }
}

/// The number an owner contributes to the hash: its name's hash, 0 for attempts counters.
#[inline]
pub(crate) fn owner_tag(owner: Option<&Arc<PolicyName>>) -> u64 {
    owner.map_or(0, |name| name.hash | 1)
}

/// The hash of an (owner, key) pair: keyed SipHash of the key alone (one pass, the cost that
/// dominates), then the owner's tag mixed in with a multiply. Mixing a known value into a keyed
/// hash keeps it unpredictable, and equality still compares owner and key exactly.
#[inline]
pub(crate) fn hash(hasher: &impl BuildHasher, owner_tag: u64, key: &[u8]) -> u64 {
    let mut state = hasher.build_hasher();
    state.write(key);
    state.finish() ^ owner_tag.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_and_long_ones_on_the_heap() {
        assert!(matches!(KeyBytes::new(b"198.51.100.7"), KeyBytes::Inline { .. }));
        assert!(matches!(KeyBytes::new(&[7; 15]), KeyBytes::Heap(_)));
        assert_eq!(std::mem::size_of::<KeyBytes>(), 16);
        assert_eq!(std::mem::size_of::<Owner>(), 8);
        for key in [&b""[..], b"a", &[0xff; 14], &[1; 15], &[2; 4096]] {
            assert_eq!(KeyBytes::new(key).as_slice(), key);
        }
    }

    fn name(text: &str) -> Arc<PolicyName> {
        let policy = crate::Policy::new(
            text,
            crate::Algorithm::sliding_log(1, std::time::Duration::from_secs(1)).unwrap(),
        )
        .unwrap();
        policy.shared_name().clone()
    }

    #[test]
    fn a_pair_matches_only_itself() {
        let (a, b) = (name("a"), name("b"));
        let stored = KeyBytes::new(b"k");
        let owner = Some(a.clone());
        assert!(Lookup::limit(&a, b"k").matches(&owner, &stored));
        assert!(!Lookup::limit(&b, b"k").matches(&owner, &stored));
        assert!(!Lookup::attempts(b"k").matches(&owner, &stored));
        assert!(Lookup::attempts(b"k").matches(&None, &stored));
        assert!(
            !Lookup::limit(&a, b"k\0").matches(&owner, &stored),
            "padding is not part of the key"
        );
        assert!(!Lookup::limit(&a, b"").matches(&owner, &stored));
        let long = [9; 40];
        assert!(Lookup::limit(&a, &long).matches(&owner, &KeyBytes::new(&long)));
        assert!(!Lookup::limit(&a, &long[..39]).matches(&owner, &KeyBytes::new(&long)));
    }

    #[test]
    fn a_rebuilt_policy_finds_its_slots() {
        let (first, rebuilt) = (name("api"), name("api"));
        assert!(!Arc::ptr_eq(&first, &rebuilt));
        let lookup = Lookup::limit(&rebuilt, b"k");
        assert!(lookup.matches(&Some(first.clone()), &KeyBytes::new(b"k")));
        let hasher = std::collections::hash_map::RandomState::new();
        assert_eq!(lookup.hash(&hasher), Lookup::limit(&first, b"k").hash(&hasher));
    }
}
