//! The local deny cache answers a one-key flood without Redis once Redis has denied the key.

use std::time::Duration;

use tollgate::{Algorithm, Policy, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

async fn flood(store: &RedisStore, policy: &Policy, checks: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..checks {
        let d = store.check(policy, b"bot", 1).await.unwrap();
        if d.allowed {
            admitted += 1;
        } else {
            assert!(d.retry_after.unwrap() > Duration::ZERO);
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_key_flood_stays_local_after_the_first_denial() {
    let server = RedisServer::start();
    let policy = Policy::new(
        "movies",
        Algorithm::sliding_log(5, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();

    let cached = RedisStore::builder(Target::Standalone(server.url()))
        .prefix("on:")
        .connect()
        .await
        .unwrap();
    assert_eq!(flood(&cached, &policy, 1_000).await, 5);
    let stats = cached.stats();
    assert_eq!(stats.redis_calls, 6, "5 admissions and the first denial");
    assert_eq!(stats.deny_cache_hits, 994);

    let uncached = RedisStore::builder(Target::Standalone(server.url()))
        .prefix("off:")
        .deny_cache(false)
        .connect()
        .await
        .unwrap();
    assert_eq!(flood(&uncached, &policy, 1_000).await, 5);
    assert_eq!(uncached.stats().redis_calls, 1_000);

    // A reset on this instance clears its cached denial.
    cached.reset(&policy, b"bot").await.unwrap();
    assert!(cached.check(&policy, b"bot", 1).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_denial_never_blocks_a_smaller_cost() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let policy = Policy::new(
        "export",
        Algorithm::sliding_log(10, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    assert!(store.check(&policy, b"tenant", 8).await.unwrap().allowed);
    assert!(!store.check(&policy, b"tenant", 5).await.unwrap().allowed);
    assert!(!store.check(&policy, b"tenant", 6).await.unwrap().allowed);
    assert_eq!(store.stats().deny_cache_hits, 1);
    assert!(
        store.check(&policy, b"tenant", 2).await.unwrap().allowed,
        "2 still fit"
    );
}
