//! Sliding log: remember when each admitted request happened, and admit a new one only if the
//! requests of the last `window` leave room for it.
//!
//! The only exact algorithm here: in *every* interval of length `window`, at most `limit` are
//! admitted, wherever the interval starts. The price is memory, one entry per admitted request
//! (requests in the same microsecond share an entry), which is why the limit is capped at
//! [`MAX_LOG_LIMIT`](crate::bounds::MAX_LOG_LIMIT). Denied requests are not recorded.
//!
//! An entry stamped `t` counts at every time `now` with `now - t < window` and expires at
//! `t + window`.
//!
//! **Debt.** A charge ([`SlidingLog::charge`]) records its cost whatever is left: a cost of `n`
//! is `n` units in one entry, like an admitted request's, so the units in the window may pass
//! the limit and the key owes `debt = used − limit`. They leave the window entry by entry, and
//! a check of `cost` is refused until enough of them have left (the step's usual
//! `retry_after`). Memory stays bounded: a log keeps at most `limit + 1` entries (checks alone
//! never make more than `limit`); a charge that finds it that long joins the newest entry,
//! which takes the charge's time, so its units leave no earlier than they should. The units in
//! the log stop at [`MAX_COUNT`](crate::bounds::MAX_COUNT).

use std::collections::VecDeque;
use std::time::Duration;

use super::{StepCharge, StepDecision};
use crate::{PolicyError, bounds};

/// Parameters: at most `limit` requests in any `window`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::algorithm::sliding_log::SlidingLog;
///
/// let params = SlidingLog::new(20, Duration::from_secs(60))?;
/// assert_eq!(params.limit(), 20);
/// assert!(SlidingLog::new(1_000_000, Duration::from_secs(60)).is_err());
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window_us: u64,
}

/// Admitted requests, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Log {
    /// `(timestamp µs, cost)` pairs in non-decreasing timestamp order.
    entries: VecDeque<(u64, u64)>,
    /// Sum of the costs in `entries`, so a check does not add up the whole log.
    total: u64,
}

impl Log {
    /// The `(timestamp µs, cost)` entries, oldest first.
    ///
    /// ```
    /// assert_eq!(tollgate::algorithm::sliding_log::Log::default().entries().count(), 0);
    /// ```
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// Forgets every entry, keeping the allocation.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::{Log, SlidingLog};
    ///
    /// let mut log = Log::default();
    /// SlidingLog::new(5, Duration::from_secs(1))?.step(&mut log, 0, 2, true);
    /// log.clear();
    /// assert_eq!(log, Log::default());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn clear(&mut self) {
        self.entries.clear();
        self.total = 0;
    }
}

impl SlidingLog {
    /// `limit` is 1 to 100 000; `window` is 1 ms to 1000 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::SlidingLog;
    ///
    /// assert!(SlidingLog::new(20, Duration::ZERO).is_err());
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Ok(SlidingLog {
            limit: bounds::count("limit", limit, bounds::MAX_LOG_LIMIT)?,
            window_us: bounds::period_us("window", window)?,
        })
    }

    /// Requests admitted per window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::SlidingLog;
    ///
    /// let params = SlidingLog::new(20, Duration::from_secs(60))?;
    /// assert_eq!(params.limit(), 20);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Window length.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let params = tollgate::algorithm::sliding_log::SlidingLog::new(5, Duration::from_secs(60))?;
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
    /// use tollgate::algorithm::sliding_log::SlidingLog;
    ///
    /// let params = SlidingLog::new(20, Duration::from_secs(60))?;
    /// assert_eq!(params.window_us(), 60_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn window_us(&self) -> u64 {
        self.window_us
    }

    /// Decides a request of `cost` at `now_us`. With `commit`, expired entries are dropped and
    /// an admitted request is appended; without it `log` is left untouched.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::{Log, SlidingLog};
    ///
    /// let params = SlidingLog::new(2, Duration::from_secs(10))?;
    /// let mut log = Log::default();
    /// params.step(&mut log, 1_000_000, 1, true);
    /// params.step(&mut log, 4_000_000, 1, true);
    /// let denied = params.step(&mut log, 5_000_000, 1, true);
    /// assert_eq!(denied.retry_after_us, Some(6_000_000)); // the entry from 1 s expires at 11 s
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step(&self, log: &mut Log, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let mut live_from = 0;
        let mut expired_cost = 0;
        for &(t, n) in &log.entries {
            if !self.expired(t, now_us) {
                break;
            }
            live_from += 1;
            expired_cost += n;
        }
        let outcome = self.answer(log, live_from, log.total - expired_cost, now_us, cost);
        if commit {
            log.entries.drain(..live_from);
            log.total -= expired_cost;
            if outcome.allowed {
                self.append(log, now_us, cost);
            }
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` on `log`, whose entries from `live_from`
    /// on are in the window and add up to `used`.
    #[inline(always)]
    fn answer(&self, log: &Log, live_from: usize, used: u64, now_us: u64, cost: u64) -> StepDecision {
        let allowed = used.saturating_add(cost) <= self.limit;
        let retry_after_us = (!allowed).then(|| {
            // Entries must expire, oldest first, until `cost` fits.
            let mut to_free = used.saturating_add(cost) - self.limit;
            let mut frees_at = now_us;
            for &(t, n) in log.entries.range(live_from..) {
                frees_at = t + self.window_us;
                to_free = to_free.saturating_sub(n);
                if to_free == 0 {
                    break;
                }
            }
            frees_at.saturating_sub(now_us)
        });
        let newest = if allowed {
            Some(log.entries.back().map_or(now_us, |&(t, _)| t.max(now_us)))
        } else {
            log.entries.back().map(|&(t, _)| t)
        };
        let used = if allowed { used + cost } else { used };
        StepDecision {
            allowed,
            remaining: self.limit.saturating_sub(used),
            reset_after_us: match newest {
                Some(t) if used > 0 => (t + self.window_us).saturating_sub(now_us),
                _ => 0,
            },
            retry_after_us,
        }
    }

    /// Gives back up to `cost` from the newest entries still in the window, newest first (a
    /// refund undoes the latest spends); entries that have left the window weigh nothing any more
    /// and are not touched.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::{Log, SlidingLog};
    ///
    /// let params = SlidingLog::new(3, Duration::from_secs(10))?;
    /// let mut log = Log::default();
    /// params.step(&mut log, 0, 2, true);
    /// params.step(&mut log, 1_000_000, 1, true);
    /// params.refund(&mut log, 2_000_000, 2);
    /// assert_eq!(log.entries().collect::<Vec<_>>(), [(0, 1)]);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, log: &mut Log, now_us: u64, cost: u64) {
        let mut left = cost;
        while left > 0 {
            let Some((t, n)) = log.entries.back_mut() else {
                break;
            };
            if *t + self.window_us <= now_us {
                break;
            }
            let given = left.min(*n);
            *n -= given;
            log.total -= given;
            left -= given;
            if *n == 0 {
                log.entries.pop_back();
            }
        }
    }

    /// Records `cost` units at `now_us` whatever is left (see the module's *Debt*), dropping
    /// the expired entries first, and returns the debt (the units in the window past the limit)
    /// with the answer a request of cost 1 would get right after.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::algorithm::sliding_log::{Log, SlidingLog};
    ///
    /// let params = SlidingLog::new(2, Duration::from_secs(10))?;
    /// let mut log = Log::default();
    /// params.step(&mut log, 0, 1, true);
    /// let charged = params.charge(&mut log, 1_000_000, 4);
    /// assert_eq!(charged.debt, 3);
    /// // The entry from 0 s leaves at 10 s, the charge's four units at 11 s.
    /// assert_eq!(charged.decision.retry_after_us, Some(10_000_000));
    /// assert_eq!(params.step(&mut log, 2_000_000, 1, false).retry_after_us, Some(9_000_000));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn charge(&self, log: &mut Log, now_us: u64, cost: u64) -> StepCharge {
        let live_from = log
            .entries
            .iter()
            .take_while(|&&(t, _)| self.expired(t, now_us))
            .count();
        let expired_cost: u64 = log.entries.drain(..live_from).map(|(_, n)| n).sum();
        log.total -= expired_cost;
        let cost = cost.min(bounds::MAX_COUNT.saturating_sub(log.total));
        if cost > 0 {
            let full = log.entries.len() as u64 > self.limit;
            match log.entries.back_mut() {
                Some((t, n)) if full => {
                    *t = (*t).max(now_us);
                    *n += cost;
                    log.total += cost;
                }
                _ => self.append(log, now_us, cost),
            }
        }
        // Every entry left is in the window (the expired ones are gone, the newest is no
        // earlier than now), so the answer comes from the whole log as a step's would.
        StepCharge {
            decision: self.answer(log, 0, log.total, now_us, 1),
            debt: log.total.saturating_sub(self.limit),
        }
    }

    /// Units logged in the window ending at `now_us`, debt included: what a changed limit
    /// carries over (see [`migrate`](super::migrate)).
    pub fn spent(&self, log: &Log, now_us: u64) -> u64 {
        log.entries
            .iter()
            .filter(|&&(t, _)| !self.expired(t, now_us))
            .map(|&(_, n)| n)
            .sum()
    }

    fn expired(&self, t: u64, now_us: u64) -> bool {
        t + self.window_us <= now_us
    }

    /// Appends, merging with the newest entry when it has the same timestamp. A clock that
    /// stepped back is stamped at the newest entry's time: later, so it expires no earlier.
    fn append(&self, log: &mut Log, now_us: u64, cost: u64) {
        log.total += cost;
        match log.entries.back_mut() {
            Some((t, n)) if *t >= now_us => *n += cost,
            _ => log.entries.push_back((now_us, cost)),
        }
    }
}
