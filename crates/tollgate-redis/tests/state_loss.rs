//! The store notices rate limit state Redis lost (`StoreStats::state_lost`): a restart without
//! persistence, a flush; and never while Redis keeps what it was given, however many instances
//! and concurrent calls. (`failover.rs` shows it noticing a failover to a replica that lagged,
//! once per slot.)

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Algorithm, Anchor, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

fn policy() -> Policy {
    let window = Duration::from_secs(600);
    Policy::new(
        "login",
        Algorithm::fixed_window(1_000, window, Anchor::FirstHit).expect("algorithm"),
    )
    .expect("policy")
}

async fn store(redis: &RedisServer) -> RedisStore {
    RedisStore::builder(Target::Standalone(redis.url()))
        .deny_cache(false)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect")
}

/// `tasks` tasks on each store, each deciding `per_task` keys in turn.
async fn load(stores: &[Arc<RedisStore>], tasks: usize, per_task: usize) {
    let mut handles = vec![];
    for store in stores {
        for t in 0..tasks {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                let policy = policy();
                for i in 0..per_task {
                    let key = format!("k{}", (t * 31 + i) % 97);
                    if i % 5 == 0 {
                        store.peek(&policy, key.as_bytes(), 1).await.expect("peek");
                    } else {
                        store.check(&policy, key.as_bytes(), 1).await.expect("check");
                    }
                }
            }));
        }
    }
    for handle in handles {
        handle.await.expect("task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_under_concurrent_load_notice_no_loss() {
    let redis = RedisServer::start();
    let stores = [Arc::new(store(&redis).await), Arc::new(store(&redis).await)];
    load(&stores, 16, 150).await;
    for store in &stores {
        let stats = store.stats();
        assert!(
            stats.batch_calls > 0,
            "decisions went out in batches too: {stats:?}"
        );
        assert_eq!(stats.state_lost, 0, "{stats:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_and_a_flush_are_noticed_once_each() {
    let mut redis = RedisServer::start();
    let store = store(&redis).await;
    let policy = policy();
    assert!(store.check(&policy, "alice", 1).await.expect("check").allowed);
    assert!(store.check(&policy, "bob", 1).await.expect("check").allowed);
    assert_eq!(store.stats().state_lost, 0);

    redis.kill();
    redis.restart();
    // The connection comes back on its own; calls fail until it does.
    let mut decided = false;
    for _ in 0..200 {
        if store.check(&policy, "alice", 1).await.is_ok() {
            decided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(decided, "the store never reached the restarted server");
    assert_eq!(store.stats().state_lost, 1, "{:?}", store.stats());
    // Noticed once: the calls after it judge the sequence from what the server holds now.
    for key in ["alice", "bob", "carol"] {
        store.check(&policy, key, 1).await.expect("check");
    }
    assert_eq!(store.stats().state_lost, 1);

    redis.cli(&["FLUSHALL"]);
    store.peek(&policy, "alice", 1).await.expect("peek");
    assert_eq!(store.stats().state_lost, 2, "a peek notices too");
}
