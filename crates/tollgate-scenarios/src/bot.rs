//! The polite bot: one client sending one request every 2 s for 10 minutes (300 requests, t = 0
//! to 598 s) against 20 per minute, on every algorithm, on a memory store with a manual clock.
//!
//! The bot asks for 30 a minute, half again the budget, so every algorithm must deny some of
//! it. The windows deny in blocks and let a fresh window in all at once; the buckets and GCRA
//! start with a full burst of 20 and refill continuously (one request every 3 s), so they deny
//! late (the burst and the refill together cover the bot's first two minutes) and then pass one
//! request in three. Ten minutes is long enough to see every algorithm settle at the rate: the
//! burst is spent once, the refill goes on. The report says which, measured, not predicted.

use std::time::Duration;

use tollgate::{ManualClock, MemoryStore};

use crate::lineup::{self, START_US};
use crate::{ScenarioError, progress};

/// Requests per minute allowed.
pub const LIMIT: u64 = 20;
/// Time between two requests of the bot.
pub const EVERY: Duration = Duration::from_secs(2);
/// How many requests the bot sends: t = 0, 2, ..., 598 s, ten minutes of 30 a minute.
pub const REQUESTS: u64 = 300;

/// One request and its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Time since the first request.
    pub at: Duration,
    /// Whether it passed.
    pub allowed: bool,
}

/// What one algorithm did with the bot's requests.
#[derive(Debug, Clone)]
pub struct Lane {
    /// The algorithm's short name, e.g. `sliding log`.
    pub label: &'static str,
    /// Its parameters in words.
    pub parameters: String,
    /// Every request, in order.
    pub requests: Vec<Request>,
}

/// The whole scenario.
#[derive(Debug, Clone)]
pub struct BotReport {
    /// Requests per minute allowed.
    pub limit: u64,
    /// Time between two requests.
    pub every: Duration,
    /// One lane per algorithm.
    pub lanes: Vec<Lane>,
}

impl Lane {
    /// How many requests passed.
    ///
    /// ```
    /// let report = tollgate_scenarios::bot::run()?;
    /// assert_eq!(report.lanes[0].admitted() + report.lanes[0].denied(), 300);
    /// # Ok::<(), tollgate_scenarios::ScenarioError>(())
    /// ```
    pub fn admitted(&self) -> usize {
        self.requests.iter().filter(|r| r.allowed).count()
    }

    /// How many requests were denied.
    pub fn denied(&self) -> usize {
        self.requests.len() - self.admitted()
    }

    /// When the first denial happened, if any.
    pub fn first_denial(&self) -> Option<Duration> {
        self.requests.iter().find(|r| !r.allowed).map(|r| r.at)
    }

    /// Every admitted request that follows a denied one: when admission resumed.
    pub fn resumed_at(&self) -> Vec<Duration> {
        self.requests
            .windows(2)
            .filter(|pair| !pair[0].allowed && pair[1].allowed)
            .map(|pair| pair[1].at)
            .collect()
    }

    /// How many requests passed in each minute of the run (t = 0–59 s, 60–119 s, ...): where
    /// the burst shows, and where each algorithm settles at its rate.
    ///
    /// ```
    /// let report = tollgate_scenarios::bot::run()?;
    /// let gcra = report.lanes.iter().find(|lane| lane.label == "GCRA").unwrap();
    /// // The burst of 20 and the refill let the first minute through whole; by the end, the rate.
    /// assert_eq!(gcra.admitted_per_minute()[0], 30);
    /// assert_eq!(gcra.admitted_per_minute()[9], 20);
    /// # Ok::<(), tollgate_scenarios::ScenarioError>(())
    /// ```
    pub fn admitted_per_minute(&self) -> Vec<usize> {
        let mut minutes: Vec<usize> = vec![];
        for request in &self.requests {
            let minute = (request.at.as_secs() / 60) as usize;
            if minutes.len() <= minute {
                minutes.resize(minute + 1, 0);
            }
            minutes[minute] += usize::from(request.allowed);
        }
        minutes
    }

    /// Runs of consecutive denied requests, as (first, last) times.
    pub fn denied_runs(&self) -> Vec<(Duration, Duration)> {
        let mut runs: Vec<(Duration, Duration)> = vec![];
        let mut previous_denied = false;
        for request in &self.requests {
            if !request.allowed {
                match runs.last_mut() {
                    Some(run) if previous_denied => run.1 = request.at,
                    _ => runs.push((request.at, request.at)),
                }
            }
            previous_denied = !request.allowed;
        }
        runs
    }
}

/// Runs the bot against every algorithm. Simulated time: returns in milliseconds.
///
/// ```
/// let report = tollgate_scenarios::bot::run()?;
/// let fixed = &report.lanes[0];
/// assert_eq!(fixed.label, "fixed window");
/// assert_eq!(fixed.first_denial(), Some(std::time::Duration::from_secs(40)));
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn run() -> Result<BotReport, ScenarioError> {
    let contenders = lineup::lineup(LIMIT, Duration::from_secs(60))?;
    let bar = progress::bar(contenders.len() as u64 * REQUESTS, "bot");
    let mut lanes = vec![];
    for contender in contenders {
        bar.set_message(contender.label);
        let clock = ManualClock::new(START_US);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let mut requests = vec![];
        for i in 0..REQUESTS {
            let at = EVERY * i as u32;
            clock.set_us(START_US + at.as_micros() as u64);
            let decision =
                store
                    .check(&contender.policy, "bot", 1)
                    .map_err(|source| ScenarioError::Store {
                        store: "memory",
                        source,
                    })?;
            requests.push(Request {
                at,
                allowed: decision.allowed,
            });
            bar.inc(1);
        }
        lanes.push(Lane {
            label: contender.label,
            parameters: contender.parameters,
            requests,
        });
    }
    bar.finish_and_clear();
    Ok(BotReport {
        limit: LIMIT,
        every: EVERY,
        lanes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(pattern: &str) -> Lane {
        Lane {
            label: "x",
            parameters: String::new(),
            requests: pattern
                .chars()
                .enumerate()
                .map(|(i, c)| Request {
                    at: Duration::from_secs(i as u64),
                    allowed: c == '+',
                })
                .collect(),
        }
    }

    #[test]
    fn finds_runs_of_denials_and_resumptions() {
        let lane = lane("++--+-+--");
        let s = Duration::from_secs;
        assert_eq!(lane.first_denial(), Some(s(2)));
        assert_eq!(lane.resumed_at(), vec![s(4), s(6)]);
        assert_eq!(lane.denied_runs(), vec![(s(2), s(3)), (s(5), s(5)), (s(7), s(8))]);
        assert_eq!((lane.admitted(), lane.denied()), (4, 5));
    }

    #[test]
    fn a_lane_without_denials_has_no_first_denial() {
        let lane = lane("+++");
        assert_eq!(lane.first_denial(), None);
        assert!(lane.resumed_at().is_empty());
        assert!(lane.denied_runs().is_empty());
    }
}
