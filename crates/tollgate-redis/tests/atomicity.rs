//! 200 concurrent tasks × 5 checks on one key with limit 100: exactly 100 admitted, for every
//! exact algorithm (calendar quotas included), on standalone Redis and on a cluster. And 50
//! concurrent login tries against an attempts maximum of 5: exactly 5 counted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::algorithm::calendar_quota::Period;
use tollgate::{Algorithm, Anchor, ManualClock, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

const TASKS: u64 = 200;
const CHECKS_PER_TASK: u64 = 5;
const LIMIT: u64 = 100;

fn exact_policies() -> Vec<Policy> {
    let hour = Duration::from_secs(3600);
    let slow = Rate::per_hour(1).unwrap();
    [
        Algorithm::fixed_window(LIMIT, hour, Anchor::Epoch),
        Algorithm::fixed_window(LIMIT, hour, Anchor::FirstHit),
        Algorithm::sliding_log(LIMIT, hour),
        Algorithm::sliding_window(LIMIT, hour),
        Algorithm::token_bucket(LIMIT, slow),
        Algorithm::leaky_bucket(LIMIT, slow),
        Algorithm::gcra(Rate::per_second(1).unwrap(), LIMIT),
        // The frozen clock is far from any midnight in the zone.
        Algorithm::calendar_quota(LIMIT, Period::Day, "Asia/Kolkata"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, a)| Policy::new(format!("atomic-{i}"), a.unwrap()).unwrap())
    .collect()
}

async fn admitted(store: &RedisStore, policy: &Policy) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for _ in 0..TASKS {
        let (store, policy, admitted) = (store.clone(), policy.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..CHECKS_PER_TASK {
                let decision = store.check(&policy, b"one-hot-key", 1).await.expect("check");
                assert!(!decision.degraded, "redis must decide");
                if decision.allowed {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    admitted.load(Ordering::Relaxed)
}

async fn assert_exact(target: Target) {
    // A frozen clock, so nothing refills while the tasks race.
    let clock = ManualClock::new(tollgate_testkit::vectors::T0_US);
    let store = RedisStore::builder(target.clone())
        .clock(clock)
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    for policy in exact_policies() {
        assert_eq!(
            admitted(&store, &policy).await,
            LIMIT,
            "{} on {target:?}",
            policy.name()
        );
    }
    // And on Redis's own clock, for an algorithm with no window edge to cross.
    let store = RedisStore::builder(target.clone())
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let policy = Policy::new(
        "atomic-redis-time",
        Algorithm::sliding_log(LIMIT, Duration::from_secs(3600)).unwrap(),
    )
    .unwrap();
    assert_eq!(admitted(&store, &policy).await, LIMIT, "redis TIME on {target:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_admits_exactly_the_limit() {
    let server = RedisServer::start();
    assert_exact(Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_admits_exactly_the_limit() {
    let cluster = RedisCluster::start();
    assert_exact(Target::Cluster(cluster.urls())).await;
}

const TRIES: u64 = 50;
const MAX_ATTEMPTS: u64 = 5;

/// 50 tries of one account in parallel tasks (on a multi-threaded runtime), each one call.
async fn tries_allowed(store: &RedisStore, account: &str) -> u64 {
    let mut tasks = vec![];
    for _ in 0..TRIES {
        let (store, account) = (store.clone(), account.to_owned());
        tasks.push(tokio::spawn(async move {
            store
                .try_attempt(&account, MAX_ATTEMPTS, Duration::from_secs(3600))
                .await
                .expect("try")
                .allowed
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += u64::from(task.await.expect("task"));
    }
    allowed
}

async fn assert_tries_exact(target: Target) {
    let store = RedisStore::builder(target.clone())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        tries_allowed(&store, "login:victim").await,
        MAX_ATTEMPTS,
        "{target:?}"
    );
    let refused = store
        .try_attempt("login:victim", MAX_ATTEMPTS, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(
        (refused.allowed, refused.attempts, refused.remaining),
        (false, 5, 0)
    );
    assert!(refused.ttl <= Duration::from_secs(3600) && refused.ttl > Duration::ZERO);
    assert_eq!(store.get_attempts("login:victim").await.unwrap(), MAX_ATTEMPTS);
    // A success clears the counter, and the next round admits exactly the maximum again.
    store.reset_attempts("login:victim").await.unwrap();
    assert_eq!(
        tries_allowed(&store, "login:victim").await,
        MAX_ATTEMPTS,
        "{target:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_redis_counts_exactly_max_of_parallel_login_tries() {
    let server = RedisServer::start();
    assert_tries_exact(Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_counts_exactly_max_of_parallel_login_tries() {
    let cluster = RedisCluster::start();
    assert_tries_exact(Target::Cluster(cluster.urls())).await;
}
