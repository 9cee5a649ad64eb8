//! Bad arguments get a clear error before any work starts, never a panic.

use std::path::PathBuf;

use clap::Parser;
use tollgate_scenarios::{BenchArgs, BoundaryArgs, ChartArgs, Scenario, ScenarioError, ThroughputArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
}

fn message(args: &[&str]) -> String {
    match parse(args) {
        Ok(cli) => match tollgate_scenarios::run(&cli.bench) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(err) => err.to_string(),
        },
        Err(err) => err.to_string(),
    }
}

#[test]
fn an_unknown_scenario_is_refused_by_name() {
    let err = parse(&["nope"]).err().expect("an error");
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
    assert!(err.to_string().contains("'nope'"), "{err}");
}

#[test]
fn a_zero_limit_is_refused() {
    assert_eq!(
        message(&["boundary", "--limit", "0"]),
        "--limit must be 1 to 100000, got 0"
    );
    assert!(matches!(
        tollgate_scenarios::boundary::run(0),
        Err(ScenarioError::BadArgument { arg: "limit", .. })
    ));
}

#[test]
fn non_loopback_redis_is_refused_before_connecting() {
    let text = message(&["throughput", "--redis", "redis://192.0.2.10:6379"]);
    assert!(text.contains("`192.0.2.10` is not a loopback address"), "{text}");
    let text = message(&[
        "throughput",
        "--redis-cluster",
        "redis+cluster://127.0.0.1:7000,redis.example.com:7001",
    ]);
    assert!(
        text.contains("`redis.example.com` is not a loopback address"),
        "{text}"
    );
    let text = message(&["throughput", "--redis", "redis+cluster://127.0.0.1:7000"]);
    assert!(
        text.contains("expected an address starting with redis://"),
        "{text}"
    );
}

#[test]
fn a_chart_in_a_missing_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/chart.png");
    let text = message(&["bot", "--chart", missing.to_str().unwrap()]);
    assert!(text.starts_with("chart directory `"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    assert!(!missing.exists());
    // Checked before the scenario runs: a long throughput run is not wasted.
    let args = BenchArgs {
        scenario: Scenario::Throughput(ThroughputArgs {
            duration: std::time::Duration::from_secs(600),
            chart: ChartArgs {
                chart: Some(missing),
                ..ChartArgs::default()
            },
            ..ThroughputArgs::default()
        }),
    };
    assert!(matches!(
        tollgate_scenarios::run(&args),
        Err(ScenarioError::ChartDirMissing { .. })
    ));
}

#[test]
fn other_bad_values_are_refused_with_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let jpg = dir.path().join("chart.jpg");
    let text = message(&["boundary", "--chart", jpg.to_str().unwrap()]);
    assert!(text.contains("must end in .png"), "{text}");
    assert_eq!(
        message(&["throughput", "--concurrency", "1,0"]),
        "--concurrency must be 1 to 4096, got 0"
    );
    assert_eq!(
        message(&["throughput", "--keys", "0"]),
        "--keys must be 1 to 10000000, got 0"
    );
    assert!(message(&["throughput", "--duration", "soon"]).contains("expected a duration"));
    assert!(message(&["bot", "--chart-width", "5"]).contains("--chart-width must be 200 to 4000"));
    let args = BenchArgs {
        scenario: Scenario::Boundary(BoundaryArgs {
            limit: 100_001,
            chart: ChartArgs {
                chart: Some(PathBuf::from("x.png")),
                ..ChartArgs::default()
            },
        }),
    };
    assert!(tollgate_scenarios::run(&args).is_err());
    assert!(!PathBuf::from("x.png").exists());
}

#[test]
fn an_unreachable_redis_is_a_clear_error() {
    // A loopback port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let text = message(&["throughput", "--redis", &url, "--duration", "10ms"]);
    assert!(
        text.starts_with(&format!("redis at {url}: cannot connect to redis")),
        "{text}"
    );
}
