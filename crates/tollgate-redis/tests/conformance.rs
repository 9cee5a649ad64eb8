//! Memory, standalone Redis and Redis Cluster give exactly the same decisions: the shared
//! vectors (one rule and many), then random traffic (checks, peeks, resets, refunds and charges)
//! compared step by step, one rule per request and several.

mod common;

use common::{Rng, UNIT, exact_store, random_named_policy, random_policy};
use tollgate::{HashTag, ManualClock, MemoryStore, Rule, Store};
use tollgate_redis::Target;
use tollgate_testkit::vectors::{self, T0_US};
use tollgate_testkit::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vectors_give_the_same_decisions_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = vectors::run(&memory, &clock).await;
    let expected_multi = vectors::run_multi(&memory, &clock).await;

    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(vectors::run(&redis, &clock).await, expected, "standalone redis");
    assert_eq!(
        vectors::run_multi(&redis, &clock).await,
        expected_multi,
        "standalone redis, multi-rule"
    );

    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(vectors::run(&clustered, &clock).await, expected, "redis cluster");
    assert_eq!(
        vectors::run_multi(&clustered, &clock).await,
        expected_multi,
        "redis cluster, multi-rule"
    );
    // The cross-slot requests of the vectors had to give reservations back.
    assert!(clustered.stats().refunds > 0, "{:?}", clustered.stats());
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
            clock.advance(UNIT * rng.below(max_wait) as u32 / 1000);
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
            if op == 4 {
                // A charge within the budget, of it exactly, or into debt up to twice over: its
                // answer (the algorithm's own, with the penalty) and its debt.
                let cost = rng.between(1, 3 * policy.max_cost());
                let rules = [Rule::new(&policy, &key, cost)];
                let want = memory.charge(&rules).unwrap()[0];
                let got = Store::charge(&redis, &rules).await.unwrap()[0];
                let got_cluster = Store::charge(&clustered, &rules).await.unwrap()[0];
                assert_eq!(got, want, "standalone: {context}, a charge of {cost}");
                assert_eq!(got_cluster, want, "cluster: {context}, a charge of {cost}");
                continue;
            }
            let (want, got, got_cluster) = if op == 3 {
                (
                    memory.refund(&policy, &key, cost).unwrap(),
                    Store::refund(&redis, &policy, key.as_bytes(), cost)
                        .await
                        .unwrap(),
                    Store::refund(&clustered, &policy, key.as_bytes(), cost)
                        .await
                        .unwrap(),
                )
            } else if op < 3 {
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
async fn random_multi_rule_requests_give_the_same_decisions_on_memory_and_redis() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let keys: [&[u8]; 2] = [b"alice", b"bob"];
    for seed in 0..24 {
        let mut rng = Rng::new(1000 + seed);
        // Two to four policies of different algorithms, some tagged by key (sharing a slot with
        // the other key-tagged ones), some not.
        let policies: Vec<_> = (0..rng.between(2, 4))
            .map(|p| {
                let policy = random_named_policy(format!("multi-{seed}-{p}"), seed + p, &mut rng);
                if rng.below(2) == 0 {
                    policy.with_hash_tag(HashTag::Key)
                } else {
                    policy
                }
            })
            .collect();
        let clock = ManualClock::new(T0_US + rng.below(1_000_000));
        let memory = MemoryStore::builder().clock(clock.clone()).build();
        let redis = exact_store(Target::Standalone(server.url()), &clock).await;
        let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
        for step in 0..50 {
            let max_wait = if rng.below(4) == 0 { 60_000 } else { 3_000 };
            clock.advance(UNIT * rng.below(max_wait) as u32 / 1000);
            let key = keys[rng.below(2) as usize];
            if rng.below(12) == 0 {
                let policy = &policies[rng.below(policies.len() as u64) as usize];
                memory.reset(policy, key).unwrap();
                Store::reset(&redis, policy, key).await.unwrap();
                Store::reset(&clustered, policy, key).await.unwrap();
                continue;
            }
            // Each policy once, on one of the keys, at a random cost, sometimes in shadow.
            let mut rules: Vec<Rule<'_>> = vec![];
            for policy in &policies {
                if rng.below(4) == 0 {
                    continue;
                }
                let cost = if rng.below(3) == 0 {
                    rng.between(1, policy.max_cost())
                } else {
                    1
                };
                let rule = Rule::new(policy, key, cost);
                rules.push(if rng.below(5) == 0 { rule.as_shadow() } else { rule });
            }
            let commit = rng.below(5) != 0;
            let context = format!("seed {seed} step {step} commit {commit} {rules:?}");
            let want = memory.decide(&rules, commit).unwrap();
            let got = redis.decide(&rules, commit).await.unwrap();
            let got_cluster = clustered.decide(&rules, commit).await.unwrap();
            assert_eq!(got.as_slice(), want.as_slice(), "standalone: {context}");
            assert_eq!(got_cluster.as_slice(), want.as_slice(), "cluster: {context}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_give_the_same_decisions_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = vectors::run_overrides(&memory, &clock).await;

    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(
        vectors::run_overrides(&redis, &clock).await,
        expected,
        "standalone redis"
    );

    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(
        vectors::run_overrides(&clustered, &clock).await,
        expected,
        "redis cluster"
    );
}
