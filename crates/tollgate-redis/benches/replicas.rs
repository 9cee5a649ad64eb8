//! What `replicas: 1` costs: decisions per second and latency of `RedisStore::check` with a policy
//! that waits for one replica's acknowledgement of each admission (`WAIT 1` behind the decision)
//! next to the same policy that waits for none, in the same run, on one `redis-server` master
//! with one replica, both on loopback and started by this bench.
//!
//! For each concurrency (1 task, 32 tasks on one store; deny cache off, batching on as by
//! default), rounds alternate between the two policies (the order flipped every round), each
//! round a fixed number of checks of cost 1 on 10 000 keys, every one admitted; the median round
//! of each is printed, with its p50 and p99 latency per check. It also prints the Redis time per
//! decision (`usec` of `cmdstat_fcall`, `cmdstat_evalsha` and `cmdstat_wait` in `INFO
//! commandstats` on the master, over the decisions), which a loaded machine disturbs far less
//! than wall time.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench replicas`
//! (needs `redis-server`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::{Algorithm, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

const KEYS: u64 = 10_000;
const ROUNDS: usize = 5;
const CHECKS: u64 = 8_000;

fn policy(name: &str, replicas: u32) -> Policy {
    let rate = Rate::per_second(1_000_000).expect("rate");
    Policy::new(name, Algorithm::gcra(rate, 1_000_000).expect("algorithm"))
        .expect("policy")
        .with_replicas(replicas)
        .expect("replicas")
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Microseconds Redis spent so far in the commands a decision sends.
fn decision_usec(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|line| {
            ["cmdstat_evalsha:", "cmdstat_fcall:", "cmdstat_wait:"]
                .iter()
                .any(|name| line.starts_with(name))
        })
        .filter_map(|line| line.split(',').find_map(|field| field.strip_prefix("usec=")))
        .filter_map(|usec| usec.trim().parse::<u64>().ok())
        .sum()
}

struct Round {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
    redis_us: f64,
}

async fn round(store: &Arc<RedisStore>, master: &RedisServer, policy: &Policy, tasks: u64) -> Round {
    let usec_before = decision_usec(master);
    let started = Instant::now();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (store, policy) = (store.clone(), policy.clone());
        handles.push(tokio::spawn(async move {
            let mut latency = Histogram::<u64>::new(3).expect("histogram");
            for i in 0..CHECKS / tasks {
                let key = format!("user:{}", (task * 7_919 + i) % KEYS);
                let asked = Instant::now();
                let decision = store.check(&policy, key.as_bytes(), 1).await.expect("check");
                assert!(decision.allowed);
                latency
                    .record(asked.elapsed().as_micros() as u64)
                    .expect("record");
            }
            latency
        }));
    }
    let mut latency = Histogram::<u64>::new(3).expect("histogram");
    for handle in handles {
        latency.add(handle.await.expect("task")).expect("add");
    }
    let seconds = started.elapsed().as_secs_f64();
    let usec = decision_usec(master) - usec_before;
    Round {
        per_second: CHECKS as f64 / seconds,
        p50_us: latency.value_at_quantile(0.5) as f64,
        p99_us: latency.value_at_quantile(0.99) as f64,
        redis_us: usec as f64 / CHECKS as f64,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let master = RedisServer::start();
        let port = master.port().to_string();
        let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
        let linked = Instant::now();
        while !replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(linked.elapsed() < Duration::from_secs(10), "the replica never linked");
            std::thread::sleep(Duration::from_millis(20));
        }
        let store = Arc::new(
            RedisStore::builder(Target::Standalone(master.url()))
                .deny_cache(false)
                .timeout(Duration::from_secs(1))
                .connect()
                .await
                .expect("connect"),
        );
        let policies = [policy("none", 0), policy("one", 1)];
        println!(
            "one master with one replica on loopback, gcra always admitting, {CHECKS} checks a round, {ROUNDS} alternating rounds, median"
        );
        println!(
            "{:<6} {:<12} {:>10} {:>9} {:>9} {:>11}",
            "tasks", "replicas", "checks/s", "p50 µs", "p99 µs", "Redis µs"
        );
        for tasks in [1, 32] {
            // Warm the connections, the library and the keys of both policies.
            for policy in &policies {
                round(&store, &master, policy, tasks).await;
            }
            let mut rounds: [Vec<Round>; 2] = [vec![], vec![]];
            for r in 0..ROUNDS {
                let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
                for i in order {
                    rounds[i].push(round(&store, &master, &policies[i], tasks).await);
                }
            }
            let mut medians = vec![];
            for (policy, rounds) in policies.iter().zip(&rounds) {
                let take = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
                let row = (
                    take(|r| r.per_second),
                    take(|r| r.p50_us),
                    take(|r| r.p99_us),
                    take(|r| r.redis_us),
                );
                println!(
                    "{tasks:<6} {:<12} {:>10.0} {:>9.0} {:>9.0} {:>11.1}",
                    policy.replicas(),
                    row.0,
                    row.1,
                    row.2,
                    row.3
                );
                medians.push(row);
            }
            let (none, one) = (medians[0], medians[1]);
            println!(
                "{tasks:<6} {:<12} {:>10.2} {:>9.2} {:>9.2} {:>11.2}",
                "1 / 0",
                one.0 / none.0,
                one.1 / none.1,
                one.2 / none.2,
                one.3 / none.3
            );
        }
    });
}
