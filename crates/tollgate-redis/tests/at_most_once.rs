//! A decision is applied at most once, even when Redis answers around the deadline: concurrent
//! checks run while Redis is paused (`CLIENT PAUSE`) for less and for more than the store's
//! deadline, on standalone Redis and on a 3-master cluster. Afterwards Redis's state must match
//! what the callers were told:
//!
//! - a budget that is never exhausted counts every call that ran: at least the calls admitted,
//!   at most the admitted ones plus those that timed out (which may or may not have run). A call
//!   sent twice would show as one count too many;
//! - a tight budget never admits more than its limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Algorithm, Anchor, Engine, FailureMode, Outcome, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

/// The store's deadline, shorter than most pauses: this test is about calls that end at it, so
/// it sets its own rather than the test kit's.
const DEADLINE: Duration = Duration::from_millis(40);
const TASKS: usize = 8;
/// The tight budget, on one key all tasks share.
const TIGHT_LIMIT: u64 = 40;
const HOT_KEY: &str = "hot";
const KEYS: [&str; 4] = ["user-a", "user-b", "user-c", "user-d"];

#[derive(Default)]
struct Tally {
    admitted: AtomicU64,
    denied: AtomicU64,
    timed_out: AtomicU64,
    /// Other store failures (none expected): counted on the "may have run" side like timeouts.
    failed: AtomicU64,
}

impl Tally {
    fn get(&self) -> (u64, u64, u64, u64) {
        (
            self.admitted.load(Ordering::Relaxed),
            self.denied.load(Ordering::Relaxed),
            self.timed_out.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

fn counter(name: &str, limit: u64, mode: FailureMode) -> Policy {
    Policy::new(
        name,
        Algorithm::fixed_window(limit, Duration::from_secs(3600), Anchor::FirstHit).unwrap(),
    )
    .unwrap()
    .with_failure_mode(mode)
}

/// Pauses every node `rounds` times, alternately shorter and longer than the deadline.
async fn pause_repeatedly(nodes: Vec<String>, rounds: u32) {
    let mut connections = vec![];
    for url in &nodes {
        let client = redis::Client::open(url.as_str()).unwrap();
        connections.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    for round in 0..rounds {
        // 15 ms and 25 ms stay under the 40 ms deadline; 60 ms and 90 ms pass it.
        let pause_ms = [15u64, 60, 25, 90][round as usize % 4];
        for conn in &mut connections {
            let _: () = redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(pause_ms)
                .arg("ALL")
                .query_async(conn)
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(pause_ms + 40)).await;
    }
}

async fn load(engine: Arc<Engine<RedisStore>>, policies: Vec<(Policy, Arc<Tally>)>, stop: Arc<AtomicBool>) {
    let mut tasks = vec![];
    for t in 0..TASKS {
        let (engine, policies, stop) = (engine.clone(), policies.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let key = KEYS[t % KEYS.len()];
            // Bounded: the pauser stops this long before the cap.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                for (policy, tally) in &policies {
                    let key = if policy.max_cost() == TIGHT_LIMIT {
                        HOT_KEY
                    } else {
                        key
                    };
                    let v = engine
                        .check(policy, key.as_bytes(), 1)
                        .await
                        .expect("valid input");
                    let counter = match (v.outcome(), v.store_error().and_then(|e| e.class())) {
                        (Outcome::Allowed, None) => &tally.admitted,
                        (Outcome::Denied, None) => &tally.denied,
                        (_, Some("timeout")) => &tally.timed_out,
                        _ => &tally.failed,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("load task");
    }
}

/// Calls spent on `keys` according to Redis, read with a patient store.
async fn spent(reader: &RedisStore, policy: &Policy, limit: u64, keys: &[&str]) -> u64 {
    let mut total = 0;
    for key in keys {
        // A peek reports what would remain after one more call: one less than now, when allowed.
        let d = reader.peek(policy, key.as_bytes(), 1).await.expect("peek");
        total += limit - d.remaining - u64::from(d.allowed);
    }
    total
}

async fn assert_at_most_once(target: Target, nodes: Vec<String>) {
    // The breaker off: every call goes to Redis and meets the pauses, so many end right at the
    // deadline. The deny cache off: every decision is Redis's.
    let store = RedisStore::builder(target.clone())
        .timeout(DEADLINE)
        .probe_interval(Duration::ZERO)
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    let engine = Arc::new(Engine::new(store));
    // Never exhausted (at most 20 000 checks a key), under both failure modes that involve no
    // local limiter; and one tight budget.
    let open = counter("once-open", 1_000_000, FailureMode::FailOpen);
    let closed = counter("once-closed", 1_000_000, FailureMode::FailClosed);
    let tight = counter("once-tight", TIGHT_LIMIT, FailureMode::FailClosed);
    let tallies: Vec<(Policy, Arc<Tally>)> = [&open, &closed, &tight]
        .into_iter()
        .map(|p| (p.clone(), Arc::new(Tally::default())))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(engine.clone(), tallies.clone(), stop.clone()));
    pause_repeatedly(nodes, 16).await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    // Every call sent during a pause has run by now: the last pause ended 40 ms ago, and the
    // reader queues behind anything still waiting.
    let reader = RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .deny_cache(false)
        .connect()
        .await
        .unwrap();

    let mut timeouts = 0;
    for (policy, tally) in &tallies[..2] {
        let (admitted, denied, timed_out, failed) = tally.get();
        let state = spent(&reader, policy, 1_000_000, &KEYS).await;
        let context = format!(
            "{}: admitted {admitted}, denied {denied}, timed out {timed_out}, failed {failed}, redis counts {state}",
            policy.name()
        );
        assert_eq!(denied, 0, "{context}");
        assert!(admitted > 0, "{context}");
        assert!(state >= admitted, "an admitted call was lost: {context}");
        assert!(
            state <= admitted + timed_out + failed,
            "a call ran twice: {context}"
        );
        timeouts += timed_out;
    }
    assert!(timeouts > 0, "the pauses must reach past the deadline");

    let (policy, tally) = &tallies[2];
    let (admitted, denied, timed_out, failed) = tally.get();
    let state = spent(&reader, policy, TIGHT_LIMIT, &[HOT_KEY]).await;
    let context = format!(
        "tight: admitted {admitted}, denied {denied}, timed out {timed_out}, failed {failed}, redis counts {state}"
    );
    assert!(admitted <= TIGHT_LIMIT, "{context}");
    assert!(denied > 0, "the tight budget must run out: {context}");
    assert!(state >= admitted && state <= TIGHT_LIMIT, "{context}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_applies_each_decision_at_most_once_around_the_deadline() {
    let server = RedisServer::start();
    assert_at_most_once(Target::Standalone(server.url()), vec![server.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_applies_each_decision_at_most_once_around_the_deadline() {
    let cluster = RedisCluster::start();
    assert_at_most_once(Target::Cluster(cluster.urls()), cluster.urls()).await;
}
