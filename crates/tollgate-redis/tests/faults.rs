//! Faults: NOSCRIPT, a killed Redis, a stalled Redis, a resharded cluster. NOSCRIPT and
//! resharding never reach the caller (and a reshard counts every decision once); an unavailable
//! Redis is a store error that the `Engine` answers with each policy's failure mode; no call
//! hangs, a call that timed out is never sent again, and the store recovers by itself.
//! (`failure_modes.rs` runs every class of failure under every failure mode.)

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, Engine, FailureMode, Outcome, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

fn policy(name: &str, mode: FailureMode) -> Policy {
    Policy::new(name, Algorithm::gcra(Rate::per_second(1).unwrap(), 10).unwrap())
        .unwrap()
        .with_failure_mode(mode)
}

/// A store with the test kit's deadline: the NOSCRIPT tests are about the reload, and any store
/// error fails them.
async fn patient(target: Target) -> RedisStore {
    RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_during_a_run_is_invisible() {
    let server = RedisServer::start();
    let store = patient(Target::Standalone(server.url())).await;
    let p = policy("flush", FailureMode::FailClosed);
    for round in 0..20 {
        server.script_flush();
        for i in 0..20 {
            let decision = store
                .check(&p, format!("k{round}-{i}").as_bytes(), 1)
                .await
                .unwrap();
            assert!(decision.allowed, "round {round}: {decision:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_on_every_cluster_node_is_invisible() {
    let cluster = RedisCluster::start();
    let store = patient(Target::parse(&cluster.store_url()).unwrap()).await;
    let p = policy("flush", FailureMode::FailClosed);
    for round in 0..10 {
        cluster.script_flush_all();
        for i in 0..30 {
            let decision = store
                .check(&p, format!("k{round}-{i}").as_bytes(), 1)
                .await
                .unwrap();
            assert!(decision.allowed, "round {round}: {decision:?}");
        }
    }
    // The function library was loaded again on every master, not given up for the scripts.
    for node in cluster.nodes() {
        let functions = node.cli(&["FUNCTION", "LIST"]);
        assert!(functions.contains("tollgate_"), "{}: {functions:?}", node.port());
    }
    let calls = cluster.nodes().iter().map(RedisServer::script_calls).sum::<u64>();
    let fcalls: u64 = cluster
        .nodes()
        .iter()
        .map(|node| node.command_calls("fcall"))
        .sum();
    assert!(
        fcalls >= 300 && fcalls <= calls,
        "{fcalls} FCALL of {calls} script calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_follows_each_failure_mode_and_recovery_is_automatic() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .timeout(STORE_TIMEOUT)
        .first_probe_after(Duration::from_millis(200))
        .probe_interval(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let engine = Engine::new(store);
    let open = policy("open", FailureMode::FailOpen);
    let closed = policy("closed", FailureMode::FailClosed);
    let local = policy(
        "local",
        FailureMode::Local {
            instances: NonZeroU32::new(5).unwrap(),
        },
    );
    assert_eq!(
        engine.check(&open, b"k", 1).await.unwrap().outcome(),
        Outcome::Allowed
    );

    server.kill();
    let started = Instant::now();
    let before = engine.store().stats();
    let v = engine.check(&open, b"k", 1).await.unwrap();
    assert!(
        v.allowed() && v.outcome() == Outcome::Degraded,
        "fail open admits: {v:?}"
    );
    assert_eq!(v.store_error().and_then(|e| e.class()), Some("connection"));
    let v = engine.check(&closed, b"k", 1).await.unwrap();
    assert!(
        !v.allowed() && v.outcome() == Outcome::Error && v.retry_after().is_some(),
        "fail closed refuses: {v:?}"
    );
    // Local: the burst of 10 divided by 5 instances, on the engine's own limiter.
    let local_admitted = {
        let mut n = 0;
        for _ in 0..10 {
            let v = engine.check(&local, b"k", 1).await.unwrap();
            assert!(v.degraded(), "{v:?}");
            n += u64::from(v.allowed());
        }
        n
    };
    assert_eq!(local_admitted, 2);
    // The breaker lets one call per probe interval reach the dead Redis; the rest are answered
    // at once.
    let stats = engine.store().stats();
    let calls = stats.redis_calls - before.redis_calls;
    let intervals = started.elapsed().as_millis() as u64 / 200;
    assert!(
        calls <= 1 + intervals,
        "{calls} calls to a dead redis in {intervals} probe intervals"
    );
    assert!(stats.breaker_refusals > before.breaker_refusals);
    assert!(engine.store().is_degraded());

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = engine.check(&open, b"after", 1).await.unwrap();
        if v.outcome() == Outcome::Allowed {
            break;
        }
        assert_eq!(v.outcome(), Outcome::Degraded, "{v:?}");
        assert!(Instant::now() < deadline, "the store never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!engine.store().is_degraded());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_takes_the_timeout_path_without_hanging() {
    let server = RedisServer::start();
    // A deadline of its own, shorter than the pause: the call must meet it.
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .timeout(Duration::from_millis(100))
        .first_probe_after(Duration::from_secs(60))
        .probe_interval(Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let engine = Engine::new(store);
    let p = policy("stall", FailureMode::FailClosed);
    assert_eq!(
        engine.check(&p, b"k", 1).await.unwrap().outcome(),
        Outcome::Allowed
    );
    server.pause(Duration::from_secs(2));
    let before = engine.store().stats();
    let mut classes = Vec::new();
    for _ in 0..50 {
        let v = engine.check(&p, b"k", 1).await.unwrap();
        assert!(v.outcome() == Outcome::Error && !v.allowed(), "{v:?}");
        classes.push(v.store_error().and_then(|e| e.class()).unwrap());
    }
    // One call waited for the timeout; the breaker answered the other 49 without Redis.
    assert_eq!(classes[0], "timeout");
    assert!(classes[1..].iter().all(|c| *c == "connection"), "{classes:?}");
    let after = engine.store().stats();
    assert_eq!(after.redis_calls - before.redis_calls, 1);
    assert_eq!(after.redis_unavailable - before.redis_unavailable, 1);
    assert_eq!(after.breaker_refusals - before.breaker_refusals, 49);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_timed_out_is_applied_once_and_never_sent_again() {
    let server = RedisServer::start();
    // No breaker, so the call right after the thaw goes to Redis on the same connection; a
    // deadline of its own, shorter than the freeze, so the first call times out.
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .timeout(Duration::from_millis(100))
        .probe_interval(Duration::ZERO)
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    let engine = Engine::new(store);
    let counter = Policy::new(
        "once",
        Algorithm::fixed_window(10, Duration::from_secs(3600), Anchor::FirstHit).unwrap(),
    )
    .unwrap()
    .with_failure_mode(FailureMode::FailOpen);
    let v = engine.check(&counter, b"k", 1).await.unwrap();
    assert_eq!(
        (v.outcome(), v.rules()[0].decision.remaining),
        (Outcome::Allowed, 9)
    );

    server.freeze();
    let v = engine.check(&counter, b"k", 1).await.unwrap();
    assert_eq!(v.outcome(), Outcome::Degraded, "{v:?}");
    assert_eq!(v.store_error().and_then(|e| e.class()), Some("timeout"));
    assert_eq!(engine.store().stats().redis_calls, 2);
    server.thaw();

    // The timed-out call sat in the server's socket and ran on the thaw, once. The next call
    // goes after it on the same connection, so it sees 3 spent: 2 would mean the timed-out call
    // was lost, 4 that it was sent again.
    let v = engine.check(&counter, b"k", 1).await.unwrap();
    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    assert_eq!(v.rules()[0].decision.remaining, 10 - 3, "{v:?}");
    assert_eq!(engine.store().stats().redis_calls, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_reshard_during_a_run_is_invisible() {
    let cluster = RedisCluster::start();
    let store = RedisStore::builder(Target::Cluster(cluster.urls()))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    // A counter no round can fill: a denial here would be the limit, not the reshard. Its
    // window starts at each key's first check, so it cannot end during the run.
    const LIMIT: u64 = 1_000_000;
    let p = Policy::new(
        "reshard",
        Algorithm::fixed_window(LIMIT, Duration::from_secs(3600), Anchor::FirstHit).unwrap(),
    )
    .unwrap()
    .with_failure_mode(FailureMode::FailClosed);
    let keys: Vec<String> = (0..200).map(|i| format!("user-{i}")).collect();
    // The reshard moves the lowest slots: some keys must live there.
    let moving = keys
        .iter()
        .filter(|key| {
            let name = RedisStore::script_call("tollgate:", &p, key.as_bytes(), 1).0[0].clone();
            cluster.key_slot(&String::from_utf8(name).unwrap()) < 1000
        })
        .count();
    assert!(moving > 0, "no key lives on the slots that move");
    // Run traffic before, during and after moving 1000 slots.
    let cluster = std::sync::Arc::new(cluster);
    let mover = cluster.clone();
    let reshard = tokio::task::spawn_blocking(move || {
        mover.reshard(1000);
    });
    let mut rounds = 0;
    // Bounded: 1 000 rounds of 200 checks stay within the budget, and a reshard that takes
    // longer fails the test below.
    while (!reshard.is_finished() || rounds < 3) && rounds < 1_000 {
        for key in &keys {
            let d = store
                .check(&p, key.as_bytes(), 1)
                .await
                .unwrap_or_else(|e| panic!("round {rounds}: {e}"));
            assert!(d.allowed, "round {rounds}: {d:?}");
        }
        rounds += 1;
    }
    assert!(reshard.is_finished(), "the reshard outlasted {rounds} rounds");
    reshard.await.unwrap();
    // Every key was decided once a round, each decision admitted: Redis counts exactly that, on
    // the slot's new node as on the old. A call run on both sides of a move, or sent again after
    // MOVED or ASK when it had run, would show as more; one lost in the move, as less.
    for key in &keys {
        // A peek reports what would remain after one more call: one less than now.
        let d = store.peek(&p, key.as_bytes(), 1).await.unwrap();
        assert!(d.allowed, "{key}: {d:?}");
        assert_eq!(
            LIMIT - d.remaining - 1,
            rounds,
            "{key}: counted after {rounds} rounds"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_started_while_redis_is_down_follows_its_failure_modes_until_redis_comes() {
    let mut server = RedisServer::start();
    server.kill();
    let target = Target::Standalone(server.url());
    assert!(
        RedisStore::builder(target.clone())
            .timeout(STORE_TIMEOUT)
            .connect()
            .await
            .is_err(),
        "an eager connect reports the unreachable redis"
    );
    let store = RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .probe_interval(Duration::from_millis(100))
        .connect_lazy()
        .await
        .unwrap();
    let engine = Engine::new(store);
    let open = policy("lazy-open", FailureMode::FailOpen);
    let closed = policy("lazy-closed", FailureMode::FailClosed);
    let v = engine.check(&open, b"k", 1).await.unwrap();
    assert!(v.allowed() && v.outcome() == Outcome::Degraded, "{v:?}");
    assert_eq!(v.store_error().and_then(|e| e.class()), Some("connection"));
    let v = engine.check(&closed, b"k", 1).await.unwrap();
    assert!(!v.allowed() && v.outcome() == Outcome::Error, "{v:?}");
    assert!(engine.store().ping().await.is_err());

    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = engine.check(&closed, b"k", 1).await.unwrap();
        if v.outcome() != Outcome::Error {
            assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the store never connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    engine.store().ping().await.unwrap();
}
