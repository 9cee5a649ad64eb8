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
