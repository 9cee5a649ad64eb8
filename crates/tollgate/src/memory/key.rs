//! How a (namespace, key) pair is stored and found without allocating on lookup.
//!
//! A policy's namespace is its interned name (a `u32`, never 0); attempts counters use namespace
//! 0. A slot stores the namespace and the key bytes, so two different pairs can never share a
//! slot, whatever bytes the key holds. Keys up to 14 bytes (user ids, short tokens, most IPv4
//! addresses) are stored inside the slot itself: no second allocation, and no second cache miss
//! when comparing. Longer keys sit behind a thin pointer, so a slot still fits one cache line.

use std::hash::{BuildHasher, Hasher};

/// Keys this long or shorter live inside the slot.
const INLINE: usize = 14;

/// The namespace of attempts counters.
pub(crate) const ATTEMPTS: u32 = 0;

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

/// A namespace and key as given by the caller.
#[derive(Clone, Copy)]
pub(crate) struct Lookup<'a> {
    pub(crate) namespace: u32,
    pub(crate) key: &'a [u8],
}

impl<'a> Lookup<'a> {
    #[inline]
    pub(crate) fn new(namespace: u32, key: &'a [u8]) -> Self {
        Lookup { namespace, key }
    }

    /// The pair's hash under `hasher`: keyed SipHash, because attackers choose keys and a fixed
    /// fast hash would let them aim every key at one bucket.
    #[inline]
    pub(crate) fn hash(&self, hasher: &impl BuildHasher) -> u64 {
        hash(hasher, self.namespace, self.key)
    }

    /// True when a slot holding `namespace` and `key` belongs to this pair.
    #[inline]
    pub(crate) fn matches(&self, namespace: u32, key: &KeyBytes) -> bool {
        namespace == self.namespace && key.as_slice() == self.key
    }
}

/// The hash of a (namespace, key) pair: keyed SipHash of the key alone (one pass, the cost that
/// dominates), then the namespace mixed in with a multiply. Mixing a known constant into a keyed
/// hash keeps it unpredictable, and equality still compares namespace and key exactly.
#[inline]
pub(crate) fn hash(hasher: &impl BuildHasher, namespace: u32, key: &[u8]) -> u64 {
    let mut state = hasher.build_hasher();
    state.write(key);
    state.finish() ^ u64::from(namespace).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_inline_and_long_ones_on_the_heap() {
        assert!(matches!(KeyBytes::new(b"198.51.100.7"), KeyBytes::Inline { .. }));
        assert!(matches!(KeyBytes::new(&[7; 15]), KeyBytes::Heap(_)));
        assert_eq!(std::mem::size_of::<KeyBytes>(), 16);
        for key in [&b""[..], b"a", &[0xff; 14], &[1; 15], &[2; 4096]] {
            assert_eq!(KeyBytes::new(key).as_slice(), key);
        }
    }

    #[test]
    fn a_pair_matches_only_itself() {
        let stored = KeyBytes::new(b"k");
        assert!(Lookup::new(3, b"k").matches(3, &stored));
        assert!(!Lookup::new(4, b"k").matches(3, &stored));
        assert!(
            !Lookup::new(3, b"k\0").matches(3, &stored),
            "padding is not part of the key"
        );
        assert!(!Lookup::new(3, b"").matches(3, &stored));
        let long = [9; 40];
        assert!(Lookup::new(3, &long).matches(3, &KeyBytes::new(&long)));
        assert!(!Lookup::new(3, &long[..39]).matches(3, &KeyBytes::new(&long)));
    }
}
