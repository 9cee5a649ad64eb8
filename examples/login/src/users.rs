//! The user table: usernames and SHA-256 digests of their passwords, computed at start-up.
//!
//! A real application stores a slow, salted password hash such as argon2 and never a plain
//! password or a fast hash like SHA-256. Here the digest only gives every comparison the same
//! length, so it can run in constant time (`subtle`) and leak nothing through timing.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Known users and their password digests. Usernames are case-insensitive.
#[derive(Clone)]
pub struct Users {
    digests: HashMap<String, [u8; 32]>,
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Digests stay out of logs.
        f.debug_struct("Users")
            .field("count", &self.digests.len())
            .finish()
    }
}

impl Users {
    /// A table of `(username, password)` pairs.
    ///
    /// ```
    /// use tollgate_example_login::Users;
    ///
    /// let users = Users::new([("Carol", "correct horse")]);
    /// assert!(users.verify("carol", "correct horse"));
    /// assert!(!users.verify("carol", "Correct horse"));
    /// ```
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let digests = pairs
            .into_iter()
            .map(|(name, password)| (name.to_lowercase(), digest(password)))
            .collect();
        Users { digests }
    }

    /// The demo accounts: `alice` / `wonderland` and `bob` / `builder`.
    ///
    /// ```
    /// assert!(tollgate_example_login::Users::demo().verify("alice", "wonderland"));
    /// ```
    pub fn demo() -> Self {
        Users::new([("alice", "wonderland"), ("bob", "builder")])
    }

    /// Whether `password` is `username`'s. An unknown user is compared against a digest no
    /// password has, so it takes as long as a known one.
    ///
    /// ```
    /// let users = tollgate_example_login::Users::demo();
    /// assert!(!users.verify("mallory", "wonderland"));
    /// ```
    pub fn verify(&self, username: &str, password: &str) -> bool {
        const NO_PASSWORD: [u8; 32] = [0; 32];
        let (expected, known) = match self.digests.get(&username.to_lowercase()) {
            Some(expected) => (expected, true),
            None => (&NO_PASSWORD, false),
        };
        let matches: bool = digest(password).ct_eq(expected).into();
        matches && known
    }
}

fn digest(password: &str) -> [u8; 32] {
    Sha256::digest(password.as_bytes()).into()
}
