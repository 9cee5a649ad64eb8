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
//! admit somewhat more or fewer than an exact log would. All arithmetic is exact integer
//! arithmetic on `used × window` (in request·µs), so a decision never depends on rounding.

use std::time::Duration;

use super::Outcome;
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
    /// Cost admitted in the window before it.
    pub previous: u64,
    /// Cost admitted in the current window.
    pub current: u64,
}

impl SlidingWindow {
    /// `limit` is 1 to 10^9; `window` is 1 ms to 1000 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_window::SlidingWindow;
    ///
    /// assert!(SlidingWindow::new(2_000_000_000, Duration::from_secs(1)).is_err());
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Ok(SlidingWindow {
            limit: bounds::count("limit", limit, bounds::MAX_LIMIT)?,
            window_us: bounds::period_us("window", window)?,
        })
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
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> Outcome {
        let w = self.window_us;
        let s = self.current_windows(state.as_ref(), now_us);
        let elapsed = now_us.saturating_sub(s.window_start_us);
        let capacity = self.scaled(self.limit, w);
        let used = self.scaled(s.previous, w - elapsed) + self.scaled(s.current, w);
        let allowed = used + self.scaled(cost, w) <= capacity;
        let (current, used) = if allowed {
            (s.current + cost, used + self.scaled(cost, w))
        } else {
            (s.current, used)
        };
        if allowed && commit {
            *state = Some(State { current, ..s });
        }
        let to_window_end = w - elapsed;
        Outcome {
            allowed,
            remaining: (capacity.saturating_sub(used) / u128::from(w)) as u64,
            reset_after_us: if current > 0 {
                to_window_end + w
            } else if s.previous > 0 {
                to_window_end
            } else {
                0
            },
            retry_after_us: (!allowed).then(|| self.retry_after_us(&s, elapsed, cost)),
        }
    }

    /// The counters as of `now_us`: rolled forward one window, or cleared after two.
    fn current_windows(&self, state: Option<&State>, now_us: u64) -> State {
        let w = self.window_us;
        let start = now_us - now_us % w;
        match state {
            // The clock stepped back before the stored window: keep counting in it.
            Some(s) if s.window_start_us >= start => *s,
            Some(s) if s.window_start_us + w == start => State {
                window_start_us: start,
                previous: s.current,
                current: 0,
            },
            _ => State {
                window_start_us: start,
                previous: 0,
                current: 0,
            },
        }
    }

    /// The earliest time a denied request of `cost` fits. The estimate only falls as time
    /// passes, so this solves `previous × (w − e) ≤ room × w` for the smallest whole `e`.
    fn retry_after_us(&self, s: &State, elapsed: u64, cost: u64) -> u64 {
        let w = self.window_us;
        if s.current.saturating_add(cost) <= self.limit {
            // Fits in this window once enough of the previous one has slid out. `previous` is
            // non-zero, or the request would have been admitted.
            let room = self.limit - s.current - cost;
            let e = w - self.fit(room, s.previous);
            e - elapsed
        } else {
            // Fits in the next window, where today's count becomes the weighted previous one.
            let room = self.limit.saturating_sub(cost);
            let e = w - self.fit(room, s.current);
            (w - elapsed) + e
        }
    }

    /// The longest span `x` (in µs, at most one window) with `weight × x ≤ room × w`.
    fn fit(&self, room: u64, weight: u64) -> u64 {
        let w = self.window_us;
        let span = self.scaled(room, w) / u128::from(weight.max(1));
        span.min(u128::from(w)) as u64
    }

    fn scaled(&self, count: u64, span_us: u64) -> u128 {
        u128::from(count) * u128::from(span_us)
    }
}
