//! `tollgate replay` against the live engine: how fast a million logged decisions are decided
//! again, next to how fast the memory store decides them live.
//!
//! The log: 1 000 000 `POST /v1/check` lines of the movie list's policy (a sliding log of 20 per
//! minute), 10 000 keys in a fixed pseudo-random order, one line every 100 µs (100 s of
//! traffic, each key back about once a second, so some are denied). Each round:
//!
//! - **replay**: `read_logs` (the file parsed) and `replay` under a stricter config (10 a
//!   minute) with the served one as `--baseline`: two decisions per line, both on memory
//!   stores on a manual clock, as `tollgate replay --config strict --baseline served LOG` runs;
//! - **live**: the same 1 000 000 rules decided once each by the engine over a memory store on
//!   the real clock, as `POST /v1/check` decides them without the HTTP around it.
//!
//! The ratio is log lines replayed per second ÷ live decisions per second: 0.5 would mean that
//! replaying a line (two configs, parsing included) costs what two live decisions cost.
//! Rounds alternate, and the median of 3 is printed as Markdown.
//!
//! Run with `cargo bench -p tollgate-server --bench replay`.

use std::io::Write;
use std::time::{Duration, Instant};

use tollgate_server::{AnyStore, AppState, Settings};

const LINES: usize = 1_000_000;
const KEYS: usize = 10_000;
/// Prime and not a factor of `KEYS`: the walk visits every key once per cycle.
const STRIDE: usize = 6_133;
const START_US: u64 = 1_704_067_200_000_000;
const ROUNDS: usize = 3;

fn config(limit: u32) -> String {
    format!("policies:\n  movies:\n    algorithm: sliding_log\n    limit: {limit}\n    window: 1m\n")
}

fn limits(limit: u32) -> tollgate_config::Limits {
    tollgate_config::parse("movies.yaml", &config(limit)).expect("config")
}

fn keys() -> Vec<String> {
    (0..KEYS).map(|i| format!("198.51.100.{}:{i}", i % 256)).collect()
}

fn key_at(n: usize) -> usize {
    n * STRIDE % KEYS
}

fn write_log(path: &std::path::Path, keys: &[String]) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create the log"));
    for n in 0..LINES {
        writeln!(
            file,
            r#"{{"time_us":{},"door":"http","rules":[{{"policy":"movies","key":"{}","cost":1}}],"outcome":"allowed"}}"#,
            START_US + n as u64 * 100,
            keys[key_at(n)]
        )
        .expect("write the log");
    }
    file.flush().expect("flush the log");
}

/// Seconds to read and replay the log under both configs, and the flips found.
fn replay_round(runtime: &tokio::runtime::Runtime, path: &std::path::Path) -> (Duration, u64, Duration) {
    let started = Instant::now();
    let lines = tollgate_server::replay::read_logs(&[path.to_owned()]).expect("read the log");
    let parsed = started.elapsed();
    let report = runtime.block_on(tollgate_server::replay::replay(
        &lines,
        limits(10),
        Some(limits(20)),
        20,
    ));
    assert_eq!(report.decisions, LINES as u64);
    (started.elapsed(), report.flipped, parsed)
}

/// Seconds to decide every rule once, live.
fn live_round(runtime: &tokio::runtime::Runtime, keys: &[String]) -> Duration {
    let state = AppState::new(limits(20), AnyStore::memory(), Settings::default());
    let limits = state.limits.load_full();
    let policy = limits.policy("movies").expect("policy").policy();
    let started = Instant::now();
    runtime.block_on(async {
        for n in 0..LINES {
            let rule = tollgate::Rule::new(policy, &keys[key_at(n)], 1);
            let verdict = state.engine.check_all(&[rule]).await.expect("decided");
            std::hint::black_box(verdict);
        }
    });
    started.elapsed()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("decisions.jsonl");
    let keys = keys();
    write_log(&path, &keys);
    let size = std::fs::metadata(&path).expect("the log").len();
    let mut replayed = Vec::new();
    let mut live = Vec::new();
    let mut ratios = Vec::new();
    let mut flipped = 0;
    let mut parse_share = Vec::new();
    for _ in 0..ROUNDS {
        let (replay, flips, parsed) = replay_round(&runtime, &path);
        let decided = live_round(&runtime, &keys);
        flipped = flips;
        let replay_rate = LINES as f64 / replay.as_secs_f64();
        let live_rate = LINES as f64 / decided.as_secs_f64();
        replayed.push(replay_rate);
        live.push(live_rate);
        ratios.push(replay_rate / live_rate);
        parse_share.push(parsed.as_secs_f64() / replay.as_secs_f64());
    }
    println!(
        "| log | replayed lines/s (2 configs, parsing included) | live decisions/s (engine + memory store) | ratio | share of replay spent parsing | flips found |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| {LINES} lines, {KEYS} keys, {:.0} MB | {:.0} | {:.0} | **{:.3}** (rounds {}) | {:.2} | {flipped} |",
        size as f64 / 1e6,
        median(replayed),
        median(live),
        median(ratios.clone()),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(parse_share),
    );
}
