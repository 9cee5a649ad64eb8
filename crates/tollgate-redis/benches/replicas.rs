//! What `replicas: 1` costs: decisions per second and latency of `RedisStore::check` with a policy
//! that waits for one replica's acknowledgement of each admission (`WAIT 1` behind the decision,
//! for at most the policy's `replica_wait`, by default 250 ms) next to the same policy that waits
//! for none, in the same run, with the store's default deadline (50 ms). Both setups are on
//! loopback and started by this bench:
//!
//! 1. one `redis-server` master with one replica: for each concurrency (1, 16 and 32 tasks on
//!    one store; deny cache off, batching on as by default), rounds alternate between the two
//!    policies (the order flipped every round), each round a fixed number of checks of cost 1 on
//!    10 000 keys of a GCRA that admits every one; the median round of each is printed, with its
//!    p50, p99 and p99.9 latency per check, the checks the store failed (an admission the replica
//!    did not acknowledge in time, a call past its deadline), and the Redis time per decision
//!    (`usec` of `cmdstat_fcall`, `cmdstat_evalsha` and `cmdstat_wait` in `INFO commandstats` on
//!    the master, over the decisions), which a loaded machine disturbs far less than wall time;
//! 2. a cluster of three masters with a replica each, 16 tasks, a `fail_closed` sliding log of 50
//!    per 300 s on 120 keys, each key checked 54 times (so 4 denials each): for each policy,
//!    alternating rounds on fresh keys, the admissions per key (50 each when nothing failed), the
//!    checks the store failed, decisions per second and the latency quantiles up to the slowest.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench replicas`
//! (needs `redis-server` and `redis-cli`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::{Algorithm, FailureMode, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer};

const KEYS: u64 = 10_000;
const ROUNDS: usize = 5;
const CHECKS: u64 = 8_000;

/// The cluster part: the limit of each key, its keys, its tasks, the checks of each key, rounds.
const LOG_LIMIT: u64 = 50;
const LOG_KEYS: u64 = 120;
const LOG_TASKS: u64 = 16;
const LOG_CHECKS: u64 = LOG_LIMIT + 4;
const LOG_ROUNDS: usize = 3;

fn policy(name: &str, replicas: u32) -> Policy {
    let rate = Rate::per_second(1_000_000).expect("rate");
    Policy::new(name, Algorithm::gcra(rate, 1_000_000).expect("algorithm"))
        .expect("policy")
        .with_replicas(replicas)
        .expect("replicas")
}

fn log_policy(name: &str, replicas: u32) -> Policy {
    Policy::new(
        name,
        Algorithm::sliding_log(LOG_LIMIT, Duration::from_secs(300)).expect("algorithm"),
    )
    .expect("policy")
    .with_failure_mode(FailureMode::FailClosed)
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

/// What the tasks of one round saw: latency of every check, the checks each key admitted, and
/// the checks the store failed, by class.
struct Seen {
    latency: Histogram<u64>,
    admitted: Vec<u64>,
    failed: BTreeMap<String, u64>,
}

impl Seen {
    fn new(keys: u64) -> Self {
        Seen {
            latency: Histogram::new(3).expect("histogram"),
            admitted: vec![0; keys as usize],
            failed: BTreeMap::new(),
        }
    }

    fn add(&mut self, other: Seen) {
        self.latency.add(other.latency).expect("add");
        for (total, n) in self.admitted.iter_mut().zip(other.admitted) {
            *total += n;
        }
        for (class, n) in other.failed {
            *self.failed.entry(class).or_default() += n;
        }
    }

    fn failures(&self) -> u64 {
        self.failed.values().sum()
    }
}

/// `checks` checks of `policy` from `tasks` tasks, each taking the next check from a shared
/// count: check `i` is of key `prefix-(i % keys)`. Returns what they saw and how long it took.
async fn run(
    store: &Arc<RedisStore>,
    policy: &Policy,
    tasks: u64,
    checks: u64,
    keys: u64,
    prefix: &str,
) -> (Seen, Duration) {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (store, policy, next, prefix) = (store.clone(), policy.clone(), next.clone(), prefix.to_owned());
        handles.push(tokio::spawn(async move {
            let mut seen = Seen::new(keys);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= checks {
                    return seen;
                }
                let key = i % keys;
                let asked = Instant::now();
                let answer = store
                    .check(&policy, format!("{prefix}-{key}").as_bytes(), 1)
                    .await;
                seen.latency
                    .record(asked.elapsed().as_micros() as u64)
                    .expect("record");
                match answer {
                    Ok(decision) => seen.admitted[key as usize] += u64::from(decision.allowed),
                    Err(err) => {
                        *seen
                            .failed
                            .entry(err.class().unwrap_or("input").to_owned())
                            .or_default() += 1
                    }
                }
            }
        }));
    }
    let mut seen = Seen::new(keys);
    for handle in handles {
        seen.add(handle.await.expect("task"));
    }
    (seen, started.elapsed())
}

struct Round {
    per_second: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    failed: f64,
    redis_us: f64,
}

async fn round(
    store: &Arc<RedisStore>,
    master: &RedisServer,
    policy: &Policy,
    tasks: u64,
    r: usize,
) -> Round {
    let usec_before = decision_usec(master);
    // The GCRA admits every check: the keys may repeat from round to round.
    let (seen, took) = run(store, policy, tasks, CHECKS, KEYS, &format!("user{}", r % 2)).await;
    let usec = decision_usec(master) - usec_before;
    Round {
        per_second: CHECKS as f64 / took.as_secs_f64(),
        p50_us: seen.latency.value_at_quantile(0.5) as f64,
        p99_us: seen.latency.value_at_quantile(0.99) as f64,
        p999_us: seen.latency.value_at_quantile(0.999) as f64,
        failed: seen.failures() as f64,
        redis_us: usec as f64 / CHECKS as f64,
    }
}

async fn master_and_replica() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let linked = Instant::now();
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            linked.elapsed() < Duration::from_secs(10),
            "the replica never linked"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The store's default deadline (50 ms).
    let store = Arc::new(
        RedisStore::builder(Target::Standalone(master.url()))
            .deny_cache(false)
            .connect()
            .await
            .expect("connect"),
    );
    let policies = [policy("none", 0), policy("one", 1)];
    println!(
        "one master with one replica on loopback, gcra always admitting, {CHECKS} checks a round, {ROUNDS} alternating rounds, median"
    );
    println!(
        "{:<6} {:<12} {:>10} {:>9} {:>9} {:>9} {:>8} {:>11}",
        "tasks", "replicas", "checks/s", "p50 µs", "p99 µs", "p99.9 µs", "failed", "Redis µs"
    );
    for tasks in [1, 16, 32] {
        // Warm the connections, the library and the keys of both policies.
        for policy in &policies {
            round(&store, &master, policy, tasks, 0).await;
        }
        let mut rounds: [Vec<Round>; 2] = [vec![], vec![]];
        for r in 0..ROUNDS {
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                rounds[i].push(round(&store, &master, &policies[i], tasks, r).await);
            }
        }
        let mut medians = vec![];
        for (policy, rounds) in policies.iter().zip(&rounds) {
            let take = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
            let row = [
                take(|r| r.per_second),
                take(|r| r.p50_us),
                take(|r| r.p99_us),
                take(|r| r.p999_us),
                take(|r| r.failed),
                take(|r| r.redis_us),
            ];
            println!(
                "{tasks:<6} {:<12} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>8.0} {:>11.1}",
                policy.replicas(),
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                row[5]
            );
            medians.push(row);
        }
        let (none, one) = (medians[0], medians[1]);
        println!(
            "{tasks:<6} {:<12} {:>10.2} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>11.2}",
            "1 / 0",
            one[0] / none[0],
            one[1] / none[1],
            one[2] / none[2],
            one[3] / none[3],
            "",
            one[5] / none[5]
        );
    }
}

async fn cluster_with_replicas() {
    let cluster = RedisCluster::start_with_replicas();
    // The store's default deadline (50 ms).
    let store = Arc::new(
        RedisStore::builder(Target::parse(&cluster.store_url()).expect("url"))
            .deny_cache(false)
            .connect()
            .await
            .expect("connect"),
    );
    let policies = [log_policy("log-none", 0), log_policy("log-one", 1)];
    println!();
    println!(
        "three masters with a replica each on loopback, {LOG_TASKS} tasks, fail_closed sliding log of {LOG_LIMIT} per 300 s, \
         {LOG_KEYS} keys checked {LOG_CHECKS} times each, {LOG_ROUNDS} alternating rounds on fresh keys"
    );
    println!(
        "{:<9} {:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>14} {:>8}",
        "replicas", "round", "checks/s", "p50 µs", "p99 µs", "p99.9 µs", "max µs", "admitted/key", "failed"
    );
    // Warm the connections and the library.
    for policy in &policies {
        run(&store, policy, LOG_TASKS, LOG_KEYS, LOG_KEYS, "warm").await;
    }
    let mut rates: [Vec<f64>; 2] = [vec![], vec![]];
    let mut p99s: [Vec<f64>; 2] = [vec![], vec![]];
    for r in 0..LOG_ROUNDS {
        let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let checks = LOG_KEYS * LOG_CHECKS;
            let (seen, took) = run(
                &store,
                &policies[i],
                LOG_TASKS,
                checks,
                LOG_KEYS,
                &format!("r{r}"),
            )
            .await;
            let per_second = checks as f64 / took.as_secs_f64();
            let (low, high) = (
                seen.admitted.iter().min().copied().unwrap_or(0),
                seen.admitted.iter().max().copied().unwrap_or(0),
            );
            let q = |q: f64| seen.latency.value_at_quantile(q);
            println!(
                "{:<9} {:<6} {:>10.0} {:>9} {:>9} {:>9} {:>9} {:>14} {:>8}  {:?}",
                policies[i].replicas(),
                r,
                per_second,
                q(0.5),
                q(0.99),
                q(0.999),
                seen.latency.max(),
                format!("{low} to {high}"),
                seen.failures(),
                seen.failed
            );
            rates[i].push(per_second);
            p99s[i].push(q(0.99) as f64);
        }
    }
    println!(
        "1 / 0: checks/s {:.2}, p99 {:.2} (medians of the rounds)",
        median(rates[1].clone()) / median(rates[0].clone()),
        median(p99s[1].clone()) / median(p99s[0].clone())
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        master_and_replica().await;
        cluster_with_replicas().await;
    });
}
