//! [`Rate`]: a number of requests per period, the pace of the buckets and of GCRA.

use std::time::Duration;

use crate::PolicyError;
use crate::bounds;

/// A rate: `count` requests per `per`, e.g. 10 per second.
///
/// Internally a rate is the interval between two requests, in whole microseconds, rounded up
/// when it does not divide evenly (7 per minute becomes one per 8 571 429 µs). Rounding up keeps
/// the limiter on the strict side: it never admits more than the rate says.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Rate;
///
/// let rate = Rate::new(10, Duration::from_secs(1))?;
/// assert_eq!(rate.interval(), Duration::from_millis(100));
/// assert_eq!(Rate::per_minute(30)?.interval(), Duration::from_secs(2));
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    per_us: u64,
    interval_us: u64,
}

impl Rate {
    /// `count` requests per `per`. `count` is 1 to [`MAX_LIMIT`](crate::bounds::MAX_LIMIT), `per`
    /// is 1 ms to 1000 days, and the rate may not exceed one request per microsecond.
    pub fn new(count: u64, per: Duration) -> Result<Self, PolicyError> {
        let count = bounds::count("rate", count, bounds::MAX_LIMIT)?;
        let per_us = bounds::period_us("rate period", per)?;
        if count > per_us {
            return Err(PolicyError::RateTooFine { count, per });
        }
        Ok(Rate {
            count,
            per_us,
            interval_us: per_us.div_ceil(count),
        })
    }

    /// `count` requests per second.
    ///
    /// ```
    /// assert!(tollgate::Rate::per_second(0).is_err());
    /// ```
    pub fn per_second(count: u64) -> Result<Self, PolicyError> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute.
    ///
    /// ```
    /// let rate = tollgate::Rate::per_minute(60)?;
    /// assert_eq!(rate.interval(), std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn per_minute(count: u64) -> Result<Self, PolicyError> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour.
    ///
    /// ```
    /// let rate = tollgate::Rate::per_hour(3600)?;
    /// assert_eq!(rate.interval(), std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn per_hour(count: u64) -> Result<Self, PolicyError> {
        Self::new(count, Duration::from_secs(3600))
    }

    /// Requests per period, as given.
    ///
    /// ```
    /// assert_eq!(tollgate::Rate::per_second(5)?.count(), 5);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period, as given (to the microsecond).
    ///
    /// ```
    /// assert_eq!(tollgate::Rate::per_second(5)?.period(), std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.per_us)
    }

    /// The time between two requests at this rate, rounded up to a whole microsecond.
    ///
    /// ```
    /// let rate = tollgate::Rate::per_second(3)?;
    /// assert_eq!(rate.interval_us(), 333_334);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// [`interval`](Self::interval) in microseconds.
    ///
    /// ```
    /// assert_eq!(tollgate::Rate::per_second(10)?.interval_us(), 100_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn interval_us(&self) -> u64 {
        self.interval_us
    }

    /// This rate divided by `n`: the same count over `n` times the period.
    pub(crate) fn slowed(&self, n: u64) -> Result<Rate, PolicyError> {
        let per = Duration::from_micros(self.per_us.saturating_mul(n));
        Rate::new(self.count, per)
    }

    /// Checks that `size` requests at this rate take at most 1000 days, so that the bucket
    /// arithmetic stays exact.
    pub(crate) fn check_horizon(&self, field: &'static str, size: u64) -> Result<(), PolicyError> {
        let max_us = bounds::as_us(bounds::MAX_PERIOD);
        match size.checked_mul(self.interval_us) {
            Some(needed) if needed <= max_us => Ok(()),
            needed => Err(PolicyError::HorizonTooLong {
                field,
                size,
                needed: Duration::from_micros(needed.unwrap_or(u64::MAX)),
                max: bounds::MAX_PERIOD,
            }),
        }
    }
}
