//! The traffic shapes the accuracy columns are measured under, as arrival times, and the
//! sliding window counter's worst case.
//!
//! Every shape is a list of request times in µs after an *origin*: a window boundary (epoch
//! aligned), so fixed windows start exactly at 0, W, 2W, ... Random shapes come from a seeded
//! generator (splitmix64), so one seed gives the same arrivals on every machine and every store.
//!
//! # The sliding window counter's bound
//!
//! The counter admits a request (cost 1) at `e` whole milliseconds into window `k + 1` of `w`
//! ms when `previous × (w − e) + (current + 1) × w ≤ L × w`, where `previous` is what window `k`
//! admitted. A span of length W starts inside some window `k` and ends inside window `k + 1`.
//! Let `A` be what it holds of window `k` and `B` what it holds of window `k + 1`. The last
//! request counted in `B` was admitted at some `e ≤ w − 1` (the span ends before window `k + 1`
//! does), so `B ≤ L − previous × (w − e) / w`, and `A ≤ previous ≤ L`. Hence
//!
//! ```text
//! A + B ≤ L + previous × e / w ≤ L + L × (w − 1) / w,   so   max ≤ 2L − ⌈L / w⌉
//! ```
//!
//! and this is reached: `L` requests in the last microsecond of a window that follows an idle
//! one, then, one millisecond at a time through the next window, as many as are admitted
//! ([`trickle_after_burst`]). So the counter's worst case is as bad as the fixed window's (just
//! under 2L), but the attacker needs a whole window of precisely paced requests instead of two
//! bursts a millisecond apart; under random traffic it stays far below (the report's seeds).

use std::time::Duration;

/// How many windows the random shapes last.
pub const HORIZON_WINDOWS: u64 = 20;
/// Poisson traffic arrives at this multiple of the limit.
pub const POISSON_LOAD: f64 = 1.5;
/// During its "on" phases the on/off client sends at this multiple of the limit.
pub const ON_LOAD: f64 = 4.0;
/// Mean length of an "on" phase, in windows.
pub const ON_MEAN_WINDOWS: f64 = 0.5;
/// Mean length of an "off" phase, in windows.
pub const OFF_MEAN_WINDOWS: f64 = 1.0;

/// A traffic shape of the accuracy columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `L` requests in the last millisecond of window 0 and `L` at the start of window 1.
    Boundary,
    /// Poisson arrivals at [`POISSON_LOAD`] × the limit for [`HORIZON_WINDOWS`] windows.
    Poisson,
    /// A client switching between idle phases and bursts at [`ON_LOAD`] × the limit; phase
    /// lengths are exponential (means [`ON_MEAN_WINDOWS`] and [`OFF_MEAN_WINDOWS`]).
    OnOff,
}

impl Shape {
    /// The three shapes, in column order.
    pub const ALL: [Shape; 3] = [Shape::Boundary, Shape::Poisson, Shape::OnOff];

    /// How the report names it.
    ///
    /// ```
    /// assert_eq!(tollgate_scenarios::compare::traffic::Shape::OnOff.label(), "on/off bursts");
    /// ```
    pub fn label(self) -> &'static str {
        match self {
            Shape::Boundary => "boundary burst",
            Shape::Poisson => "Poisson 1.5×",
            Shape::OnOff => "on/off bursts",
        }
    }

    /// The arrival times (µs after the origin, sorted) for `limit` per `window` and `seed`
    /// (ignored by the boundary burst).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_scenarios::compare::traffic::Shape;
    ///
    /// let times = Shape::Boundary.arrivals(3, Duration::from_secs(1), 0);
    /// assert_eq!(times, [999_000, 999_000, 999_000, 1_000_000, 1_000_000, 1_000_000]);
    /// let a = Shape::Poisson.arrivals(10, Duration::from_secs(1), 7);
    /// assert_eq!(a, Shape::Poisson.arrivals(10, Duration::from_secs(1), 7));
    /// assert!(a.windows(2).all(|pair| pair[0] <= pair[1]));
    /// ```
    pub fn arrivals(self, limit: u64, window: Duration, seed: u64) -> Vec<u64> {
        let w = window.as_micros() as u64;
        match self {
            Shape::Boundary => {
                let mut times = vec![w.saturating_sub(1_000); limit as usize];
                times.extend(std::iter::repeat_n(w, limit as usize));
                times
            }
            Shape::Poisson => {
                let mut rng = Rng::new(seed);
                let mean_gap = w as f64 / (POISSON_LOAD * limit as f64);
                poisson(&mut rng, 0.0, (HORIZON_WINDOWS * w) as f64, mean_gap)
            }
            Shape::OnOff => {
                let mut rng = Rng::new(seed ^ 0x0FF0_0FF0);
                let end = (HORIZON_WINDOWS * w) as f64;
                let mean_gap = w as f64 / (ON_LOAD * limit as f64);
                let mut times = vec![];
                // Start idle for a random while, so phases do not line up with windows.
                let mut t = rng.exponential(OFF_MEAN_WINDOWS * w as f64);
                while t < end {
                    let on_end = (t + rng.exponential(ON_MEAN_WINDOWS * w as f64)).min(end);
                    times.extend(poisson(&mut rng, t, on_end, mean_gap));
                    t = on_end + rng.exponential(OFF_MEAN_WINDOWS * w as f64);
                }
                times
            }
        }
    }
}

/// Poisson arrivals in `[start, end)` µs with mean gap `mean_gap` µs.
fn poisson(rng: &mut Rng, start: f64, end: f64, mean_gap: f64) -> Vec<u64> {
    let mut times = vec![];
    let mut t = start + rng.exponential(mean_gap);
    // Bounded: at most 100 times the expected count (never reached in practice).
    let cap = ((end - start) / mean_gap * 100.0) as usize + 100;
    while t < end && times.len() < cap {
        times.push(t as u64);
        t += rng.exponential(mean_gap);
    }
    times
}

/// The most a sliding window counter of `limit` per `window` can admit in any span of length
/// `window`: `2L − ⌈L / w⌉` with `w` the window in whole milliseconds (see the module docs).
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::compare::traffic::sliding_window_bound;
///
/// assert_eq!(sliding_window_bound(100, Duration::from_secs(1)), 199);
/// assert_eq!(sliding_window_bound(100, Duration::from_millis(50)), 198);
/// ```
pub fn sliding_window_bound(limit: u64, window: Duration) -> u64 {
    let w_ms = (window.as_millis() as u64).max(1);
    2 * limit - limit.div_ceil(w_ms)
}

/// The attack that reaches [`sliding_window_bound`], as a sequence of steps: at each time (µs
/// after the origin), send requests until one is denied, at most `at_most` of them. First the
/// whole budget in the last microsecond of window 0, then every millisecond of window 1.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::compare::traffic::trickle_after_burst;
///
/// let steps = trickle_after_burst(100, Duration::from_secs(1));
/// assert_eq!(steps[0], (999_999, 100));
/// assert_eq!(steps.len(), 1 + 1000);
/// ```
pub fn trickle_after_burst(limit: u64, window: Duration) -> Vec<(u64, u64)> {
    let w = window.as_micros() as u64;
    let w_ms = w / 1000;
    let per_ms = limit.div_ceil(w_ms.max(1)) + 1;
    let mut steps = vec![(w - 1, limit)];
    steps.extend((0..w_ms).map(|e| (w + e * 1000, per_ms)));
    steps
}

/// splitmix64: tiny, fast, and good enough to draw arrival gaps; seeded, so reproducible.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1]`.
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Exponentially distributed with mean `mean`.
    fn exponential(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_traffic_runs_at_one_and_a_half_times_the_limit() {
        let window = Duration::from_secs(1);
        let mut total = 0;
        for seed in 0..20 {
            total += Shape::Poisson.arrivals(100, window, seed).len();
        }
        let per_window = total as f64 / (20 * HORIZON_WINDOWS) as f64;
        assert!((140.0..160.0).contains(&per_window), "{per_window}");
    }

    #[test]
    fn on_off_traffic_has_idle_gaps_of_a_window_and_bursts_above_the_limit() {
        let window = Duration::from_secs(1);
        let times = Shape::OnOff.arrivals(100, window, 3);
        assert!(times.iter().all(|&t| t < HORIZON_WINDOWS * 1_000_000));
        let longest_gap = times.windows(2).map(|p| p[1] - p[0]).max().unwrap();
        assert!(longest_gap > 500_000, "{longest_gap}");
        let busiest = crate::boundary::max_in_span(
            &times
                .iter()
                .map(|&t| Duration::from_micros(t))
                .collect::<Vec<_>>(),
            window,
        );
        assert!(busiest > 100, "{busiest}");
    }

    #[test]
    fn seeds_give_different_traffic() {
        let window = Duration::from_secs(1);
        assert_ne!(
            Shape::Poisson.arrivals(50, window, 1),
            Shape::Poisson.arrivals(50, window, 2)
        );
    }

    #[test]
    fn the_bound_is_below_twice_the_limit() {
        assert_eq!(sliding_window_bound(1, Duration::from_millis(10)), 1);
        assert_eq!(sliding_window_bound(1000, Duration::from_millis(10)), 1900);
    }
}
