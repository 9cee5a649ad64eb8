//! `bench compare` on the memory store, a real Redis and a real 3-master cluster: accuracy numbers
//! are exact (and the same on every store), the cost columns are measured, the chart decodes.

use std::fs::File;
use std::time::Duration;

use tollgate_scenarios::compare::traffic::{Shape, sliding_window_bound};
use tollgate_scenarios::compare::{self, CompareReport};
use tollgate_scenarios::throughput::StoreKind;
use tollgate_scenarios::{BenchArgs, CompareArgs, Scenario};
use tollgate_testkit::{RedisCluster, RedisServer};

const LIMIT: u64 = 10;

fn brief(store: String) -> CompareArgs {
    CompareArgs {
        store,
        limit: LIMIT,
        window: Duration::from_secs(1),
        duration: Duration::from_millis(100),
        max_requests: 5_000,
        concurrency: 4,
        keys: 500,
        seeds: 10,
        ..CompareArgs::default()
    }
}

fn row<'a>(report: &'a CompareReport, label: &str) -> &'a compare::Row {
    report
        .rows
        .iter()
        .find(|row| row.label == label)
        .unwrap_or_else(|| panic!("no row {label}"))
}

/// What every store must report, whatever its speed.
fn assert_exact_accuracy(report: &CompareReport) {
    let labels: Vec<&str> = report.rows.iter().map(|row| row.label).collect();
    assert_eq!(
        labels,
        [
            "fixed window",
            "sliding log",
            "sliding window",
            "token bucket",
            "leaky bucket",
            "GCRA"
        ]
    );
    assert_eq!(Shape::ALL[0], Shape::Boundary);
    // Fixed window: both bursts pass, 2.00 at the boundary.
    assert_eq!(row(report, "fixed window").most_admitted[0], 2 * LIMIT);
    assert_eq!(row(report, "fixed window").accuracy(LIMIT)[0], 2.0);
    // Sliding log: exactly the limit under every shape (1.00: it never lets more through, and
    // every shape offers more than the limit in some window).
    assert_eq!(row(report, "sliding log").most_admitted, [LIMIT; 3]);
    // Every other algorithm holds the boundary burst to the limit.
    for label in ["sliding window", "token bucket", "leaky bucket", "GCRA"] {
        assert_eq!(row(report, label).most_admitted[0], LIMIT, "{label}");
    }
    // Sliding window: within its stated bound over every seed, and the attack reaches it.
    let sw = &report.sliding_window;
    assert_eq!(sw.bound, sliding_window_bound(LIMIT, Duration::from_secs(1)));
    assert_eq!(sw.bound, 2 * LIMIT - 1);
    assert!(sw.most_over_seeds <= sw.bound, "{sw:?}");
    assert!(sw.most_over_seeds >= LIMIT, "{sw:?}");
    assert_eq!(sw.attack, sw.bound);
    assert_eq!(sw.seeds, 10);
    // The sliding window's seed-1 numbers are among the seeds it tried.
    let seed_one = row(report, "sliding window").most_admitted;
    assert!(seed_one[1] <= sw.most_over_seeds && seed_one[2] <= sw.most_over_seeds);
}

fn assert_speed_measured(report: &CompareReport) {
    for row in &report.rows {
        let name = row.label;
        assert!(
            row.decisions > 0 && row.decisions <= 5_000,
            "{name}: {}",
            row.decisions
        );
        assert!(row.allowed <= row.decisions, "{name}");
        assert!(row.per_second() > 0.0, "{name}");
        assert!(
            Duration::ZERO < row.p50 && row.p50 <= row.p99 && row.p99 <= row.max,
            "{name}: {row:?}"
        );
        assert!(row.mean <= row.max, "{name}");
    }
}

#[test]
fn memory_store_accuracy_is_exact_and_repeatable() {
    let report = compare::run(&brief("memory".into())).unwrap();
    assert_eq!(report.store, StoreKind::Memory);
    assert_exact_accuracy(&report);
    assert_speed_measured(&report);
    // Same seeds, same answers.
    let again = compare::run(&brief("memory".into())).unwrap();
    for (a, b) in report.rows.iter().zip(&again.rows) {
        assert_eq!(a.most_admitted, b.most_admitted, "{}", a.label);
    }
    assert_eq!(
        report.sliding_window.most_over_seeds,
        again.sliding_window.most_over_seeds
    );
    if cfg!(target_os = "linux") {
        for row in &report.rows {
            assert!(row.cpu_per_1000.is_some(), "{}", row.label);
            assert!(row.bytes_per_key.is_some(), "{}", row.label);
        }
    }
}

#[test]
fn redis_reports_its_cpu_and_memory_and_agrees_with_memory_on_accuracy() {
    let redis = RedisServer::start();
    let report = compare::run(&brief(redis.url())).unwrap();
    assert_eq!((report.store, report.redis_nodes), (StoreKind::Redis, 1));
    assert_exact_accuracy(&report);
    assert_speed_measured(&report);
    for row in &report.rows {
        let cpu = row
            .cpu_per_1000
            .unwrap_or_else(|| panic!("{}: no Redis CPU", row.label));
        assert!(cpu > Duration::ZERO, "{}: Redis CPU {cpu:?}", row.label);
        let bytes = row.bytes_per_key.unwrap_or(0.0);
        assert!(bytes > 0.0, "{}: {bytes} bytes per key", row.label);
    }
    // The sliding log keeps a sorted set of L entries next to its state: it costs the most.
    let log = row(&report, "sliding log").bytes_per_key.unwrap();
    let fixed = row(&report, "fixed window").bytes_per_key.unwrap();
    assert!(log > fixed, "sliding log {log} B vs fixed window {fixed} B");
    // The scripts run the same steps as the memory store, on the same simulated clock.
    let memory = compare::run(&brief("memory".into())).unwrap();
    for (r, m) in report.rows.iter().zip(&memory.rows) {
        assert_eq!(r.most_admitted, m.most_admitted, "{}", r.label);
    }
    assert_eq!(
        report.sliding_window.most_over_seeds,
        memory.sliding_window.most_over_seeds
    );
    // The markdown carries the Redis CPU column.
    let markdown = tollgate_scenarios::report::compare(&report);
    assert!(
        markdown.contains("| Redis CPU / 1 000 | bytes per key |"),
        "{markdown}"
    );
    assert!(markdown.contains("on one Redis server"), "{markdown}");
}

#[test]
fn a_cluster_is_measured_on_every_node() {
    let cluster = RedisCluster::start();
    let ports: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let args = CompareArgs {
        seeds: 2,
        ..brief(format!("redis+cluster://{}", ports[0]))
    };
    let report = compare::run(&args).unwrap();
    assert_eq!((report.store, report.redis_nodes), (StoreKind::RedisCluster, 3));
    assert_speed_measured(&report);
    assert_eq!(row(&report, "fixed window").most_admitted[0], 2 * LIMIT);
    assert_eq!(row(&report, "sliding log").most_admitted, [LIMIT; 3]);
    for row in &report.rows {
        assert!(
            row.cpu_per_1000.is_some_and(|cpu| cpu > Duration::ZERO),
            "{}",
            row.label
        );
        assert!(row.bytes_per_key.is_some_and(|b| b > 0.0), "{}", row.label);
    }
    // Same answers as the memory store, run for run, though eight probes share the cluster.
    let memory = compare::run(&CompareArgs {
        seeds: 2,
        ..brief("memory".into())
    })
    .unwrap();
    for (c, m) in report.rows.iter().zip(&memory.rows) {
        assert_eq!(c.most_admitted, m.most_admitted, "{}", c.label);
    }
    assert_eq!(
        report.sliding_window.most_over_seeds,
        memory.sliding_window.most_over_seeds
    );
}

#[test]
fn out_writes_the_markdown_and_a_chart_that_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let args = BenchArgs {
        scenario: Scenario::Compare(CompareArgs {
            out: Some(dir.path().to_path_buf()),
            chart_width: 1200,
            chart_height: 800,
            seeds: 2,
            ..brief("memory".into())
        }),
    };
    let output = tollgate_scenarios::run(&args).unwrap();
    let chart = dir.path().join("compare.png");
    assert_eq!(output.chart.as_deref(), Some(chart.as_path()));
    let written = std::fs::read_to_string(dir.path().join("compare.md")).unwrap();
    assert_eq!(written, output.markdown);
    assert!(written.contains("| fixed window |"));

    let decoder = png::Decoder::new(File::open(&chart).unwrap());
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("PNG pixels");
    assert_eq!((frame.width, frame.height), (1200, 800));
    let channels = frame.color_type.samples();
    let inked = pixels[..frame.buffer_size()]
        .chunks(channels)
        .filter(|p| p.iter().take(3).any(|&c| c < 250))
        .count();
    let share = inked as f64 / (1200.0 * 800.0);
    assert!(share > 0.03, "only {share:.3} of the chart inked");
}

#[test]
fn bad_arguments_are_refused_before_any_work() {
    let cases = [
        (
            CompareArgs {
                limit: 0,
                ..CompareArgs::default()
            },
            "--limit must be 1 to 10000, got 0",
        ),
        (
            CompareArgs {
                window: Duration::from_millis(5),
                ..CompareArgs::default()
            },
            "--window must be whole milliseconds from 10ms to 1 hour, got 5ms",
        ),
        (
            CompareArgs {
                seeds: 0,
                ..CompareArgs::default()
            },
            "--seeds must be 1 to 100000, got 0",
        ),
        (
            CompareArgs {
                out: Some("/no/such/dir".into()),
                ..CompareArgs::default()
            },
            "--out must be an existing directory, got /no/such/dir",
        ),
    ];
    for (args, message) in cases {
        let err = compare::run(&args).unwrap_err();
        assert_eq!(err.to_string(), message);
    }
    let far = CompareArgs {
        store: "redis://192.0.2.1:6379".into(),
        ..CompareArgs::default()
    };
    assert!(
        compare::run(&far)
            .unwrap_err()
            .to_string()
            .contains("not a loopback address")
    );
}
