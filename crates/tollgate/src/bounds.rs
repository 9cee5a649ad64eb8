//! The ranges every parameter must fall in, and the checks that enforce them.
//!
//! All arithmetic in the algorithms is on integer microseconds and must also run inside a Redis
//! Lua script, where numbers are doubles that stay exact only up to 2^53. These bounds keep every
//! timestamp and every product an algorithm forms far below that, so a policy that constructs is a
//! policy that cannot overflow.

use std::time::Duration;

use crate::PolicyError;

/// The shortest window, period or penalty: 1 ms.
///
/// ```
/// assert_eq!(tollgate::bounds::MIN_PERIOD.as_micros(), 1_000);
/// ```
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The longest window, period or penalty: 1000 days.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_PERIOD.as_secs(), 86_400_000);
/// ```
pub const MAX_PERIOD: Duration = Duration::from_secs(1000 * 24 * 3600);

/// The largest limit, capacity, burst or rate count.
///
/// ```
/// assert!(tollgate::Algorithm::sliding_window(tollgate::bounds::MAX_LIMIT, std::time::Duration::from_secs(60)).is_ok());
/// ```
pub const MAX_LIMIT: u64 = 1_000_000_000;

/// The largest sliding log limit. The log keeps one entry per admitted request (requests in the
/// same microsecond share one), so its memory grows with the limit; use the sliding window
/// counter for larger limits.
///
/// ```
/// assert!(tollgate::Algorithm::sliding_log(tollgate::bounds::MAX_LOG_LIMIT + 1, std::time::Duration::from_secs(60)).is_err());
/// ```
pub const MAX_LOG_LIMIT: u64 = 100_000;

/// The largest `limit × window` (window in ms) of a sliding window counter: 2^51. Its
/// arithmetic multiplies the two, and must stay exact in a Lua double (2^53) with room for sums.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_WINDOW_UNITS, 1 << 51);
/// ```
pub const MAX_WINDOW_UNITS: u64 = 1 << 51;

/// The longest a charge's debt may take to be paid back by a bucket or GCRA: 1000 days, as
/// [`MAX_PERIOD`]. A charge past it is recorded up to it, so every time an algorithm stores
/// stays within 2 × 1000 days of now, exact in a Lua double.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_DEBT_PERIOD, tollgate::bounds::MAX_PERIOD);
/// ```
pub const MAX_DEBT_PERIOD: Duration = MAX_PERIOD;

/// The largest count a fixed window, calendar quota or sliding log may reach with charges:
/// 2^50. A window paying back a debt that large is refused until it ends anyway; the bound
/// keeps counts plus costs exact in a Lua double.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_COUNT, 1 << 50);
/// ```
pub const MAX_COUNT: u64 = 1 << 50;

/// The longest key, in bytes.
///
/// ```
/// assert!(tollgate::store::validate_key(&[b'k'; tollgate::bounds::MAX_KEY_LEN]).is_ok());
/// ```
pub const MAX_KEY_LEN: usize = 8 * 1024;

/// The longest policy name, in bytes.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_NAME_LEN, 255);
/// ```
pub const MAX_NAME_LEN: usize = 255;

/// The most replicas a policy may ask a networked store to wait for
/// ([`Policy::with_replicas`](crate::Policy::with_replicas)).
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_REPLICAS, 16);
/// ```
pub const MAX_REPLICAS: u32 = 16;

/// The longest a policy may let a networked store wait for its replicas' acknowledgement of an
/// admission ([`Policy::with_replica_wait`](crate::Policy::with_replica_wait)): 5 s. A request
/// held longer than that is better refused by the failure mode.
///
/// ```
/// assert_eq!(tollgate::bounds::MAX_REPLICA_WAIT.as_secs(), 5);
/// ```
pub const MAX_REPLICA_WAIT: Duration = Duration::from_secs(5);

/// Checks that `value` is within `MIN_PERIOD..=MAX_PERIOD` and returns it in whole microseconds
/// (sub-microsecond parts are dropped).
pub(crate) fn period_us(field: &'static str, value: Duration) -> Result<u64, PolicyError> {
    if value < MIN_PERIOD || value > MAX_PERIOD {
        return Err(PolicyError::DurationOutOfRange {
            field,
            value,
            min: MIN_PERIOD,
            max: MAX_PERIOD,
        });
    }
    Ok(as_us(value))
}

/// Checks that a count is within `1..=max`.
pub(crate) fn count(field: &'static str, value: u64, max: u64) -> Result<u64, PolicyError> {
    if value == 0 {
        return Err(PolicyError::Zero { field });
    }
    if value > max {
        return Err(PolicyError::TooLarge { field, value, max });
    }
    Ok(value)
}

/// [`MAX_DEBT_PERIOD`] in µs.
pub(crate) const MAX_DEBT_US: u64 = 1000 * 24 * 3600 * 1_000_000;

/// A duration in whole microseconds, saturating (only used on validated durations).
pub(crate) fn as_us(value: Duration) -> u64 {
    u64::try_from(value.as_micros()).unwrap_or(u64::MAX)
}
