//! Calendar quota: count requests per calendar day, week, month or year in a time zone, and deny
//! once the count would pass the limit. "1 000 calls per calendar month, in the customer's time
//! zone".
//!
//! A fixed window whose boundaries are the calendar's: midnight of the day, of the first day of
//! the week (Monday by default), of the first of the month or of the year, in the policy's IANA
//! time zone (`Europe/Paris`), with the zone's daylight saving rules. A day is 23 or 25 hours
//! long when the clocks change, a month 28 to 31 days, a year 365 or 366: the windows follow.
//! The tz database is compiled in (`jiff` with its bundled data), so no system tzdata is read
//! and every instance of a fleet computes the same boundaries.
//!
//! The period is computed from the time the step is given, in [`CalendarQuota::period_at`];
//! the step itself ([`CalendarQuota::step_in`]) is the fixed window's arithmetic on that period,
//! integers only. The Redis store computes the boundaries in Rust from its notion of now and
//! passes the period around it together with the one before and the one after to the script,
//! which picks the one that holds Redis's own time: the windows agree to the microsecond on
//! every store, and a clock difference between the instance and Redis at a boundary is decided
//! by Redis's clock, as every other algorithm is.
//!
//! Denied requests are not counted.
//!
//! **Debt.** A charge ([`CalendarQuota::charge`]) records its cost whatever is left, as a fixed
//! window's does: the count may go past the limit, the key owes `debt = count − limit`, checks
//! are refused until the period ends, and the period's end clears it. Counts stop at
//! [`MAX_COUNT`](crate::bounds::MAX_COUNT).

use std::hash::{Hash, Hasher};
use std::time::Duration;

use jiff::ToSpan;
use jiff::civil::Date;
/// A day of the week (jiff's), for [`CalendarQuota::week_starts`].
pub use jiff::civil::Weekday;
use jiff::tz::TimeZone;

use super::fixed_window::State;
use super::{StepCharge, StepDecision};
use crate::{PolicyError, bounds};

/// The calendar unit of a quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// From midnight to midnight.
    Day,
    /// Seven days from midnight of the week's first day.
    Week,
    /// From midnight of the first of the month.
    Month,
    /// From midnight of January 1st.
    Year,
}

impl Period {
    /// `day`, `week`, `month` or `year`.
    ///
    /// ```
    /// assert_eq!(tollgate::algorithm::calendar_quota::Period::Month.as_str(), "month");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The longest this period can be, for the `RateLimit-Policy` window.
    fn longest(self) -> Duration {
        let days = match self {
            Period::Day => 1,
            Period::Week => 7,
            Period::Month => 31,
            Period::Year => 366,
        };
        // A day with a clock change can be 25 hours.
        Duration::from_secs(days * 86_400 + 3_600)
    }
}

/// Parameters: `limit` requests per calendar `period` in `time_zone`, weeks starting on
/// `week_start`.
///
/// ```
/// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
///
/// let quota = CalendarQuota::new(1_000, Period::Month, "Europe/Paris")?;
/// assert_eq!(quota.time_zone(), "Europe/Paris");
/// // March 2024 in Paris: from 2024-02-29T23:00Z to 2024-03-31T22:00Z (summer time began).
/// let (start, end) = quota.period_at(1_710_000_000_000_000); // 2024-03-09
/// assert_eq!((start, end), (1_709_247_600_000_000, 1_711_922_400_000_000));
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CalendarQuota {
    limit: u64,
    period: Period,
    zone_name: Box<str>,
    zone: TimeZone,
    week_start: Weekday,
}

impl PartialEq for CalendarQuota {
    fn eq(&self, other: &Self) -> bool {
        self.limit == other.limit
            && self.period == other.period
            && self.zone_name == other.zone_name
            && self.week_start == other.week_start
    }
}

impl Eq for CalendarQuota {}

impl Hash for CalendarQuota {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.limit.hash(state);
        self.period.hash(state);
        self.zone_name.hash(state);
        self.week_start.to_monday_zero_offset().hash(state);
    }
}

impl CalendarQuota {
    /// `limit` (1 to 10^9) per `period` in the IANA zone `time_zone` (`"UTC"`,
    /// `"America/New_York"`), weeks starting on Monday.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let err = CalendarQuota::new(10, Period::Day, "Mars/Olympus_Mons").unwrap_err();
    /// assert_eq!(err.to_string(), "unknown time zone \"Mars/Olympus_Mons\": expected an IANA name like \"Europe/Paris\"");
    /// ```
    pub fn new(limit: u64, period: Period, time_zone: &str) -> Result<Self, PolicyError> {
        let zone = TimeZone::get(time_zone).map_err(|_| PolicyError::UnknownTimeZone {
            name: time_zone.to_owned(),
        })?;
        Ok(CalendarQuota {
            limit: bounds::count("limit", limit, bounds::MAX_LIMIT)?,
            period,
            zone_name: time_zone.into(),
            zone,
            week_start: Weekday::Monday,
        })
    }

    /// Weeks start on `day` (a weekly quota only; Monday by default).
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::Weekday;
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let quota = CalendarQuota::new(10, Period::Week, "UTC")?.week_starts(Weekday::Sunday);
    /// // Wednesday 2024-01-10: the week began on Sunday 2024-01-07.
    /// assert_eq!(quota.period_at(1_704_844_800_000_000).0, 1_704_585_600_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn week_starts(mut self, day: Weekday) -> Self {
        self.week_start = day;
        self
    }

    /// Requests admitted per period.
    ///
    /// ```
    /// # use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    /// assert_eq!(CalendarQuota::new(7, Period::Day, "UTC")?.limit(), 7);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The calendar unit.
    ///
    /// ```
    /// # use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    /// assert_eq!(CalendarQuota::new(7, Period::Year, "UTC")?.period(), Period::Year);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn period(&self) -> Period {
        self.period
    }

    /// The time zone's IANA name, as given.
    ///
    /// ```
    /// # use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    /// assert_eq!(CalendarQuota::new(7, Period::Day, "Asia/Tokyo")?.time_zone(), "Asia/Tokyo");
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn time_zone(&self) -> &str {
        &self.zone_name
    }

    /// The first day of a week.
    ///
    /// ```
    /// # use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    /// assert_eq!(CalendarQuota::new(7, Period::Week, "UTC")?.week_start(), jiff::civil::Weekday::Monday);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn week_start(&self) -> Weekday {
        self.week_start
    }

    /// The longest a period can last (a month is 31 days and an hour, a clock change included):
    /// the window a `RateLimit-Policy` header announces.
    ///
    /// ```
    /// # use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    /// assert_eq!(CalendarQuota::new(7, Period::Day, "UTC")?.longest_period().as_secs(), 90_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn longest_period(&self) -> Duration {
        self.period.longest()
    }

    /// The period holding `now_us` (µs since the Unix epoch): its start and end in µs, start
    /// included, end excluded. Times jiff cannot represent (past the year 9999) fall in the last
    /// representable period.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// // 2024-03-31 in Paris has 23 hours: the clocks go forward at 02:00.
    /// let daily = CalendarQuota::new(1, Period::Day, "Europe/Paris")?;
    /// let (start, end) = daily.period_at(1_711_875_600_000_000); // 2024-03-31T09:00Z
    /// assert_eq!(end - start, 23 * 3_600_000_000);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn period_at(&self, now_us: u64) -> (u64, u64) {
        let now = i64::try_from(now_us).unwrap_or(i64::MAX);
        let zoned = jiff::Timestamp::from_microsecond(now)
            .unwrap_or(jiff::Timestamp::MAX)
            .to_zoned(self.zone.clone());
        let start = self.start_date(zoned.date());
        let next = match self.period {
            Period::Day => start.checked_add(1.day()),
            Period::Week => start.checked_add(1.week()),
            Period::Month => start.checked_add(1.month()),
            Period::Year => start.checked_add(1.year()),
        };
        let start_us = self.midnight_us(start);
        let end_us = next.map_or(u64::MAX / 2, |next| self.midnight_us(next));
        (start_us, end_us.max(start_us + 1))
    }

    /// The periods before, at and after the one holding `now_us`: four boundaries, each period
    /// from one to the next. The Redis store passes them to its script, which picks the period
    /// that holds Redis's own time.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let daily = CalendarQuota::new(1, Period::Day, "UTC")?;
    /// let day = 86_400_000_000;
    /// assert_eq!(daily.boundaries_around(day + 5), [0, day, 2 * day, 3 * day]);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn boundaries_around(&self, now_us: u64) -> [u64; 4] {
        let (start, end) = self.period_at(now_us);
        let before = self.period_at(start.saturating_sub(1)).0;
        let after = self.period_at(end).1;
        [before, start, end, after]
    }

    /// Decides a request of `cost` at `now_us`, in the period holding it; see
    /// [`step_in`](Self::step_in).
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let daily = CalendarQuota::new(2, Period::Day, "UTC")?;
    /// let mut state = None;
    /// let noon = 43_200_000_000;
    /// assert!(daily.step(&mut state, noon, 2, true).allowed);
    /// let denied = daily.step(&mut state, noon, 1, true);
    /// assert_eq!(denied.retry_after_us, Some(noon)); // back at midnight
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step(&self, state: &mut Option<State>, now_us: u64, cost: u64, commit: bool) -> StepDecision {
        let period = self.period_at(now_us);
        self.step_in(state, period, now_us, cost, commit)
    }

    /// Decides a request of `cost` at `now_us` in the period `[start, end)`: the count carries
    /// over while the stored period is this one, and a request passes while the count stays
    /// within the limit. The answer's reset time (in every answer, a fresh key's included) and
    /// retry time are the period's end.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let quota = CalendarQuota::new(3, Period::Day, "UTC")?;
    /// let mut state = None;
    /// let outcome = quota.step_in(&mut state, (0, 100), 40, 1, true);
    /// assert_eq!((outcome.remaining, outcome.reset_after_us), (2, 60));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn step_in(
        &self,
        state: &mut Option<State>,
        (start_us, end_us): (u64, u64),
        now_us: u64,
        cost: u64,
        commit: bool,
    ) -> StepDecision {
        let count = match state {
            Some(s) if s.count > 0 && s.window_start_us == start_us => s.count,
            _ => 0,
        };
        let outcome = self.answer(count, end_us, now_us, cost);
        if outcome.allowed && commit {
            *state = Some(State {
                window_start_us: start_us,
                count: count + cost,
            });
        }
        outcome
    }

    /// The answer to a request of `cost` at `now_us` with `count` spent in the period ending at
    /// `end_us`.
    #[inline(always)]
    fn answer(&self, count: u64, end_us: u64, now_us: u64, cost: u64) -> StepDecision {
        let allowed = count.saturating_add(cost) <= self.limit;
        let count = if allowed { count + cost } else { count };
        StepDecision {
            allowed,
            remaining: self.limit.saturating_sub(count),
            // Every answer tells when the period ends, even with nothing spent in it: a quota's
            // clients plan by the calendar.
            reset_after_us: end_us.saturating_sub(now_us),
            retry_after_us: (!allowed).then(|| end_us.saturating_sub(now_us)),
        }
    }

    /// Gives back up to `cost` while the stored period is the current one, as a fixed window
    /// does.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let quota = CalendarQuota::new(3, Period::Day, "UTC")?;
    /// let mut state = None;
    /// quota.step(&mut state, 5, 3, true);
    /// quota.refund(&mut state, 6, 2);
    /// assert_eq!(state.map(|s| s.count), Some(1));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn refund(&self, state: &mut Option<State>, now_us: u64, cost: u64) {
        let (start_us, _) = self.period_at(now_us);
        if let Some(s) = state
            && s.count > 0
            && s.window_start_us == start_us
        {
            s.count = s.count.saturating_sub(cost);
        }
    }

    /// Records `cost` in the period holding `now_us` whatever is left; see
    /// [`charge_in`](Self::charge_in).
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let daily = CalendarQuota::new(2, Period::Day, "UTC")?;
    /// let mut state = None;
    /// let charged = daily.charge(&mut state, 5, 3);
    /// assert_eq!(charged.debt, 1);
    /// assert!(!charged.decision.allowed);
    /// assert!(!daily.step(&mut state, 6, 1, false).allowed);
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    pub fn charge(&self, state: &mut Option<State>, now_us: u64, cost: u64) -> StepCharge {
        let period = self.period_at(now_us);
        self.charge_in(state, period, now_us, cost)
    }

    /// Records `cost` in the period `[start, end)` whatever is left (see the module's *Debt*),
    /// and returns the debt (how far the count is past the limit) with the answer a request of
    /// cost 1 would get right after, in the same period.
    ///
    /// ```
    /// use tollgate::algorithm::calendar_quota::{CalendarQuota, Period};
    ///
    /// let quota = CalendarQuota::new(3, Period::Day, "UTC")?;
    /// let mut state = None;
    /// let charged = quota.charge_in(&mut state, (0, 100), 40, 5);
    /// assert_eq!((charged.debt, charged.decision.retry_after_us), (2, Some(60)));
    /// assert_eq!(quota.step_in(&mut state, (0, 100), 50, 1, false).retry_after_us, Some(50));
    /// # Ok::<(), tollgate::PolicyError>(())
    /// ```
    #[inline]
    pub fn charge_in(
        &self,
        state: &mut Option<State>,
        (start_us, end_us): (u64, u64),
        now_us: u64,
        cost: u64,
    ) -> StepCharge {
        let count = match state {
            Some(s) if s.count > 0 && s.window_start_us == start_us => s.count,
            _ => 0,
        };
        let count = count.saturating_add(cost).min(bounds::MAX_COUNT);
        *state = Some(State {
            window_start_us: start_us,
            count,
        });
        StepCharge {
            decision: self.answer(count, end_us, now_us, 1),
            debt: count.saturating_sub(self.limit),
        }
    }

    /// Units counted in the period holding `now_us`, debt included: what a changed limit
    /// carries over (see [`migrate`](super::migrate)).
    pub fn spent(&self, state: Option<&State>, now_us: u64) -> u64 {
        let (start_us, _) = self.period_at(now_us);
        match state {
            Some(s) if s.window_start_us == start_us => s.count,
            _ => 0,
        }
    }

    /// The first day of the period holding `date`.
    fn start_date(&self, date: Date) -> Date {
        match self.period {
            Period::Day => date,
            Period::Week => {
                let back = (date.weekday().to_monday_zero_offset() - self.week_start.to_monday_zero_offset())
                    .rem_euclid(7);
                date.checked_sub(i64::from(back).days()).unwrap_or(date)
            }
            Period::Month => date.first_of_month(),
            Period::Year => date.first_of_year(),
        }
    }

    /// The first instant of `date` in the zone (midnight, or the end of a clock change that
    /// skipped midnight), in µs since the Unix epoch.
    fn midnight_us(&self, date: Date) -> u64 {
        date.to_zoned(self.zone.clone())
            .and_then(|z| z.start_of_day())
            .map_or(0, |z| u64::try_from(z.timestamp().as_microsecond()).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// µs of a UTC date and time written as RFC 3339.
    fn at(text: &str) -> u64 {
        let ts: jiff::Timestamp = text.parse().unwrap();
        ts.as_microsecond() as u64
    }

    fn period(quota: &CalendarQuota, now: &str) -> (u64, u64) {
        quota.period_at(at(now))
    }

    #[test]
    fn days_follow_the_clock_changes() {
        let paris = CalendarQuota::new(1, Period::Day, "Europe/Paris").unwrap();
        // Spring forward: 2024-03-31 lasts 23 hours.
        assert_eq!(
            period(&paris, "2024-03-31T12:00:00Z"),
            (at("2024-03-30T23:00:00Z"), at("2024-03-31T22:00:00Z"))
        );
        // Fall back: 2024-10-27 lasts 25 hours.
        assert_eq!(
            period(&paris, "2024-10-27T12:00:00Z"),
            (at("2024-10-26T22:00:00Z"), at("2024-10-27T23:00:00Z"))
        );
        // In the repeated hour (01:30 happens twice in New York on 2024-11-03), still one day.
        let new_york = CalendarQuota::new(1, Period::Day, "America/New_York").unwrap();
        assert_eq!(
            period(&new_york, "2024-11-03T06:30:00Z"),
            (at("2024-11-03T04:00:00Z"), at("2024-11-04T05:00:00Z"))
        );
    }

    #[test]
    fn a_day_without_midnight_starts_when_the_clocks_resume() {
        // Santiago skipped from 2024-09-08 00:00 to 01:00.
        let santiago = CalendarQuota::new(1, Period::Day, "America/Santiago").unwrap();
        let (start, end) = period(&santiago, "2024-09-08T12:00:00Z");
        assert_eq!(start, at("2024-09-08T04:00:00Z"));
        assert_eq!(end - start, 23 * 3_600_000_000);
    }

    #[test]
    fn months_and_leap_years() {
        let utc = CalendarQuota::new(1, Period::Month, "UTC").unwrap();
        assert_eq!(
            period(&utc, "2024-02-29T23:59:59Z"),
            (at("2024-02-01T00:00:00Z"), at("2024-03-01T00:00:00Z"))
        );
        assert_eq!(
            period(&utc, "2023-02-15T00:00:00Z"),
            (at("2023-02-01T00:00:00Z"), at("2023-03-01T00:00:00Z"))
        );
        assert_eq!(
            period(&utc, "2024-12-31T23:59:59.999999Z"),
            (at("2024-12-01T00:00:00Z"), at("2025-01-01T00:00:00Z"))
        );
        let yearly = CalendarQuota::new(1, Period::Year, "UTC").unwrap();
        let (start, end) = period(&yearly, "2024-07-01T00:00:00Z");
        assert_eq!(end - start, 366 * 86_400_000_000);
        let (start, end) = period(&yearly, "2025-07-01T00:00:00Z");
        assert_eq!(end - start, 365 * 86_400_000_000);
    }

    #[test]
    fn weeks_start_on_the_configured_day() {
        let monday = CalendarQuota::new(1, Period::Week, "UTC").unwrap();
        // Sunday 2024-01-07 belongs to the week of Monday 2024-01-01.
        assert_eq!(
            period(&monday, "2024-01-07T23:00:00Z"),
            (at("2024-01-01T00:00:00Z"), at("2024-01-08T00:00:00Z"))
        );
        let sunday = monday.clone().week_starts(Weekday::Sunday);
        assert_eq!(
            period(&sunday, "2024-01-07T23:00:00Z"),
            (at("2024-01-07T00:00:00Z"), at("2024-01-14T00:00:00Z"))
        );
        // A week across the spring clock change in Paris is 167 hours.
        let paris = CalendarQuota::new(1, Period::Week, "Europe/Paris").unwrap();
        let (start, end) = period(&paris, "2024-03-28T12:00:00Z");
        assert_eq!(end - start, 167 * 3_600_000_000);
    }

    #[test]
    fn the_count_resets_at_the_calendar_boundary_in_the_zone() {
        let tokyo = CalendarQuota::new(2, Period::Day, "Asia/Tokyo").unwrap();
        let mut state = None;
        // 23:59:59 in Tokyo on 2024-05-01 is 14:59:59 UTC.
        assert!(
            tokyo
                .step(&mut state, at("2024-05-01T14:59:59Z"), 2, true)
                .allowed
        );
        let denied = tokyo.step(&mut state, at("2024-05-01T14:59:59.5Z"), 1, true);
        assert_eq!(denied.retry_after_us, Some(500_000));
        assert!(
            tokyo
                .step(&mut state, at("2024-05-01T15:00:00Z"), 2, true)
                .allowed
        );
    }
}
