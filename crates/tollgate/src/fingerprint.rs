//! A policy's fingerprint: one number for its algorithm and the parameters that give its stored
//! state a meaning (a window's limit and length, a bucket's capacity and refill interval, a
//! calendar's period and zone). Two configs whose policy has the same fingerprint read the same
//! stored state the same way; a changed fingerprint is how a reload, `check-config --against` and
//! explain tell an operator that a policy's live keys will be read under other numbers.
//!
//! The number is FNV-1a over a fixed text of the algorithm's parameters, not `std`'s hasher,
//! whose seed differs per process: every instance of a fleet, and every version that keeps this
//! text, computes the same fingerprint for the same parameters. A penalty, shadow mode and the
//! failure mode are not part of it: they change what a decision does, not what a stored state
//! means.

use std::fmt;

use crate::Algorithm;
use crate::Anchor;

/// The fingerprint of an algorithm and its parameters; shown as 16 hexadecimal digits.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Anchor};
///
/// let minute = Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch)?;
/// let again = Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch)?;
/// let raised = Algorithm::fixed_window(10, Duration::from_secs(60), Anchor::Epoch)?;
/// assert_eq!(minute.fingerprint(), again.fingerprint());
/// assert_ne!(minute.fingerprint(), raised.fingerprint());
/// assert_eq!(minute.fingerprint().to_string().len(), 16);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// The number itself.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Algorithm {
    /// The fingerprint of this algorithm and its parameters (see the [module docs](self)).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint(fnv1a(self.parameters_text().as_bytes()))
    }

    /// The algorithm's name and the parameters its state depends on, in base units: the text
    /// the fingerprint is taken of. A rate is its interval between units, so `10/s` and `20/2s`
    /// are one rate.
    fn parameters_text(&self) -> String {
        let name = self.name();
        match self {
            Algorithm::FixedWindow(p) => {
                let anchor = match p.anchor() {
                    Anchor::Epoch => "epoch",
                    Anchor::FirstHit => "first_hit",
                };
                format!("{name} {} {} {anchor}", p.limit(), p.window_us())
            }
            Algorithm::SlidingLog(p) => format!("{name} {} {}", p.limit(), p.window_us()),
            Algorithm::SlidingWindow(p) => format!("{name} {} {}", p.limit(), p.window_us()),
            Algorithm::TokenBucket(p) => format!("{name} {} {}", p.capacity(), p.refill().interval_us()),
            Algorithm::LeakyBucket(p) => format!("{name} {} {}", p.capacity(), p.leak().interval_us()),
            Algorithm::Gcra(p) => format!("{name} {} {}", p.rate().interval_us(), p.burst()),
            Algorithm::CalendarQuota(p) => format!(
                "{name} {} {} {} {}",
                p.limit(),
                p.period().as_str(),
                p.time_zone(),
                p.week_start().to_monday_one_offset()
            ),
        }
    }
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Rate;
    use crate::algorithm::calendar_quota::{CalendarQuota, Period, Weekday};

    fn every_kind() -> Vec<Algorithm> {
        let minute = Duration::from_secs(60);
        let per_second = |n| Rate::per_second(n).expect("a rate");
        let calendar = |zone, start| {
            Algorithm::CalendarQuota(
                CalendarQuota::new(10, Period::Week, zone)
                    .expect("a quota")
                    .week_starts(start),
            )
        };
        vec![
            Algorithm::fixed_window(5, minute, Anchor::Epoch).unwrap(),
            Algorithm::fixed_window(5, minute, Anchor::FirstHit).unwrap(),
            Algorithm::fixed_window(6, minute, Anchor::Epoch).unwrap(),
            Algorithm::fixed_window(5, minute * 2, Anchor::Epoch).unwrap(),
            Algorithm::sliding_log(5, minute).unwrap(),
            Algorithm::sliding_window(5, minute).unwrap(),
            Algorithm::token_bucket(5, per_second(1)).unwrap(),
            Algorithm::token_bucket(5, per_second(2)).unwrap(),
            Algorithm::leaky_bucket(5, per_second(1)).unwrap(),
            Algorithm::gcra(per_second(1), 5).unwrap(),
            Algorithm::gcra(per_second(1), 6).unwrap(),
            calendar("UTC", Weekday::Monday),
            calendar("UTC", Weekday::Sunday),
            calendar("Europe/Paris", Weekday::Monday),
        ]
    }

    #[test]
    fn every_parameter_and_algorithm_changes_the_fingerprint() {
        let all = every_kind();
        let distinct: std::collections::BTreeSet<_> = all.iter().map(Algorithm::fingerprint).collect();
        assert_eq!(distinct.len(), all.len());
    }

    #[test]
    fn the_same_rate_written_two_ways_is_one_fingerprint() {
        let one = Algorithm::token_bucket(5, Rate::per_second(10).unwrap()).unwrap();
        let other = Algorithm::token_bucket(5, Rate::new(20, Duration::from_secs(2)).unwrap()).unwrap();
        assert_eq!(one.fingerprint(), other.fingerprint());
    }

    #[test]
    fn the_fingerprint_does_not_depend_on_the_process() {
        // Pinned: a fleet's instances, and versions that keep the text, agree on it.
        let algorithm = Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch).unwrap();
        assert_eq!(algorithm.parameters_text(), "fixed_window 5 60000000 epoch");
        assert_eq!(
            algorithm.fingerprint().as_u64(),
            fnv1a(b"fixed_window 5 60000000 epoch")
        );
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
