//! Hot-key leases: the settings a networked store uses to serve one very busy key from local
//! memory without giving up the shared limit.
//!
//! A key that every instance of a fleet checks thousands of times a second costs one store round
//! trip per check, and one store node serves all of them: a single Redis core caps that key. With
//! a lease, an instance that sees the key hot takes `k` units of its budget from the store in one
//! call, debited there at once, and then admits up to `k` requests from memory. The store still
//! holds the whole budget's truth (spent units plus units out on lease), so the fleet never admits
//! more than the limit; what it can lose is the units that sit unused in leases when the budget
//! runs out elsewhere: at most `instances × max_units` per window or refill period. `k` follows
//! the rate this instance saw over the last lease period, capped by [`LeaseOptions::max_units`].
//!
//! This module only holds the options; the store that honours them (the Redis store) documents
//! how it takes, spends and returns leases. The memory store is already local and ignores them.
//!
//! Leases are defined where taking `k` units at once is exact: the fixed window (the units count
//! in the current window, and a lease never outlives it), the token bucket (`k` tokens) and GCRA
//! (`k` emission intervals). A sliding log or sliding window would have to place the units at a
//! time they were not spent, and a leaky bucket's level is what drains; [`Policy::with_lease`]
//! refuses them.
//!
//! [`Policy::with_lease`]: crate::Policy::with_lease

use std::time::Duration;

use crate::PolicyError;
use crate::bounds;

/// The longest a lease may be held before its unused units go back: 60 s.
pub const MAX_LEASE_HOLD: Duration = Duration::from_secs(60);

/// How an instance leases a hot key's budget; see the [module docs](self).
///
/// ```
/// use std::time::Duration;
/// use tollgate::LeaseOptions;
///
/// let lease = LeaseOptions::new(100)?
///     .hot_per_second(500)?
///     .hold(Duration::from_millis(200))?;
/// assert_eq!(lease.max_units(), 100);
/// assert_eq!(lease.hot_per_second_value(), 500);
/// assert_eq!(lease.hold_duration(), Duration::from_millis(200));
/// assert!(LeaseOptions::new(0).is_err());
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseOptions {
    max_units: u64,
    hot_per_second: u64,
    hold_us: u64,
}

impl LeaseOptions {
    /// Decisions per second on one key, on one instance, from which the key counts as hot
    /// (default 100).
    pub const DEFAULT_HOT_PER_SECOND: u64 = 100;

    /// How long a lease is held at most, and the period its size is measured over (default
    /// 100 ms).
    pub const DEFAULT_HOLD: Duration = Duration::from_millis(100);

    /// Leases of at most `max_units` units (1 to [`MAX_LIMIT`](bounds::MAX_LIMIT); at most the
    /// policy's limit, which [`Policy::with_lease`](crate::Policy::with_lease) checks). This is
    /// the bound's `lease units`: each instance holds at most this many unspent units of a key.
    pub fn new(max_units: u64) -> Result<Self, PolicyError> {
        Ok(LeaseOptions {
            max_units: bounds::count("lease.max_units", max_units, bounds::MAX_LIMIT)?,
            hot_per_second: Self::DEFAULT_HOT_PER_SECOND,
            hold_us: bounds::as_us(Self::DEFAULT_HOLD),
        })
    }

    /// A key is hot on an instance once that instance decides it at least this often per second
    /// (1 to [`MAX_LIMIT`](bounds::MAX_LIMIT)). Colder keys are decided by the store call by call,
    /// exactly as without leases.
    ///
    /// ```
    /// assert!(tollgate::LeaseOptions::new(10)?.hot_per_second(0).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn hot_per_second(mut self, decisions: u64) -> Result<Self, PolicyError> {
        self.hot_per_second = bounds::count("lease.hot_per_second", decisions, bounds::MAX_LIMIT)?;
        Ok(self)
    }

    /// How long a lease is held at most (1 ms to [`MAX_LEASE_HOLD`]) before its unused units go
    /// back to the store, and the period over which the next lease's size is measured. A fixed
    /// window's lease also ends with its window, whichever comes first.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lease = tollgate::LeaseOptions::new(10)?;
    /// assert!(lease.hold(Duration::from_secs(61)).is_err());
    /// assert!(lease.hold(Duration::from_micros(10)).is_err());
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn hold(mut self, hold: Duration) -> Result<Self, PolicyError> {
        if hold < bounds::MIN_PERIOD || hold > MAX_LEASE_HOLD {
            return Err(PolicyError::DurationOutOfRange {
                field: "lease.hold",
                value: hold,
                min: bounds::MIN_PERIOD,
                max: MAX_LEASE_HOLD,
            });
        }
        self.hold_us = bounds::as_us(hold);
        Ok(self)
    }

    /// The most units one lease takes.
    ///
    /// ```
    /// assert_eq!(tollgate::LeaseOptions::new(7)?.max_units(), 7);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn max_units(&self) -> u64 {
        self.max_units
    }

    /// Decisions per second from which a key is hot.
    ///
    /// ```
    /// assert_eq!(tollgate::LeaseOptions::new(7)?.hot_per_second_value(), 100);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn hot_per_second_value(&self) -> u64 {
        self.hot_per_second
    }

    /// The longest a lease is held, and the sizing period.
    ///
    /// ```
    /// assert_eq!(tollgate::LeaseOptions::new(7)?.hold_duration().as_millis(), 100);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn hold_duration(&self) -> Duration {
        Duration::from_micros(self.hold_us)
    }

    /// [`hold_duration`](Self::hold_duration) in microseconds.
    ///
    /// ```
    /// assert_eq!(tollgate::LeaseOptions::new(7)?.hold_us(), 100_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn hold_us(&self) -> u64 {
        self.hold_us
    }

    /// Decisions within one hold period that make a key hot: `hot_per_second` scaled to the
    /// period, at least 1.
    ///
    /// ```
    /// let lease = tollgate::LeaseOptions::new(7)?.hot_per_second(1000)?;
    /// assert_eq!(lease.hot_per_hold(), 100); // 1000/s over 100 ms
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn hot_per_hold(&self) -> u64 {
        let scaled = u128::from(self.hot_per_second) * u128::from(self.hold_us) / 1_000_000;
        u64::try_from(scaled).unwrap_or(u64::MAX).max(1)
    }
}
