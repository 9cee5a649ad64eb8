//! The attempts counter for brute-force protection, as pure functions on its state.
//!
//! A login flow checks before acting (`check_limit`), counts a failure (`increment`), and clears
//! the counter on success (`reset`). The TTL is fixed when the counter is created and is not
//! extended by later failures, so "5 failures within an hour lock the account for the rest of
//! that hour" is exactly what happens.

use std::time::Duration;

use crate::{AttemptsStatus, Error, bounds};

/// A live counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// Failures counted so far.
    pub count: u64,
    /// When the counter disappears, µs since the Unix epoch.
    pub expires_at_us: u64,
}

impl Attempts {
    /// The counter as seen at `now_us`: `None` once expired.
    ///
    /// ```
    /// use tollgate::attempts::Attempts;
    ///
    /// let counter = Attempts { count: 3, expires_at_us: 100 };
    /// assert_eq!(Attempts::live(Some(&counter), 99), Some(counter));
    /// assert_eq!(Attempts::live(Some(&counter), 100), None);
    /// ```
    pub fn live(counter: Option<&Attempts>, now_us: u64) -> Option<Attempts> {
        counter.filter(|c| c.expires_at_us > now_us).copied()
    }

    /// Counts one failure at `now_us`: a new counter starts at 1 and lives for `ttl_us`; an
    /// existing one goes up by one and keeps its expiry.
    ///
    /// ```
    /// use tollgate::attempts::Attempts;
    ///
    /// let first = Attempts::increment(None, 0, 1_000);
    /// let second = Attempts::increment(Some(&first), 500, 1_000);
    /// assert_eq!((second.count, second.expires_at_us), (2, 1_000));
    /// ```
    pub fn increment(counter: Option<&Attempts>, now_us: u64, ttl_us: u64) -> Attempts {
        match Self::live(counter, now_us) {
            Some(c) => Attempts {
                count: c.count.saturating_add(1),
                ..c
            },
            None => Attempts {
                count: 1,
                expires_at_us: now_us.saturating_add(ttl_us),
            },
        }
    }

    /// Whether another attempt is allowed under `max_attempts`, and how long the counter lives.
    ///
    /// ```
    /// use tollgate::attempts::Attempts;
    ///
    /// let counter = Attempts { count: 5, expires_at_us: 2_000_000 };
    /// let status = Attempts::status(Some(&counter), 1_000_000, 5);
    /// assert!(!status.allowed);
    /// assert_eq!(status.ttl, Some(std::time::Duration::from_secs(1)));
    /// ```
    pub fn status(counter: Option<&Attempts>, now_us: u64, max_attempts: u64) -> AttemptsStatus {
        let live = Self::live(counter, now_us);
        let count = live.map_or(0, |c| c.count);
        AttemptsStatus {
            allowed: count < max_attempts,
            remaining: max_attempts.saturating_sub(count),
            ttl: live.map(|c| Duration::from_micros(c.expires_at_us - now_us)),
        }
    }
}

/// Checks an attempts TTL (1 ms to 1000 days) and returns it in microseconds.
pub(crate) fn ttl_us(ttl: Duration) -> Result<u64, Error> {
    if ttl < bounds::MIN_PERIOD || ttl > bounds::MAX_PERIOD {
        return Err(Error::TtlOutOfRange {
            value: ttl,
            min: bounds::MIN_PERIOD,
            max: bounds::MAX_PERIOD,
        });
    }
    Ok(bounds::as_us(ttl))
}
