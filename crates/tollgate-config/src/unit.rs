//! envoyproxy/ratelimit's units (`SECOND` to `YEAR`), in one place: the config reads them
//! (`unit: minute`), the Envoy planner reports limits in them (`current_limit`), `/rlconfig`
//! prints them, and a request's own limit override names one. A month is 30 days and a year
//! 365, as upstream counts them.

use std::time::Duration;

/// One of upstream's units.
///
/// ```
/// use std::time::Duration;
/// use tollgate_config::Unit;
///
/// assert_eq!(Unit::from_name("Minute"), Some(Unit::Minute));
/// assert_eq!(Unit::Month.length(), Duration::from_secs(30 * 86_400));
/// // 100 per 90 s, told in the longest unit not longer than 90 s.
/// assert_eq!(Unit::scaled(100, Duration::from_secs(90)), (66, Unit::Minute));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, longest first.
    pub const LONGEST_FIRST: [Unit; 7] = [
        Unit::Year,
        Unit::Month,
        Unit::Week,
        Unit::Day,
        Unit::Hour,
        Unit::Minute,
        Unit::Second,
    ];

    /// Its length in seconds.
    pub const fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// Its length.
    pub const fn length(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// Its name as upstream's API writes it: `SECOND` ... `YEAR`.
    pub const fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit named `name`, in any case.
    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::LONGEST_FIRST
            .into_iter()
            .find(|unit| unit.name().eq_ignore_ascii_case(name))
    }

    /// `count` per `period` in the longest unit not longer than `period` (seconds when shorter
    /// than a second), rounded down, at least 1: how a window or rate that is not one of
    /// upstream's units is reported in them.
    pub fn scaled(count: u64, period: Duration) -> (u32, Unit) {
        let period_us = period.as_micros().max(1);
        let unit = Unit::LONGEST_FIRST
            .into_iter()
            .find(|unit| u128::from(unit.seconds()) * 1_000_000 <= period_us)
            .unwrap_or(Unit::Second);
        let scaled = u128::from(count) * u128::from(unit.seconds()) * 1_000_000 / period_us;
        (u32::try_from(scaled.max(1)).unwrap_or(u32::MAX), unit)
    }

    /// How long until the current unit ends, `since_epoch` being the time since the Unix epoch:
    /// units are aligned to the epoch, as upstream's fixed windows are.
    pub fn until_end(self, since_epoch: Duration) -> Duration {
        let length_ns = self.length().as_nanos();
        let into_ns = since_epoch.as_nanos() % length_ns;
        Duration::from_nanos(u64::try_from(length_ns - into_ns).unwrap_or(u64::MAX))
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_units_are_reported_as_they_are() {
        assert_eq!(Unit::scaled(10, Duration::from_secs(1)), (10, Unit::Second));
        assert_eq!(Unit::scaled(5, Duration::from_secs(86_400)), (5, Unit::Day));
        assert_eq!(Unit::scaled(7, Duration::from_secs(7 * 86_400)), (7, Unit::Week));
        assert_eq!(
            Unit::scaled(3, Duration::from_secs(365 * 86_400)),
            (3, Unit::Year)
        );
    }

    #[test]
    fn other_windows_are_scaled_down_to_the_longest_shorter_unit() {
        assert_eq!(Unit::scaled(100, Duration::from_secs(90)), (66, Unit::Minute));
        assert_eq!(
            Unit::scaled(1, Duration::from_secs(2 * 3_600)),
            (1, Unit::Hour),
            "at least 1"
        );
        assert_eq!(Unit::scaled(5, Duration::from_millis(500)), (10, Unit::Second));
        assert_eq!(
            Unit::scaled(u64::MAX / 2, Duration::from_millis(1)),
            (u32::MAX, Unit::Second)
        );
    }

    #[test]
    fn a_unit_ends_on_its_epoch_boundary() {
        assert_eq!(
            Unit::Minute.until_end(Duration::from_secs(125)),
            Duration::from_secs(55)
        );
        assert_eq!(
            Unit::Second.until_end(Duration::from_millis(1_250)),
            Duration::from_millis(750)
        );
        assert_eq!(
            Unit::Hour.until_end(Duration::from_secs(7_200)),
            Duration::from_secs(3_600)
        );
    }
}
