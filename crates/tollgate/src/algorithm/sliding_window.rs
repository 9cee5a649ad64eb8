//! Sliding window counter: estimate the last `window` from two fixed-window counters.
//!
//! Keep the count of the current epoch-aligned window and of the previous one. A request at
//! fraction `f` into the current window sees
//!
//! ```text
//! used = previous × (1 − f) + current
//! ```
//!
//! as if the previous window's requests had been spread evenly over it. It costs two counters
//! per key whatever the limit (the sliding log costs one entry per request) and it smooths the
//! fixed window's boundary burst, at the price of being an estimate: with bursty traffic it can
//! admit somewhat more or fewer than an exact log would.
//!
//! The fraction moves in whole milliseconds, and all arithmetic is exact integer arithmetic on
//! `used × window` in request·ms, so a decision never depends on rounding. That needs
//! `limit × window` (in ms) to stay below 2^51 so the Lua port, whose numbers are doubles, is exact
//! too: 26 million per day or 600 million per hour, for example. Larger quotas fit a fixed window.
//!
//! **Debt.** A charge ([`SlidingWindow::charge`]) records its cost whatever is left: the current
//! count may go past the limit, and it is weighted as usual, so the key owes
//! `debt = ⌈(used − limit × window) / window⌉` (`used` in request·ms as above). A check of
//! `cost` is refused until enough of the count has slid out (the step's usual `retry_after`):
//! this window's count weighs fully until it ends, then less and less through the next one.
//! Counts stop at `3 × 2^50 / window in ms` (and at 2^32 − 1), which keeps `used` exact in a Lua
//! double: a count that large is refused for nearly two windows anyway.

use std::time::Duration;

use super::{StepCharge, StepDecision};
use crate::{PolicyError, bounds};

/// Parameters: about `limit` requests per sliding `window`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_window::SlidingWindow;
///
/// let params = SlidingWindow::new(1000, Duration::from_secs(3600))?;
/// assert_eq!(params.limit(), 1000);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window_us: u64,
}

/// The two counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct State {
    /// Start of the current window, µs since the Unix epoch (a multiple of the window).
    pub window_start_us: u64,
    /// Cost admitted in the window before it (at most the limit, so 32 bits suffice).
    pub previous: u32,
    /// Cost admitted in the current window.
    pub current: u32,
}

/// The counters widened for arithmetic.
#[derive(Debug, Clone, Copy)]
struct Counts {
    window_start_us: u64,
    previous: u64,
    current: u64,
}

/// Counts stay within [`SlidingWindow::max_count`]; saturate rather than wrap if a caller breaks
/// that.
fn narrow(count: u64) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

impl SlidingWindow {
    /// `limit` is 1 to 10^9; `window` is a whole number of milliseconds from 1 ms to 1000 days;
    /// and `limit × window in ms` is below 2^51.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// assert!(SlidingWindow::new(2_000_000_000, Duration::from_secs(1)).is_err());
    /// assert!(SlidingWindow::new(10, Duration::from_micros(1_500)).is_err());
    /// assert!(SlidingWindow::new(26_000_000, Duration::from_secs(86_400)).is_ok());
    /// assert!(SlidingWindow::new(27_000_000, Duration::from_secs(86_400)).is_err());
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        let limit = bounds::count("limit", limit, bounds::MAX_LIMIT)?;
        let window_us = bounds::period_us("window", window)?;
        if window_us % 1000 != 0 {
            return Err(PolicyError::NotWholeMilliseconds {
                field: "window",
                value: window,
            });
        }
        let max_limit = bounds::MAX_WINDOW_UNITS / (window_us / 1000);
        if limit > max_limit {
            return Err(PolicyError::TooLarge {
                field: "limit",
                value: limit,
                max: max_limit,
            });
        }
        Ok(SlidingWindow { limit, window_us })
    }

    /// Requests admitted per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// let params = SlidingWindow::new(50, Duration::from_secs(1))?;
    /// assert_eq!(params.limit(), 50);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Window length.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let params = tollgate::algorithm::sliding_window::SlidingWindow::new(5, Duration::from_secs(60))?;
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
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// let params = SlidingWindow::new(50, Duration::from_secs(1))?;
    /// assert_eq!(params.window_us(), 1_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn window_us(&self) -> u64 {
        self.window_us
    }

    /// Decides a request of `cost` at `now_us`; with `commit`, an admitted one is counted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// let params = SlidingWindow::new(10, Duration::from_secs(10))?;
    /// let mut state = None;
    /// assert!(params.step(&mut state, 0, 10, true).allowed); // 10 in the window [0 s, 10 s)
    /// // At 15 s, half of the previous window still overlaps: 10 × 0.5 = 5 used, 5 remain.
    /// assert_eq!(params.step(&mut state, 15_000_000, 1, false).remaining, 4);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let s = self.current_windows(state.as_ref(), now_us);
        let outcome = self.answer(&s, self.used(&s, now_us), now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State {
                window_start_us: s.window_start_us,
                previous: narrow(s.previous),
                current: narrow(s.current + cost),
            });
        }
        outcome
    }

    /// What the counters as of now weigh at `now_us`, in request·ms: `previous × (w − e) +
    /// current × w`.
    #[inline(always)]
    fn used(&self, s: &Counts, now_us: u64) -> u64 {
        let w = self.window_ms();
        // Whole milliseconds into the current window: the previous window weighs (w - e) / w.
        // Below w, as counters as of now start within a window of now (0 when the clock stepped
        // back before their window: the previous one then weighs fully).
        let e = now_us.saturating_sub(s.window_start_us) / 1000;
        s.previous
            .saturating_mul(w - e)
            .saturating_add(s.current.saturating_mul(w))
    }

    /// The answer to a request of `cost` at `now_us` on the counters as of now (see
    /// `current_windows`), which weigh `used` (see `used`).
    #[inline(always)]
    fn answer(&self, s: &Counts, used: u64, now_us: u64, cost: u64) -> StepDecision {
        let w = self.window_ms();
        let capacity = self.limit * w;
        let allowed = used.saturating_add(cost.saturating_mul(w)) <= capacity;
        let (current, used) = if allowed {
            (s.current + cost, used + cost * w)
        } else {
            (s.current, used)
        };
        let window_end_us = s.window_start_us + self.window_us;
        StepDecision {
            allowed,
            remaining: capacity.saturating_sub(used) / w,
            reset_after_us: if current > 0 {
                window_end_us + self.window_us - now_us
            } else if s.previous > 0 {
                window_end_us - now_us
            } else {
                0
            },
            retry_after_us: (!allowed).then(|| self.retry_at_us(s, cost) - now_us),
        }
    }

    /// Gives back up to `cost`, newest spends first: from the stored window's count while it
    /// still weighs (it is the current window, or the one before), then from the count before it
    /// while that still weighs (the stored window is the current one). What has stopped weighing
    /// is not touched.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// let params = SlidingWindow::new(10, Duration::from_secs(10))?;
    /// let mut state = None;
    /// params.step(&mut state, 0, 10, true);
    /// params.refund(&mut state, 1_000_000, 4);
    /// assert_eq!(params.step(&mut state, 1_000_000, 1, false).remaining, 3);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, now_us: u64, cost: u64) {
        let Some(s) = state else {
            return;
        };
        let start = now_us - now_us % self.window_us;
        if s.window_start_us + self.window_us < start {
            return;
        }
        let from_current = cost.min(u64::from(s.current));
        s.current -= from_current as u32;
        if s.window_start_us >= start {
            let from_previous = (cost - from_current).min(u64::from(s.previous));
            s.previous -= from_previous as u32;
        }
    }

    /// Records `cost` in the current window whatever is left (see the module's *Debt*) and
    /// returns the debt (what the weighted count owes beyond the limit, rounded up) with the
    /// answer a request of cost 1 would get right after.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// let params = SlidingWindow::new(10, Duration::from_secs(10))?;
    /// let mut state = None;
    /// let charged = params.charge(&mut state, 0, 20);
    /// assert_eq!(charged.debt, 10);
    /// assert_eq!(charged.decision, params.step(&mut state, 0, 1, false));
    /// // At 15 s the 20 weigh 10: a request fits once they weigh 9, at 15.5 s.
    /// assert_eq!(params.step(&mut state, 15_000_000, 1, false).retry_after_us, Some(500_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline(always)]
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let w = self.window_ms();
        let s = self.current_windows(state.as_ref(), now_us);
        // Still the counters as of now (within a `u32` each), so the answer comes from them as
        // a step's would.
        // Past the bound (3 × MAX_COUNT weighed, and a `u32`), the count stops at it, or where
        // it already was above it; the bound is worked out only then.
        let counted = s.current.saturating_add(cost);
        let past_bound = counted.saturating_mul(w) > 3 << 50 || counted > u64::from(u32::MAX);
        let written = Counts {
            current: if past_bound {
                self.max_count().max(s.current)
            } else {
                counted
            },
            ..s
        };
        *state = Some(State {
            window_start_us: written.window_start_us,
            previous: narrow(written.previous),
            current: narrow(written.current),
        });
        let used = self.used(&written, now_us);
        let owed = used.saturating_sub(self.limit * w);
        StepCharge {
            decision: self.answer(&written, used, now_us, 1),
            debt: if owed == 0 { 0 } else { owed.div_ceil(w) },
        }
    }

    /// The largest count a window may hold: `3 × 2^50 / window in ms`, so that `used` (two
    /// counts weighted, plus a cost) stays within 2^53; and at most what a `u32` holds.
    fn max_count(&self) -> u64 {
        ((3 << 50) / self.window_ms()).min(u64::from(u32::MAX))
    }

    /// The counters as of `now_us`: rolled forward one window, or cleared after two.
    fn current_windows(&self, state: Option<&State>, now_us: u64) -> Counts {
        let w = self.window_us;
        let start = now_us - now_us % w;
        match state {
            // The clock stepped back before the stored window: keep counting in it.
            Some(s) if s.window_start_us >= start => Counts {
                window_start_us: s.window_start_us,
                previous: u64::from(s.previous),
                current: u64::from(s.current),
            },
            Some(s) if s.window_start_us + w == start => Counts {
                window_start_us: start,
                previous: u64::from(s.current),
                current: 0,
            },
            _ => Counts {
                window_start_us: start,
                previous: 0,
                current: 0,
            },
        }
    }

    /// The earliest time (µs) a denied request of `cost` fits. The estimate only falls as time
    /// passes, so this solves `weight × (w − e) ≤ room × w` for the smallest whole `e` in ms.
    fn retry_at_us(&self, s: &Counts, cost: u64) -> u64 {
        let w = self.window_ms();
        let (window_start_us, room, weight) = if s.current.saturating_add(cost) <= self.limit {
            // Fits in this window once enough of the previous one has slid out. `previous` is
            // non-zero, or the request would have been admitted.
            (s.window_start_us, self.limit - s.current - cost, s.previous)
        } else {
            // Fits in the next window, where this window's count is the weighted previous one.
            (
                s.window_start_us + self.window_us,
                self.limit.saturating_sub(cost),
                s.current,
            )
        };
        let longest_overlap = (room * w / weight.max(1)).min(w);
        window_start_us + (w - longest_overlap) * 1000
    }

    /// Units the window weighs at `now_us`, rounded up, debt included: what a changed limit
    /// carries over (see [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        let counts = self.current_windows(state, now_us);
        self.used(&counts, now_us).div_ceil(self.window_ms())
    }

    fn window_ms(&self) -> u64 {
        self.window_us / 1000
    }
}
