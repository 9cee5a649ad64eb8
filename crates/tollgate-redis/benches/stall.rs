//! Degraded answers against the time Redis is stalled: Redis pauses (`CLIENT PAUSE ... ALL`) for
//! 45 to 80 ms once a second, while checks arrive at a steady rate, and we count the share of
//! answers a failure mode had to give (degraded) next to the share of time Redis was stalled.
//! The circuit breaker should keep the first within about twice the second.
//!
//! Scenarios, each for [`SECONDS`] seconds on loopback against servers this bench starts:
//!
//! First standalone Redis with no pauses: the noise floor (timeouts from a busy machine alone).
//! Then, at each `hz`:
//!
//! 1. standalone Redis, the store's defaults (50 ms deadline, first probe 10 ms after a failure,
//!    then doubling waits up to 500 ms);
//! 2. the same with the breaker of old (open for 500 ms after every failure), for comparison;
//! 3. a 3-master cluster, every master paused at once;
//! 4. the same cluster with only one master paused: the other masters' answers must not suffer,
//!    so the comparison is with the stalled share of the checks that go to the paused master.
//!
//! The stalled share is measured, not assumed: right after each pause a PING on another
//! connection measures how long clients were kept waiting. Every scenario runs at `hz 100` (a
//! pause ends within 10 ms of its time) and at Redis's default `hz 10` (a pause is only seen to
//! be over at the next tick, so a 45 ms pause can stall for up to 100 ms).
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

const SECONDS: u64 = 20;
const TICK: Duration = Duration::from_millis(1);
const KEYS: u64 = 1_000;
/// The pauses, in ms, one a second, in this order over and over: 45 to 80 ms.
const PAUSES_MS: [u64; 8] = [45, 62, 80, 51, 70, 58, 75, 66];

#[derive(Default)]
struct Counts {
    checks: AtomicU64,
    degraded: AtomicU64,
    /// Degraded because the call timed out (the rest were refused by an open breaker).
    timed_out: AtomicU64,
    /// Checks whose key lives on a paused node.
    on_paused: AtomicU64,
}

struct Row {
    scenario: &'static str,
    /// The share of time the pauses asked for.
    asked: f64,
    /// The share of time Redis did not answer, as measured.
    stalled_time: f64,
    stalled_checks: f64,
    degraded: f64,
    /// The share of checks that timed out.
    timed_out: f64,
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

/// Per node to pause: a connection that sends the pause and one that measures it. Sets the
/// node's `hz`: at 100 a pause ends within 10 ms of its time; at Redis's default of 10 a pause is
/// only noticed to be over at the next tick, so 45 ms can stall for up to 100.
async fn pause(urls: &[String], hz: u32) -> Vec<(Conn, Conn)> {
    let mut connections = vec![];
    for url in urls {
        let client = redis::Client::open(url.as_str()).expect("url");
        let mut pauser = client.get_multiplexed_async_connection().await.expect("connect");
        let watcher = client.get_multiplexed_async_connection().await.expect("connect");
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("hz")
            .arg(hz)
            .query_async(&mut pauser)
            .await
            .expect("config set hz");
        connections.push((pauser, watcher));
    }
    connections
}

type Conn = redis::aio::MultiplexedConnection;

/// Runs checks for [`SECONDS`] while `paused` (connections to the nodes to pause) stall once a
/// second; `on_paused(key)` says whether a key lives on a paused node.
async fn run(
    scenario: &'static str,
    store: RedisStore,
    mut paused: Vec<(Conn, Conn)>,
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
        let (mut asked_ms, mut stalled_us) = (0, 0);
        for second in 0..SECONDS {
            // Half a second into each second, so the first pause does not meet the warm-up.
            tokio::time::sleep_until((started + Duration::from_millis(second * 1000 + 500)).into()).await;
            let ms = PAUSES_MS[(second % PAUSES_MS.len() as u64) as usize];
            let paused_at = Instant::now();
            for (pauser, _) in &mut paused {
                let _: Result<(), _> = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(ms)
                    .arg("ALL")
                    .query_async(pauser)
                    .await;
            }
            // The stall as clients see it: until a PING sent at once is answered.
            for (_, watcher) in &mut paused {
                let _: Result<String, _> = redis::cmd("PING").query_async(watcher).await;
            }
            if !paused.is_empty() {
                asked_ms += ms;
                stalled_us += paused_at.elapsed().as_micros() as u64;
            }
        }
        (asked_ms, stalled_us)
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
                if v.store_error().and_then(|e| e.class()) == Some("timeout") {
                    counts.timed_out.fetch_add(1, Ordering::Relaxed);
                }
            }
            if on_paused(key) {
                counts.on_paused.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("check task");
    }
    let elapsed_us = started.elapsed().as_micros() as f64;
    let (asked_ms, stalled_us) = pauser.await.expect("pauser");
    let checks = counts.checks.load(Ordering::Relaxed);
    let stalled_time = stalled_us as f64 / elapsed_us;
    let key_share = counts.on_paused.load(Ordering::Relaxed) as f64 / checks as f64;
    Row {
        scenario,
        asked: asked_ms as f64 * 1000.0 / elapsed_us,
        stalled_time,
        stalled_checks: stalled_time * key_share,
        degraded: counts.degraded.load(Ordering::Relaxed) as f64 / checks as f64,
        timed_out: counts.timed_out.load(Ordering::Relaxed) as f64 / checks as f64,
        checks,
    }
}

/// A scenario's name with the `hz` it ran at, leaked once: the table needs `&'static str`.
fn name(hz: u32, scenario: &str) -> &'static str {
    Box::leak(format!("{scenario}, hz {hz}").into_boxed_str())
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
    let cluster = RedisCluster::start();
    let standalone = Target::Standalone(server.url());
    let clustered = Target::Cluster(cluster.urls());
    let quiet = store(standalone.clone(), Duration::from_millis(10)).await;
    rows.push(
        run(
            "standalone, no pauses (noise floor)",
            quiet,
            vec![],
            everywhere.clone(),
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
    let on_paused: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(move |key| owner[key as usize]);

    for hz in [100, 10] {
        let s = store(standalone.clone(), Duration::from_millis(10)).await;
        rows.push(
            run(
                name(hz, "standalone"),
                s,
                pause(&[server.url()], hz).await,
                everywhere.clone(),
            )
            .await,
        );
        let s = store(standalone.clone(), Duration::from_millis(500)).await;
        let paused = pause(&[server.url()], hz).await;
        rows.push(
            run(
                name(hz, "standalone, breaker open 500 ms per failure (before)"),
                s,
                paused,
                everywhere.clone(),
            )
            .await,
        );
        let s = store(clustered.clone(), Duration::from_millis(10)).await;
        let paused = pause(&cluster.urls(), hz).await;
        rows.push(
            run(
                name(hz, "cluster, every master paused"),
                s,
                paused,
                everywhere.clone(),
            )
            .await,
        );
        let s = store(clustered.clone(), Duration::from_millis(10)).await;
        let paused = pause(&cluster.urls()[..1], hz).await;
        rows.push(
            run(
                name(hz, "cluster, one master paused"),
                s,
                paused,
                on_paused.clone(),
            )
            .await,
        );
    }

    println!(
        "| scenario | checks | paused (asked) | stalled (measured) | checks meeting a stall | degraded answers (timed out) | degraded / stalled |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let ratio = match row.stalled_checks > 0.0 {
            true => format!("{:.2}x", row.degraded / row.stalled_checks),
            false => "-".to_string(),
        };
        println!(
            "| {} | {} | {:.1}% | {:.1}% | {:.1}% | {:.2}% ({:.2}%) | {ratio} |",
            row.scenario,
            row.checks,
            row.asked * 100.0,
            row.stalled_time * 100.0,
            row.stalled_checks * 100.0,
            row.degraded * 100.0,
            row.timed_out * 100.0,
        );
    }
}
