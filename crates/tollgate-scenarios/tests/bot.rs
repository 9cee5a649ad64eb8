//! The bot scenario's numbers, from a real run on the memory store and a manual clock.

use std::time::Duration;

use tollgate_scenarios::bot::{self, Lane};

fn lane<'a>(report: &'a bot::BotReport, label: &str) -> &'a Lane {
    report
        .lanes
        .iter()
        .find(|lane| lane.label == label)
        .unwrap_or_else(|| panic!("no lane {label}"))
}

fn secs(times: &[Duration]) -> Vec<u64> {
    times.iter().map(Duration::as_secs).collect()
}

#[test]
fn sends_300_requests_two_seconds_apart_for_ten_minutes_to_every_algorithm() {
    let report = bot::run().unwrap();
    assert_eq!(report.lanes.len(), 6);
    for lane in &report.lanes {
        let times: Vec<u64> = lane.requests.iter().map(|r| r.at.as_secs()).collect();
        assert_eq!(times, (0..600).step_by(2).collect::<Vec<u64>>(), "{}", lane.label);
        assert_eq!(lane.admitted() + lane.denied(), 300);
        assert_eq!(lane.admitted_per_minute().len(), 10, "{}", lane.label);
    }
}

/// 20 a minute at one request per 2 s: within each minute the first 20 requests (t mod 60 =
/// 0..38) pass and the other 10 (40..58) are refused, for the epoch-aligned fixed window (which
/// starts a new window every 60 s) and for the exact sliding log (where the request at t
/// leaves the log at t + 60).
#[test]
fn fixed_window_and_sliding_log_pass_the_first_20_of_each_minute() {
    let report = bot::run().unwrap();
    for label in ["fixed window", "sliding log"] {
        let lane = lane(&report, label);
        for request in &lane.requests {
            let expected = request.at.as_secs() % 60 < 40;
            assert_eq!(request.allowed, expected, "{label} at t = {:?}", request.at);
        }
        let first_20: Vec<u64> = lane.requests[..20].iter().map(|r| r.at.as_secs()).collect();
        assert!(lane.requests[..20].iter().all(|r| r.allowed), "{label}");
        assert_eq!(first_20, (0..=38).step_by(2).collect::<Vec<u64>>());
        assert_eq!(lane.first_denial(), Some(Duration::from_secs(40)), "{label}");
        let minutes: Vec<u64> = (1..10).map(|m| m * 60).collect();
        assert_eq!(secs(&lane.resumed_at()), minutes, "{label}");
        let runs: Vec<(u64, u64)> = lane
            .denied_runs()
            .iter()
            .map(|(a, b)| (a.as_secs(), b.as_secs()))
            .collect();
        let expected: Vec<(u64, u64)> = (0..10).map(|m| (m * 60 + 40, m * 60 + 58)).collect();
        assert_eq!(runs, expected, "{label}");
        assert_eq!((lane.admitted(), lane.denied()), (200, 100), "{label}");
        assert_eq!(lane.admitted_per_minute(), vec![20; 10], "{label}");
    }
}

/// Burst versus rate: token bucket, leaky bucket and GCRA start with a burst of 20 and refill
/// one request every 3 s, so by t the bot may have had 20 + t / 3. The bot asks for t / 2 + 1,
/// which stays within that until t = 116 s: the first 58 requests pass, more than the "20 per
/// minute" reads. Then the burst is spent and only the refill is left: from the third minute on,
/// exactly 20 a minute, the rate.
#[test]
fn the_buckets_and_gcra_spend_their_burst_and_then_converge_to_the_rate() {
    let report = bot::run().unwrap();
    for label in ["token bucket", "leaky bucket", "GCRA"] {
        let lane = lane(&report, label);
        assert_eq!(lane.first_denial(), Some(Duration::from_secs(116)), "{label}");
        let per_minute = lane.admitted_per_minute();
        assert_eq!(per_minute[..2], [30, 29], "{label}: the burst and the refill");
        assert_eq!(
            per_minute[2..],
            [20; 8],
            "{label}: the rate from the third minute on"
        );
        // Over the whole run: the burst once, plus one request per 3 s up to the last at 598 s.
        assert_eq!(lane.admitted(), 20 + 598 / 3, "{label}");
    }
}

/// The windows let the bot reach the rate at once, the buckets two minutes later; by the end
/// every algorithm admits 20 a minute.
#[test]
fn every_algorithm_admits_the_rate_in_the_last_minutes() {
    let report = bot::run().unwrap();
    for lane in &report.lanes {
        let per_minute = lane.admitted_per_minute();
        for (minute, &admitted) in per_minute.iter().enumerate().skip(3) {
            assert!(
                (19..=21).contains(&admitted),
                "{} admitted {admitted} in minute {}",
                lane.label,
                minute + 1
            );
        }
    }
}

/// Whatever each algorithm did, it admitted at most its budget: the burst of 20 plus one request
/// per 3 s of elapsed time, at every moment of the run.
#[test]
fn no_algorithm_admits_more_than_its_burst_plus_its_rate() {
    let report = bot::run().unwrap();
    for lane in &report.lanes {
        let mut admitted = 0u64;
        for request in &lane.requests {
            admitted += u64::from(request.allowed);
            let budget = bot::LIMIT + request.at.as_secs() / 3;
            assert!(
                admitted <= budget,
                "{} at {:?}: {admitted} > {budget}",
                lane.label,
                request.at
            );
        }
        assert!(
            lane.denied() > 0,
            "{} never denied a bot asking for 30 a minute",
            lane.label
        );
    }
}

#[test]
fn the_summary_shows_each_lanes_measured_numbers() {
    let report = bot::run().unwrap();
    let markdown = tollgate_scenarios::report::bot(&report);
    for lane in &report.lanes {
        let row = markdown
            .lines()
            .find(|line| line.starts_with(&format!("| {} |", lane.label)))
            .unwrap_or_else(|| panic!("no row for {}", lane.label));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells[2], lane.parameters);
        assert_eq!(cells[3], lane.admitted().to_string());
        assert_eq!(cells[4], lane.denied().to_string());
        let first = lane.first_denial().map(|t| format!("t = {} s", t.as_secs()));
        assert_eq!(cells[6], first.as_deref().unwrap_or("none"));
        let minutes: Vec<String> = lane
            .admitted_per_minute()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(cells[7], minutes.join(", "));
    }
    assert!(markdown.contains("capacity 20, refill 20 per 60 s (1 every 3 s)"));
    assert!(markdown.contains("rate 20 per 60 s (1 every 3 s), burst 20"));
}
