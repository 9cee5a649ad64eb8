//! The local deny cache answers a one-key flood without Redis once Redis has denied the key.

mod common;

use std::time::Duration;

use tollgate::{Algorithm, Policy, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};

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
        .timeout(STORE_TIMEOUT)
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
        .timeout(STORE_TIMEOUT)
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
    let store = common::store_at(&server.url()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_one_instance_clears_every_instance_deny_cache() {
    let server = RedisServer::start();
    // A long penalty: without the reset reaching it, instance B would deny for an hour.
    let policy = Policy::new(
        "login",
        Algorithm::fixed_window(2, Duration::from_secs(60), tollgate::Anchor::FirstHit).unwrap(),
    )
    .unwrap()
    .with_block_for(Duration::from_secs(3600))
    .unwrap();
    let a = common::store_at(&server.url()).await;
    let b = common::store_at(&server.url()).await;

    assert_eq!(flood(&b, &policy, 10).await, 2);
    let hits = b.stats().deny_cache_hits;
    assert!(hits > 0, "b answers the flood from its deny cache");
    assert!(!b.check(&policy, b"bot", 1).await.unwrap().allowed);
    assert_eq!(b.stats().deny_cache_hits, hits + 1, "still cached");

    a.reset(&policy, b"bot").await.unwrap();
    assert_eq!(a.stats().reset_publish_failures, 0);
    // The reset reaches b one pub/sub hop after a's call returns; wait for it, boundedly.
    let mut checks = 0;
    loop {
        checks += 1;
        let calls_before = b.stats().redis_calls;
        let d = b.check(&policy, b"bot", 1).await.unwrap();
        if d.allowed {
            assert_eq!(b.stats().redis_calls, calls_before + 1, "decided by redis");
            break;
        }
        assert!(checks < 500, "b still denies from its cache: {:?}", b.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Without the channel, b would deny from its cache for the whole penalty: a store that does
    // not listen (no deny cache) is not affected, and one reset more is harmless.
    let c = RedisStore::builder(Target::Standalone(server.url()))
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    Store::reset(&c, &policy, b"bot").await.unwrap();
    assert!(c.check(&policy, b"bot", 1).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_reaches_the_deny_caches_of_cluster_instances() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let policy = Policy::new(
        "api",
        Algorithm::fixed_window(1, Duration::from_secs(60), tollgate::Anchor::FirstHit).unwrap(),
    )
    .unwrap()
    .with_block_for(Duration::from_secs(3600))
    .unwrap();
    let target = Target::Cluster(cluster.urls());
    let a = common::store(target.clone()).await;
    let b = common::store(target).await;
    assert_eq!(flood(&b, &policy, 5).await, 1);
    assert!(b.stats().deny_cache_hits > 0);
    a.reset(&policy, b"bot").await.unwrap();
    let mut checks = 0;
    while !b.check(&policy, b"bot", 1).await.unwrap().allowed {
        checks += 1;
        assert!(checks < 500, "b still denies from its cache: {:?}", b.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_raises_the_limit_is_not_answered_from_a_denial_of_the_old_one() {
    let server = RedisServer::start();
    let window = Duration::from_secs(3600);
    let old = Policy::new(
        "api",
        Algorithm::fixed_window(5, window, tollgate::Anchor::Epoch).unwrap(),
    )
    .unwrap()
    .with_generation(1);
    let raised = Policy::new(
        "api",
        Algorithm::fixed_window(20, window, tollgate::Anchor::Epoch).unwrap(),
    )
    .unwrap()
    .with_generation(2);
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    assert_eq!(flood(&store, &old, 10).await, 5);
    assert!(
        store.stats().deny_cache_hits > 0,
        "the old limit's denial is cached"
    );
    // After the reload, the key has 15 left under the raised limit: asked of Redis, not the cache.
    let after = store.check(&raised, b"bot", 1).await.unwrap();
    assert!(after.allowed, "{after:?}");
    assert_eq!(after.remaining, 14);
}
