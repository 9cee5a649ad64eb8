//! How a (namespace, key) pair is stored and found without allocating on lookup.
//!
//! The stored form is one boxed byte string, `[namespace length][namespace][key]`. The length
//! prefix makes the encoding unambiguous: `("ab", "c")` and `("a", "bc")` are different byte
//! strings, so two different pairs can never share a slot, whatever bytes the key holds. Attempts
//! counters use the empty namespace, which no policy can have.

use std::hash::{BuildHasher, Hasher};

/// A namespace and key as given by the caller.
#[derive(Clone, Copy)]
pub(crate) struct Lookup<'a> {
    namespace: &'a [u8],
    key: &'a [u8],
}

impl<'a> Lookup<'a> {
    /// `namespace` is at most 255 bytes (policy names are validated to fit).
    pub(crate) fn new(namespace: &'a str, key: &'a [u8]) -> Self {
        debug_assert!(namespace.len() <= usize::from(u8::MAX));
        Lookup {
            namespace: namespace.as_bytes(),
            key,
        }
    }

    /// The hash of the encoded pair under `hasher` (SipHash with random keys: attackers choose
    /// keys, so a fixed fast hash would let them aim for one bucket).
    pub(crate) fn hash(&self, hasher: &impl BuildHasher) -> u64 {
        let mut state = hasher.build_hasher();
        state.write_u8(self.namespace.len() as u8);
        state.write(self.namespace);
        state.write(self.key);
        state.finish()
    }

    /// True when `stored` is this pair's encoding.
    pub(crate) fn matches(&self, stored: &[u8]) -> bool {
        let n = self.namespace.len();
        stored.len() == 1 + n + self.key.len()
            && usize::from(stored[0]) == n
            && &stored[1..1 + n] == self.namespace
            && &stored[1 + n..] == self.key
    }

    /// The stored encoding.
    pub(crate) fn encode(&self) -> Box<[u8]> {
        let mut bytes = Vec::with_capacity(1 + self.namespace.len() + self.key.len());
        bytes.push(self.namespace.len() as u8);
        bytes.extend_from_slice(self.namespace);
        bytes.extend_from_slice(self.key);
        bytes.into_boxed_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_splits_never_match() {
        let a = Lookup::new("ab", b"c");
        let b = Lookup::new("a", b"bc");
        assert!(a.matches(&a.encode()));
        assert!(!b.matches(&a.encode()));
        assert!(!a.matches(&b.encode()));
    }

    #[test]
    fn attempts_namespace_never_matches_a_policy() {
        let attempts = Lookup::new("", b"\x01xk");
        let policy = Lookup::new("x", b"k");
        assert!(!attempts.matches(&policy.encode()));
        assert!(!policy.matches(&attempts.encode()));
    }
}
