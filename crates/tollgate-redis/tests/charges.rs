//! Charges on Redis and Redis Cluster: rules of several slots and of one budget, one round trip
//! per slot, TTLs that outlive the debt, and reserve-then-settle ending at the actual cost on
//! every store exactly as on the memory store.

mod common;

use std::time::Duration;

use common::exact_store;
use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, Policy, Rate, Rule, Store};
use tollgate_redis::Target;
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisCluster, RedisServer};

fn policies() -> Vec<Policy> {
    let s = Duration::from_secs;
    let per_second = Rate::per_second(1).unwrap();
    [
        Algorithm::fixed_window(4, s(10), Anchor::Epoch).unwrap(),
        Algorithm::sliding_log(4, s(10)).unwrap(),
        Algorithm::sliding_window(4, s(10)).unwrap(),
        Algorithm::token_bucket(4, per_second).unwrap(),
        Algorithm::leaky_bucket(4, per_second).unwrap(),
        Algorithm::gcra(per_second, 4).unwrap(),
    ]
    .into_iter()
    .map(|algorithm| Policy::new(algorithm.name(), algorithm).unwrap())
    .collect()
}

/// Check an estimate of 3, then settle at 1 (refund 2) and at 5 (charge 2); every later answer
/// of each settled key, as each store gives it.
async fn settle(store: &impl Store, clock: &ManualClock) -> Vec<tollgate::Decision> {
    let mut answers = vec![];
    for policy in policies() {
        clock.set_us(T0_US);
        store.check(&policy, b"over", 3).await.unwrap();
        store.check(&policy, b"under", 3).await.unwrap();
        clock.set_us(T0_US + 1_000);
        store.refund(&policy, b"over", 2).await.unwrap();
        let charged = store.charge(&[Rule::new(&policy, "under", 2)]).await.unwrap();
        assert_eq!(charged[0].debt, 1, "{}", policy.name());
        for later_ms in [0, 1_500, 4_000, 10_500, 12_000] {
            clock.set_us(T0_US + 1_000 + later_ms * 1_000);
            answers.push(store.peek(&policy, b"over", 1).await.unwrap());
            answers.push(store.peek(&policy, b"under", 1).await.unwrap());
        }
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserve_then_settle_gives_the_same_answers_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = settle(&memory, &clock).await;
    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(settle(&redis, &clock).await, expected, "standalone redis");
    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(settle(&clustered, &clock).await, expected, "redis cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_across_slots_records_every_rule_and_adds_up_one_budget() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let gcra = Policy::new("gcra", Algorithm::gcra(Rate::per_second(1).unwrap(), 4).unwrap()).unwrap();
    let log = Policy::new("log", Algorithm::sliding_log(4, Duration::from_secs(10)).unwrap()).unwrap();
    // Keys of different slots, and one budget named twice.
    let rules = [
        Rule::new(&gcra, "a", 3),
        Rule::new(&log, "b", 2),
        Rule::new(&gcra, "c", 9),
        Rule::new(&gcra, "a", 3).as_shadow(),
    ];
    let charged = store.charge(&rules).await.unwrap();
    assert_eq!(charged, memory.charge(&rules).unwrap());
    assert_eq!(charged.iter().map(|c| c.debt).collect::<Vec<_>>(), [2, 0, 5, 2]);
    assert_eq!(store.stats().refunds, 0, "a charge needs no refunds");
    for (key, retry) in [("a", 3), ("c", 6)] {
        assert_eq!(
            store.check(&gcra, key, 1).await.unwrap().retry_after,
            Some(Duration::from_secs(retry))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_debt_lives_until_its_debt_is_paid() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    let policy = Policy::new(
        "tb",
        Algorithm::token_bucket(4, Rate::per_second(1).unwrap()).unwrap(),
    )
    .unwrap();
    store.charge(&[Rule::new(&policy, "k", 104)]).await.unwrap();
    // 100 tokens owed, then 4 to refill: the state must live about 104 s.
    let ttl_ms: i64 = server.cli(&["PTTL", "tollgate:{tb:k}"]).trim().parse().unwrap();
    assert!((103_000..=104_000).contains(&ttl_ms), "{ttl_ms}");
    assert!(!store.check(&policy, "k", 1).await.unwrap().allowed);
    // Bad input never reaches Redis.
    assert!(store.charge(&[Rule::new(&policy, "", 1)]).await.is_err());
    assert!(store.charge(&[Rule::new(&policy, "k", 0)]).await.is_err());
}

/// A question of cost 0 ("is the key past its limit?"), for every algorithm: a budget exactly
/// spent is not past it, a key in debt is, until the debt is paid back. Each store's answers,
/// as `(allowed, retry_after)`.
async fn past_the_limit(store: &impl Store, clock: &ManualClock) -> Vec<(bool, Option<Duration>)> {
    let mut answers = vec![];
    for policy in policies() {
        clock.set_us(T0_US);
        let question = [Rule::new(&policy, "q", 0).as_question()];
        store.charge(&[Rule::new(&policy, "q", 4)]).await.unwrap();
        let spent = store.decide(&question, false).await.unwrap().as_slice()[0];
        assert!(
            spent.allowed,
            "{}: a budget exactly spent is not past its limit",
            policy.name()
        );
        store.charge(&[Rule::new(&policy, "q", 1)]).await.unwrap();
        let over = store.decide(&question, false).await.unwrap().as_slice()[0];
        assert!(!over.allowed, "{}: one past the limit", policy.name());
        answers.push((over.allowed, over.retry_after));
        for later_ms in [500, 1_500, 12_500] {
            clock.set_us(T0_US + later_ms * 1_000);
            let d = store.decide(&question, true).await.unwrap().as_slice()[0];
            answers.push((d.allowed, d.retry_after));
        }
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_of_cost_zero_asks_whether_the_key_is_past_its_limit_on_every_store() {
    let clock = ManualClock::new(T0_US);
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let expected = past_the_limit(&memory, &clock).await;
    // Paid back by each algorithm's own clock within the 12.5 s looked at.
    assert!(expected.chunks(4).all(|answers| answers[3].0), "{expected:?}");
    let server = RedisServer::start();
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(past_the_limit(&redis, &clock).await, expected, "standalone redis");
    let cluster = RedisCluster::start();
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    assert_eq!(
        past_the_limit(&clustered, &clock).await,
        expected,
        "redis cluster"
    );
}
