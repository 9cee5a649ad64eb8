//! Fixed window: count requests per window and deny once the count would pass the limit.
//!
//! The cheapest algorithm (one counter per key) and the easiest to explain, with one known flaw:
//! a client can spend a whole limit at the very end of one window and another whole limit at the
//! start of the next, so up to twice the limit passes within one window length around a boundary.
//! Sliding windows exist to close that gap.
//!
//! Denied requests are not counted, so a client hammering a closed window does not push its own
//! reopening further away.
//!
//! **Debt.** A charge ([`FixedWindow::charge`]) records its cost whatever is left: the count may
//! go past the limit, and the key owes `debt = count − limit`. Checks are refused until the
//! window ends, whose end clears the count (and the debt with it). Counts stop at
//! [`MAX_COUNT`](crate::bounds::MAX_COUNT).

use std::time::Duration;

use super::{StepCharge, StepDecision};
use crate::{PolicyError, bounds};

/// Where fixed windows start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Anchor {
    /// Windows are aligned to multiples of the window length since the Unix epoch, the same for
    /// every key (a 1-minute window runs from :00 to :59 of each minute).
    #[default]
    Epoch,
    /// A key's window starts at its first request and a new one at the first request after it
    /// ends: the classic `INCR` + `EXPIRE` counter.
    FirstHit,
}

/// Parameters: `limit` requests per `window`, windows anchored per [`Anchor`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::Anchor;
/// use tollgate::algorithm::fixed_window::FixedWindow;
///
/// let params = FixedWindow::new(100, Duration::from_secs(60), Anchor::FirstHit)?;
/// assert_eq!(params.window_us(), 60_000_000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window_us: u64,
    anchor: Anchor,
}

/// A key's window: when it started and how much it has admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// Start of the window the count belongs to, µs since the Unix epoch.
    pub window_start_us: u64,
    /// Cost admitted in that window.
    pub count: u64,
}

impl FixedWindow {
    /// `limit` is 1 to 10^9; `window` is 1 ms to 1000 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// assert!(FixedWindow::new(0, Duration::from_secs(60), Anchor::Epoch).is_err());
    /// ```
    pub fn new(limit: u64, window: Duration, anchor: Anchor) -> Result<Self, PolicyError> {
        Ok(FixedWindow {
            limit: bounds::count("limit", limit, bounds::MAX_LIMIT)?,
            window_us: bounds::period_us("window", window)?,
            anchor,
        })
    }

    /// Requests admitted per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(100, Duration::from_secs(60), Anchor::Epoch)?;
    /// assert_eq!(params.limit(), 100);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Window length.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let params = tollgate::algorithm::fixed_window::FixedWindow::new(5, Duration::from_secs(60), tollgate::Anchor::Epoch)?;
    /// assert_eq!(params.window(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window_us)
    }

    /// Window length in microseconds.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(100, Duration::from_secs(60), Anchor::Epoch)?;
    /// assert_eq!(params.window_us(), 60_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn window_us(&self) -> u64 {
        self.window_us
    }

    /// Where windows start.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(100, Duration::from_secs(60), Anchor::Epoch)?;
    /// assert_eq!(params.anchor(), Anchor::Epoch);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn anchor(&self) -> Anchor {
        self.anchor
    }

    /// Decides a request of `cost` at `now_us`; when `commit` is true and it is admitted, the
    /// count is updated in `state` (`None` means the key has no state yet).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(2, Duration::from_secs(1), Anchor::Epoch)?;
    /// let mut state = None;
    /// assert!(params.step(&mut state, 10_000_000, 2, true).allowed);
    /// let denied = params.step(&mut state, 10_400_000, 1, true);
    /// assert_eq!(denied.retry_after_us, Some(600_000)); // the next window starts at 11 s
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let current = self.current_window(state.as_ref(), now_us);
        let outcome = self.answer(&current, now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State {
                count: current.count + cost,
                ..current
            });
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` in the window `current` (see
    /// `current_window`).
    #[inline(always)]
    fn answer(&self, current: &State, now_us: u64, cost: u64) -> StepDecision {
        let window_end = current.window_start_us + self.window_us;
        let allowed = current.count.saturating_add(cost) <= self.limit;
        let count = if allowed {
            current.count + cost
        } else {
            current.count
        };
        StepDecision {
            allowed,
            remaining: self.limit.saturating_sub(count),
            reset_after_us: if count > 0 {
                window_end.saturating_sub(now_us)
            } else {
                0
            },
            retry_after_us: (!allowed).then(|| window_end.saturating_sub(now_us)),
        }
    }

    /// Gives back up to `cost` of what the window admitted: while the window the key counted in
    /// is still current, its count goes down by `cost` (not below zero); once that window has
    /// passed, the spend went with it and there is nothing to give back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(2, Duration::from_secs(1), Anchor::Epoch)?;
    /// let mut state = None;
    /// params.step(&mut state, 0, 2, true);
    /// params.refund(&mut state, 500_000, 1);
    /// assert_eq!(params.step(&mut state, 600_000, 1, false).remaining, 0);
    /// assert!(params.step(&mut state, 600_000, 1, false).allowed);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, now_us: u64, cost: u64) {
        if let Some(s) = state
            && s.count > 0
            && now_us < s.window_start_us + self.window_us
        {
            s.count = s.count.saturating_sub(cost);
        }
    }

    /// Records `cost` in the current window whatever is left (see the module's *Debt*), and
    /// returns the debt (how far the count is past the limit, 0 when it is not) with the answer
    /// a request of cost 1 would get right after.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Anchor;
    /// use tollgate::algorithm::fixed_window::FixedWindow;
    ///
    /// let params = FixedWindow::new(2, Duration::from_secs(1), Anchor::Epoch)?;
    /// let mut state = None;
    /// let charged = params.charge(&mut state, 0, 5);
    /// assert_eq!((charged.debt, charged.decision.retry_after_us), (3, Some(1_000_000)));
    /// assert_eq!(params.step(&mut state, 400_000, 1, false).retry_after_us, Some(600_000));
    /// assert!(params.step(&mut state, 1_000_000, 2, false).allowed); // the window's end clears it
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let current = self.current_window(state.as_ref(), now_us);
        // Still the window `now_us` falls in, so the answer comes from it as a step's would.
        let written = State {
            count: current.count.saturating_add(cost).min(bounds::MAX_COUNT),
            ..current
        };
        *state = Some(written);
        StepCharge {
            decision: self.answer(&written, now_us, 1),
            debt: written.count.saturating_sub(self.limit),
        }
    }

    /// The window `now_us` falls in, with the count carried over when it is the stored one.
    #[inline]
    fn current_window(&self, state: Option<&State>, now_us: u64) -> State {
        let w = self.window_us;
        let stored = state.filter(|s| s.count > 0);
        match (self.anchor, stored) {
            // Still inside the stored window (or the clock stepped back into it or before it).
            (_, Some(s)) if now_us < s.window_start_us + w => *s,
            (Anchor::Epoch, _) => State {
                window_start_us: now_us - now_us % w,
                count: 0,
            },
            (Anchor::FirstHit, _) => State {
                window_start_us: now_us,
                count: 0,
            },
        }
    }

    /// Units spent at `now_us` as this window counts them, debt included: the count while its
    /// window is current, 0 after. What a changed limit carries over (see
    /// [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        self.current_window(state, now_us).count
    }
}
