//! Leaky bucket as a meter: each request pours `cost` units into a bucket of `capacity`, the
//! bucket drains one unit per interval, and a request that would overflow it is denied.
//!
//! This is the mirror image of the token bucket (the level is the tokens already spent) and
//! admits the same traffic: bursts up to `capacity`, then the leak rate. Use whichever picture
//! your team reasons in. It is not a queue: nothing is delayed, requests pass or are denied now.
//!
//! **Debt.** A charge ([`LeakyBucket::charge`]) pours its cost whatever room is left: the level
//! may go above the capacity, and the key owes `debt = level − capacity` units. The bucket
//! leaks as usual, and a check of `cost` is refused until `level + cost − capacity` units have
//! leaked. The level stops at `capacity +` what leaks in
//! [`MAX_DEBT_PERIOD`](crate::bounds::MAX_DEBT_PERIOD).

use super::{StepCharge, StepDecision};
use crate::{PolicyError, Rate, bounds};

/// Parameters: a bucket of `capacity` units draining at `leak`.
///
/// ```
/// use tollgate::Rate;
/// use tollgate::algorithm::leaky_bucket::LeakyBucket;
///
/// let params = LeakyBucket::new(5, Rate::per_second(1)?)?;
/// assert_eq!(params.leak().interval_us(), 1_000_000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeakyBucket {
    capacity: u64,
    leak: Rate,
}

/// The bucket's level and the drain clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// Whole units in the bucket.
    pub level: u64,
    /// When the next unit started draining, µs since the Unix epoch.
    pub leaked_at_us: u64,
}

impl LeakyBucket {
    /// `capacity` is 1 to 10^9, and draining a full bucket may take at most 1000 days.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// assert!(LeakyBucket::new(0, Rate::per_second(1)?).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn new(capacity: u64, leak: Rate) -> Result<Self, PolicyError> {
        let capacity = bounds::count("capacity", capacity, bounds::MAX_LIMIT)?;
        leak.check_horizon("capacity", capacity)?;
        Ok(LeakyBucket { capacity, leak })
    }

    /// Bucket size.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// let params = LeakyBucket::new(10, Rate::per_second(5)?)?;
    /// assert_eq!(params.capacity(), 10);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Drain rate.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// let params = LeakyBucket::new(10, Rate::per_second(5)?)?;
    /// assert_eq!(params.leak().interval_us(), 200_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn leak(&self) -> Rate {
        self.leak
    }

    /// Decides a request of `cost` at `now_us`; with `commit`, an admitted one fills the bucket.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// let params = LeakyBucket::new(3, Rate::per_second(2)?)?;
    /// let mut state = None;
    /// assert!(params.step(&mut state, 0, 3, true).allowed);
    /// let denied = params.step(&mut state, 100_000, 2, true);
    /// assert_eq!(denied.retry_after_us, Some(900_000)); // two units drain by 1 s
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let s = self.drained(state.as_ref(), now_us);
        let outcome = self.answer(&s, now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State {
                level: s.level + cost,
                ..s
            });
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` on a bucket as of now (see `drained`).
    #[inline(always)]
    fn answer(&self, s: &State, now_us: u64, cost: u64) -> StepDecision {
        let interval = self.leak.interval_us();
        let allowed = s.level.saturating_add(cost) <= self.capacity;
        let level = if allowed { s.level + cost } else { s.level };
        // Time until `n` more units have drained.
        let drain = |n: u64| {
            s.leaked_at_us
                .saturating_add(n.saturating_mul(interval))
                .saturating_sub(now_us)
        };
        StepDecision {
            allowed,
            remaining: self.capacity.saturating_sub(level),
            reset_after_us: drain(level),
            retry_after_us: (!allowed).then(|| drain(s.level.saturating_add(cost) - self.capacity)),
        }
    }

    /// The bucket as of `now_us`. An empty bucket does not drain, so its clock restarts.
    #[inline]
    fn drained(&self, state: Option<&State>, now_us: u64) -> State {
        let empty = State {
            level: 0,
            leaked_at_us: now_us,
        };
        let Some(s) = state else { return empty };
        let interval = self.leak.interval_us();
        let leaked = now_us.saturating_sub(s.leaked_at_us) / interval;
        if leaked >= s.level {
            return empty;
        }
        State {
            level: s.level - leaked,
            leaked_at_us: s.leaked_at_us + leaked * interval,
        }
    }

    /// Pours `cost` units whatever room is left (see the module's *Debt*) and returns the debt
    /// (the units above the capacity, 0 when none) with the answer a request of cost 1 would
    /// get right after.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// let params = LeakyBucket::new(3, Rate::per_second(1)?)?;
    /// let mut state = None;
    /// let charged = params.charge(&mut state, 0, 5);
    /// assert_eq!((charged.debt, charged.decision.retry_after_us), (2, Some(3_000_000)));
    /// assert_eq!(params.step(&mut state, 0, 1, false).retry_after_us, Some(3_000_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let s = self.drained(state.as_ref(), now_us);
        let mut level = s.level.saturating_add(cost);
        if level > self.capacity {
            let most = self.capacity + bounds::MAX_DEBT_US / self.leak.interval_us();
            level = level.min(most.max(s.level));
        }
        // Its drain clock is within an interval of now, so the answer comes from the bucket
        // written as a step's would.
        let written = State { level, ..s };
        *state = Some(written);
        StepCharge {
            decision: self.answer(&written, now_us, 1),
            debt: written.level.saturating_sub(self.capacity),
        }
    }

    /// Takes up to `cost` units back out of the bucket, never below empty.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::leaky_bucket::LeakyBucket;
    ///
    /// let params = LeakyBucket::new(3, Rate::per_second(1)?)?;
    /// let mut state = None;
    /// params.step(&mut state, 0, 3, true);
    /// params.refund(&mut state, 0, 2);
    /// assert_eq!(state.map(|s| s.level), Some(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, _now_us: u64, cost: u64) {
        if let Some(s) = state {
            s.level = s.level.saturating_sub(cost);
        }
    }

    /// Units in the bucket at `now_us`, debt included: what a changed limit carries over (see
    /// [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        self.drained(state, now_us).level
    }
}
