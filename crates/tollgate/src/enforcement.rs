//! Gradual enforcement: a new limit enforced for a share of the keys and run in shadow mode for
//! the rest, so it can be turned on for 10% of traffic first and widened as it proves right.
//!
//! Which keys are enforced must not flap: a client enforced on one request and not on the next,
//! or on one instance and not on another, would see a limit that comes and goes. So the choice
//! is a fixed function of the policy name and the key, the same on every instance, after every
//! restart and in every version:
//!
//! ```text
//! h      = FNV-1a 64 over: policy name bytes, one 0xFF byte, key bytes
//! h      = murmur3 fmix64(h)          (spreads FNV's low bits)
//! bucket = h mod 10 000               (a basis point, 0 to 9 999)
//! enforced when bucket < the share in basis points (10% is 1 000)
//! ```
//!
//! The policy name takes part so that two policies at 10% do not enforce on the same unlucky
//! tenth of the clients; the 0xFF byte (never in UTF-8 text) keeps `("ab", "c")` apart from
//! `("a", "bc")`. Widening the share only adds keys: a key enforced at 10% stays enforced at 50%.
//!
//! The hash is public, so a client that picks its own key freely (a random API key it mints)
//! could pick one in the shadow part; gradual enforcement is meant for keys a client does not
//! choose, such as its address or account, and for a rollout, not as a lasting limit.
//!
//! The [`Engine`](crate::Engine) applies it: a rule of a policy with an
//! [`Enforcement`] below 100% is made a shadow rule for the keys outside the share, and is
//! reported as one ([`RuleVerdict::shadow`](crate::RuleVerdict::shadow)).

use crate::PolicyError;

/// The share of a policy's keys that is enforced, in basis points (10 000 is every key).
///
/// ```
/// use tollgate::Enforcement;
///
/// let tenth = Enforcement::percent(10)?;
/// assert_eq!(tenth.basis_points(), 1_000);
/// let enforced = (0..10_000).filter(|i| tenth.enforces("api", format!("user-{i}").as_bytes())).count();
/// assert!((900..1_100).contains(&enforced), "{enforced}");
/// // Stable: the same key gets the same answer every time, and stays in when the share widens.
/// let half = Enforcement::percent(50)?;
/// for i in 0..1_000 {
///     let key = format!("user-{i}");
///     assert!(!tenth.enforces("api", key.as_bytes()) || half.enforces("api", key.as_bytes()));
/// }
/// assert!(Enforcement::percent(101).is_err());
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Enforcement {
    basis_points: u16,
}

/// Every key: 100% in basis points.
pub const ALL_BASIS_POINTS: u16 = 10_000;

impl Enforcement {
    /// `percent` of the keys (0 to 100).
    pub fn percent(percent: u8) -> Result<Self, PolicyError> {
        Self::from_basis_points(u16::from(percent).saturating_mul(100))
    }

    /// `basis_points` hundredths of a percent of the keys (0 to 10 000): `1_250` is 12.5%.
    ///
    /// ```
    /// let share = tollgate::Enforcement::from_basis_points(1_250)?;
    /// assert_eq!(share.to_string(), "12.5%");
    /// assert!(tollgate::Enforcement::from_basis_points(10_001).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn from_basis_points(basis_points: u16) -> Result<Self, PolicyError> {
        if basis_points > ALL_BASIS_POINTS {
            return Err(PolicyError::TooLarge {
                field: "enforce_percent",
                value: u64::from(basis_points) / 100,
                max: 100,
            });
        }
        Ok(Enforcement { basis_points })
    }

    /// The share in basis points.
    pub fn basis_points(&self) -> u16 {
        self.basis_points
    }

    /// True when every key is enforced.
    pub fn is_full(&self) -> bool {
        self.basis_points >= ALL_BASIS_POINTS
    }

    /// Whether `key` under the policy named `policy` is in the enforced share.
    #[inline]
    pub fn enforces(&self, policy: &str, key: &[u8]) -> bool {
        self.is_full() || bucket(policy, key) < self.basis_points
    }
}

impl std::fmt::Display for Enforcement {
    /// `10%`, `12.5%`, `0.01%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, part) = (self.basis_points / 100, self.basis_points % 100);
        match part {
            0 => write!(f, "{whole}%"),
            p if p % 10 == 0 => write!(f, "{whole}.{}%", p / 10),
            p => write!(f, "{whole}.{p:02}%"),
        }
    }
}

/// The basis point (0 to 9 999) of `key` under `policy`; see the [module docs](self).
///
/// ```
/// // Fixed forever: these values are part of the format.
/// assert_eq!(tollgate::enforcement::bucket("api", b"203.0.113.9"), 3168);
/// assert!(tollgate::enforcement::bucket("api", b"k") < 10_000);
/// ```
pub fn bucket(policy: &str, key: &[u8]) -> u16 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for &byte in policy.as_bytes().iter().chain(&[0xFF]).chain(key) {
        hash = (hash ^ u64::from(byte)).wrapping_mul(PRIME);
    }
    // murmur3's 64-bit finalizer.
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash % u64::from(ALL_BASIS_POINTS)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_fixed_values() {
        // If these change, every deployment's enforced keys change: they must not.
        let seen: Vec<u16> = ["a", "b", "203.0.113.9"]
            .iter()
            .map(|k| bucket("api", k.as_bytes()))
            .collect();
        assert_eq!(seen, FIXED);
    }

    const FIXED: [u16; 3] = [9425, 5860, 3168];

    #[test]
    fn zero_and_full_shares_are_all_or_nothing() {
        let none = Enforcement::percent(0).unwrap();
        let all = Enforcement::percent(100).unwrap();
        for i in 0..1000 {
            let key = format!("k{i}");
            assert!(!none.enforces("p", key.as_bytes()));
            assert!(all.enforces("p", key.as_bytes()));
        }
    }

    #[test]
    fn policies_enforce_on_different_keys() {
        let tenth = Enforcement::percent(10).unwrap();
        let both = (0..10_000)
            .map(|i| format!("k{i}"))
            .filter(|k| tenth.enforces("a", k.as_bytes()) && tenth.enforces("b", k.as_bytes()))
            .count();
        // Independent choices overlap on about 1% of keys, not 10%.
        assert!(both < 300, "{both}");
    }
}
