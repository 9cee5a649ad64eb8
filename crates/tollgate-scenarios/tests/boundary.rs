//! The boundary scenario's numbers, from real runs on the memory store and a manual clock.

use std::time::Duration;

use tollgate_scenarios::boundary::{self, max_in_span};

#[test]
fn fixed_window_admits_twice_the_limit_in_60_s_and_sliding_log_exactly_the_limit() {
    for limit in [100, 7, 1] {
        let report = boundary::run(limit).unwrap();
        let row = |label: &str| {
            report
                .rows
                .iter()
                .find(|row| row.label == label)
                .unwrap_or_else(|| panic!("no row {label}"))
                .clone()
        };
        let fixed = row("fixed window");
        assert_eq!((fixed.first_burst, fixed.second_burst), (limit, limit));
        assert_eq!(fixed.max_in_span, 2 * limit, "limit {limit}");
        let log = row("sliding log");
        assert_eq!((log.first_burst, log.second_burst), (limit, 0));
        assert_eq!(log.max_in_span, limit, "limit {limit}");
    }
}

#[test]
fn every_algorithm_reports_a_max_at_least_its_largest_burst() {
    let report = boundary::run(100).unwrap();
    assert_eq!(report.rows.len(), 6);
    for row in &report.rows {
        assert!(row.first_burst <= 100 && row.second_burst <= 100, "{}", row.label);
        assert!(
            row.max_in_span >= row.first_burst.max(row.second_burst),
            "{}",
            row.label
        );
        // Both bursts are 100 ms apart, so they fall in one 60 s span.
        assert_eq!(
            row.max_in_span,
            row.first_burst + row.second_burst,
            "{}",
            row.label
        );
    }
}

#[test]
fn sliding_scan_finds_the_busiest_span_wherever_it_is() {
    let ms = Duration::from_millis;
    let times = [ms(0), ms(10_000), ms(59_999), ms(60_000), ms(61_000), ms(119_999)];
    assert_eq!(max_in_span(&times, Duration::from_secs(60)), 4);
    assert_eq!(max_in_span(&times, Duration::from_millis(1)), 1);
    assert_eq!(max_in_span(&times, Duration::from_secs(1000)), 6);
}

#[test]
fn the_table_matches_the_report() {
    let report = boundary::run(40).unwrap();
    let markdown = tollgate_scenarios::report::boundary(&report);
    assert!(
        markdown
            .contains("| algorithm | admitted at 0:59.9 | admitted at 1:00.0 | max in any 60 s | vs limit |")
    );
    for row in &report.rows {
        let line = format!(
            "| {} | {} | {} | {} |",
            row.label, row.first_burst, row.second_burst, row.max_in_span
        );
        assert!(markdown.contains(&line), "missing {line}");
    }
    assert!(markdown.contains("| fixed window | 40 | 40 | 80 | 2.00× — over by 40 |"));
}
