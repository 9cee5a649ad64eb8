//! The attempts counter for brute-force protection, as pure functions on its state.
//!
//! A login flow counts each try before verifying the password (`try_once`: counted only while
//! fewer than `max` are, in one step, so parallel guesses cannot slip past the check) and clears
//! the counter on success (`reset`). `check_limit` then `increment` is the older two-step recipe:
//! parallel requests can all pass the check before any of them counts. The TTL is fixed when the
//! counter is created and is not extended by later attempts, so "5 tries within an hour lock the
//! account for the rest of that hour" is exactly what happens.

use std::time::Duration;

use crate::{AttemptTry, AttemptsStatus, Error, bounds};

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

impl Attempts {
    /// Counts one try at `now_us` only if fewer than `max_attempts` are counted: the new counter
    /// (`None` when the try was refused and nothing changes) and the answer. A new counter lives
    /// for `ttl_us`; a counted try keeps an existing counter's expiry.
    ///
    /// ```
    /// use tollgate::attempts::Attempts;
    ///
    /// let (first, answer) = Attempts::try_once(None, 0, 2, 1_000);
    /// assert!(answer.allowed && answer.attempts == 1 && answer.remaining == 1);
    /// let (second, _) = Attempts::try_once(first.as_ref(), 10, 2, 1_000);
    /// let (third, refused) = Attempts::try_once(second.as_ref(), 20, 2, 1_000);
    /// assert_eq!(third, None);
    /// assert!(!refused.allowed);
    /// assert_eq!((refused.attempts, refused.remaining), (2, 0));
    /// assert_eq!(refused.ttl, std::time::Duration::from_micros(980));
    /// ```
    pub fn try_once(
        counter: Option<&Attempts>,
        now_us: u64,
        max_attempts: u64,
        ttl_us: u64,
    ) -> (Option<Attempts>, AttemptTry) {
        let live = Self::live(counter, now_us);
        let (next, allowed) = match live {
            Some(c) if c.count >= max_attempts => (c, false),
            _ => (Self::increment(live.as_ref(), now_us, ttl_us), true),
        };
        let answer = AttemptTry {
            allowed,
            attempts: next.count,
            remaining: max_attempts.saturating_sub(next.count),
            ttl: Duration::from_micros(next.expires_at_us.saturating_sub(now_us)),
        };
        (allowed.then_some(next), answer)
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
