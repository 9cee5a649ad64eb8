//! GCRA, the generic cell rate algorithm: one timestamp per key.
//!
//! **Rate and burst in plain words.** `rate` is the long-run pace: `Rate::per_second(10)` means
//! one request every 100 ms on average. `burst` is how many requests may arrive *at once* after a
//! quiet period, before that pace applies. Both are needed because real clients are bursty: a
//! page load fires five calls together, then nothing for a while.
//!
//! Worked example with `rate = 10 per second` and `burst = 5`:
//!
//! - At t = 0 a client fires 8 requests together: the first 5 pass, the last 3 are denied with
//!   `retry_after` = 100 ms (one interval frees one slot).
//! - From then on it gets one request per 100 ms: t = 100 ms passes, t = 150 ms is denied
//!   (retry in 50 ms), t = 200 ms passes.
//! - After 500 ms of silence it has its full burst of 5 back.
//!
//! So `burst = 1` means strictly one request per interval, and the most a client can get in any
//! span `T` is `burst + T × rate`. (Some libraries call `burst − 1` the burst; here `burst` is
//! exactly the number of back-to-back requests allowed, the same as a token bucket's capacity.)
//!
//! **How it works.** The state is the *theoretical arrival time* (TAT): when the key's budget
//! would be completely refilled. Each admitted request pushes the TAT `cost × interval` further
//! into the future. A request is admitted if, after pushing, the TAT is no more than
//! `burst × interval` ahead of now.
//!
//! **Debt.** A charge ([`Gcra::charge`]) records its cost whatever is left: it pushes the TAT
//! `cost × interval` ahead even past `now + tolerance`. The key then owes
//! `debt = ⌈(TAT − now − tolerance) / interval⌉` requests, and a check of `cost` is refused for
//! exactly `TAT + cost × interval − now − tolerance`: time pays the debt back at the rate, as it
//! frees any spent burst. The TAT stops at `now + tolerance +`
//! [`MAX_DEBT_PERIOD`](crate::bounds::MAX_DEBT_PERIOD).

use super::{StepCharge, StepDecision};
use crate::{PolicyError, Rate, bounds};

/// Parameters: `rate` on average, up to `burst` requests at once.
///
/// ```
/// use tollgate::Rate;
/// use tollgate::algorithm::gcra::Gcra;
///
/// let params = Gcra::new(Rate::per_second(10)?, 5)?;
/// assert_eq!(params.tolerance_us(), 500_000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gcra {
    rate: Rate,
    burst: u64,
}

/// The theoretical arrival time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// When the key's whole burst is available again, µs since the Unix epoch.
    pub tat_us: u64,
}

impl Gcra {
    /// `burst` is 1 to 10^9, and `burst` requests at `rate` may span at most 1000 days.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// assert!(Gcra::new(Rate::per_second(10)?, 0).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn new(rate: Rate, burst: u64) -> Result<Self, PolicyError> {
        let burst = bounds::count("burst", burst, bounds::MAX_LIMIT)?;
        rate.check_horizon("burst", burst)?;
        Ok(Gcra { rate, burst })
    }

    /// Long-run rate.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// let params = Gcra::new(Rate::per_second(10)?, 5)?;
    /// assert_eq!(params.rate().interval_us(), 100_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Requests admitted at once.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// let params = Gcra::new(Rate::per_second(10)?, 5)?;
    /// assert_eq!(params.burst(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// How far ahead of now the TAT may run: `burst × interval`, in µs.
    #[inline]
    pub fn tolerance_us(&self) -> u64 {
        self.burst * self.rate.interval_us()
    }

    /// Decides a request of `cost` at `now_us`; with `commit`, an admitted one moves the TAT.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// let params = Gcra::new(Rate::per_second(10)?, 5)?;
    /// let mut state = None;
    /// for _ in 0..5 {
    ///     assert!(params.step(&mut state, 0, 1, true).allowed);
    /// }
    /// assert_eq!(params.step(&mut state, 0, 1, true).retry_after_us, Some(100_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline(always)]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let tat = state.map_or(now_us, |s| s.tat_us.max(now_us));
        let (outcome, tat) = self.answer(tat, now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State { tat_us: tat });
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` on a TAT no earlier than now, and the TAT
    /// it leaves when admitted (the TAT as it was when denied).
    #[inline(always)]
    fn answer(&self, tat: u64, now_us: u64, cost: u64) -> (StepDecision, u64) {
        let interval = self.rate.interval_us();
        let tolerance = self.tolerance_us();
        let pushed = tat.saturating_add(cost.saturating_mul(interval));
        let allowed = pushed - now_us <= tolerance;
        let tat = if allowed { pushed } else { tat };
        let ahead = tat - now_us;
        // Less than one interval of slack is no request left: the common case of a denial, and
        // no division needed for it.
        let slack = tolerance.saturating_sub(ahead);
        let outcome = StepDecision {
            allowed,
            remaining: if slack < interval { 0 } else { slack / interval },
            reset_after_us: ahead,
            retry_after_us: (!allowed).then(|| pushed - now_us - tolerance),
        };
        (outcome, tat)
    }

    /// Records `cost` requests whatever is left (see the module's *Debt*) and returns the debt
    /// (the requests owed beyond the burst, 0 when none) with the answer a request of cost 1
    /// would get right after.
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// let params = Gcra::new(Rate::per_second(10)?, 5)?;
    /// let mut state = None;
    /// let charged = params.charge(&mut state, 0, 7);
    /// assert_eq!(charged.debt, 2);
    /// // Two intervals to pay the debt, one more for a request of cost 1.
    /// assert_eq!(charged.decision.retry_after_us, Some(300_000));
    /// assert_eq!(charged.decision, params.step(&mut state, 0, 1, false));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let interval = self.rate.interval_us();
        let tolerance = self.tolerance_us();
        let tat = state.map_or(now_us, |s| s.tat_us.max(now_us));
        let latest = (now_us + tolerance + bounds::MAX_DEBT_US).max(tat);
        let tat = tat.saturating_add(cost.saturating_mul(interval)).min(latest);
        *state = Some(State { tat_us: tat });
        let owed_us = (tat - now_us).saturating_sub(tolerance);
        StepCharge {
            decision: self.answer(tat, now_us, 1).0,
            debt: if owed_us == 0 {
                0
            } else {
                owed_us.div_ceil(interval)
            },
        }
    }

    /// Gives back `cost` requests: the TAT moves back by `cost` intervals (a TAT in the past is a
    /// full burst, so the budget never goes past full).
    ///
    /// ```
    /// use tollgate::Rate;
    /// use tollgate::algorithm::gcra::Gcra;
    ///
    /// let params = Gcra::new(Rate::per_second(10)?, 5)?;
    /// let mut state = None;
    /// params.step(&mut state, 0, 5, true);
    /// params.refund(&mut state, 0, 2);
    /// assert_eq!(params.step(&mut state, 0, 1, false).remaining, 1);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, _now_us: u64, cost: u64) {
        if let Some(s) = state {
            s.tat_us = s
                .tat_us
                .saturating_sub(cost.saturating_mul(self.rate.interval_us()));
        }
    }

    /// Requests spent at `now_us`, debt included: how far ahead of now the TAT is, in whole
    /// intervals rounded up. What a changed limit carries over (see [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        state.map_or(0, |s| {
            s.tat_us.saturating_sub(now_us).div_ceil(self.rate.interval_us())
        })
    }
}
