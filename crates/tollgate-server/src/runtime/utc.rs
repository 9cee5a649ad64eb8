//! Times written for people and for other programs: RFC 3339 in UTC, the date and time of day
//! from `jiff`. The one date helper of the server.

/// `seconds` since the Unix epoch as RFC 3339 in UTC, with `fraction` (`""`, `".500"`,
/// `".000001"`, as the caller's format wants it) between the seconds and the `Z`:
/// `2024-02-29T12:34:56.500Z`. A time outside `jiff`'s range (years -9999 to 9999, a day short
/// at each end) is written as the nearest end of it.
pub(crate) fn rfc3339(seconds: i64, fraction: &str) -> String {
    let bound = if seconds < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    };
    let at = jiff::Timestamp::from_second(seconds).unwrap_or(bound);
    format!("{}{fraction}Z", at.strftime("%Y-%m-%dT%H:%M:%S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_epoch_a_leap_day_and_the_bounds() {
        assert_eq!(rfc3339(0, ""), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_709_210_096, ".500"), "2024-02-29T12:34:56.500Z");
        assert_eq!(rfc3339(-1, ""), "1969-12-31T23:59:59Z");
        assert!(rfc3339(i64::MAX, "").starts_with("9999-12-"));
    }
}
