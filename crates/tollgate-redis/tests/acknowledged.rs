//! Policies that wait for their replicas (`Policy::with_replicas`), on a Redis master with one
//! replica: an admission returns once the replica holds it; an admission the replica does not
//! acknowledge is a store failure of class `unreplicated`, answered by the failure mode; denials,
//! peeks and policies that wait for none go on as before. (`failover.rs` kills a cluster master
//! under load and shows that no key then admits more than its limit.)

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, Engine, FailureMode, Outcome, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

/// A master and a replica of it, linked.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    wait_for_link(&replica);
    (master, replica)
}

/// Waits until `replica` reports its link to its master up, for at most 10 s.
fn wait_for_link(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            Instant::now() < deadline,
            "the replica never linked to its master"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn policy(name: &str, replicas: u32) -> Policy {
    let window = Duration::from_secs(600);
    Policy::new(
        name,
        Algorithm::fixed_window(3, window, Anchor::FirstHit).expect("algorithm"),
    )
    .expect("policy")
    .with_failure_mode(FailureMode::FailClosed)
    .with_replicas(replicas)
    .expect("replicas")
}

async fn store(master: &RedisServer) -> RedisStore {
    RedisStore::builder(Target::Standalone(master.url()))
        .deny_cache(false)
        .timeout(Duration::from_millis(400))
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_waits_for_its_replica_and_one_it_does_not_acknowledge_follows_the_failure_mode() {
    let (master, replica) = master_and_replica();
    let store = store(&master).await;
    let login = policy("login", 1);
    let plain = policy("plain", 0);

    // Acknowledged: the decision returns once the replica holds the state it wrote.
    let decision = store.check(&login, "alice", 1).await.expect("acknowledged");
    assert!(decision.allowed);
    assert_eq!(master.command_calls("wait"), 1);
    assert_eq!(replica.cli(&["EXISTS", "tollgate:{login:alice}"]), "1");
    // Policies that wait for none send no WAIT.
    assert!(store.check(&plain, "alice", 1).await.expect("plain").allowed);
    assert!(store.peek(&login, "alice", 1).await.expect("peek").allowed);
    assert_eq!(master.command_calls("wait"), 1);
    // Spend the rest of alice's window while the replica follows.
    for _ in 0..2 {
        assert!(
            store
                .check(&login, "alice", 1)
                .await
                .expect("acknowledged")
                .allowed
        );
    }

    replica.cut_from_master();
    let engine = Engine::new(store.clone());
    // Not acknowledged: a store failure of its own class, which fail_closed refuses. The
    // decision was applied on the master all the same.
    let err = store.check(&login, "bob", 1).await.expect_err("not acknowledged");
    assert_eq!(err.class(), Some("unreplicated"), "{err}");
    assert!(err.to_string().contains("0 of the 1 replicas"), "{err}");
    assert_eq!(master.cli(&["EXISTS", "tollgate:{login:bob}"]), "1");
    assert_eq!(store.stats().unreplicated, 1, "counted");
    let verdict = engine.check(&login, "carol", 1).await.expect("a verdict");
    assert_eq!(verdict.outcome(), Outcome::Error, "{verdict:?}");
    assert_eq!(
        verdict.store_error().and_then(tollgate::Error::class),
        Some("unreplicated")
    );
    // The node's replicas fell short: until the next probe, calls go without WAIT. A denial is
    // still a denial, an admission is still not acknowledged.
    let waits = master.command_calls("wait");
    let denied = store
        .check(&login, "alice", 1)
        .await
        .expect("a denial needs no replica");
    assert!(!denied.allowed);
    let err = store
        .check(&login, "dave", 1)
        .await
        .expect_err("not acknowledged");
    assert_eq!(err.class(), Some("unreplicated"), "{err}");
    // Bob, carol and dave; alice's denial is not an admission.
    assert_eq!(store.stats().unreplicated, 3, "counted");
    // Peeks and the other policies never wait.
    assert!(store.peek(&login, "erin", 1).await.expect("peek").allowed);
    assert!(store.check(&plain, "bob", 1).await.expect("plain").allowed);
    assert!(master.command_calls("wait") <= waits + 2, "probes only");

    // The replica is back: within a probe or two, admissions are acknowledged again.
    replica.rejoin_master();
    wait_for_link(&replica);
    let mut acknowledged = false;
    for i in 0..100 {
        match store.check(&login, format!("back-{i}").as_bytes(), 1).await {
            Ok(decision) => {
                assert!(decision.allowed);
                acknowledged = true;
                break;
            }
            Err(err) => assert_eq!(err.class(), Some("unreplicated"), "{err}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(acknowledged, "admissions never acknowledged again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_waiting_for_more_replicas_than_the_master_has_admits_nothing() {
    let (master, _replica) = master_and_replica();
    let store = store(&master).await;
    let two = policy("two", 2);
    let err = store.check(&two, "k", 1).await.expect_err("one replica of two");
    assert_eq!(err.class(), Some("unreplicated"), "{err}");
    assert!(err.to_string().contains("1 of the 2 replicas"), "{err}");
    // One replica is enough for a policy that asks for one, on the same master meanwhile.
    assert!(
        store
            .check(&policy("one", 1), "k", 1)
            .await
            .expect("one of one")
            .allowed
    );
}

const BUSY_LIMIT: u64 = 50;
const BUSY_KEYS: u64 = 120;
const BUSY_TASKS: u64 = 16;
/// Checks of each key: its limit, and a few that its window must deny.
const BUSY_CHECKS: u64 = BUSY_LIMIT + 4;

/// Sixteen tasks on a `replicas: 1` sliding log (fail_closed, 50 per 300 s) over 120 keys of a
/// cluster of three masters with a replica each, before any fault: every key admits exactly its
/// 50 and nothing fails. The store's deadline is short (10 ms, which a Redis next to the server
/// answers well within): under load an acknowledgement comes later than that, since the
/// decisions that wait on one master queue behind each other's `WAIT`, so the wait for the
/// replica is the policy's own, added to the deadline. (When the wait was half of what was left
/// of the deadline, dozens of admissions in a run were refused, as `unreplicated` or as
/// timeouts; with the default 50 ms deadline, on a busier machine, one in seven.) The policy's
/// wait here is far above any acknowledgement time of a loaded machine, as the test kit's
/// deadline is for calls; what the default wait costs is measured by `benches/replicas.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_every_key_admits_exactly_its_limit_while_the_replicas_follow() {
    let cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    let store = std::sync::Arc::new(
        RedisStore::builder(Target::parse(&cluster.store_url()).expect("url"))
            .deny_cache(false)
            // This test is about the deadline: a short one, not the test kit's.
            .timeout(Duration::from_millis(10))
            .connect()
            .await
            .expect("connect"),
    );
    let login = Policy::new(
        "busy",
        Algorithm::sliding_log(BUSY_LIMIT, Duration::from_secs(300)).expect("algorithm"),
    )
    .expect("policy")
    .with_failure_mode(FailureMode::FailClosed)
    .with_replicas(1)
    .expect("replicas")
    .with_replica_wait(Duration::from_secs(2))
    .expect("replica wait");
    // Connections first (the one for calls that wait is made on first use), on keys not counted:
    // a connection made under a short deadline on a loaded machine may take a try or two.
    let mut warm = false;
    for i in 0..20 {
        if store
            .check(&login, format!("warm-{i}").as_bytes(), 1)
            .await
            .is_ok()
        {
            warm = true;
            break;
        }
    }
    assert!(warm, "no check went through before the load");

    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = vec![];
    for _ in 0..BUSY_TASKS {
        let (store, login, next) = (store.clone(), login.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = vec![0u64; BUSY_KEYS as usize];
            let mut failed = std::collections::BTreeMap::<String, u64>::new();
            loop {
                let job = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if job >= BUSY_KEYS * BUSY_CHECKS {
                    return (admitted, failed);
                }
                let key = job % BUSY_KEYS;
                match store.check(&login, format!("user-{key}").as_bytes(), 1).await {
                    Ok(decision) => admitted[key as usize] += u64::from(decision.allowed),
                    Err(err) => {
                        *failed
                            .entry(err.class().unwrap_or("input").to_owned())
                            .or_default() += 1
                    }
                }
            }
        }));
    }
    let mut admitted = vec![0u64; BUSY_KEYS as usize];
    let mut failed = std::collections::BTreeMap::<String, u64>::new();
    for task in tasks {
        let (task_admitted, task_failed) = task.await.expect("load task");
        for (total, n) in admitted.iter_mut().zip(task_admitted) {
            *total += n;
        }
        for (class, n) in task_failed {
            *failed.entry(class).or_default() += n;
        }
    }
    let short: Vec<(usize, u64)> = admitted
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, n)| n != BUSY_LIMIT)
        .collect();
    assert!(
        failed.is_empty() && short.is_empty(),
        "store errors {failed:?}; keys that did not admit exactly {BUSY_LIMIT} (key, admitted): {short:?}"
    );
}
