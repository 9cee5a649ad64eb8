//! The six algorithms every scenario runs, set to the same budget ("`limit` per `window`") so
//! their differences come from the algorithm alone, each with its parameters spelled out for the
//! report.

use std::time::Duration;

use tollgate::{Algorithm, Anchor, Policy, Rate};

use crate::ScenarioError;

/// One algorithm, configured, with the words the report uses for it.
#[derive(Debug, Clone)]
pub struct Contender {
    /// The policy (named after the algorithm).
    pub policy: Policy,
    /// A short human name, e.g. `token bucket`.
    pub label: &'static str,
    /// The parameters in words, e.g. `capacity 20, refill 20 per 60 s (1 token every 3 s)`.
    pub parameters: String,
}

/// Every algorithm allowing `limit` per `window`: fixed window (epoch-aligned), sliding log,
/// sliding window counter, token bucket (capacity `limit`, refilled at `limit` per `window`),
/// leaky bucket (capacity `limit`, leaking `limit` per `window`) and GCRA (rate `limit` per
/// `window`, burst `limit`).
///
/// ```
/// use std::time::Duration;
///
/// let lineup = tollgate_scenarios::lineup::lineup(20, Duration::from_secs(60))?;
/// assert_eq!(lineup.len(), 6);
/// assert_eq!(lineup[3].label, "token bucket");
/// assert_eq!(lineup[3].parameters, "capacity 20, refill 20 per 60 s (1 every 3 s)");
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn lineup(limit: u64, window: Duration) -> Result<Vec<Contender>, ScenarioError> {
    let w = words(window);
    let rate = Rate::new(limit, window).map_err(|source| ScenarioError::Policy { name: "rate", source })?;
    let pace = format!("{limit} per {w} (1 every {})", words(rate.interval()));
    let entries = [
        (
            "fixed window",
            Algorithm::fixed_window(limit, window, Anchor::Epoch),
            format!("{limit} per {w} window, windows aligned to the epoch"),
        ),
        (
            "sliding log",
            Algorithm::sliding_log(limit, window),
            format!("{limit} in any {w} (exact log)"),
        ),
        (
            "sliding window",
            Algorithm::sliding_window(limit, window),
            format!("{limit} per {w}, previous window weighted by its overlap"),
        ),
        (
            "token bucket",
            Algorithm::token_bucket(limit, rate),
            format!("capacity {limit}, refill {pace}"),
        ),
        (
            "leaky bucket",
            Algorithm::leaky_bucket(limit, rate),
            format!("capacity {limit}, leak {pace}"),
        ),
        (
            "GCRA",
            Algorithm::gcra(rate, limit),
            format!("rate {pace}, burst {limit}"),
        ),
    ];
    entries
        .into_iter()
        .map(|(label, algorithm, parameters)| {
            let to_error = |source| ScenarioError::Policy { name: label, source };
            let algorithm = algorithm.map_err(to_error)?;
            let policy = Policy::new(algorithm.name(), algorithm).map_err(to_error)?;
            Ok(Contender {
                policy,
                label,
                parameters,
            })
        })
        .collect()
}

/// A duration in the report's words: `60 s`, `100 ms`, `2.5 s`, `3 µs`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::lineup::words;
///
/// assert_eq!(words(Duration::from_secs(60)), "60 s");
/// assert_eq!(words(Duration::from_millis(100)), "100 ms");
/// assert_eq!(words(Duration::from_millis(59_900)), "59.9 s");
/// ```
pub fn words(d: Duration) -> String {
    let us = d.as_micros();
    if us >= 1_000_000 {
        let s = d.as_secs_f64();
        if us.is_multiple_of(1_000_000) {
            format!("{} s", d.as_secs())
        } else {
            format!("{} s", trim(format!("{s:.3}")))
        }
    } else if us >= 1_000 {
        if us.is_multiple_of(1_000) {
            format!("{} ms", us / 1_000)
        } else {
            format!("{} ms", trim(format!("{:.3}", us as f64 / 1e3)))
        }
    } else {
        format!("{us} µs")
    }
}

fn trim(mut number: String) -> String {
    while number.ends_with('0') {
        number.pop();
    }
    if number.ends_with('.') {
        number.pop();
    }
    number
}

/// Where the simulated scenarios start: 1 800 000 000 s after the Unix epoch, a whole number of
/// minutes, so epoch-aligned windows of a minute (or any divisor of it) start exactly at t = 0.
pub const START_US: u64 = 1_800_000_000_000_000;
