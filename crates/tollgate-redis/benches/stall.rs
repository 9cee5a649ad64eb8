//! Degraded answers against the time Redis is stalled: Redis pauses (`CLIENT PAUSE ... ALL`) for
//! 45 to 80 ms once a second, while checks arrive at a steady rate, and we count the share of
//! answers a failure mode had to give (degraded) next to the share of time Redis was stalled.
//! The circuit breaker should keep the first within about twice the second.
//!
//! Scenarios, each for [`SECONDS`] seconds on loopback against servers this bench starts:
//!
//! 0. standalone Redis, no pauses: the noise floor (timeouts from a busy machine alone);
//! 1. standalone Redis, the store's defaults (50 ms deadline, first probe 10 ms after a failure,
//!    then doubling waits up to 500 ms);
//! 2. the same with the breaker of old (open for 500 ms after every failure), for comparison;
//! 3. a 3-master cluster, every master paused at once;
//! 4. the same cluster with only one master paused: the other masters' answers must not suffer,
//!    so the comparison is with the stalled share of the checks that go to the paused master.
//!
//! Checks arrive open-loop, one every [`TICK`] (a task per check, whatever the earlier ones are
//! doing), each on one of 1 000 keys, under a fail-open policy that never denies; an answer is
//! degraded when the store failed (timeout, or refused by an open breaker). Every loop is bounded
//! by a count. Run with `cargo bench -p tollgate-redis --bench stall` (needs `redis-server` and
//! `redis-cli`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Engine, FailureMode, Outcome, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer};

const SECONDS: u64 = 30;
const TICK: Duration = Duration::from_millis(1);
const KEYS: u64 = 1_000;
/// The pauses, in ms, one a second, in this order over and over: 45 to 80 ms.
const PAUSES_MS: [u64; 8] = [45, 62, 80, 51, 70, 58, 75, 66];

#[derive(Default)]
struct Counts {
    checks: AtomicU64,
    degraded: AtomicU64,
    /// Checks whose key lives on a paused node.
    on_paused: AtomicU64,
}

struct Row {
    scenario: &'static str,
    stalled_time: f64,
    stalled_checks: f64,
    degraded: f64,
    checks: u64,
}

fn policy() -> Policy {
    Policy::new(
        "stall",
        Algorithm::gcra(Rate::per_second(1_000_000).expect("rate"), 1_000_000).expect("gcra"),
    )
    .expect("policy")
    .with_failure_mode(FailureMode::FailOpen)
}

async fn pause(urls: &[String]) -> Vec<redis::aio::MultiplexedConnection> {
    let mut connections = vec![];
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("url");
        connections.push(client.get_multiplexed_async_connection().await.expect("connect"));
    }
    connections
}

/// Runs checks for [`SECONDS`] while `paused` (connections to the nodes to pause) stall once a
/// second; `on_paused(key)` says whether a key lives on a paused node.
async fn run(
    scenario: &'static str,
    store: RedisStore,
    mut paused: Vec<redis::aio::MultiplexedConnection>,
    on_paused: Arc<dyn Fn(u64) -> bool + Send + Sync>,
) -> Row {
    let engine = Arc::new(Engine::new(store));
    let policy = Arc::new(policy());
    let counts = Arc::new(Counts::default());
    // Warm up: connections, scripts, slot map.
    for key in 0..KEYS {
        let _ = engine.check(&policy, format!("k{key}").as_bytes(), 1).await;
    }
    let started = Instant::now();
    let pauser = tokio::spawn(async move {
        let mut stalled_ms = 0;
        for second in 0..SECONDS {
            // Half a second into each second, so the first pause does not meet the warm-up.
            tokio::time::sleep_until((started + Duration::from_millis(second * 1000 + 500)).into()).await;
            let ms = PAUSES_MS[(second % PAUSES_MS.len() as u64) as usize];
            for conn in &mut paused {
                let _: Result<(), _> = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(ms)
                    .arg("ALL")
                    .query_async(conn)
                    .await;
            }
            if !paused.is_empty() {
                stalled_ms += ms;
            }
        }
        stalled_ms
    });
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let ticks = SECONDS * 1000 * 1000 / TICK.as_micros() as u64;
    let mut tasks = Vec::with_capacity(ticks as usize);
    for i in 0..ticks {
        ticker.tick().await;
        let (engine, policy, counts, on_paused) =
            (engine.clone(), policy.clone(), counts.clone(), on_paused.clone());
        tasks.push(tokio::spawn(async move {
            let key = (i * 7919) % KEYS;
            let v = engine
                .check(&policy, format!("k{key}").as_bytes(), 1)
                .await
                .expect("valid input");
            counts.checks.fetch_add(1, Ordering::Relaxed);
            if v.outcome() == Outcome::Degraded {
                counts.degraded.fetch_add(1, Ordering::Relaxed);
            }
            if on_paused(key) {
                counts.on_paused.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("check task");
    }
    let elapsed_ms = started.elapsed().as_millis() as f64;
    let stalled_ms = pauser.await.expect("pauser") as f64;
    let checks = counts.checks.load(Ordering::Relaxed);
    let stalled_time = stalled_ms / elapsed_ms;
    let key_share = counts.on_paused.load(Ordering::Relaxed) as f64 / checks as f64;
    Row {
        scenario,
        stalled_time,
        stalled_checks: stalled_time * key_share,
        degraded: counts.degraded.load(Ordering::Relaxed) as f64 / checks as f64,
        checks,
    }
}

fn store_key(policy: &Policy, key: u64) -> String {
    let (keys, _) = RedisStore::script_call("tollgate:", policy, format!("k{key}").as_bytes(), 1);
    String::from_utf8(keys[0].clone()).expect("utf-8")
}

async fn store(target: Target, first_probe_after: Duration) -> RedisStore {
    RedisStore::builder(target)
        .first_probe_after(first_probe_after)
        .deny_cache(false)
        .connect()
        .await
        .expect("connect")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut rows = vec![];
    let everywhere: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(|_| true);

    let server = RedisServer::start();
    let target = Target::Standalone(server.url());
    let quiet = store(target.clone(), Duration::from_millis(10)).await;
    rows.push(
        run(
            "standalone, no pauses (noise floor)",
            quiet,
            vec![],
            everywhere.clone(),
        )
        .await,
    );
    let defaults = store(target.clone(), Duration::from_millis(10)).await;
    rows.push(
        run(
            "standalone",
            defaults,
            pause(&[server.url()]).await,
            everywhere.clone(),
        )
        .await,
    );
    let old = store(target, Duration::from_millis(500)).await;
    rows.push(
        run(
            "standalone, breaker open 500 ms per failure (before)",
            old,
            pause(&[server.url()]).await,
            everywhere.clone(),
        )
        .await,
    );
    drop(server);

    let cluster = RedisCluster::start();
    let target = Target::Cluster(cluster.urls());
    let all = store(target.clone(), Duration::from_millis(10)).await;
    rows.push(
        run(
            "cluster, every master paused",
            all,
            pause(&cluster.urls()).await,
            everywhere,
        )
        .await,
    );
    let paused_port = cluster.ports()[0];
    let policy = policy();
    let owner: Vec<bool> = (0..KEYS)
        .map(|key| {
            let slot: u16 = cluster.nodes()[1]
                .cli(&["CLUSTER", "KEYSLOT", &store_key(&policy, key)])
                .parse()
                .expect("a slot");
            cluster.slot_owner(slot) == paused_port
        })
        .collect();
    let one = store(target, Duration::from_millis(10)).await;
    let on_paused: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(move |key| owner[key as usize]);
    rows.push(
        run(
            "cluster, one master paused",
            one,
            pause(&cluster.urls()[..1]).await,
            on_paused,
        )
        .await,
    );

    println!(
        "| scenario | checks | stalled time | checks meeting a stall | degraded answers | degraded / stalled |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for row in rows {
        let ratio = match row.stalled_checks > 0.0 {
            true => format!("{:.2}x", row.degraded / row.stalled_checks),
            false => "-".to_string(),
        };
        println!(
            "| {} | {} | {:.1}% | {:.1}% | {:.2}% | {ratio} |",
            row.scenario,
            row.checks,
            row.stalled_time * 100.0,
            row.stalled_checks * 100.0,
            row.degraded * 100.0,
        );
    }
}
