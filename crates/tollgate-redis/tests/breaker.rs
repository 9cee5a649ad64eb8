//! The circuit breaker recovers in proportion to the fault, and a cluster has one per master.
//! These tests check the structure with a frozen Redis (SIGSTOP: deterministic, no timing
//! thresholds): a failure opens the breaker, the first probe after a short wait is one call, and
//! its success closes the breaker; a frozen master does not open the breakers of the others.
//! How degraded answers compare with the time Redis is stalled is measured by
//! `benches/stall.rs` (see BENCHMARKS.md).

use std::time::Duration;

use tollgate::{Algorithm, Engine, FailureMode, Outcome, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer};

/// The store's deadline, its own rather than the test kit's: calls to the frozen server must
/// meet it, so it is short; yet long enough that a healthy answer on a busy machine comes in time.
const DEADLINE: Duration = Duration::from_millis(500);
/// Soon next to the 60 s maximum, and long enough that the check right after the failure is
/// surely refused, however busy the machine.
const FIRST_PROBE: Duration = Duration::from_millis(300);

fn policy() -> Policy {
    Policy::new(
        "breaker",
        Algorithm::gcra(Rate::per_second(1000).unwrap(), 1000).unwrap(),
    )
    .unwrap()
    .with_failure_mode(FailureMode::FailOpen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_probe_after_a_stall_closes_the_breaker() {
    let server = RedisServer::start();
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .timeout(DEADLINE)
        .first_probe_after(FIRST_PROBE)
        .probe_interval(Duration::from_secs(60))
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    let engine = Engine::new(store.clone());
    let p = policy();
    assert_eq!(
        engine.check(&p, b"k", 1).await.unwrap().outcome(),
        Outcome::Allowed
    );

    server.freeze();
    let v = engine.check(&p, b"k", 1).await.unwrap();
    assert_eq!(v.store_error().and_then(|e| e.class()), Some("timeout"));
    assert!(store.is_degraded(), "a timeout opens the breaker");
    let calls = store.stats().redis_calls;
    // Refused at once while open (the first probe is 300 ms away; asked right away).
    let v = engine.check(&p, b"k", 1).await.unwrap();
    assert_eq!(v.outcome(), Outcome::Degraded);
    assert_eq!(store.stats().redis_calls, calls, "a refusal never reaches redis");
    assert_eq!(store.stats().breaker_refusals, 1);
    server.thaw();

    // The breaker's first probe is due after 300 ms, whatever the 60 s maximum says.
    tokio::time::sleep(FIRST_PROBE * 2).await;
    let v = engine.check(&p, b"k", 1).await.unwrap();
    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    assert_eq!(store.stats().redis_calls, calls + 1, "one probe");
    assert!(!store.is_degraded(), "the probe's success closes the breaker");
    assert_eq!(store.breaker_states().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_leaves_the_other_masters_undegraded() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder(Target::Cluster(cluster.urls()))
        .timeout(DEADLINE)
        .probe_interval(Duration::from_secs(60))
        .first_probe_after(Duration::from_secs(60))
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    let engine = Engine::new(store.clone());
    let p = policy();
    let keys: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    // Until the store has its slot map, calls are counted under one breaker; wait for the map
    // (bounded), then every call names its master.
    for _ in 0..200 {
        for key in &keys {
            assert_eq!(
                engine.check(&p, key.as_bytes(), 1).await.unwrap().outcome(),
                Outcome::Allowed
            );
        }
        if masters(&store).len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        masters(&store).len(),
        3,
        "a breaker per master: {:?}",
        store.breaker_states()
    );

    let frozen = &cluster.nodes()[0];
    let frozen_name = format!("127.0.0.1:{}", frozen.port());
    // Which keys live on the frozen master, asked before it freezes.
    let on_frozen: Vec<bool> = keys
        .iter()
        .map(|key| {
            let slot: u16 = cluster.nodes()[1]
                .cli(&["CLUSTER", "KEYSLOT", &store_key(&p, key)])
                .parse()
                .unwrap();
            cluster.slot_owner(slot) == frozen.port()
        })
        .collect();
    frozen.freeze();
    let mut degraded_elsewhere = 0;
    let mut degraded_on_frozen = 0;
    for (key, &on_frozen) in keys.iter().zip(&on_frozen) {
        let v = engine.check(&p, key.as_bytes(), 1).await.unwrap();
        match (v.outcome(), on_frozen) {
            (Outcome::Degraded, true) => degraded_on_frozen += 1,
            (Outcome::Degraded, false) => degraded_elsewhere += 1,
            (Outcome::Allowed, true) => panic!("a frozen master answered for {key}"),
            _ => {}
        }
    }
    frozen.thaw();
    assert!(degraded_on_frozen > 0, "some keys live on the frozen master");
    assert_eq!(degraded_elsewhere, 0, "the other masters keep deciding");
    let open: Vec<String> = store
        .breaker_states()
        .into_iter()
        .filter(|(_, open)| *open)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(open, [frozen_name], "only the frozen master's breaker is open");
}

/// The masters the store has breakers for (not the one for calls made before the slot map).
fn masters(store: &RedisStore) -> Vec<String> {
    store
        .breaker_states()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "cluster")
        .collect()
}

/// The Redis key a check of `key` under `p` uses (the default layout: `tollgate:{policy:key}`).
fn store_key(p: &Policy, key: &str) -> String {
    let (keys, _) = RedisStore::script_call("tollgate:", p, key.as_bytes(), 1);
    String::from_utf8(keys[0].clone()).unwrap()
}
