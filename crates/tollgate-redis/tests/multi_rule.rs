//! Requests of several rules: one script call on standalone Redis (and on a cluster when the
//! rules share a slot), never two racing requests through where only one fits, and on a cluster
//! across slots, reserve-then-refund that leaves a denied request's counters and logs exactly as
//! they were and buckets within their bound, also when a master dies or freezes between a
//! reservation and its refund.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::exact_store;
use tollgate::{
    Algorithm, Anchor, Engine, FailureMode, HashTag, ManualClock, Outcome, Policy, Rate, Rule, Store,
};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisCluster, RedisServer};

const HOUR: Duration = Duration::from_secs(3600);

fn policy(name: &str, algorithm: Result<Algorithm, tollgate::PolicyError>) -> Policy {
    Policy::new(name, algorithm.expect("algorithm")).expect("policy")
}

/// The Redis key names of `key` under `policy` (the state hash, and a sliding log's set), with
/// its override hash, without the slot's sequence (which every call moves).
fn names(policy: &Policy, key: &str) -> Vec<String> {
    RedisStore::script_call("tollgate:", policy, key.as_bytes(), 1)
        .0
        .into_iter()
        .map(|name| String::from_utf8(name).expect("ascii key names"))
        .filter(|name| !name.ends_with("}:seq"))
        .collect()
}

fn five_policies() -> Vec<Policy> {
    vec![
        policy("one-fw", Algorithm::fixed_window(10, HOUR, Anchor::Epoch)),
        policy("one-log", Algorithm::sliding_log(10, HOUR)),
        policy("one-sw", Algorithm::sliding_window(10, HOUR)),
        policy(
            "one-tb",
            Algorithm::token_bucket(10, Rate::per_hour(1).expect("rate")),
        ),
        policy("one-gcra", Algorithm::gcra(Rate::per_hour(1).expect("rate"), 10)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_multi_rule_request_is_one_script_call() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    let policies = five_policies();
    let rules: Vec<Rule<'_>> = policies.iter().map(|p| Rule::new(p, "user-1", 4)).collect();
    for (round, want_allowed) in [(0, true), (1, true), (2, false), (3, false)] {
        let calls = store.stats().redis_calls;
        let script_calls = server.script_calls();
        let decisions = store.decide(&rules, true).await.expect("decide");
        assert!(
            decisions.as_slice().iter().all(|d| d.allowed == want_allowed),
            "round {round}: {decisions:?}"
        );
        assert_eq!(store.stats().redis_calls - calls, 1, "round {round}");
        assert_eq!(server.script_calls() - script_calls, 1, "round {round}");
    }
    let calls = store.stats().redis_calls;
    store.decide(&rules, false).await.expect("peek");
    assert_eq!(store.stats().redis_calls - calls, 1, "a peek of five rules");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_tagged_by_key_are_one_call_on_a_cluster_and_others_one_per_slot() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let by_key: Vec<Policy> = five_policies()
        .into_iter()
        .map(|p| p.with_hash_tag(HashTag::Key))
        .collect();
    let rules: Vec<Rule<'_>> = by_key.iter().map(|p| Rule::new(p, "tenant-9", 1)).collect();
    let calls = store.stats().redis_calls;
    assert!(
        store
            .decide(&rules, true)
            .await
            .expect("decide")
            .as_slice()
            .iter()
            .all(|d| d.allowed)
    );
    assert_eq!(store.stats().redis_calls - calls, 1);

    let spread = five_policies();
    let slots: std::collections::BTreeSet<String> = spread
        .iter()
        .map(|p| cluster.nodes()[0].cli(&["CLUSTER", "KEYSLOT", &names(p, "tenant-9")[0]]))
        .collect();
    let rules: Vec<Rule<'_>> = spread.iter().map(|p| Rule::new(p, "tenant-9", 1)).collect();
    let calls = store.stats().redis_calls;
    assert!(
        store
            .decide(&rules, true)
            .await
            .expect("decide")
            .as_slice()
            .iter()
            .all(|d| d.allowed)
    );
    assert_eq!(
        store.stats().redis_calls - calls,
        slots.len() as u64,
        "one call per slot"
    );
    assert!(
        slots.len() > 1,
        "the test needs rules on several slots: {slots:?}"
    );
}

/// Three budgets of 1 and three kinds of request, each needing two of them: any two requests
/// share a budget, so at most one may pass, however they race. Returns how many passed in the
/// race; with a request made alone after it, exactly one passes.
async fn race_where_only_one_fits(store: &RedisStore, cluster: Option<&RedisCluster>, round: u64) -> u64 {
    let budgets: Vec<Policy> = ["race-a", "race-b", "race-c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let algorithm = match i {
                0 => Algorithm::sliding_log(1, HOUR),
                1 => Algorithm::fixed_window(1, HOUR, Anchor::Epoch),
                _ => Algorithm::sliding_window(1, HOUR),
            };
            policy(&format!("{name}-{round}"), algorithm)
        })
        .collect();
    if let Some(cluster) = cluster {
        let slots: std::collections::BTreeSet<String> = budgets
            .iter()
            .map(|p| cluster.nodes()[0].cli(&["CLUSTER", "KEYSLOT", &names(p, "k")[0]]))
            .collect();
        assert_eq!(
            slots.len(),
            3,
            "round {round}: the budgets must sit on different slots"
        );
    }
    let budgets = Arc::new(budgets);
    let passed = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for task in 0..30usize {
        let (store, budgets, passed) = (store.clone(), budgets.clone(), passed.clone());
        tasks.push(tokio::spawn(async move {
            let (first, second) = (task % 3, (task + 1) % 3);
            let rules = [
                Rule::new(&budgets[first], "k", 1),
                Rule::new(&budgets[second], "k", 1),
            ];
            let decisions = store.decide(&rules, true).await.expect("decide");
            let allowed: Vec<bool> = decisions.as_slice().iter().map(|d| d.allowed).collect();
            if allowed.iter().all(|&a| a) {
                passed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let passed = passed.load(Ordering::Relaxed);
    assert!(
        passed <= 1,
        "round {round}: {passed} requests passed where one fits"
    );
    // What was spent is exactly what the passing request spent: reservations were given back.
    let mut spent = 0;
    for budget in budgets.iter() {
        if !store.peek(budget, b"k", 1).await.expect("peek").allowed {
            spent += 1;
        }
    }
    assert_eq!(spent, 2 * passed, "round {round}");
    // So one request fits, in the race or after it: a request alone afterwards passes exactly
    // when none passed in the race.
    let rules = [Rule::new(&budgets[0], "k", 1), Rule::new(&budgets[1], "k", 1)];
    let decisions = store.decide(&rules, true).await.expect("decide");
    let alone = u64::from(decisions.as_slice().iter().all(|d| d.allowed));
    assert_eq!(
        passed + alone,
        1,
        "round {round}: {passed} passed in the race, {alone} alone after it"
    );
    passed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_where_only_one_fits_never_both_pass_on_standalone_redis() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    for round in 0..20 {
        // One script call per request: the first one decided takes both its budgets.
        assert_eq!(race_where_only_one_fits(&store, None, round).await, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_where_only_one_fits_never_both_pass_on_a_cluster() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    // Each request reserves on both its slots at once and gives back when either denies, so
    // requests that reserve crosswise (one holds a, another b, a third c) deny one another and
    // all give back: a round may pass none (as the crate docs allow, a request can be denied by
    // the reservation of one that was itself denied), never two, and never loses the budget.
    for round in 0..20 {
        race_where_only_one_fits(&store, Some(&cluster), round).await;
    }
}

/// Every field of `key`'s state hash and every entry of its log, read on the cluster.
fn raw_state(cluster: &RedisCluster, policy: &Policy, key: &str) -> Vec<String> {
    raw_state_on(&cluster.nodes()[0], policy, key)
}

/// [`raw_state`], asked of `node` (which follows redirections to the key's master).
fn raw_state_on(node: &RedisServer, policy: &Policy, key: &str) -> Vec<String> {
    names(policy, key)
        .iter()
        .map(|name| match name.ends_with(":log") {
            true => node.cli(&["-c", "ZRANGE", name, "0", "-1", "WITHSCORES"]),
            false => {
                let mut fields: Vec<String> = node
                    .cli(&["-c", "HGETALL", name])
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
                    .chunks(2)
                    .map(|pair| pair.join("="))
                    .collect();
                fields.sort();
                fields.join(",")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_cross_slot_request_leaves_counters_and_logs_as_they_were() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let counted = [
        policy("refund-fw", Algorithm::fixed_window(5, HOUR, Anchor::Epoch)),
        policy(
            "refund-fw-first",
            Algorithm::fixed_window(5, HOUR, Anchor::FirstHit),
        ),
        policy("refund-sw", Algorithm::sliding_window(5, HOUR)),
        policy("refund-log", Algorithm::sliding_log(5, HOUR)),
        policy("refund-log-2", Algorithm::sliding_log(9, HOUR)),
    ];
    let denier = policy("refund-denier", Algorithm::sliding_log(1, HOUR));
    let key = "acct-7";
    // Some history: two entries at different times, one merged entry.
    for at_ms in [0, 10, 10] {
        clock.set_us(T0_US + at_ms * 1000);
        for p in &counted {
            assert!(store.check(p, key.as_bytes(), 1).await.expect("check").allowed);
        }
    }
    assert!(
        store
            .check(&denier, key.as_bytes(), 1)
            .await
            .expect("check")
            .allowed
    );
    // The request comes at the time of the newest entry, so its spend would merge into it.
    for at_ms in [10, 20] {
        clock.set_us(T0_US + at_ms * 1000);
        let before: Vec<_> = counted.iter().map(|p| raw_state(&cluster, p, key)).collect();
        let peeks: Vec<_> = {
            let mut peeks = vec![];
            for p in &counted {
                peeks.push(store.peek(p, key.as_bytes(), 2).await.expect("peek"));
            }
            peeks
        };
        let refunds = store.stats().refunds;
        let mut rules: Vec<Rule<'_>> = counted.iter().map(|p| Rule::new(p, key, 2)).collect();
        rules.push(Rule::new(&denier, key, 1));
        let decisions = store.decide(&rules, true).await.expect("decide");
        let decisions = decisions.as_slice();
        assert!(!decisions[counted.len()].allowed, "at {at_ms} ms");
        assert_eq!(
            &decisions[..counted.len()],
            &peeks[..],
            "untouched budgets at {at_ms} ms"
        );
        assert!(
            store.stats().refunds > refunds,
            "at {at_ms} ms: nothing was refunded"
        );
        let after: Vec<_> = counted.iter().map(|p| raw_state(&cluster, p, key)).collect();
        assert_eq!(after, before, "at {at_ms} ms");
    }
    assert_eq!(store.stats().refund_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_get_reservations_back_and_never_pass_their_capacity() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    const CAPACITY: u64 = 20;
    let slow = Rate::per_hour(1).expect("rate");
    let buckets = Arc::new([
        policy("bound-tb", Algorithm::token_bucket(CAPACITY, slow)),
        policy("bound-lb", Algorithm::leaky_bucket(CAPACITY, slow)),
        policy("bound-gcra", Algorithm::gcra(slow, CAPACITY)),
    ]);
    let denier = Arc::new(policy("bound-denier", Algorithm::sliding_log(1, HOUR)));
    assert!(store.check(&denier, b"k", 1).await.expect("check").allowed);
    // A quiet denied request gives everything back exactly.
    let rules: Vec<Rule<'_>> = buckets
        .iter()
        .map(|p| Rule::new(p, "k", 3))
        .chain([Rule::new(&denier, "k", 1)])
        .collect();
    assert!(!store.decide(&rules, true).await.expect("decide").as_slice()[3].allowed);
    for bucket in buckets.iter() {
        assert_eq!(
            store.peek(bucket, b"k", 1).await.expect("peek").remaining,
            CAPACITY - 1
        );
    }
    // Denied cross-slot requests race plain checks of each bucket: the checks may be denied
    // while a reservation is held, but what they took and what is left always add up to the
    // capacity, and no more than the capacity is ever taken.
    let admitted = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let mut tasks = vec![];
    for task in 0..40usize {
        let (store, buckets, denier, admitted) =
            (store.clone(), buckets.clone(), denier.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                if task % 2 == 0 {
                    let rules: Vec<Rule<'_>> = buckets
                        .iter()
                        .map(|p| Rule::new(p, "k", 2))
                        .chain([Rule::new(&denier, "k", 1)])
                        .collect();
                    let decisions = store.decide(&rules, true).await.expect("decide");
                    assert!(!decisions.as_slice()[3].allowed);
                } else {
                    let b = task / 2 % 3;
                    if store.check(&buckets[b], b"k", 1).await.expect("check").allowed {
                        admitted[b].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    for (b, bucket) in buckets.iter().enumerate() {
        let taken = admitted[b].load(Ordering::Relaxed);
        assert!(taken <= CAPACITY, "{}: {taken} admitted", bucket.name());
        let left = store.peek(bucket, b"k", 1).await.expect("peek");
        let left = if left.allowed { left.remaining + 1 } else { 0 };
        assert_eq!(taken + left, CAPACITY, "{}", bucket.name());
    }
    assert_eq!(store.stats().refund_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_is_invisible_to_multi_rule_requests() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    let clustered = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let policies = five_policies();
    let denier = policy("flush-denier", Algorithm::sliding_log(1, HOUR));
    for round in 0..4u64 {
        server.script_flush();
        cluster.script_flush_all();
        let key = format!("flush-{round}");
        let mut rules: Vec<Rule<'_>> = policies.iter().map(|p| Rule::new(p, &key, 1)).collect();
        for store in [&redis, &clustered] {
            let decisions = store
                .decide(&rules, true)
                .await
                .expect("decide after SCRIPT FLUSH");
            assert!(decisions.as_slice().iter().all(|d| d.allowed));
        }
        // And a denied cross-slot request, whose refund script was flushed too.
        server.script_flush();
        cluster.script_flush_all();
        rules.push(Rule::new(&denier, &key, 2));
        for store in [&redis, &clustered] {
            let decisions = store
                .decide(&rules, true)
                .await
                .expect("denied decide after SCRIPT FLUSH");
            assert!(!decisions.as_slice()[5].allowed);
            assert_eq!(decisions.as_slice()[0].remaining, 8, "untouched budget");
        }
    }
    assert!(clustered.stats().refunds > 0);
    assert_eq!(clustered.stats().refund_failures, 0);
}

/// Questions (`Rule::question`) are decided in the same request, on the state before it, and
/// never spent, exactly as on the memory store: on standalone Redis and across cluster slots
/// (where a slot holding only questions reserves nothing).
async fn questions_match_memory(redis: &RedisStore, clock: &ManualClock) {
    let memory = tollgate::MemoryStore::builder().clock(clock.clone()).build();
    let asked = policy("asked", Algorithm::sliding_log(2, HOUR));
    let spent = policy("spent", Algorithm::gcra(Rate::per_hour(10).expect("rate"), 3));
    let requests: Vec<Vec<Rule<'_>>> = vec![
        vec![Rule::new(&asked, "k", 1).as_question()],
        vec![Rule::new(&asked, "k", 1).as_question(), Rule::new(&asked, "k", 1)],
        vec![Rule::new(&asked, "k", 1).as_question(), Rule::new(&spent, "k", 1)],
        vec![Rule::new(&asked, "k", 1), Rule::new(&spent, "k", 1)],
        vec![Rule::new(&asked, "k", 1).as_question(), Rule::new(&spent, "k", 1)],
        vec![Rule::new(&asked, "k", 2).as_question()],
    ];
    for (i, rules) in requests.iter().enumerate() {
        let on_memory = memory.decide(rules, true).expect("memory");
        let on_redis = redis.decide(rules, true).await.expect("redis");
        assert_eq!(on_memory, on_redis, "request {i}");
    }
    assert!(!memory.peek(&asked, "k", 1).expect("peek").allowed);
    assert!(!redis.peek(&asked, b"k", 1).await.expect("peek").allowed);
    assert_eq!(
        memory.peek(&spent, "k", 1).expect("peek"),
        redis.peek(&spent, b"k", 1).await.expect("peek")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_decided_but_never_spent_as_on_memory() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let redis = exact_store(Target::Standalone(server.url()), &clock).await;
    questions_match_memory(&redis, &clock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_across_cluster_slots_are_decided_but_never_spent_as_on_memory() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let redis = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    questions_match_memory(&redis, &clock).await;
}

/// A request of two rules on two masters of a cluster: a counter (fixed window of 5, cost 2) on
/// the master at index `first`, and a log of 1 on the master at index `second`.
struct TwoMasters {
    cluster: RedisCluster,
    counter: Policy,
    log: Policy,
    first: usize,
    second: usize,
}

const KEY: &str = "acct-3";

impl TwoMasters {
    fn start() -> Self {
        let cluster = RedisCluster::start();
        let index_of = |policy: &Policy| {
            let owner = cluster.slot_owner(cluster.key_slot(&names(policy, KEY)[0]));
            cluster
                .ports()
                .iter()
                .position(|&port| port == owner)
                .expect("a node")
        };
        let counter = policy("aon-counter", Algorithm::fixed_window(5, HOUR, Anchor::Epoch))
            .with_failure_mode(FailureMode::FailClosed);
        let first = index_of(&counter);
        // Bounded: a name lands on one of three masters, so a few tries find another one.
        let (log, second) = (0..100)
            .map(|i| policy(&format!("aon-log-{i}"), Algorithm::sliding_log(1, HOUR)))
            .map(|log| log.with_failure_mode(FailureMode::FailClosed))
            .map(|log| {
                let at = index_of(&log);
                (log, at)
            })
            .find(|&(_, at)| at != first)
            .expect("a log on another master");
        TwoMasters {
            cluster,
            counter,
            log,
            first,
            second,
        }
    }

    fn counter_state(&self) -> Vec<String> {
        raw_state_on(&self.cluster.nodes()[self.first], &self.counter, KEY)
    }

    /// Waits until the counter's master holds a state other than `before`: the request's
    /// reservation, made while the other master is frozen.
    async fn wait_for_reservation(&self, before: &[String]) {
        for _ in 0..500 {
            if self.counter_state() != before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the counter's master never saw the reservation");
    }
}

/// The second slot's master dies after the first slot reserved and before it could be refunded:
/// the request fails (its failure mode answers: closed, so refused), and the first slot, whose
/// master answers, gets its reservation back exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_slot_request_whose_other_master_dies_fails_and_gives_its_reservation_back() {
    let mut two = TwoMasters::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(two.cluster.urls()), &clock).await;
    let engine = Arc::new(Engine::new(store.clone()));
    assert!(
        store
            .check(&two.counter, KEY.as_bytes(), 1)
            .await
            .expect("check")
            .allowed
    );
    let before = two.counter_state();
    let stats = store.stats();

    two.cluster.nodes()[two.second].freeze();
    let request = tokio::spawn({
        let (engine, counter, log) = (engine.clone(), two.counter.clone(), two.log.clone());
        async move {
            let rules = [Rule::new(&counter, KEY, 2), Rule::new(&log, KEY, 1)];
            engine.check_all(&rules).await.expect("valid rules")
        }
    });
    two.wait_for_reservation(&before).await;
    // A frozen process dies of SIGKILL too: the call waiting for it fails at once.
    two.cluster.nodes_mut()[two.second].kill();
    let verdict = request.await.expect("request");

    assert!(
        !verdict.allowed() && verdict.outcome() == Outcome::Error,
        "{verdict:?}"
    );
    assert_eq!(
        verdict.store_error().and_then(|e| e.class()),
        Some("connection"),
        "{verdict:?}"
    );
    assert_eq!(two.counter_state(), before, "the reservation was not given back");
    assert_eq!(store.stats().refunds - stats.refunds, 1);
    assert_eq!(store.stats().refund_failures, stats.refund_failures);
}

/// The second slot denies, and the first slot's master freezes between its reservation and the
/// refund: the request is denied all the same, the refund fails at the store's deadline and is
/// counted, and it is never sent again. What Redis read before the deadline runs once the master
/// thaws: the reservation comes back exactly once (twice would take the earlier spend with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_that_cannot_be_made_is_counted_and_the_request_stays_denied() {
    let two = TwoMasters::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(two.cluster.urls()), &clock).await;
    let engine = Arc::new(Engine::new(store.clone()));
    assert!(
        store
            .check(&two.counter, KEY.as_bytes(), 1)
            .await
            .expect("check")
            .allowed
    );
    // The log is full: its slot denies.
    assert!(
        store
            .check(&two.log, KEY.as_bytes(), 1)
            .await
            .expect("check")
            .allowed
    );
    let before = two.counter_state();
    let stats = store.stats();

    let (first, second) = (&two.cluster.nodes()[two.first], &two.cluster.nodes()[two.second]);
    second.freeze();
    let request = tokio::spawn({
        let (engine, counter, log) = (engine.clone(), two.counter.clone(), two.log.clone());
        async move {
            let rules = [Rule::new(&counter, KEY, 2), Rule::new(&log, KEY, 1)];
            engine.check_all(&rules).await.expect("valid rules")
        }
    });
    two.wait_for_reservation(&before).await;
    first.freeze();
    second.thaw();
    let verdict = request.await.expect("request");
    first.thaw();

    assert!(
        !verdict.allowed() && verdict.outcome() == Outcome::Denied,
        "{verdict:?}"
    );
    assert_eq!(store.stats().refunds - stats.refunds, 1);
    assert_eq!(store.stats().refund_failures - stats.refund_failures, 1);
    // The late refund ran before this read: the master reads its sockets in the order data came.
    assert_eq!(
        two.counter_state(),
        before,
        "the reservation came back other than once"
    );
}
