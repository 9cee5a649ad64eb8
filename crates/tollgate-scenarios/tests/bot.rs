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
fn sends_61_requests_two_seconds_apart_to_every_algorithm() {
    let report = bot::run().unwrap();
    assert_eq!(report.lanes.len(), 6);
    for lane in &report.lanes {
        let times: Vec<u64> = lane.requests.iter().map(|r| r.at.as_secs()).collect();
        assert_eq!(
            times,
            (0..=120).step_by(2).collect::<Vec<u64>>(),
            "{}",
            lane.label
        );
        assert_eq!(lane.admitted() + lane.denied(), 61);
    }
}

/// 20 a minute at one request per 2 s: within each minute the first 20 requests (t mod 60 =
/// 0..38) pass and the other 10 (40..58) are refused, for the epoch-aligned fixed window (which
/// starts a new window at 60 and 120) and for the exact sliding log (where the request at t
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
        assert_eq!(secs(&lane.resumed_at()), vec![60, 120], "{label}");
        let runs: Vec<(u64, u64)> = lane
            .denied_runs()
            .iter()
            .map(|(a, b)| (a.as_secs(), b.as_secs()))
            .collect();
        assert_eq!(runs, vec![(40, 58), (100, 118)], "{label}");
        assert_eq!((lane.admitted(), lane.denied()), (41, 20), "{label}");
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
    }
    assert!(markdown.contains("capacity 20, refill 20 per 60 s (1 every 3 s)"));
    assert!(markdown.contains("rate 20 per 60 s (1 every 3 s), burst 20"));
}
