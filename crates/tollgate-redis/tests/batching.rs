//! Many decisions per script call: decisions waiting for the same node (or cluster slot) go out
//! as one call of the batch script, each decided as it would be alone, each keeping its own
//! deadline, none applied twice; and one task at a time still sends single calls.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tollgate::{Algorithm, Anchor, Decisions, ManualClock, MemoryStore, Policy, Rate, Rule, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

const HOUR: Duration = Duration::from_secs(3600);

fn policy(name: &str, algorithm: Result<Algorithm, tollgate::PolicyError>) -> Policy {
    Policy::new(name, algorithm.expect("algorithm")).expect("policy")
}

/// The Redis key name of `key`'s state under `policy`.
fn state_name(policy: &Policy, key: &str) -> String {
    let (names, _) = RedisStore::script_call("tollgate:", policy, key.as_bytes(), 1);
    String::from_utf8(names[0].clone()).expect("ascii key name")
}

/// `tasks` tasks, started together, each checking one key `per_task` times: how many were
/// admitted.
async fn flood(store: &RedisStore, policy: &Policy, tasks: u64, per_task: u64) -> u64 {
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(tasks as usize));
    let mut handles = vec![];
    for _ in 0..tasks {
        let (store, policy) = (store.clone(), policy.clone());
        let (admitted, start) = (admitted.clone(), start.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..per_task {
                let decision = store.check(&policy, b"hot", 1).await.expect("check");
                admitted.fetch_add(u64::from(decision.allowed), Ordering::Relaxed);
            }
        }));
    }
    for handle in handles {
        handle.await.expect("task");
    }
    admitted.load(Ordering::Relaxed)
}

async fn exact_under_batching(target: Target) {
    let clock = ManualClock::new(T0_US);
    let store = common::exact_store(target.clone(), &clock).await;
    let policies = [
        policy("batch-fw", Algorithm::fixed_window(100, HOUR, Anchor::Epoch)),
        policy("batch-log", Algorithm::sliding_log(100, HOUR)),
        policy("batch-sw", Algorithm::sliding_window(100, HOUR)),
        policy(
            "batch-tb",
            Algorithm::token_bucket(100, Rate::per_hour(1).expect("rate")),
        ),
        policy(
            "batch-lb",
            Algorithm::leaky_bucket(100, Rate::per_hour(1).expect("rate")),
        ),
        policy(
            "batch-gcra",
            Algorithm::gcra(Rate::per_hour(1).expect("rate"), 100),
        ),
    ];
    for policy in &policies {
        let before = store.stats();
        assert_eq!(
            flood(&store, policy, 200, 5).await,
            100,
            "{} on {target:?}",
            policy.name()
        );
        let after = store.stats();
        assert!(
            after.batch_calls > before.batch_calls,
            "200 tasks at once must share calls: {after:?}"
        );
        // Every decision went to Redis once: alone, or in a batch.
        let decisions = (after.redis_calls - before.redis_calls) - (after.batch_calls - before.batch_calls)
            + (after.batched_decisions - before.batched_decisions);
        assert_eq!(decisions, 1_000, "{after:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_decisions_on_one_key_admit_exactly_the_limit() {
    let server = RedisServer::start();
    exact_under_batching(Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_decisions_on_one_key_admit_exactly_the_limit_on_a_cluster() {
    let cluster = RedisCluster::start();
    exact_under_batching(Target::Cluster(cluster.urls())).await;
}

/// 200 tasks at once each charge one hot key 3 units, past its limit: the charges share batch
/// calls as decisions do, and each is recorded exactly once (a last charge of 1 owes every unit
/// past the limit).
async fn charges_batched_and_recorded_once(target: Target) {
    let clock = ManualClock::new(T0_US);
    let store = common::exact_store(target.clone(), &clock).await;
    let policies = [
        policy("charge-fw", Algorithm::fixed_window(100, HOUR, Anchor::Epoch)),
        policy("charge-log", Algorithm::sliding_log(100, HOUR)),
        policy(
            "charge-gcra",
            Algorithm::gcra(Rate::per_hour(1).expect("rate"), 100),
        ),
    ];
    for policy in &policies {
        let before = store.stats();
        let start = Arc::new(tokio::sync::Barrier::new(200));
        let handles: Vec<_> = (0..200)
            .map(|_| {
                let (store, policy, start) = (store.clone(), policy.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store
                        .charge(&[Rule::new(&policy, b"hot", 3)])
                        .await
                        .expect("charge");
                })
            })
            .collect();
        for handle in handles {
            handle.await.expect("task");
        }
        let after = store.stats();
        assert!(
            after.batch_calls > before.batch_calls,
            "200 charges at once must share calls: {after:?}"
        );
        let last = store
            .charge(&[Rule::new(policy, b"hot", 1)])
            .await
            .expect("charge");
        assert_eq!(last[0].debt, 601 - 100, "{} on {target:?}", policy.name());
        assert!(!last[0].decision.allowed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_charges_are_each_recorded_once() {
    let server = RedisServer::start();
    charges_batched_and_recorded_once(Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_charges_are_each_recorded_once_on_a_cluster() {
    let cluster = RedisCluster::start();
    charges_batched_and_recorded_once(Target::Cluster(cluster.urls())).await;
}

fn same(redis: &Decisions, memory: &Decisions) -> bool {
    redis.as_slice().len() == memory.as_slice().len()
        && redis.as_slice().iter().zip(memory.as_slice()).all(|(r, m)| {
            r.allowed == m.allowed
                && r.remaining == m.remaining
                && r.reset_after == m.reset_after
                && r.retry_after == m.retry_after
        })
}

/// One batch call holding requests that pass and requests that are denied, of every algorithm,
/// a shadow rule, peeks, runs of requests that share their head, and a request whose key holds a
/// value the store did not write: each is
/// answered as the memory store answers the same requests in the same order, and the broken one
/// gets its own error. Redis has forgotten the scripts (`SCRIPT FLUSH`) when the batch arrives.
#[tokio::test(flavor = "current_thread")]
async fn one_batch_decides_each_request_as_it_would_alone() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    // One call in flight: the first request goes out alone, every later one waits for it and
    // they go out together.
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .clock(clock.clone())
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .batch_calls_in_flight(1)
        .connect()
        .await
        .expect("connect");
    let memory = MemoryStore::builder().clock(clock.clone()).build();
    let fw = policy("mix-fw", Algorithm::fixed_window(2, HOUR, Anchor::Epoch));
    let log = policy("mix-log", Algorithm::sliding_log(3, HOUR));
    let sw = policy("mix-sw", Algorithm::sliding_window(2, HOUR));
    let tb = policy(
        "mix-tb",
        Algorithm::token_bucket(2, Rate::per_hour(1).expect("rate")),
    );
    let lb = policy(
        "mix-lb",
        Algorithm::leaky_bucket(2, Rate::per_hour(1).expect("rate")),
    );
    let gcra = Policy::new(
        "mix-gcra",
        Algorithm::gcra(Rate::per_hour(1).expect("rate"), 2).expect("gcra"),
    )
    .expect("policy")
    .with_block_for(HOUR)
    .expect("penalty");
    let broken = policy("mix-broken", Algorithm::fixed_window(5, HOUR, Anchor::Epoch));
    server.cli(&["SET", &state_name(&broken, "k"), "not a hash"]);
    // Neither script is loaded: the single call and the batch call each load theirs on NOSCRIPT.
    server.script_flush();

    let requests: Vec<(Vec<Rule<'_>>, bool)> = vec![
        (vec![Rule::new(&fw, b"a", 1)], true),
        (vec![Rule::new(&fw, b"a", 1), Rule::new(&log, b"a", 1)], true),
        // Denied by the fixed window (spent): the log must not spend either.
        (vec![Rule::new(&log, b"a", 1), Rule::new(&fw, b"a", 1)], true),
        (vec![Rule::new(&log, b"a", 1)], false),
        (vec![Rule::new(&log, b"a", 2)], true),
        (vec![Rule::new(&broken, b"k", 1)], true),
        (vec![Rule::new(&sw, b"a", 2), Rule::new(&tb, b"a", 1)], true),
        (
            vec![Rule::new(&sw, b"a", 1), Rule::new(&tb, b"a", 1).as_shadow()],
            true,
        ),
        (vec![Rule::new(&tb, b"a", 1), Rule::new(&lb, b"a", 2)], true),
        (vec![Rule::new(&lb, b"a", 1), Rule::new(&gcra, b"a", 3)], true),
        (vec![Rule::new(&gcra, b"a", 1)], true),
        (vec![Rule::new(&gcra, b"a", 1), Rule::new(&fw, b"b", 2)], true),
        // A run of requests that share their head (one rule of the same policy and cost,
        // committed): the call sends it once for all five, each with its own key; the third on
        // `c` is denied.
        (vec![Rule::new(&fw, b"b", 1)], true),
        (vec![Rule::new(&fw, b"c", 1)], true),
        (vec![Rule::new(&fw, b"c", 1)], true),
        (vec![Rule::new(&fw, b"d", 1)], true),
        (vec![Rule::new(&fw, b"c", 1)], true),
        // The same rule as a peek ends the run; the next commit starts another.
        (vec![Rule::new(&fw, b"d", 1)], false),
        (vec![Rule::new(&fw, b"d", 1)], true),
    ];
    let answers = join_all(
        requests
            .iter()
            .map(|(rules, commit)| store.decide(rules, *commit)),
    )
    .await;
    let stats = store.stats();
    assert_eq!(
        stats.redis_calls, 2,
        "the first request alone, then one batch: {stats:?}"
    );
    assert_eq!(stats.batch_calls, 1);
    assert_eq!(stats.batched_decisions, requests.len() as u64 - 1);

    let mut denied = 0;
    for (i, ((rules, commit), answer)) in requests.iter().zip(answers).enumerate() {
        if rules[0].policy.name() == "mix-broken" {
            let err = answer.expect_err("a key holding a string is an error");
            assert_eq!(err.class(), Some("corrupt"), "{err}");
            continue;
        }
        let answer = answer.expect("decided");
        let expected = memory.decide(rules, *commit).expect("memory decides");
        assert!(
            same(&answer, &expected),
            "request {i}: redis {answer:?}, memory {expected:?}"
        );
        denied += usize::from(answer.as_slice().iter().any(|d| !d.allowed));
    }
    assert!(denied >= 3, "the batch must hold denied requests too");
    // The state afterwards agrees as well: a peek of each key is the same on both stores.
    for rule in [
        Rule::new(&fw, b"a", 1),
        Rule::new(&log, b"a", 1),
        Rule::new(&sw, b"a", 1),
        Rule::new(&tb, b"a", 1),
        Rule::new(&lb, b"a", 1),
        Rule::new(&gcra, b"a", 1),
        Rule::new(&fw, b"b", 1),
        Rule::new(&fw, b"c", 1),
        Rule::new(&fw, b"d", 1),
    ] {
        let redis = store.decide(&[rule], false).await.expect("peek");
        let memory = memory.decide(&[rule], false).expect("peek");
        assert!(
            same(&redis, &memory),
            "{}: redis {redis:?}, memory {memory:?}",
            rule.policy.name()
        );
    }
}

/// Redis paused past the deadline while decisions keep arriving: each caller gets its own
/// timeout, queued decisions whose deadline passed are never sent, and every decision that was
/// sent runs exactly once when Redis wakes (the counter in Redis equals the decisions sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_past_the_deadline_times_out_each_decision_and_applies_none_twice() {
    let server = RedisServer::start();
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .deny_cache(false)
        // A deadline of its own, shorter than the pause: the test is about calls that meet it.
        .timeout(Duration::from_millis(150))
        // No breaker: every batch that can go out does, so batches meet the pause.
        .probe_interval(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let fw = policy("paused", Algorithm::fixed_window(1_000_000, HOUR, Anchor::Epoch));
    store.check(&fw, b"k", 1).await.expect("before the pause");
    let before = store.stats();

    server.pause(Duration::from_millis(600));
    // Waves of concurrent decisions while Redis is paused: the first go out at once, the later
    // ones queue behind them and go out together when a call gives up at its deadline.
    let mut handles = vec![];
    for _wave in 0..6 {
        for _ in 0..20 {
            let (store, fw) = (store.clone(), fw.clone());
            handles.push(tokio::spawn(async move { store.check(&fw, b"k", 1).await }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut timeouts = 0;
    let mut admitted = 0u64;
    for handle in handles {
        match handle.await.expect("task") {
            Ok(decision) => admitted += u64::from(decision.allowed),
            Err(err) => {
                assert_eq!(err.class(), Some("timeout"), "{err}");
                timeouts += 1;
            }
        }
    }
    assert!(timeouts > 0, "the pause outlasts the deadline");
    // Let Redis run what it buffered during the pause.
    server.cli(&["PING"]);
    let after = store.stats();
    assert!(after.batch_calls > before.batch_calls, "{after:?}");
    let sent = (after.redis_calls - before.redis_calls) - (after.batch_calls - before.batch_calls)
        + (after.batched_decisions - before.batched_decisions);
    assert!(sent <= 120, "{after:?}");
    assert!(admitted <= sent);
    let counted: u64 = server
        .cli(&["HGET", &state_name(&fw, "k"), "c"])
        .trim()
        .parse()
        .expect("a count");
    assert_eq!(
        counted - 1,
        sent,
        "every decision sent ran exactly once: {after:?}"
    );
}

/// One task at a time never finds a call in flight, so every decision is a single call of the
/// decision script, as without batching.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_sends_single_calls() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = common::exact_store(Target::Standalone(server.url()), &clock).await;
    let gcra = policy(
        "single",
        Algorithm::gcra(Rate::per_second(1000).expect("rate"), 50),
    );
    for i in 0..200u32 {
        store
            .check(&gcra, format!("k{i}").as_bytes(), 1)
            .await
            .expect("check");
    }
    let stats = store.stats();
    assert_eq!(stats.redis_calls, 200, "{stats:?}");
    assert_eq!(stats.batch_calls, 0, "{stats:?}");
    assert_eq!(stats.batched_decisions, 0);
}
