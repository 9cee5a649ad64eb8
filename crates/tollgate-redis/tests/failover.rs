//! A master of a cluster dies under load and its replica is promoted: what each key admitted in
//! its window, against the bound `docs/redis.md` states.
//!
//! The replica is cut from its master first (`RedisServer::cut_from_master`), as a replica that
//! lags is, so the master dies holding writes its replica never got: what an asynchronous replica
//! loses in a real failover, made certain instead of left to timing. Then:
//!
//! 1. every key spends 2 of its limit of 5 while the replica is linked (and replicated);
//! 2. the replica is cut; load runs until every key has been denied (its whole window spent);
//! 3. the master of the victim keys is killed under that load, and its replica promoted;
//! 4. load runs on until every key has had [`AFTER_PROMOTION`] decisions from the new master.
//!
//! The store must notice the lost state (`StoreStats::state_lost`): once per slot that lost
//! writes, none for the others.
//!
//! Each key's admissions (answers Redis gave "allowed"; the policy fails closed, so a failed call
//! admits nothing) are counted over the whole run, one window of 10 minutes anchored at the first
//! hit, with the deny cache off so that every decision is Redis's (as on a fleet, where other
//! instances never saw this one's denials).
//!
//! Tests that start six-node clusters are slow: this file holds few, and every wait in it is
//! bounded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, FailureMode, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisCluster;

const LIMIT: u64 = 5;
/// Spent by every key in phase 1, while the replica still receives every write.
const SPENT_REPLICATED: u64 = 2;
/// Keys tried; about a third land on the master that dies.
const KEYS: usize = 60;
const TASKS: usize = 8;
/// Decisions each key gets from the promoted master before the run ends: far more than a
/// fresh budget, so whatever the failover handed back is spent by then.
const AFTER_PROMOTION: u64 = 12;
/// Bound on each phase of load.
const PHASE_TIMEOUT: Duration = Duration::from_secs(30);

fn login_policy() -> Policy {
    let window = Duration::from_secs(600);
    Policy::new(
        "login",
        Algorithm::fixed_window(LIMIT, window, Anchor::FirstHit).expect("algorithm"),
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

    fn admitted(&self, key: usize) -> u64 {
        self.admitted[key].load(Ordering::Relaxed)
    }
}

/// What one run measured.
struct Run {
    /// Whether each key's slot was served by the master that died.
    victim: Vec<bool>,
    counts: Arc<Counts>,
    /// Store errors by class over the run.
    errors: BTreeMap<String, u64>,
    /// The distinct slots of the keys on the master that died.
    victim_slots: usize,
    /// The store's own account.
    stats: tollgate_redis::StoreStats,
}

impl Run {
    /// Admissions of the keys on the master that died (`victim`) or on the others.
    fn admitted(&self, victim: bool) -> Vec<u64> {
        (0..KEYS)
            .filter(|&i| self.victim[i] == victim)
            .map(|i| self.counts.admitted(i))
            .collect()
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

/// Runs the four phases (see the module docs) with `policy` on a fresh cluster with replicas.
async fn kill_a_master_under_load(policy: Policy) -> Run {
    let cluster = RedisCluster::start_with_replicas();
    let store = Arc::new(
        RedisStore::builder(Target::parse(&cluster.store_url()).expect("url"))
            .deny_cache(false)
            // The test kit's deadline: a loaded machine can take longer than a short one to
            // acknowledge a replicated write before any fault, and calls to the killed master
            // fail at once (refused), not at the deadline.
            .timeout(tollgate_testkit::STORE_TIMEOUT)
            .connect()
            .await
            .expect("connect"),
    );
    // The state of `key` under "login" is `tollgate:{login:KEY}`: its slot is its tag's.
    let slots: Vec<u16> = (0..KEYS)
        .map(|i| cluster.key_slot(&format!("{{login:{}}}", key(i))))
        .collect();
    let victim_slot = slots[0];
    let victim_port = cluster.slot_owner(victim_slot);
    let victim: Vec<bool> = slots
        .iter()
        .map(|&s| cluster.slot_owner(s) == victim_port)
        .collect();
    let counts = Arc::new(Counts::new());

    // 1. Spends the replica receives. A decision that waits for replicas sends its FCALL and
    // WAIT as one pipeline, which goes to the master of the key's slot alone.
    if policy.replicas() > 0 {
        let waits = |cluster: &RedisCluster| -> Vec<(u16, u64)> {
            cluster
                .nodes()
                .iter()
                .map(|node| (node.port(), node.command_calls("wait")))
                .collect()
        };
        let before = waits(&cluster);
        let failed = decide(&store, &policy, &counts, 0, false).await;
        assert_eq!(failed, None, "key 0 before any fault");
        let grown: Vec<u16> = before
            .iter()
            .zip(waits(&cluster))
            .filter(|((_, old), (_, new))| new > old)
            .map(|((port, _), _)| *port)
            .collect();
        assert_eq!(
            grown,
            [victim_port],
            "WAIT went to the master of the key's slot only"
        );
        assert_eq!(
            cluster
                .nodes()
                .iter()
                .find(|n| n.port() == victim_port)
                .map(|n| n.command_calls("wait")),
            Some(1)
        );
    }
    for i in 0..KEYS {
        for _ in counts.calls[i].load(Ordering::Relaxed)..SPENT_REPLICATED {
            let failed = decide(&store, &policy, &counts, i, false).await;
            assert_eq!(failed, None, "key {i} before any fault");
        }
    }
    cluster.wait_until_replicated();
    cluster
        .replica_of(victim_port)
        .expect("the victim master has a replica")
        .cut_from_master();

    // 2. Load until every key has had more calls than its window has room for: the victim's
    // spends since the cut exist on its master alone.
    let stop = Arc::new(AtomicBool::new(false));
    let paused = Arc::new(AtomicBool::new(false));
    let promoted = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let mut tasks = vec![];
    for t in 0..TASKS {
        let (store, policy, counts) = (store.clone(), policy.clone(), counts.clone());
        let (stop, paused, promoted, errors) =
            (stop.clone(), paused.clone(), promoted.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            // Ended by the stop flag, which the test sets within its phase timeouts; the count
            // is a backstop.
            for _ in 0..1_000_000 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                if paused.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
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

    // 3. The master dies under load; its replica takes over without the writes since the cut.
    // A policy that waits for a replica admits nothing from a master without one, so then the
    // dead master is started again (load paused meanwhile), and rejoins as the new master's
    // replica.
    let restore_replica = policy.replicas() > 0;
    let pause = paused.clone();
    let cluster = tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let failover = cluster.fail_over(victim_slot);
        assert_eq!(cluster.slot_owner(victim_slot), failover.new_master);
        if restore_replica {
            pause.store(true, Ordering::Relaxed);
            let node = cluster
                .nodes_mut()
                .iter_mut()
                .find(|node| node.port() == failover.old_master)
                .expect("the dead master");
            node.restart();
            cluster.wait_until_ok();
            let replica = cluster.replica_of(failover.new_master).map(|n| n.port());
            assert_eq!(
                replica,
                Some(failover.old_master),
                "the old master is the new one's replica"
            );
        }
        cluster
    })
    .await
    .expect("failover");
    promoted.store(true, Ordering::Relaxed);
    paused.store(false, Ordering::Relaxed);

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
    // The nodes stop after the store's last call.
    drop(cluster);
    let errors = errors.lock().expect("errors").clone();
    let victim_slots = slots
        .iter()
        .zip(&victim)
        .filter(|(_, v)| **v)
        .map(|(s, _)| *s)
        .collect::<std::collections::BTreeSet<u16>>()
        .len();
    Run {
        victim,
        counts,
        errors,
        victim_slots,
        stats: store.stats(),
    }
}

/// min, max and sum of `values`.
fn spread(values: &[u64]) -> (u64, u64, u64) {
    let min = values.iter().copied().min().unwrap_or(0);
    let max = values.iter().copied().max().unwrap_or(0);
    (min, max, values.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_replica_acknowledgement_a_failover_admits_at_most_one_extra_window_per_key() {
    let run = kill_a_master_under_load(login_policy()).await;
    let (victims, others) = (run.admitted(true), run.admitted(false));
    assert!(!victims.is_empty() && !others.is_empty(), "keys on both sides");
    let (low, high, total) = spread(&victims);
    let overshoot: u64 = victims.iter().map(|&a| a.saturating_sub(LIMIT)).sum();
    println!(
        "failover without replicas: {} keys on the dead master admitted {low} to {high} of a limit of {LIMIT} \
         ({total} in all, {overshoot} over their limits; bound {} each); {} keys elsewhere admitted at most {}; \
         store errors {:?}; lost state noticed {} times, {} slots on the dead master",
        victims.len(),
        2 * LIMIT,
        others.len(),
        spread(&others).1,
        run.errors,
        run.stats.state_lost,
        run.victim_slots,
    );
    // The documented bound: one extra window's worth per key, at most.
    for (i, admitted) in (0..KEYS).map(|i| (i, run.counts.admitted(i))) {
        assert!(admitted <= 2 * LIMIT, "key {i} admitted {admitted}");
    }
    // Keys whose master lived keep their limit exactly.
    assert!(others.iter().all(|&a| a == LIMIT), "{others:?}");
    // What the replica never received was spent again: the bound is not idle.
    assert!(overshoot > 0, "{victims:?}");
    // Only the spends since the cut were lost: the promoted master had the first ones.
    assert!(high <= 2 * LIMIT - SPENT_REPLICATED, "{victims:?}");
    // The store noticed: once for each slot of the dead master it had written to since the cut,
    // never for the others.
    assert_eq!(run.stats.state_lost, run.victim_slots as u64, "{:?}", run.stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_replica_acknowledgement_no_key_admits_more_than_its_limit_across_a_failover() {
    let policy = login_policy().with_replicas(1).expect("replicas");
    let run = kill_a_master_under_load(policy).await;
    let (victims, others) = (run.admitted(true), run.admitted(false));
    assert!(!victims.is_empty() && !others.is_empty(), "keys on both sides");
    let (low, high, total) = spread(&victims);
    println!(
        "failover with replicas: 1: {} keys on the dead master admitted {low} to {high} of a limit of {LIMIT} \
         ({total} in all); {} keys elsewhere admitted {} to {}; store errors {:?}; lost state noticed {} times, \
         {} slots on the dead master",
        victims.len(),
        others.len(),
        spread(&others).0,
        spread(&others).1,
        run.errors,
        run.stats.state_lost,
        run.victim_slots,
    );
    for (i, admitted) in (0..KEYS).map(|i| (i, run.counts.admitted(i))) {
        assert!(admitted <= LIMIT, "key {i} admitted {admitted}");
    }
    // What the replica did not acknowledge was refused (fail_closed), not admitted.
    assert!(
        run.errors.get("unreplicated").is_some_and(|&n| n > 0),
        "{:?}",
        run.errors
    );
    // Admissions went on once the promoted master had a replica again.
    assert!(total > SPENT_REPLICATED * victims.len() as u64, "{victims:?}");
    assert!(others.iter().all(|&a| a == LIMIT), "{others:?}");
    // State was lost all the same (spends that were refused), and the store noticed it.
    assert_eq!(run.stats.state_lost, run.victim_slots as u64, "{:?}", run.stats);
}
