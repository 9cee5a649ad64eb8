//! Decisions per second and latency of `RedisStore::check`, next to `redis-benchmark` running
//! EVALSHA of the very same script in the same run: the ceiling of what any client could get.
//!
//! Everything runs on loopback against a `redis-server` this bench starts itself (and stops):
//!
//! 1. **Ceiling.** `redis-benchmark -c 64 -P 16` (64 connections, 16 commands in flight on
//!    each: the most Redis can do with this script) and `-c 64 -P 1` (one command per round trip,
//!    what a naive client does), calling the decision script on one gcra rule with the arguments
//!    our store sends, on 100 000 random keys.
//! 2. **tollgate.** For each algorithm, `concurrency` tokio tasks share one `RedisStore` (one
//!    multiplexed connection, batching on as by default) and each performs a fixed number of checks on 1 hot key or on
//!    100 000 keys; decisions per second is checks / wall time, latency is per `check` call. The
//!    deny cache is off, so every decision is a Redis round trip.
//! 3. **Batching.** In alternating rounds (the order flipped every round), the store with
//!    batching (decisions waiting for Redis go out together as one call of the batch script;
//!    1, 2 and 4 calls in flight), the store sending one call per decision, and both
//!    `redis-benchmark` ceilings, gcra on 100 000 keys with 64 tasks, plus one task alone (where
//!    batching must cost nothing); the ratios are taken per round and their median printed.
//!    `cargo bench -p tollgate-redis --bench throughput -- batching` runs only this part.
//! 4. **Deny cache.** One key flooded by 64 tasks, cache off versus on.
//! 5. **Memory.** `MEMORY USAGE` of the keys one (policy, key) leaves in Redis, per algorithm.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench throughput`
//! (needs `redis-server` and `redis-benchmark`; `./scripts/test.sh` installs them).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::{Algorithm, Anchor, Policy, Rate, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

const KEYS: u64 = 100_000;
const CONCURRENCY: [u64; 3] = [1, 16, 64];

/// Bursts of 50, then 1000 per second: on 100 000 keys nearly every check is allowed.
fn policies() -> Vec<Policy> {
    every_algorithm(Rate::per_second(1000).expect("rate"), Duration::from_millis(50))
}

fn every_algorithm(rate: Rate, window: Duration) -> Vec<Policy> {
    [
        Algorithm::fixed_window(50, window, Anchor::Epoch),
        Algorithm::sliding_log(50, window),
        Algorithm::sliding_window(50, window),
        Algorithm::token_bucket(50, rate),
        Algorithm::leaky_bucket(50, rate),
        Algorithm::gcra(rate, 50),
    ]
    .into_iter()
    .map(|a| {
        let a = a.expect("algorithm");
        Policy::new(a.name(), a).expect("policy")
    })
    .collect()
}

struct Run {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
}

async fn run(store: &RedisStore, policy: &Policy, concurrency: u64, keys: u64) -> Run {
    // Enough checks per task for a stable number, bounded in total.
    run_checks(
        store,
        policy,
        concurrency,
        keys,
        (60_000 / concurrency).clamp(1_000, 20_000),
    )
    .await
}

async fn run_checks(store: &RedisStore, policy: &Policy, concurrency: u64, keys: u64, per_task: u64) -> Run {
    let started = Instant::now();
    let mut tasks = vec![];
    for task in 0..concurrency {
        let (store, policy) = (store.clone(), policy.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new(3).expect("histogram");
            let mut at = task * 7_919 % keys;
            for _ in 0..per_task {
                let key = format!("user-{at}");
                let begun = Instant::now();
                store.check(&policy, key.as_bytes(), 1).await.expect("check");
                latencies
                    .record(begun.elapsed().as_nanos() as u64)
                    .expect("record");
                at = (at + 61_813) % keys;
            }
            latencies
        }));
    }
    let mut all = Histogram::<u64>::new(3).expect("histogram");
    for task in tasks {
        all.add(task.await.expect("task")).expect("merge");
    }
    let elapsed = started.elapsed();
    Run {
        per_second: (concurrency * per_task) as f64 / elapsed.as_secs_f64(),
        p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
    }
}

/// `redis-benchmark` calling the decision script on one gcra rule on 100 000 random keys; requests per second.
fn ceiling(server: &RedisServer, pipeline: u32) -> f64 {
    ceiling_of(server, pipeline, 400_000, Call::Script)
}

/// How `redis-benchmark` calls the decision: the script (`EVALSHA`), or the function the store
/// calls where the server has functions (`FCALL`; the library must be loaded, as a store does on
/// connect).
#[derive(Clone, Copy)]
enum Call {
    Script,
    Function,
}

fn ceiling_of(server: &RedisServer, pipeline: u32, requests: u64, call: Call) -> f64 {
    let gcra = policies().pop().expect("gcra");
    let (keys, args) = RedisStore::script_call("tollgate:", &gcra, b"user-__rand_int__", 1);
    let (command_name, target) = match call {
        Call::Script => ("EVALSHA", RedisStore::script_sha()),
        Call::Function => ("FCALL", RedisStore::function_name()),
    };
    let port = server.port().to_string();
    let pipeline = pipeline.to_string();
    let mut command = Command::new("redis-benchmark");
    command.args([
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-c",
        "64",
        "-P",
        &pipeline,
        "-n",
        &requests.to_string(),
    ]);
    // Every key of the call: the state and the override hash beside it (redis-benchmark draws
    // each `__rand_int__` on its own, so the override read is of some other key's: as absent as
    // the key's own, and as costly).
    command.args([
        "-r",
        &KEYS.to_string(),
        "--csv",
        command_name,
        &target,
        &keys.len().to_string(),
    ]);
    command.args(
        keys.iter()
            .map(|key| String::from_utf8(key.clone()).expect("utf-8 key")),
    );
    command.args(&args);
    let output = command
        .output()
        .expect("redis-benchmark runs (apt-get install -y redis-server)");
    let text = String::from_utf8_lossy(&output.stdout);
    // --csv: a header line, then "EVALSHA ...","<rps>",...
    let line = text.lines().last().unwrap_or_default();
    let rps = line
        .split("\",\"")
        .nth(1)
        .and_then(|v| v.trim_matches('"').parse().ok());
    rps.unwrap_or_else(|| {
        panic!(
            "cannot read redis-benchmark output: {text} {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

const ROUNDS: usize = 5;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Paired rounds: the batching store (1, 2, 4 calls in flight), the store with one call per
/// decision, and `redis-benchmark -P 16` / `-P 1`, on gcra over 100 000 keys.
async fn batching(server: &RedisServer, single: &RedisStore) {
    let gcra = policies().pop().expect("gcra");
    let mut batched = vec![];
    for calls in [1, 2, 4] {
        let store = RedisStore::builder(Target::Standalone(server.url()))
            .deny_cache(false)
            .timeout(Duration::from_secs(5))
            .batch_calls_in_flight(calls)
            .connect()
            .await
            .expect("connect");
        batched.push((calls, store));
    }
    println!("## Batching: paired rounds, gcra, 100 000 keys\n");
    println!(
        "decisions/s at 64 tasks (200 000 checks per store per round), and one task alone \
         (20 000 checks): decisions/s and p50 µs\n"
    );
    println!(
        "| round | `-P 16` | `-P 1` | `FCALL -P 16` | one call each, 64 | batched 1 / 2 / 4 in flight, 64 | one call each, 1 task | batched (2), 1 task |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut ratios: Vec<Vec<f64>> = vec![vec![]; 9];
    for round in 0..ROUNDS {
        let mut order: Vec<usize> = (0..7).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        let (mut p16, mut p1, mut f16, mut one64, mut one1, mut two1) = (0.0, 0.0, 0.0, 0.0, None, None);
        let mut many = [0.0; 3];
        for step in order {
            match step {
                0 => p16 = ceiling_of(server, 16, 200_000, Call::Script),
                1 => p1 = ceiling_of(server, 1, 200_000, Call::Script),
                6 => f16 = ceiling_of(server, 16, 200_000, Call::Function),
                2 => one64 = run_checks(single, &gcra, 64, KEYS, 3_125).await.per_second,
                3 => {
                    for (i, (_, store)) in batched.iter().enumerate() {
                        many[i] = run_checks(store, &gcra, 64, KEYS, 3_125).await.per_second;
                    }
                }
                4 => one1 = Some(run_checks(single, &gcra, 1, KEYS, 20_000).await),
                _ => two1 = Some(run_checks(&batched[1].1, &gcra, 1, KEYS, 20_000).await),
            }
        }
        let (one1, two1) = (one1.expect("ran"), two1.expect("ran"));
        println!(
            "| {} | {p16:.0} | {p1:.0} | {f16:.0} | {one64:.0} | {:.0} / {:.0} / {:.0} | {:.0}, p50 {:.0} | {:.0}, p50 {:.0} |",
            round + 1,
            many[0],
            many[1],
            many[2],
            one1.per_second,
            one1.p50_us,
            two1.per_second,
            two1.p50_us
        );
        ratios[0].push(many[1] / p16);
        ratios[1].push(many[1] / p1);
        ratios[2].push(many[1] / one64);
        ratios[3].push(many[0] / p16);
        ratios[4].push(many[2] / p16);
        ratios[5].push(two1.per_second / one1.per_second);
        ratios[6].push(two1.p50_us / one1.p50_us);
        ratios[7].push(one64 / p16);
        ratios[8].push(many[1] / f16);
    }
    println!("\nMedians of the per-round ratios:\n");
    println!("| ratio | median | per round |\n|---|---|---|");
    let names = [
        "batched (2 in flight) / `redis-benchmark -c 64 -P 16`",
        "batched (2 in flight) / `redis-benchmark -c 64 -P 1`",
        "batched (2 in flight) / one call each, 64 tasks",
        "batched (1 in flight) / `-P 16`",
        "batched (4 in flight) / `-P 16`",
        "one task: batched / one call each, decisions/s",
        "one task: batched / one call each, p50",
        "one call each / `-P 16` (before batching)",
        "batched (2 in flight) / `redis-benchmark -c 64 -P 16` of the function (`FCALL`)",
    ];
    for (name, values) in names.iter().zip(ratios) {
        let rounds: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        println!("| {name} | **{:.2}** | {} |", median(values), rounds.join(", "));
    }
    println!();
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let exact = RedisStore::builder(Target::Standalone(server.url()))
            .deny_cache(false)
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect");
        // The script must exist before redis-benchmark calls it by SHA.
        let gcra = policies().pop().expect("gcra");
        exact.check(&gcra, b"warm", 1).await.expect("warm");

        let single = RedisStore::builder(Target::Standalone(server.url()))
            .deny_cache(false)
            .timeout(Duration::from_secs(5))
            .batch_calls_in_flight(0)
            .connect()
            .await
            .expect("connect");
        batching(&server, &single).await;
        if std::env::args().any(|a| a == "batching") {
            return;
        }

        let pipelined = ceiling(&server, 16);
        let naive = ceiling(&server, 1);
        println!(
            "## Ceiling: redis-benchmark, EVALSHA of the decision script, one gcra rule, 100 000 keys\n"
        );
        println!("| redis-benchmark | requests/s |\n|---|---|");
        println!("| `-c 64 -P 16` | {pipelined:.0} |\n| `-c 64 -P 1` | {naive:.0} |\n");

        println!("## tollgate RedisStore::check (deny cache off)\n");
        println!("| algorithm | keys | tasks | decisions/s | p50 µs | p99 µs |");
        println!("|---|---|---|---|---|---|");
        let mut gcra_64_many = 0.0;
        for policy in policies() {
            for (label, keys) in [("1", 1), ("100 000", KEYS)] {
                for concurrency in CONCURRENCY {
                    let r = run(&exact, &policy, concurrency, keys).await;
                    if policy.algorithm().name() == "gcra" && keys == KEYS && concurrency == 64 {
                        gcra_64_many = r.per_second;
                    }
                    println!(
                        "| {} | {label} | {concurrency} | {:.0} | {:.0} | {:.0} |",
                        policy.algorithm().name(),
                        r.per_second,
                        r.p50_us,
                        r.p99_us
                    );
                }
            }
        }
        println!("\n## Ratios (gcra, 64 tasks, 100 000 keys)\n");
        println!("| against | ratio | target |\n|---|---|---|");
        println!(
            "| `redis-benchmark -c 64 -P 16` | **{:.2}** | ≥ 0.7 |",
            gcra_64_many / pipelined
        );
        println!(
            "| `redis-benchmark -c 64 -P 1` | **{:.2}** | ≥ 1.5 |",
            gcra_64_many / naive
        );

        let flood = Policy::new(
            "flood",
            Algorithm::sliding_log(10, Duration::from_secs(3600)).expect("sliding log"),
        )
        .expect("policy");
        let cached = RedisStore::builder(Target::Standalone(server.url()))
            .prefix("cached:")
            .connect()
            .await
            .expect("connect");
        let off = run(&exact, &flood, 64, 1).await;
        let on = run(&cached, &flood, 64, 1).await;
        println!("\n## One-key flood, 64 tasks\n");
        println!("| deny cache | decisions/s | p50 µs | p99 µs |\n|---|---|---|---|");
        println!(
            "| off | {:.0} | {:.0} | {:.0} |",
            off.per_second, off.p50_us, off.p99_us
        );
        println!(
            "| on | {:.0} | {:.1} | {:.1} |",
            on.per_second, on.p50_us, on.p99_us
        );
        println!(
            "\nratio on / off: **{:.1}** (target ≥ 10)",
            on.per_second / off.per_second
        );

        println!("\n## Redis memory per (policy, key)\n");
        println!("| algorithm | keys in Redis | MEMORY USAGE bytes |\n|---|---|---|");
        let store = Arc::new(exact);
        // Long-lived state, so the keys are still there when measured.
        for policy in every_algorithm(Rate::per_minute(50).expect("rate"), Duration::from_secs(60)) {
            let key = format!("memory-{}", policy.name());
            for _ in 0..10 {
                store.check(&policy, key.as_bytes(), 1).await.expect("check");
            }
            let (mut names, _) = RedisStore::script_call("tollgate:", &policy, key.as_bytes(), 1);
            // The slot's sequence is shared by every key of the slot, not this key's.
            names.retain(|name| !name.ends_with(b"}:seq"));
            let mut bytes = 0;
            for name in &names {
                let name = String::from_utf8(name.clone()).expect("utf-8 key");
                bytes += server
                    .cli(&["MEMORY", "USAGE", &name])
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
            println!("| {} | {} | {bytes} |", policy.algorithm().name(), names.len());
        }
    });
}
