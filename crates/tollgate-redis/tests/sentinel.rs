//! Redis behind Sentinel (a master, its replica, three sentinels: `RedisSentinel`): decisions
//! through the sentinels agree with the memory store, and a failover under load keeps the bound
//! `docs/redis.md` states, is seen (`StoreStats::failovers`, `StoreStats::state_lost`), and
//! decisions go on on the promoted replica.
//!
//! The failover run is the cluster's (`failover.rs`) on one master: the replica is cut from its
//! master first (`RedisServer::cut_from_master`), so the master dies holding writes its replica
//! never got, what an asynchronous replica loses in a real failover, made certain instead of left
//! to timing. Then:
//!
//! 1. every key spends [`SPENT_REPLICATED`] of its limit while the replica is linked;
//! 2. the replica is cut; load runs until every key has been denied (its whole window spent);
//! 3. the master is killed (SIGKILL by its PID) under that load, and the sentinels promote the
//!    replica;
//! 4. load runs on until every key has had [`AFTER_PROMOTION`] decisions from the new master.
//!
//! Every wait is bounded, and so is every load loop.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, FailureMode, ManualClock, MemoryStore, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::{self, T0_US};
use tollgate_testkit::{RedisSentinel, STORE_TIMEOUT};

const LIMIT: u64 = 5;
/// Spent by every key in phase 1, while the replica still receives every write.
const SPENT_REPLICATED: u64 = 2;
const KEYS: usize = 20;
const TASKS: usize = 4;
/// Decisions each key gets from the promoted master before the run ends: far more than a fresh
/// budget, so whatever the failover handed back is spent by then.
const AFTER_PROMOTION: u64 = 12;
/// Bound on each phase of load.
const PHASE_TIMEOUT: Duration = Duration::from_secs(40);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vectors_give_the_same_decisions_through_sentinel_as_in_memory() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = vectors::run(&memory, &clock).await;
    let expected_multi = vectors::run_multi(&memory, &clock).await;

    let setup = RedisSentinel::start();
    let target = Target::parse(&setup.store_url()).expect("a sentinel address");
    let store = RedisStore::builder(target)
        .clock(clock.clone())
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect through the sentinels");
    assert_eq!(vectors::run(&store, &clock).await, expected, "through sentinel");
    assert_eq!(
        vectors::run_multi(&store, &clock).await,
        expected_multi,
        "through sentinel, multi-rule"
    );
    store.health(STORE_TIMEOUT).await.expect("healthy");
    // The decisions ran on the master the sentinels name, and reached its replica from there.
    let master = setup.master();
    assert_eq!(master.port(), setup.servers()[0].port());
    assert!(master.script_calls() > 0);
    setup.wait_until_replicated();
    let replica = setup.replica().expect("a replica");
    assert_eq!(replica.script_calls(), 0, "no call goes to the replica");
    assert_eq!(replica.cli(&["DBSIZE"]), master.cli(&["DBSIZE"]));
    let stats = store.stats();
    assert_eq!((stats.failovers, stats.state_lost), (0, 0), "{stats:?}");
    assert_eq!(
        store.breaker_states(),
        [(format!("127.0.0.1:{}", master.port()), false)],
        "the master's address names its breaker"
    );
}

fn login_policy() -> Policy {
    Policy::new(
        "login",
        Algorithm::fixed_window(LIMIT, Duration::from_secs(600), Anchor::FirstHit).expect("algorithm"),
    )
    .expect("policy")
    .with_failure_mode(FailureMode::FailClosed)
}

/// Per key: admissions, calls (answered or failed), and decisions Redis answered after the
/// promotion.
struct Counts {
    admitted: Vec<AtomicU64>,
    calls: Vec<AtomicU64>,
    decided_after: Vec<AtomicU64>,
}

impl Counts {
    fn new() -> Self {
        let zeros = || (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        Counts {
            admitted: zeros(),
            calls: zeros(),
            decided_after: zeros(),
        }
    }
}

fn key(i: usize) -> String {
    format!("user-{i}")
}

/// Decides key `i` once and records the answer; a failed call returns its class.
async fn decide(
    store: &RedisStore,
    policy: &Policy,
    counts: &Counts,
    i: usize,
    promoted: bool,
) -> Option<String> {
    counts.calls[i].fetch_add(1, Ordering::Relaxed);
    match store.check(policy, key(i).as_bytes(), 1).await {
        Ok(decision) => {
            if decision.allowed {
                counts.admitted[i].fetch_add(1, Ordering::Relaxed);
            }
            if promoted {
                counts.decided_after[i].fetch_add(1, Ordering::Relaxed);
            }
            None
        }
        Err(err) => Some(err.class().unwrap_or("input").to_owned()),
    }
}

/// Waits until `done` holds, polling every 20 ms, for at most [`PHASE_TIMEOUT`].
async fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {PHASE_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_under_load_admits_at_most_one_extra_window_per_key_and_is_seen() {
    let setup = RedisSentinel::start();
    let policy = login_policy();
    let store = Arc::new(
        RedisStore::builder(Target::parse(&setup.store_url()).expect("a sentinel address"))
            .deny_cache(false)
            .timeout(STORE_TIMEOUT)
            .connect()
            .await
            .expect("connect through the sentinels"),
    );
    let counts = Arc::new(Counts::new());

    // 1. Spends the replica receives.
    for i in 0..KEYS {
        for _ in 0..SPENT_REPLICATED {
            assert_eq!(decide(&store, &policy, &counts, i, false).await, None, "key {i}");
        }
    }
    setup.wait_until_replicated();
    setup.replica().expect("a replica").cut_from_master();

    // 2. Load until every key has had more calls than its window has room for: the spends since
    // the cut exist on the master alone.
    let stop = Arc::new(AtomicBool::new(false));
    let promoted = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let mut tasks = vec![];
    for t in 0..TASKS {
        let (store, policy, counts) = (store.clone(), policy.clone(), counts.clone());
        let (stop, promoted, errors) = (stop.clone(), promoted.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            // Ended by the stop flag, which the test sets within its phase timeouts; the count
            // is a backstop.
            for _ in 0..1_000_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let after = promoted.load(Ordering::Relaxed);
                if let Some(class) = decide(&store, &policy, &counts, i % KEYS, after).await {
                    *errors.lock().expect("errors").entry(class).or_default() += 1;
                }
                i += TASKS;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }));
    }
    let enough_calls = SPENT_REPLICATED + LIMIT + 2;
    wait_for("every window spent on the master", || {
        (0..KEYS).all(|i| counts.calls[i].load(Ordering::Relaxed) >= enough_calls)
    })
    .await;

    // 3. The master dies under load (killed by its PID); the sentinels promote the replica,
    // which lacks the writes since the cut.
    let old_master_calls = setup.master().script_calls();
    let (setup, failover) = tokio::task::spawn_blocking(move || {
        let mut setup = setup;
        let failover = setup.fail_over();
        (setup, failover)
    })
    .await
    .expect("failover");
    promoted.store(true, Ordering::Relaxed);

    // 4. Load on until the new master has decided every key often enough to spend whatever
    // budget the failover handed back.
    wait_for("every key decided by the new master", || {
        (0..KEYS).all(|i| counts.decided_after[i].load(Ordering::Relaxed) >= AFTER_PROMOTION)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("load task");
    }
    let errors = errors.lock().expect("errors").clone();
    let admitted: Vec<u64> = counts
        .admitted
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    let stats = store.stats();
    println!(
        "sentinel failover from port {} to port {}: {KEYS} keys admitted {admitted:?} of a limit of {LIMIT} \
         (bound {} each); store errors {errors:?}; {stats:?}",
        failover.old_master,
        failover.new_master,
        2 * LIMIT,
    );

    // The documented bound: one extra window's worth per key, at most.
    for (i, &n) in admitted.iter().enumerate() {
        assert!(n <= 2 * LIMIT, "key {i} admitted {n}");
    }
    // Exactly what the replica lacked was admitted again: the spends since the cut, on each key.
    assert!(
        admitted.iter().all(|&n| n == 2 * LIMIT - SPENT_REPLICATED),
        "{admitted:?}"
    );
    // The failover was seen: followed once, and the lost state noticed (one standalone slot).
    assert_eq!(stats.failovers, 1, "{stats:?}");
    assert_eq!(stats.state_lost, 1, "{stats:?}");
    // Calls in flight to the dead master failed as an unavailable Redis fails, never otherwise.
    assert!(
        errors
            .keys()
            .all(|class| ["connection", "timeout"].contains(&class.as_str())),
        "{errors:?}"
    );
    // Decisions go on on the new master, whose breaker is the one the store now names.
    let new_master = setup.master();
    assert_eq!(new_master.port(), failover.new_master);
    assert!(new_master.script_calls() > 0);
    assert!(old_master_calls > 0);
    let fresh = store
        .check(&policy, b"after-the-failover", 1)
        .await
        .expect("a decision");
    assert!(fresh.allowed);
    let breakers = store.breaker_states();
    assert!(
        breakers.contains(&(format!("127.0.0.1:{}", failover.new_master), false)),
        "{breakers:?}"
    );
}
