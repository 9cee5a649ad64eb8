//! The window boundary: a client that knows where fixed windows start sends `L` requests at
//! 0:59.9, the end of one window, and `L` more at 1:00.0, the start of the next, against `L` per
//! minute. On a manual clock, with epoch-aligned windows starting at t = 0.
//!
//! The number that matters is the most requests admitted in any 60 s span. It is computed from
//! the admitted timestamps themselves with a sliding scan, so it reports what each algorithm
//! actually let through, not what its documentation promises.

use std::time::Duration;

use tollgate::{ManualClock, MemoryStore};

use crate::lineup::{self, START_US};
use crate::{ScenarioError, progress};

/// When the first burst arrives.
pub const FIRST_AT: Duration = Duration::from_millis(59_900);
/// When the second burst arrives.
pub const SECOND_AT: Duration = Duration::from_secs(60);
/// The span the limit is about.
pub const SPAN: Duration = Duration::from_secs(60);

/// What one algorithm let through.
#[derive(Debug, Clone)]
pub struct Row {
    /// The algorithm's short name.
    pub label: &'static str,
    /// Its parameters in words.
    pub parameters: String,
    /// Admitted in the burst at 0:59.9.
    pub first_burst: u64,
    /// Admitted in the burst at 1:00.0.
    pub second_burst: u64,
    /// The most admitted requests in any 60 s span, from the admitted timestamps.
    pub max_in_span: u64,
}

/// The whole scenario.
#[derive(Debug, Clone)]
pub struct BoundaryReport {
    /// Requests per minute allowed, and the size of each burst.
    pub limit: u64,
    /// One row per algorithm.
    pub rows: Vec<Row>,
}

/// Runs both bursts against every algorithm.
///
/// ```
/// let report = tollgate_scenarios::boundary::run(10)?;
/// assert_eq!(report.rows[0].label, "fixed window");
/// assert_eq!(report.rows[0].max_in_span, 20);
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn run(limit: u64) -> Result<BoundaryReport, ScenarioError> {
    if limit == 0 {
        return Err(ScenarioError::BadArgument {
            arg: "limit",
            expected: "1 to 100000",
            value: "0".into(),
        });
    }
    let contenders = lineup::lineup(limit, SPAN)?;
    let bar = progress::bar(contenders.len() as u64 * 2 * limit, "boundary");
    let mut rows = vec![];
    for contender in contenders {
        bar.set_message(contender.label);
        let clock = ManualClock::new(START_US);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let mut admitted_at = vec![];
        let mut bursts = [0u64; 2];
        for (burst, at) in [FIRST_AT, SECOND_AT].into_iter().enumerate() {
            clock.set_us(START_US + at.as_micros() as u64);
            for _ in 0..limit {
                let decision =
                    store
                        .check(&contender.policy, "client", 1)
                        .map_err(|source| ScenarioError::Store {
                            store: "memory",
                            source,
                        })?;
                if decision.allowed {
                    bursts[burst] += 1;
                    admitted_at.push(at);
                }
            }
            bar.inc(limit);
        }
        rows.push(Row {
            label: contender.label,
            parameters: contender.parameters,
            first_burst: bursts[0],
            second_burst: bursts[1],
            max_in_span: max_in_span(&admitted_at, SPAN),
        });
    }
    bar.finish_and_clear();
    Ok(BoundaryReport { limit, rows })
}

/// The most timestamps in any half-open span `[t, t + span)`, by a sliding scan over the sorted
/// timestamps (a busiest span can always be moved right until it starts at one of them).
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::boundary::max_in_span;
///
/// let s = Duration::from_secs;
/// assert_eq!(max_in_span(&[s(0), s(30), s(59), s(60), s(61)], s(60)), 4);
/// assert_eq!(max_in_span(&[], s(60)), 0);
/// ```
pub fn max_in_span(timestamps: &[Duration], span: Duration) -> u64 {
    let mut sorted = timestamps.to_vec();
    sorted.sort_unstable();
    let mut best = 0;
    let mut end = 0;
    for (start, &t) in sorted.iter().enumerate() {
        while end < sorted.len() && sorted[end] < t + span {
            end += 1;
        }
        best = best.max(end - start);
    }
    best as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_excludes_its_end() {
        let s = Duration::from_secs;
        assert_eq!(max_in_span(&[s(0), s(60)], s(60)), 1);
        assert_eq!(max_in_span(&[s(60), s(0), s(59)], s(60)), 2);
    }

    #[test]
    fn counts_repeated_timestamps() {
        let t = Duration::from_millis(59_900);
        assert_eq!(max_in_span(&[t; 5], SPAN), 5);
    }
}
