//! What a charge costs next to a check, per algorithm, on the memory store and on one
//! `redis-server`, in the same run: a charge records a cost whatever is left (see
//! `docs/charges.md`), a check decides and records if it fits. The claim is that the new
//! operation is no dearer than the old.
//!
//! - **memory**: nanoseconds per operation, one thread, 10 000 keys walked in order, cost 1,
//!   budgets no key runs out of; alternating rounds, check then charge, median round of each.
//! - **redis**: operations per second with 32 tokio tasks on one store (deny cache off, batching
//!   on as by default; a charge goes out as one script call of its own), and the script time
//!   Redis itself spent per operation (`usec` of `cmdstat_evalsha` and `cmdstat_fcall` in `INFO
//!   commandstats`), which a loaded machine disturbs far less than wall time.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench
//! charge_vs_check` (needs `redis-server`); `-- memory [ALGORITHM]` runs the memory store only,
//! which `scripts/charge-vs-check-instructions.sh` runs under callgrind to count instructions
//! per operation, a figure the machine's load does not move.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::algorithm::calendar_quota::Period;
use tollgate::{Algorithm, Anchor, MemoryStore, Policy, Rate, Rule, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

const KEYS: u64 = 10_000;
const ROUNDS: usize = 5;
const MEMORY_OPS: u64 = 200_000;
const REDIS_OPS: u64 = 20_000;
const TASKS: u64 = 32;

fn policies() -> Vec<Policy> {
    let rate = Rate::per_second(1_000_000).expect("rate");
    let minute = Duration::from_secs(60);
    [
        Algorithm::fixed_window(1_000_000_000, minute, Anchor::Epoch),
        Algorithm::sliding_window(1_000_000_000, minute),
        Algorithm::token_bucket(1_000_000, rate),
        Algorithm::leaky_bucket(1_000_000, rate),
        Algorithm::gcra(rate, 1_000_000),
        // The longest log a limit allows: no key comes near it in a run.
        Algorithm::sliding_log(100_000, minute),
        Algorithm::calendar_quota(1_000_000_000, Period::Day, "UTC"),
    ]
    .into_iter()
    .map(|algorithm| {
        let algorithm = algorithm.expect("algorithm");
        Policy::new(algorithm.name(), algorithm).expect("policy")
    })
    .collect()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Nanoseconds per operation on the memory store.
fn memory_ns(store: &MemoryStore, policy: &Policy, charge: bool) -> f64 {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let started = Instant::now();
    if charge {
        memory_charges(store, policy, &keys);
    } else {
        memory_checks(store, policy, &keys);
    }
    started.elapsed().as_nanos() as f64 / MEMORY_OPS as f64
}

// The two loops are functions of their own, never inlined, so that `callgrind_annotate
// --inclusive=yes` gives each one's instructions (see `memory` below).
#[inline(never)]
fn memory_checks(store: &MemoryStore, policy: &Policy, keys: &[String]) {
    for i in 0..MEMORY_OPS {
        let key = &keys[(i % KEYS) as usize];
        std::hint::black_box(store.check(policy, key, 1).expect("check"));
    }
}

#[inline(never)]
fn memory_charges(store: &MemoryStore, policy: &Policy, keys: &[String]) {
    for i in 0..MEMORY_OPS {
        let key = &keys[(i % KEYS) as usize];
        let charged = store.charge(&[Rule::new(policy, key, 1)]).expect("charge");
        std::hint::black_box(charged);
    }
}

/// Script microseconds Redis has spent so far, from `INFO commandstats`.
fn script_usec(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_fcall:"))
        .filter_map(|line| line.split(',').find_map(|field| field.strip_prefix("usec=")))
        .filter_map(|usec| usec.trim().parse::<u64>().ok())
        .sum()
}

/// Operations per second on Redis, and Redis's script microseconds per operation.
async fn redis_rate(
    store: &Arc<RedisStore>,
    redis: &RedisServer,
    policy: &Policy,
    charge: bool,
) -> (f64, f64) {
    let usec_before = script_usec(redis);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let store = store.clone();
        let policy = policy.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..REDIS_OPS / TASKS {
                let key = format!("user:{}", (task * 7_919 + i) % KEYS);
                if charge {
                    store
                        .charge(&[Rule::new(&policy, &key, 1)])
                        .await
                        .expect("charge");
                } else {
                    store.check(&policy, key.as_bytes(), 1).await.expect("check");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let seconds = started.elapsed().as_secs_f64();
    let usec = script_usec(redis) - usec_before;
    (REDIS_OPS as f64 / seconds, usec as f64 / REDIS_OPS as f64)
}

fn main() {
    // `memory [ALGORITHM]`: the memory store only, one algorithm if named (for callgrind, which
    // counts each loop's instructions where wall time moves with the machine's load).
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let memory_only = args.first().is_some_and(|a| a == "memory");
    let only = args.get(1).cloned();
    println!("memory store, ns per operation, {ROUNDS} alternating rounds, median");
    println!(
        "{:<16} {:>10} {:>10} {:>16}",
        "algorithm", "check", "charge", "charge / check"
    );
    let store = MemoryStore::new();
    for policy in policies() {
        if only.as_ref().is_some_and(|name| name != policy.name()) {
            continue;
        }
        let (mut checks, mut charges) = (vec![], vec![]);
        for _ in 0..ROUNDS {
            checks.push(memory_ns(&store, &policy, false));
            charges.push(memory_ns(&store, &policy, true));
        }
        let (check, charge) = (median(checks), median(charges));
        println!(
            "{:<16} {check:>10.1} {charge:>10.1} {:>16.3}",
            policy.name(),
            charge / check
        );
    }
    if memory_only {
        return;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let redis = RedisServer::start();
        let store = Arc::new(
            RedisStore::builder(Target::parse(&redis.url()).expect("url"))
                .deny_cache(false)
                .timeout(Duration::from_secs(5))
                .connect()
                .await
                .expect("connect"),
        );
        println!();
        println!(
            "redis, {TASKS} tasks, ops/s and Redis script µs per op, {ROUNDS} alternating rounds, median"
        );
        println!(
            "{:<16} {:>12} {:>12} {:>16} {:>10} {:>10} {:>16}",
            "algorithm", "check/s", "charge/s", "charge / check", "check µs", "charge µs", "µs charge/check"
        );
        for policy in policies() {
            let (mut checks, mut charges, mut check_us, mut charge_us) = (vec![], vec![], vec![], vec![]);
            for _ in 0..ROUNDS {
                let (rate, usec) = redis_rate(&store, &redis, &policy, false).await;
                checks.push(rate);
                check_us.push(usec);
                let (rate, usec) = redis_rate(&store, &redis, &policy, true).await;
                charges.push(rate);
                charge_us.push(usec);
            }
            let (check, charge) = (median(checks), median(charges));
            let (check_us, charge_us) = (median(check_us), median(charge_us));
            println!(
                "{:<16} {check:>12.0} {charge:>12.0} {:>16.3} {check_us:>10.1} {charge_us:>10.1} {:>16.3}",
                policy.name(),
                charge / check,
                charge_us / check_us
            );
        }
    });
}
