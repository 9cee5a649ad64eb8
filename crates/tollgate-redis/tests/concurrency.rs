//! Concurrency limits on a real `redis-server` and a real 3-master cluster: the shared vectors
//! give the memory store's answers exactly, several instances together never hold more than
//! `max_in_flight` leases of a key, every key has a TTL and an emptied key is gone, and a dead
//! Redis is answered by each policy's failure mode.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::exact_store;
use tollgate::concurrency::{Acquire, ConcurrencyPolicy, ConcurrencyStore, LeaseId, Release};
use tollgate::{Engine, FailureMode, HashTag, ManualClock, MemoryStore};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::{self, T0_US};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vectors_give_the_same_answers_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = vectors::run_concurrency(&memory, &clock).await;

    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(
        vectors::run_concurrency(&redis, &clock).await,
        expected,
        "standalone redis"
    );

    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(
        vectors::run_concurrency(&clustered, &clock).await,
        expected,
        "redis cluster"
    );
}

/// `TASKS` tasks over `stores` (separate instances: separate connections) acquire, hold for a
/// moment and release one key, `ROUNDS` times each; a counter of holders, raised after a grant
/// and lowered before the release, must never pass the limit.
async fn never_over_the_limit(stores: Vec<RedisStore>, label: &str) {
    const TASKS: usize = 12;
    const ROUNDS: usize = 40;
    const MAX: u64 = 3;
    let policy = ConcurrencyPolicy::new("stress", MAX, Duration::from_secs(60)).unwrap();
    let holding = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let granted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = stores[t % stores.len()].clone();
        let (policy, holding, most, granted) =
            (policy.clone(), holding.clone(), most.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                match store.acquire(&policy, b"shared").await.expect("redis answers") {
                    Acquire::Granted(lease) => {
                        assert!(lease.in_flight <= MAX);
                        granted.fetch_add(1, Ordering::Relaxed);
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        holding.fetch_sub(1, Ordering::SeqCst);
                        let released = store
                            .release(&policy, b"shared", lease.id)
                            .await
                            .expect("redis answers");
                        assert!(matches!(released, Release::Released { .. }), "{released:?}");
                    }
                    Acquire::Denied(full) => {
                        assert_eq!(full.in_flight, MAX);
                        assert!(full.retry_after <= Duration::from_secs(60));
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!((1..=MAX).contains(&most), "{label}: {most} held at once");
    assert!(granted.load(Ordering::Relaxed) >= MAX, "{label}");
    // Every lease was released: the next MAX acquisitions are all granted.
    for _ in 0..MAX {
        assert!(
            stores[0].acquire(&policy, b"shared").await.unwrap().is_granted(),
            "{label}"
        );
    }
}

async fn instances(target: impl Fn() -> Target, n: usize) -> Vec<RedisStore> {
    let mut stores = Vec::new();
    for _ in 0..n {
        stores.push(common::store(target()).await);
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_together_never_hold_more_than_max_in_flight() {
    let server = RedisServer::start();
    never_over_the_limit(
        instances(|| Target::Standalone(server.url()), 3).await,
        "standalone",
    )
    .await;
    let cluster = RedisCluster::start();
    never_over_the_limit(instances(|| Target::Cluster(cluster.urls()), 3).await, "cluster").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_set_has_a_ttl_and_goes_away_when_emptied() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    let policy = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(30)).unwrap();
    let name = "tollgate:{exports:alice}:leases";
    let Acquire::Granted(lease) = store.acquire(&policy, b"alice").await.unwrap() else {
        panic!("a free slot")
    };
    assert!(lease.expires_in <= Duration::from_secs(30));
    assert_eq!(server.cli(&["TYPE", name]).trim(), "zset");
    let ttl_ms: u64 = server.cli(&["PTTL", name]).trim().parse().unwrap();
    assert!(ttl_ms > 0 && ttl_ms <= 30_000, "PTTL {ttl_ms}");
    let member = server.cli(&["ZRANGE", name, "0", "-1"]);
    assert_eq!(member.trim(), lease.id.to_string());
    assert_eq!(
        store.release(&policy, b"alice", lease.id).await.unwrap(),
        Release::Released { in_flight: 0 }
    );
    assert_eq!(server.cli(&["EXISTS", name]).trim(), "0");
    // Released twice, or never granted: not an error.
    assert_eq!(
        store.release(&policy, b"alice", lease.id).await.unwrap(),
        Release::NotHeld
    );
    assert_eq!(
        store.release(&policy, b"nobody", LeaseId::new(7)).await.unwrap(),
        Release::NotHeld
    );

    // A hash-tagged-by-key policy keeps the key's leases on the key's slot.
    let per_user = ConcurrencyPolicy::new("uploads", 1, Duration::from_secs(5))
        .unwrap()
        .with_hash_tag(HashTag::Key);
    assert!(store.acquire(&per_user, b"bob").await.unwrap().is_granted());
    assert_eq!(
        server.cli(&["TYPE", "tollgate:{bob}uploads:leases"]).trim(),
        "zset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_corrupt_value_not_an_answer() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    server.cli(&["SET", "tollgate:{exports:mallory}:leases", "x"]);
    let policy = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(30)).unwrap();
    let err = store.acquire(&policy, b"mallory").await.unwrap_err();
    assert!(err.class().is_some(), "a store error: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redis_is_answered_by_the_failure_mode() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let store = RedisStore::builder(Target::parse(&url).unwrap())
        .timeout(STORE_TIMEOUT)
        .connect_lazy()
        .await
        .expect("a lazy store needs no server");
    let engine = Engine::new(store);
    let base = ConcurrencyPolicy::new("exports", 4, Duration::from_secs(30)).unwrap();

    let open = engine
        .acquire(&base.clone().with_failure_mode(FailureMode::FailOpen), b"k")
        .await
        .unwrap();
    assert!(open.store_error.is_some());
    assert!(matches!(open.acquire, Acquire::Granted(lease) if lease.degraded));

    let closed = engine
        .acquire(&base.clone().with_failure_mode(FailureMode::FailClosed), b"k")
        .await
        .unwrap();
    assert!(closed.store_error.is_some());
    assert!(matches!(closed.acquire, Acquire::Denied(full) if full.degraded));

    // Local with 2 instances: this instance admits 4 / 2 = 2 on its own.
    let local = base.with_failure_mode(FailureMode::Local {
        instances: std::num::NonZeroU32::new(2).unwrap(),
    });
    let mut leases = Vec::new();
    for _ in 0..2 {
        let Acquire::Granted(lease) = engine.acquire(&local, b"k").await.unwrap().acquire else {
            panic!("the local share has room")
        };
        assert!(lease.degraded);
        assert_eq!(lease.limit, 2);
        leases.push(lease.id);
    }
    assert!(matches!(
        engine.acquire(&local, b"k").await.unwrap().acquire,
        Acquire::Denied(full) if full.degraded
    ));
    // A lease granted locally is released locally, without Redis.
    assert_eq!(
        engine.release(&local, b"k", leases[0]).await.unwrap(),
        Release::Released { in_flight: 1 }
    );
    // Any other release needs Redis: the error comes back for the caller to log.
    let err = engine.release(&local, b"k", LeaseId::new(1)).await.unwrap_err();
    assert!(err.class().is_some(), "{err}");
}
