//! Keys written as keyed hashes, for a log that must not hold them in clear: HMAC-SHA-256 (the
//! `hmac` crate over `sha2`) under the log's secret, cut to 128 bits in hex. Equal keys hash
//! equally under one secret, so a replay of a hashed log decides exactly as a replay of the
//! clear one would. Hashing runs on the writer thread, never in the request.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::line::LogLine;
use super::options::HashSecret;
use crate::ops::hex;

/// HMAC-SHA-256 under one secret, keyed once and cloned per key.
pub(super) struct KeyedHash(Hmac<Sha256>);

impl KeyedHash {
    pub(super) fn new(secret: &HashSecret) -> Self {
        // HMAC takes a key of any length (a long one is hashed first): this cannot fail.
        KeyedHash(Hmac::new_from_slice(&secret.0).expect("HMAC takes a key of any length"))
    }

    /// The first 128 bits of the HMAC of `data`, in lower-case hex.
    pub(super) fn hex(&self, data: &[u8]) -> String {
        let mut mac = self.0.clone();
        mac.update(data);
        let mac = mac.finalize().into_bytes();
        hex::lower(&mac[..16])
    }

    /// Replaces every key of `line` (its ops' keys and its Envoy descriptors' values) by its
    /// keyed hash.
    pub(super) fn hide_keys(&self, line: &mut LogLine) {
        for op in &mut line.ops {
            op.key = self.hex(op.key.as_bytes());
        }
        for descriptor in &mut line.descriptors {
            for [_, value] in &mut descriptor.entries {
                *value = self.hex(value.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_hash_is_hmac_sha256() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?".
        let hash = KeyedHash::new(&HashSecret(b"Jefe".to_vec()));
        assert_eq!(
            hash.hex(b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c7"
        );
    }

    #[test]
    fn a_secret_longer_than_a_block_is_hashed_first() {
        // RFC 4231, test case 6: a 131-byte key of 0xaa.
        let hash = KeyedHash::new(&HashSecret(vec![0xaa; 131]));
        assert_eq!(
            hash.hex(b"Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f"
        );
    }
}
