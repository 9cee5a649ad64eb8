//! Memory, standalone Redis and Redis Cluster give exactly the same decisions: the shared
//! vectors, then random traffic compared step by step.

mod common;

use common::{Rng, exact_store, random_policy};
use tollgate::{AttemptsStore, ManualClock, MemoryStore, Store};
use tollgate_redis::Target;
use tollgate_testkit::vectors::{self, T0_US};
use tollgate_testkit::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vectors_give_the_same_decisions_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = vectors::run(&memory, &clock).await;

    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(vectors::run(&redis, &clock).await, expected, "standalone redis");

    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(vectors::run(&clustered, &clock).await, expected, "redis cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_traffic_gives_the_same_decisions_on_memory_and_redis() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    for seed in 0..36 {
        let mut rng = Rng::new(seed);
        let policy = random_policy(seed, &mut rng);
        let clock = ManualClock::new(T0_US + rng.below(1_000_000));
        let memory = MemoryStore::builder().clock(clock.clone()).build();
        let redis = exact_store(Target::Standalone(server.url()), &clock).await;
        let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
        let key = format!("key-{seed}");
        for step in 0..60 {
            let max_wait = if rng.below(4) == 0 { 60_000 } else { 3_000 };
            clock.advance(std::time::Duration::from_micros(rng.below(max_wait)));
            let cost = if rng.below(3) == 0 {
                rng.between(1, policy.max_cost())
            } else {
                1
            };
            let op = rng.below(10);
            let context = format!("seed {seed} step {step} {policy:?} cost {cost}");
            if op == 0 {
                memory.reset(&policy, &key).unwrap();
                Store::reset(&redis, &policy, key.as_bytes()).await.unwrap();
                Store::reset(&clustered, &policy, key.as_bytes()).await.unwrap();
                continue;
            }
            let (want, got, got_cluster) = if op < 3 {
                (
                    memory.peek(&policy, &key, cost).unwrap(),
                    redis.peek(&policy, key.as_bytes(), cost).await.unwrap(),
                    clustered.peek(&policy, key.as_bytes(), cost).await.unwrap(),
                )
            } else {
                (
                    memory.check(&policy, &key, cost).unwrap(),
                    redis.check(&policy, key.as_bytes(), cost).await.unwrap(),
                    clustered.check(&policy, key.as_bytes(), cost).await.unwrap(),
                )
            };
            assert_eq!(got, want, "standalone: {context}");
            assert_eq!(got_cluster, want, "cluster: {context}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_agree_on_memory_and_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    let hour = std::time::Duration::from_secs(3600);
    for step in 0..40u64 {
        clock.advance(std::time::Duration::from_secs(step * 37 % 300));
        let key = format!("login:{}", step % 3);
        let key = key.as_bytes();
        match step % 5 {
            0..=2 => assert_eq!(
                memory.increment_attempts(key, hour).unwrap(),
                redis.increment_attempts(key, hour).await.unwrap()
            ),
            3 => assert_eq!(
                memory.check_limit(key, 3).unwrap(),
                redis.check_limit(key, 3).await.unwrap()
            ),
            _ => {
                assert_eq!(memory.get_ttl(key).unwrap(), redis.get_ttl(key).await.unwrap());
                assert_eq!(
                    memory.get_attempts(key).unwrap(),
                    redis.get_attempts(key).await.unwrap()
                );
            }
        }
        if step == 20 {
            memory.reset_attempts(key).unwrap();
            redis.reset_attempts(key).await.unwrap();
        }
    }
}
