//! Durations (`"90s"`, `"1h30m"`) and rates (`"10/s"`, `"5/1h"`) as people write them in config
//! files.
//!
//! One small grammar serves both file formats, so a window, a penalty and a refill period read the
//! same everywhere:
//!
//! - a duration is one or more `<digits><unit>` groups, units `d`, `h`, `m`, `s` and `ms`, each at
//!   most once and largest first: `"500ms"`, `"90s"`, `"1h30m"`, `"400d"`. The total must be more
//!   than zero. A plain number is refused rather than guessed at (seconds? milliseconds?), with a
//!   hint to add the unit; so are fractions (`"1.5h"`: write `"1h30m"`), signs and spaces inside.
//! - a rate is `<count>/<period>`, where the period is a duration or a bare unit meaning one of
//!   it: `"10/s"`, `"100/m"`, `"5/1h"`, `"20/30s"`.
//!
//! Parsing only checks the grammar and that the numbers fit in 64 bits; whether a value is usable
//! (at least 1 ms, at most 1000 days, ...) is the core's call, made when the policy is built, so
//! those limits are stated in one place.

use std::time::Duration;

use tollgate::Rate;

use crate::ConfigErrorKind;

/// The units, largest first, with their length in milliseconds. `ms` must be tried before `m`.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("ms", 1),
    ("m", 60_000),
    ("s", 1_000),
];

/// Parses a duration such as `"90s"` or `"1h30m"`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_config::duration::parse_duration;
///
/// assert_eq!(parse_duration("1h30m")?, Duration::from_secs(5400));
/// assert_eq!(parse_duration("500ms")?, Duration::from_millis(500));
/// assert!(parse_duration("fortnight").is_err());
/// assert!(parse_duration("0s").is_err());
/// # Ok::<(), tollgate_config::ConfigErrorKind>(())
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ConfigErrorKind> {
    let bad = || ConfigErrorKind::BadDuration { got: text.to_owned() };
    let overflow = || ConfigErrorKind::DurationOverflow { got: text.to_owned() };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total_ms: u64 = 0;
    // Index into UNITS order by size: each group's unit must be strictly smaller than the last.
    let mut last_size = u64::MAX;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let (number, tail) = rest.split_at(digits);
        let (unit, unit_ms) = UNITS
            .iter()
            .find(|(unit, _)| tail.starts_with(unit))
            .copied()
            .ok_or_else(bad)?;
        if unit_ms >= last_size {
            return Err(bad());
        }
        last_size = unit_ms;
        rest = &tail[unit.len()..];
        // All digits, so the only way to fail is a number too large for 64 bits.
        let number: u64 = number.parse().map_err(|_| overflow())?;
        total_ms = number
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(overflow)?;
    }
    if total_ms == 0 {
        return Err(ConfigErrorKind::ZeroDuration { got: text.to_owned() });
    }
    Ok(Duration::from_millis(total_ms))
}

/// Parses a rate such as `"10/s"`, `"100/m"` or `"20/30s"` and builds the core's [`Rate`], whose
/// own limits (count 1 to 10^9, period 1 ms to 1000 days, ...) come back as
/// [`ConfigErrorKind::Policy`].
///
/// ```
/// use std::time::Duration;
/// use tollgate_config::duration::parse_rate;
///
/// let rate = parse_rate("20/30s")?;
/// assert_eq!((rate.count(), rate.period()), (20, Duration::from_secs(30)));
/// assert_eq!(parse_rate("5/h")?.period(), Duration::from_secs(3600));
/// assert!(parse_rate("ten per second").is_err());
/// assert!(parse_rate("0/s").is_err());
/// # Ok::<(), tollgate_config::ConfigErrorKind>(())
/// ```
pub fn parse_rate(text: &str) -> Result<Rate, ConfigErrorKind> {
    let bad = || ConfigErrorKind::BadRate { got: text.to_owned() };
    let (count, per) = text.split_once('/').ok_or_else(bad)?;
    let count = count.trim();
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let count: u64 = count.parse().map_err(|_| bad())?;
    let per = per.trim();
    let per = match UNITS.iter().find(|(unit, _)| *unit == per) {
        Some(&(_, unit_ms)) => Duration::from_millis(unit_ms),
        None => parse_duration(per).map_err(|_| bad())?,
    };
    Rate::new(count, per).map_err(ConfigErrorKind::Policy)
}

/// Writes a duration the way [`parse_duration`] reads it, in its largest whole unit (`"90s"`,
/// `"2h"`, `"1500ms"`); a duration that is not a whole number of milliseconds is rounded up.
///
/// ```
/// use std::time::Duration;
/// use tollgate_config::duration::{format_duration, parse_duration};
///
/// assert_eq!(format_duration(Duration::from_secs(5400)), "90m");
/// assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
/// assert_eq!(parse_duration(&format_duration(Duration::from_secs(86_400)))?, Duration::from_secs(86_400));
/// # Ok::<(), tollgate_config::ConfigErrorKind>(())
/// ```
pub fn format_duration(duration: Duration) -> String {
    let ms = u64::try_from(duration.as_micros().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1);
    let (unit, size) = [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)]
        .into_iter()
        .find(|&(_, size)| ms % size == 0)
        .unwrap_or(("ms", 1));
    format!("{}{unit}", ms / size)
}

/// Writes a rate the way [`parse_rate`] reads it: `"<count>/<period>"`.
///
/// ```
/// use tollgate_config::duration::format_rate;
///
/// assert_eq!(format_rate(tollgate::Rate::per_minute(30)?), "30/1m");
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn format_rate(rate: Rate) -> String {
    format!("{}/{}", rate.count(), format_duration(rate.period()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(text: &str) -> u64 {
        u64::try_from(parse_duration(text).unwrap().as_millis()).unwrap()
    }

    fn duration_error(text: &str) -> String {
        parse_duration(text).unwrap_err().to_string()
    }

    #[test]
    fn reads_every_unit() {
        assert_eq!(ms("500ms"), 500);
        assert_eq!(ms("1s"), 1_000);
        assert_eq!(ms("90s"), 90_000);
        assert_eq!(ms("1m"), 60_000);
        assert_eq!(ms("1h"), 3_600_000);
        assert_eq!(ms("1d"), 86_400_000);
        assert_eq!(ms("400d"), 400 * 86_400_000);
    }

    #[test]
    fn adds_up_groups_largest_first() {
        assert_eq!(ms("1h30m"), 5_400_000);
        assert_eq!(ms("1d2h3m4s5ms"), 86_400_000 + 7_200_000 + 180_000 + 4_000 + 5);
        assert_eq!(ms("1m500ms"), 60_500);
        assert_eq!(ms("0h1s"), 1_000);
    }

    #[test]
    fn trims_surrounding_space_and_leading_zeros() {
        assert_eq!(ms(" 1m "), 60_000);
        assert_eq!(ms("007s"), 7_000);
    }

    #[test]
    fn refuses_garbage() {
        for text in [
            "",
            " ",
            "fortnight",
            "1",
            "s",
            "m1",
            "1.5h",
            "-1s",
            "+1s",
            "1 s",
            "1m 30s",
            "1S",
            "1M",
            "1y",
            "1w",
            "1us",
            "1ns",
            "1sec",
            "1min",
            "1hour",
            "1s1",
            "1m1m",
            "30m1h",
            "1s1m",
            "1ms1s",
            "1٣s",
            "１s",
            "1s\u{0}",
            "💥",
        ] {
            assert!(
                matches!(parse_duration(text), Err(ConfigErrorKind::BadDuration { .. })),
                "{text:?} should be refused as malformed, got {:?}",
                parse_duration(text)
            );
        }
        assert_eq!(
            duration_error("fortnight"),
            r#"expected a duration like "1m", got "fortnight""#
        );
    }

    #[test]
    fn refuses_zero() {
        for text in ["0s", "0ms", "0d0h0m0s0ms", "000m"] {
            assert!(matches!(
                parse_duration(text),
                Err(ConfigErrorKind::ZeroDuration { .. })
            ));
        }
        assert_eq!(
            duration_error("0s"),
            r#"a duration must be more than zero, got "0s""#
        );
    }

    #[test]
    fn refuses_overflow_without_panicking() {
        for text in [
            "18446744073709551616ms",
            "99999999999999999999999999999999d",
            "213503982335d",
            "1d18446744073709551615ms",
            "18446744073709551615s",
        ] {
            assert!(
                matches!(
                    parse_duration(text),
                    Err(ConfigErrorKind::DurationOverflow { .. })
                ),
                "{text:?}"
            );
        }
        assert_eq!(
            duration_error("99999999999999999999d"),
            r#"duration "99999999999999999999d" is too long"#
        );
        // The largest total that fits is accepted here; the core decides whether it is usable.
        assert_eq!(ms("18446744073709551615ms"), u64::MAX);
    }

    #[test]
    fn huge_but_countable_durations_parse_and_are_left_to_the_core() {
        assert_eq!(ms("5000d"), 5000 * 86_400_000);
        assert!(tollgate::Algorithm::sliding_log(1, parse_duration("5000d").unwrap()).is_err());
        assert!(tollgate::Algorithm::sliding_log(1, parse_duration("1000d").unwrap()).is_ok());
    }

    #[test]
    fn reads_rates() {
        let rate = |text: &str| {
            let rate = parse_rate(text).unwrap();
            (rate.count(), u64::try_from(rate.period().as_millis()).unwrap())
        };
        assert_eq!(rate("10/s"), (10, 1_000));
        assert_eq!(rate("100/m"), (100, 60_000));
        assert_eq!(rate("5/1h"), (5, 3_600_000));
        assert_eq!(rate("20/30s"), (20, 30_000));
        assert_eq!(rate("1/d"), (1, 86_400_000));
        assert_eq!(rate("1/500ms"), (1, 500));
        assert_eq!(rate("3/1h30m"), (3, 5_400_000));
        assert_eq!(rate(" 10 / s "), (10, 1_000));
    }

    #[test]
    fn refuses_malformed_rates() {
        for text in [
            "",
            "/",
            "10",
            "10/",
            "/s",
            "ten/s",
            "10/fortnight",
            "10/0s",
            "-1/s",
            "1.5/s",
            "10/s/s",
            "10 per second",
            "99999999999999999999/s",
            "10/99999999999999999999d",
            "１0/s",
        ] {
            assert!(
                matches!(parse_rate(text), Err(ConfigErrorKind::BadRate { .. })),
                "{text:?} should be refused as malformed, got {:?}",
                parse_rate(text)
            );
        }
        assert_eq!(
            parse_rate("10/fortnight").unwrap_err().to_string(),
            r#"expected a rate like "10/s", got "10/fortnight""#
        );
    }

    #[test]
    fn leaves_zero_and_oversized_rates_to_the_core() {
        assert_eq!(
            parse_rate("0/s").unwrap_err().to_string(),
            "rate must be at least 1"
        );
        assert!(matches!(
            parse_rate("2000000000/s"),
            Err(ConfigErrorKind::Policy(_))
        ));
        assert!(matches!(parse_rate("1/1001d"), Err(ConfigErrorKind::Policy(_))));
        assert!(matches!(parse_rate("2000/1ms"), Err(ConfigErrorKind::Policy(_))));
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(text in "\\PC{0,40}") {
            let _ = parse_duration(&text);
            let _ = parse_rate(&text);
        }

        #[test]
        fn never_panics_on_duration_like_text(text in "[0-9]{0,25}(ms|s|m|h|d|x)?([0-9]{0,25}(ms|s|m|h|d))?/?[0-9]{0,5}[smhd]?") {
            let _ = parse_duration(&text);
            let _ = parse_rate(&text);
        }

        #[test]
        fn reads_back_what_it_would_write(d in 0u64..1000, h in 0u64..24, m in 0u64..60, s in 0u64..60, milli in 1u64..1000) {
            let text = format!("{d}d{h}h{m}m{s}s{milli}ms");
            let expected = (((d * 24 + h) * 60 + m) * 60 + s) * 1000 + milli;
            prop_assert_eq!(parse_duration(&text).unwrap(), Duration::from_millis(expected));
        }
    }
}
