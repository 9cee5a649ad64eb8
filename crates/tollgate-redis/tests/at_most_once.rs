//! A decision is applied at most once, whatever happens to a call on its way. Concurrent checks
//! run while a fault strikes again and again, on standalone Redis and on a 3-master cluster:
//!
//! - Redis pauses (`CLIENT PAUSE`) for less and for more than the store's deadline, so calls end
//!   right at it;
//! - Redis drops the store's connections mid-call (`CLIENT KILL TYPE normal`), so calls that ran
//!   lose their answers (a client that retried them would run them twice);
//! - standalone Redis is killed (SIGKILL) and started again on its port. It keeps an append-only
//!   file written and synced before it answers (`appendfsync always`), so every answered call
//!   survives the crash and the counts below hold across it; without persistence they would
//!   restart from zero. (With the default `everysec`, Redis 7.0 writes the file before it
//!   answers too, but Valkey 9.1 may answer first: about one run in three lost up to a hundred
//!   answered calls to the kill, a loss of the server's and not of the store's.)
//!
//! Afterwards Redis's state must match what the callers were told:
//!
//! - a budget that is never exhausted (a fixed window) counts every call that ran: at least the
//!   calls admitted, at most the admitted ones plus those that failed (a timeout or a dropped
//!   connection: they may or may not have run). A call sent twice would show as one count too
//!   many;
//! - a tight budget (a sliding log) never admits more than its limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tollgate::{Algorithm, Anchor, Engine, FailureMode, Outcome, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

/// The class of store error of a call that met its deadline.
const TIMEOUT: &str = "timeout";
/// The class of store error of a call whose connection dropped or was refused.
const CONNECTION: &str = "connection";

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
    /// Other store failures (dropped connections, or none): counted on the "may have run" side
    /// like timeouts.
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
/// A connection of the test's own to each node, to command the faults.
async fn admin_connections(nodes: &[String]) -> Vec<MultiplexedConnection> {
    let mut connections = vec![];
    for url in nodes {
        let client = redis::Client::open(url.as_str()).unwrap();
        connections.push(client.get_multiplexed_async_connection().await.unwrap());
    }
    connections
}

/// Closes every client connection of the node but `admin` itself (`CLIENT KILL TYPE normal`
/// spares the connection that sends it), answers unsent included.
async fn drop_connections(mut admin: MultiplexedConnection) {
    let _: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query_async(&mut admin)
        .await
        .unwrap();
}

async fn pause_repeatedly(nodes: Vec<String>, rounds: u32) {
    let mut connections = admin_connections(&nodes).await;
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

/// Drops every connection of the store on every node `rounds` times, while calls are in flight
/// (`CLIENT KILL TYPE normal` spares only the connection that sends it).
async fn drop_connections_repeatedly(nodes: Vec<String>, rounds: u32) {
    let connections = admin_connections(&nodes).await;
    for _ in 0..rounds {
        // Time for the store to connect again and calls to fill its connections.
        tokio::time::sleep(Duration::from_millis(50)).await;
        for conn in &connections {
            drop_connections(conn.clone()).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Kills the server with SIGKILL `rounds` times, while calls are in flight, and starts it again
/// on its port, from its append-only file.
async fn kill_and_restart_repeatedly(server: &mut RedisServer, rounds: u32) {
    for _ in 0..rounds {
        tokio::time::sleep(Duration::from_millis(100)).await;
        tokio::task::block_in_place(|| {
            server.kill();
            server.restart();
        });
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
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
        // A peek changes nothing: one whose connection a fault just dropped is asked again.
        let mut peek = reader.peek(policy, key.as_bytes(), 1).await;
        for _ in 0..50 {
            if peek.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            peek = reader.peek(policy, key.as_bytes(), 1).await;
        }
        // It reports what would remain after one more call: one less than now, when allowed.
        let d = peek.expect("peek");
        total += limit - d.remaining - u64::from(d.allowed);
    }
    total
}

/// Runs the load while `fault` strikes, then checks Redis's counts against the callers' tallies;
/// `class` is the class of the store errors the fault must have caused.
async fn assert_at_most_once(target: Target, fault: impl Future<Output = ()>, class: &str) {
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
    let tight = Policy::new(
        "once-tight",
        Algorithm::sliding_log(TIGHT_LIMIT, Duration::from_secs(3600)).unwrap(),
    )
    .unwrap()
    .with_failure_mode(FailureMode::FailClosed);
    let tallies: Vec<(Policy, Arc<Tally>)> = [&open, &closed, &tight]
        .into_iter()
        .map(|p| (p.clone(), Arc::new(Tally::default())))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(load(engine.clone(), tallies.clone(), stop.clone()));
    fault.await;
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    // Every call sent during a fault has run by now (or never will): the last pause ended 40 ms
    // ago, and the reader queues behind anything still waiting.
    let reader = RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .deny_cache(false)
        .connect()
        .await
        .unwrap();

    let mut faulted = 0;
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
        faulted += if class == TIMEOUT { timed_out } else { failed };
    }
    assert!(faulted > 0, "the faults must fail calls with class {class}");

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
    let fault = pause_repeatedly(vec![server.url()], 16);
    assert_at_most_once(Target::Standalone(server.url()), fault, TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_applies_each_decision_at_most_once_around_the_deadline() {
    let cluster = RedisCluster::start();
    let fault = pause_repeatedly(cluster.urls(), 16);
    assert_at_most_once(Target::Cluster(cluster.urls()), fault, TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_applies_each_decision_at_most_once_when_connections_drop() {
    let server = RedisServer::start();
    let fault = drop_connections_repeatedly(vec![server.url()], 20);
    assert_at_most_once(Target::Standalone(server.url()), fault, CONNECTION).await;
}

/// The cluster client is built without retries: one that sent calls again after their
/// connection dropped would hide the drops (no call would fail with a connection error) and run
/// twice those whose answers were lost, and fail this test either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_applies_each_decision_at_most_once_when_connections_drop() {
    let cluster = RedisCluster::start();
    let fault = drop_connections_repeatedly(cluster.urls(), 20);
    assert_at_most_once(Target::Cluster(cluster.urls()), fault, CONNECTION).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_applies_each_decision_at_most_once_when_killed_and_restarted() {
    let mut server = RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let target = Target::Standalone(server.url());
    let fault = kill_and_restart_repeatedly(&mut server, 4);
    assert_at_most_once(target, fault, CONNECTION).await;
}

/// One check at a time, with the fault placed exactly where a retry would count twice: the
/// nodes are frozen (SIGSTOP) while the store sends a check, then told to drop every client
/// connection, then thawed. A node reads its sockets in the order data arrived, so the node of
/// the check runs it, then closes its connection with the answer unsent: the check ran and its
/// caller cannot know. It must fail, not be sent again. When the drop arrived first (the check
/// had not reached the socket yet), the check never ran and the attempt proves nothing, so the
/// test tries again, a bounded number of times.
async fn assert_a_lost_answer_is_not_sent_again(target: Target, nodes: &[&RedisServer]) {
    let store = RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .probe_interval(Duration::ZERO)
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    let policy = counter("lost-answer", 1_000_000, FailureMode::FailClosed);
    let urls: Vec<String> = nodes.iter().map(|node| node.url()).collect();
    let admins = admin_connections(&urls).await;
    let mut lost = 0;
    for attempt in 0..10 {
        let key = format!("lost-{attempt}");
        // The store's connection up again after the last attempt's drop: a check that fails
        // here may have run, so the count starts after it.
        for _ in 0..100 {
            if store.check(&policy, key.as_bytes(), 1).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let before = spent(&store, &policy, 1_000_000, &[key.as_str()]).await;
        for node in nodes {
            node.freeze();
        }
        let check = tokio::spawn({
            let (store, policy, key) = (store.clone(), policy.clone(), key.clone());
            async move { store.check(&policy, key.as_bytes(), 1).await }
        });
        // Time for the check to reach the frozen node's socket, then for the drops to follow.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let drops: Vec<_> = admins
            .iter()
            .map(|admin| tokio::spawn(drop_connections(admin.clone())))
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for node in nodes {
            node.thaw();
        }
        for drop in drops {
            drop.await.unwrap();
        }
        let answer = check.await.unwrap();
        let admitted = u64::from(answer.as_ref().is_ok_and(|d| d.allowed));
        let failed = u64::from(answer.is_err());
        let ran = spent(&store, &policy, 1_000_000, &[key.as_str()]).await - before;
        assert!(
            ran <= admitted + failed,
            "attempt {attempt}: the check ran {ran} times, answered {answer:?}"
        );
        if ran > admitted {
            lost += 1;
            break;
        }
    }
    assert_eq!(lost, 1, "the drop never came after the check ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_never_gets_a_check_again_whose_answer_was_lost() {
    let server = RedisServer::start();
    assert_a_lost_answer_is_not_sent_again(Target::Standalone(server.url()), &[&server]).await;
}

/// Pins the cluster client's own retries at zero: with retries, it sends the check again on a
/// new connection and Redis counts it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_never_gets_a_check_again_whose_answer_was_lost() {
    let cluster = RedisCluster::start();
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    assert_a_lost_answer_is_not_sent_again(Target::Cluster(cluster.urls()), &nodes).await;
}
