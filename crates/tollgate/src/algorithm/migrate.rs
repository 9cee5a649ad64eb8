//! What happens to a key's state when its policy's algorithm or parameters change under the same
//! name (a reload): the state was written under the old numbers, and read under the new ones it
//! would mean something else (a bucket's tokens left are not a window's count spent), so it is
//! *migrated* once, the first time the key is written under the new numbers (a check, a charge,
//! a refund). What only looks at the key (a peek, an explain, a question) migrates a copy to
//! answer from and stores nothing, so a look between two changes cannot decide what the second
//! one finds.
//!
//! Every algorithm can say how many units a key has spent as of now, debt included (each
//! module's `spent`), and every algorithm can record a number of units on an empty state (its
//! `charge`). A migration is those two: the units spent under the old parameters, carried over
//! as the policy's [`OnChange`] declares, then charged on an empty state of the new algorithm at
//! now. The Redis scripts do the same in Lua, step for step, so a key migrates to the same state
//! whichever store holds it and whichever instance of a fleet touches it first.
//!
//! What a migration cannot carry is *when* the units were spent: they are recorded as spent now,
//! so under a window they leave with the window that holds now, and under a bucket they refill
//! from now. That errs on the strict side: no key gains budget from a change it did not ask for.

use std::fmt;
use std::str::FromStr;

use super::{Algorithm, AlgorithmState, KeyState, PolicyParts, charge};

/// What a change of a policy's algorithm or parameters does to the keys it already counts.
///
/// ```
/// use tollgate::algorithm::migrate::OnChange;
///
/// assert_eq!(OnChange::default(), OnChange::Keep);
/// assert_eq!("scale".parse::<OnChange>(), Ok(OnChange::Scale));
/// assert_eq!(OnChange::Reset.to_string(), "reset");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnChange {
    /// The units a key spent stay spent, all of them: 3 of 5 spent is 3 of 10 after a raise, and
    /// 3 of 2 after a cut to 2 (one unit of debt, paid back as the algorithm recovers), so a
    /// limit cut and raised again gives no key budget it did not have.
    #[default]
    Keep,
    /// The key keeps the same fraction of its budget, rounded up: 3 of 5 spent is 6 of 10.
    Scale,
    /// Every key starts afresh, with its whole budget and no penalty.
    Reset,
}

impl OnChange {
    /// The name used in configs and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            OnChange::Keep => "keep",
            OnChange::Scale => "scale",
            OnChange::Reset => "reset",
        }
    }
}

impl fmt::Display for OnChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnChange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "keep" => Ok(OnChange::Keep),
            "scale" => Ok(OnChange::Scale),
            "reset" => Ok(OnChange::Reset),
            other => Err(format!(
                "unknown on_change {other:?}: expected keep, scale or reset"
            )),
        }
    }
}

/// The units `state` has spent at `now_us` under `algorithm`, debt included; 0 for a state of
/// another algorithm.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, decide, migrate::spent};
/// use tollgate::{Algorithm, Policy, Rate};
///
/// let policy = Policy::new("api", Algorithm::token_bucket(5, Rate::per_second(1)?)?)?;
/// let mut state = KeyState::default();
/// decide(&policy, &mut state, 0, 3, true);
/// assert_eq!(spent(policy.algorithm(), &state.algorithm, 0), 3);
/// // One token back a second later.
/// assert_eq!(spent(policy.algorithm(), &state.algorithm, 1_000_000), 2);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn spent(algorithm: &Algorithm, state: &AlgorithmState, now_us: u64) -> u64 {
    match (algorithm, state) {
        (Algorithm::FixedWindow(p), AlgorithmState::FixedWindow(s)) => p.spent(Some(s), now_us),
        (Algorithm::SlidingWindow(p), AlgorithmState::SlidingWindow(s)) => p.spent(Some(s), now_us),
        (Algorithm::TokenBucket(p), AlgorithmState::TokenBucket(s)) => p.spent(Some(s), now_us),
        (Algorithm::LeakyBucket(p), AlgorithmState::LeakyBucket(s)) => p.spent(Some(s), now_us),
        (Algorithm::Gcra(p), AlgorithmState::Gcra(s)) => p.spent(Some(s), now_us),
        (Algorithm::CalendarQuota(p), AlgorithmState::CalendarQuota(s)) => p.spent(Some(s), now_us),
        (Algorithm::SlidingLog(p), AlgorithmState::SlidingLog(log)) => p.spent(log, now_us),
        _ => 0,
    }
}

/// The units a key that spent `spent` under `from` has spent under `to`, as `on_change` says:
/// never more than `to`'s limit (a key in debt starts the new numbers out of budget, not in
/// debt). `scale` computes in floating point, as the Lua port does, so both round alike.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::migrate::{OnChange, carried};
/// use tollgate::{Algorithm, Anchor};
///
/// let five = Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch)?;
/// let ten = Algorithm::fixed_window(10, Duration::from_secs(60), Anchor::Epoch)?;
/// assert_eq!(carried(&five, &ten, OnChange::Keep, 3), 3);
/// assert_eq!(carried(&five, &ten, OnChange::Scale, 3), 6);
/// assert_eq!(carried(&ten, &five, OnChange::Keep, 8), 8); // 3 over the new limit: debt
/// assert_eq!(carried(&ten, &five, OnChange::Scale, 3), 2); // 1.5, rounded up
/// assert_eq!(carried(&five, &ten, OnChange::Reset, 3), 0);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn carried(from: &Algorithm, to: &Algorithm, on_change: OnChange, spent: u64) -> u64 {
    let (old, new) = (from.limit(), to.limit());
    match on_change {
        // All of it, past the new limit too (debt): a limit lowered and raised again finds the
        // key where it was, so no flip-flop of a reload gives a key budget it never had.
        OnChange::Keep => spent,
        OnChange::Scale => {
            let fraction = spent.min(old) as f64 / old as f64;
            ((fraction * new as f64).ceil() as u64).min(new)
        }
        OnChange::Reset => 0,
    }
}

/// Migrates `state`, written under `from`, to `to`'s algorithm and parameters at `now_us`, as
/// `to`'s [`on_change`](crate::Policy::on_change) declares (see the [module docs](self)). `keep` and
/// `scale` keep a penalty's block and offense count; `reset` drops them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::{KeyState, decide, migrate::migrate};
/// use tollgate::{Algorithm, Anchor, Policy, Rate};
///
/// let window = Policy::new("api", Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch)?)?;
/// let mut state = KeyState::default();
/// decide(&window, &mut state, 0, 2, true);
/// // The same policy, now a token bucket of 10: the 2 spent stay spent.
/// let bucket = Policy::new("api", Algorithm::token_bucket(10, Rate::per_second(1)?)?)?;
/// migrate(window.algorithm(), &bucket, &mut state, 0);
/// assert_eq!(decide(&bucket, &mut state, 0, 1, false).remaining, 7);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn migrate(from: &Algorithm, to: &impl PolicyParts, state: &mut KeyState, now_us: u64) {
    let units = carried(
        from,
        to.algorithm(),
        to.on_change(),
        spent(from, &state.algorithm, now_us),
    );
    if to.on_change() == OnChange::Reset {
        state.clear();
        return;
    }
    match &mut state.algorithm {
        AlgorithmState::SlidingLog(log) => log.clear(),
        other => *other = AlgorithmState::Empty,
    }
    if units > 0 {
        charge(to, state, now_us, units);
    }
}
