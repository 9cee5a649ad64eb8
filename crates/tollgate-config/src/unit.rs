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
/// // 100 per 90 s, up to 100 at once: told in the shortest unit that admits 100.
/// assert_eq!(Unit::reported(100, Duration::from_secs(90), 100), (4_000, Unit::Hour));
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

    /// `count` per `period` as upstream's `requests_per_unit` per `unit`, for a key that can hold
    /// at most `budget` at once (a window's limit, a bucket's capacity, a GCRA burst): the
    /// shortest unit in which the rate admits at least `budget`, and the rate scaled to it,
    /// rounded down. So the reported limit is never below the `limit_remaining` an answer can
    /// carry, and a window that is one of upstream's units is reported as it is. Past a year,
    /// a year and at least `budget`.
    pub fn reported(count: u64, period: Duration, budget: u64) -> (u32, Unit) {
        let period_us = period.as_micros().max(1);
        let per = |unit: Unit| u128::from(count) * u128::from(unit.seconds()) * 1_000_000 / period_us;
        let (scaled, unit) = Unit::LONGEST_FIRST
            .into_iter()
            .rev()
            .map(|unit| (per(unit), unit))
            .find(|&(scaled, _)| scaled >= u128::from(budget))
            .unwrap_or_else(|| (per(Unit::Year).max(u128::from(budget)), Unit::Year));
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
        let days = |n: u64| Duration::from_secs(n * 86_400);
        assert_eq!(Unit::reported(10, Duration::from_secs(1), 10), (10, Unit::Second));
        assert_eq!(Unit::reported(5, days(1), 5), (5, Unit::Day));
        assert_eq!(Unit::reported(7, days(7), 7), (7, Unit::Week));
        assert_eq!(Unit::reported(3, days(365), 3), (3, Unit::Year));
    }

    #[test]
    fn other_windows_are_told_in_the_shortest_unit_that_admits_their_budget() {
        // 5 per 15 minutes: a minute would say 1 while 4 remain.
        assert_eq!(Unit::reported(5, Duration::from_secs(900), 5), (20, Unit::Hour));
        assert_eq!(
            Unit::reported(100, Duration::from_secs(90), 100),
            (4_000, Unit::Hour)
        );
        assert_eq!(
            Unit::reported(5, Duration::from_millis(500), 5),
            (10, Unit::Second)
        );
        assert_eq!(
            Unit::reported(1, Duration::from_secs(2 * 3_600), 1),
            (12, Unit::Day)
        );
        // A bucket of 100 refilled at 10 a second: a second admits 10, a minute 600.
        assert_eq!(
            Unit::reported(10, Duration::from_secs(1), 100),
            (600, Unit::Minute)
        );
        assert_eq!(
            Unit::reported(u64::MAX / 2, Duration::from_millis(1), 1),
            (u32::MAX, Unit::Second)
        );
    }

    #[test]
    fn past_a_year_the_budget_is_told_per_year() {
        let years = |n: u64| Duration::from_secs(n * 365 * 86_400);
        assert_eq!(Unit::reported(4, years(2), 4), (4, Unit::Year));
        assert_eq!(Unit::reported(1, years(3), 1), (1, Unit::Year));
    }

    #[test]
    fn the_reported_limit_is_never_below_the_budget() {
        for count in [1, 2, 3, 5, 7, 10, 60, 100, 999, 1_000_000] {
            for period_ms in [
                1,
                250,
                999,
                1_000,
                1_500,
                60_000,
                90_000,
                900_000,
                86_400_000,
                40_000_000_000,
            ] {
                for budget in [1, count, count * 3] {
                    let (limit, _) = Unit::reported(count, Duration::from_millis(period_ms), budget);
                    assert!(
                        u64::from(limit) >= budget.min(u64::from(u32::MAX)),
                        "{count} per {period_ms} ms, {budget}"
                    );
                }
            }
        }
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
