//! Hot-key leases: the two bounds (never over the limit; at most `instances × max_units` denied
//! that a perfect limiter would have admitted) with two and three instances on one Redis and on a
//! 3-master cluster, and resets, penalties, failures and the deny cache with leases on.
//!
//! Each instance is its own `RedisStore` (its own connections, lease table and deny cache), as
//! separate processes would be. Time is a manual clock shared by every instance and passed to the
//! scripts; durations are minutes so that the keys' real TTLs in Redis never run out meanwhile.

mod common;

use std::sync::Arc;
use std::time::Duration;

use tollgate::{
    Algorithm, Anchor, Engine, FailureMode, LeaseOptions, ManualClock, Outcome, Policy, Rate, Rule, Store,
};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

/// The hold period: a tenth of a window.
const HOLD: Duration = Duration::from_secs(6);
const MAX_UNITS: u64 = 10;
/// Concurrent tasks per instance, and checks per task, in each step.
const TASKS: usize = 3;
const CHECKS: usize = 20;

/// A minute-aligned start, so epoch windows start with the test.
const START_US: u64 = 1_700_000_040_000_000;

fn lease() -> LeaseOptions {
    LeaseOptions::new(MAX_UNITS)
        .and_then(|l| l.hot_per_second(1))
        .and_then(|l| l.hold(HOLD))
        .expect("lease options")
}

async fn fleet(target: &Target, prefix: &str, instances: usize, clock: &ManualClock) -> Vec<Arc<RedisStore>> {
    let mut stores = vec![];
    for _ in 0..instances {
        let store = RedisStore::builder(target.clone())
            .prefix(prefix)
            .clock(clock.clone())
            .timeout(STORE_TIMEOUT)
            .connect()
            .await
            .expect("connect to redis");
        stores.push(Arc::new(store));
    }
    stores
}

/// The instances that get traffic in step `s`: every one in even steps, one in turn in odd steps,
/// so that the others' leases sit unused for a while.
fn active(stores: &[Arc<RedisStore>], s: usize) -> &[Arc<RedisStore>] {
    match s % 2 {
        0 => stores,
        _ => {
            let i = (s / 2) % stores.len();
            &stores[i..=i]
        }
    }
}

/// One step: every instance given runs `TASKS` tasks of `CHECKS` checks of `key` at once;
/// returns (admitted, denied).
async fn step(stores: &[Arc<RedisStore>], policy: &Policy, key: &'static str) -> (u64, u64) {
    let mut tasks = vec![];
    for store in stores {
        for _ in 0..TASKS {
            let store = store.clone();
            let policy = policy.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..CHECKS {
                    let decision = store.check(&policy, key.as_bytes(), 1).await.expect("check");
                    admitted += u64::from(decision.allowed);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.expect("task");
    }
    let demand = (stores.len() * TASKS * CHECKS) as u64;
    (admitted, demand - admitted)
}

/// A fixed window of `limit` per minute: per window, admitted ≤ limit, and the shortfall against
/// a perfect limiter (which admits min(demand, limit)) ≤ instances × max_units.
async fn fixed_window_bounds(target: Target, instances: usize) {
    let limit = 250;
    let window = Duration::from_secs(60);
    let policy = Policy::new(
        format!("fw-{instances}"),
        Algorithm::fixed_window(limit, window, Anchor::Epoch).expect("algorithm"),
    )
    .expect("policy")
    .with_lease(lease())
    .expect("lease");
    let clock = ManualClock::new(START_US);
    let stores = fleet(&target, "fw:", instances, &clock).await;
    let bound = instances as u64 * MAX_UNITS;
    for w in 0..4 {
        let (mut admitted, mut demand) = (0, 0);
        // Window 2 is short: two steps.
        let steps: u32 = if w == 2 { 2 } else { 10 };
        for s in 0..steps {
            let (a, d) = step(active(&stores, s as usize), &policy, "hot").await;
            admitted += a;
            demand += a + d;
            clock.advance(HOLD);
        }
        clock.advance(window - HOLD * steps);
        let perfect = demand.min(limit);
        assert!(
            admitted <= limit,
            "window {w}: admitted {admitted} > limit {limit}"
        );
        assert!(
            perfect - admitted <= bound,
            "window {w}: {} denied that a perfect limiter admits, bound {bound} (demand {demand})",
            perfect - admitted
        );
        if w != 2 {
            assert!(demand > limit, "the test must saturate the window");
        }
    }
    let local: u64 = stores.iter().map(|s| s.lease_stats().local_decisions).sum();
    assert!(local > 0, "leases were used: {:?}", stores[0].lease_stats());
}

/// A token bucket or GCRA of `size` refilled one unit per `interval`: after each step, what was
/// admitted since the start ≤ size + refills, and ≥ that − instances × max_units.
async fn bucket_bounds(
    target: Target,
    instances: usize,
    algorithm: Algorithm,
    size: u64,
    interval: Duration,
) {
    let policy = Policy::new(format!("{}-{instances}", algorithm.name()), algorithm)
        .expect("policy")
        .with_lease(lease())
        .expect("lease");
    let clock = ManualClock::new(START_US);
    let stores = fleet(&target, "bucket:", instances, &clock).await;
    let bound = instances as u64 * MAX_UNITS;
    let mut admitted = 0;
    for s in 0..12u32 {
        let elapsed = HOLD * s;
        let supply = size + (elapsed.as_micros() / interval.as_micros()) as u64;
        let (a, _) = step(active(&stores, s as usize), &policy, "hot").await;
        admitted += a;
        assert!(
            admitted <= supply,
            "step {s}: admitted {admitted} > supply {supply}"
        );
        assert!(
            supply - admitted <= bound,
            "step {s}: {} short of a perfect limiter, bound {bound}",
            supply - admitted
        );
        clock.advance(HOLD);
    }
    let local: u64 = stores.iter().map(|s| s.lease_stats().local_decisions).sum();
    assert!(local > 0, "leases were used");
}

fn gcra() -> (Algorithm, u64, Duration) {
    let rate = Rate::new(100, Duration::from_secs(60)).expect("rate");
    (Algorithm::gcra(rate, 100).expect("gcra"), 100, rate.interval())
}

fn token_bucket() -> (Algorithm, u64, Duration) {
    let rate = Rate::new(100, Duration::from_secs(60)).expect("rate");
    (
        Algorithm::token_bucket(100, rate).expect("bucket"),
        100,
        rate.interval(),
    )
}

async fn every_bound(target: Target) {
    for instances in [2, 3] {
        fixed_window_bounds(target.clone(), instances).await;
        let (algorithm, size, interval) = gcra();
        bucket_bounds(target.clone(), instances, algorithm, size, interval).await;
        let (algorithm, size, interval) = token_bucket();
        bucket_bounds(target.clone(), instances, algorithm, size, interval).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_both_bounds_on_one_redis() {
    let server = RedisServer::start();
    every_bound(Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_keep_both_bounds_on_a_cluster() {
    let cluster = RedisCluster::start();
    every_bound(Target::Cluster(cluster.urls())).await;
}

fn fixed(name: &str, limit: u64) -> Policy {
    Policy::new(
        name,
        Algorithm::fixed_window(limit, Duration::from_secs(60), Anchor::Epoch).expect("algorithm"),
    )
    .expect("policy")
}

/// Checks until this instance holds a lease (bounded).
async fn take_lease(store: &RedisStore, policy: &Policy, key: &str) {
    for _ in 0..50 {
        assert!(
            store
                .check(policy, key.as_bytes(), 1)
                .await
                .expect("check")
                .allowed
        );
        if store.lease_stats().units_leased > 0 {
            return;
        }
    }
    panic!("no lease taken: {:?}", store.lease_stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_admits_without_redis_and_a_peek_sees_it_spent() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START_US);
    let policy = fixed("api", 100).with_lease(lease()).expect("lease");
    let stores = fleet(&Target::Standalone(server.url()), "t:", 1, &clock).await;
    let store = &stores[0];
    take_lease(store, &policy, "k").await;
    let calls = store.stats().redis_calls;
    let decision = store.check(&policy, b"k", 1).await.expect("check");
    assert!(decision.allowed);
    assert_eq!(store.stats().redis_calls, calls, "admitted from the lease");
    // A peek asks Redis, where the leased units are already spent.
    let admitted = store.lease_stats().local_decisions + store.lease_stats().calls;
    let peek = store.peek(&policy, b"k", 1).await.expect("peek");
    let in_redis = 100 - peek.remaining;
    assert!(
        in_redis >= admitted,
        "redis counts {in_redis}, admitted {admitted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_drops_the_lease_here_and_on_every_instance() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START_US);
    let policy = fixed("reset", 100).with_lease(lease()).expect("lease");
    let stores = fleet(&Target::Standalone(server.url()), "t:", 2, &clock).await;
    let (a, b) = (&stores[0], &stores[1]);
    take_lease(a, &policy, "k").await;
    take_lease(b, &policy, "k").await;

    a.reset(&policy, b"k").await.expect("reset");
    assert!(a.lease_stats().units_dropped > 0, "a dropped its own lease");
    let calls = a.lease_stats().calls;
    assert!(a.check(&policy, b"k", 1).await.expect("check").allowed);
    assert_eq!(a.lease_stats().calls, calls + 1, "the next check goes to redis");

    // b hears the reset one pub/sub hop later.
    let mut waited = 0;
    while b.lease_stats().units_dropped == 0 {
        waited += 1;
        assert!(
            waited < 500,
            "b kept its lease after the reset: {:?}",
            b.lease_stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_penalty_stops_every_instance_admitting_from_its_lease() {
    let server = RedisServer::start();
    let clock = ManualClock::new(START_US);
    let policy = fixed("login", 40)
        .with_block_for(Duration::from_secs(3600))
        .expect("block_for")
        .with_lease(lease())
        .expect("lease");
    let stores = fleet(&Target::Standalone(server.url()), "t:", 2, &clock).await;
    let (a, b) = (&stores[0], &stores[1]);
    take_lease(b, &policy, "k").await;
    // a spends the rest of the window until Redis denies it: the penalty starts.
    let mut denied = false;
    for _ in 0..100 {
        if !a.check(&policy, b"k", 1).await.expect("check").allowed {
            denied = true;
            break;
        }
    }
    assert!(denied, "a was never denied");
    // b drops its lease when the message arrives; from then on the key is blocked for b too.
    let mut waited = 0;
    while b.lease_stats().units_dropped == 0 {
        waited += 1;
        assert!(
            waited < 500,
            "b kept its lease after the penalty: {:?}",
            b.lease_stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let decision = b.check(&policy, b"k", 1).await.expect("check");
    assert!(!decision.allowed);
    assert!(
        decision.retry_after >= Some(Duration::from_secs(3000)),
        "{decision:?}"
    );
    // A denied instance answers from its deny cache.
    let hits = a.stats().deny_cache_hits;
    assert!(!a.check(&policy, b"k", 1).await.expect("check").allowed);
    assert_eq!(a.stats().deny_cache_hits, hits + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_a_dead_redis_and_then_the_failure_mode_answers() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new(START_US);
    let policy = fixed("down", 1000)
        .with_failure_mode(FailureMode::FailClosed)
        .with_lease(lease())
        .expect("lease");
    let stores = fleet(&Target::Standalone(server.url()), "t:", 1, &clock).await;
    let engine = Engine::new(stores[0].clone());
    // A busy first period makes the next lease as large as max_units.
    for _ in 0..3 {
        for _ in 0..20 {
            assert!(engine.check(&policy, b"k", 1).await.expect("check").allowed());
        }
        clock.advance(HOLD);
    }
    // Spend down to a fresh lease, then kill Redis.
    let leased = stores[0].lease_stats().units_leased;
    let mut checks = 0;
    while stores[0].lease_stats().units_leased == leased {
        checks += 1;
        assert!(checks < 100, "no new lease");
        assert!(engine.check(&policy, b"k", 1).await.expect("check").allowed());
    }
    server.kill();
    let mut local = 0;
    loop {
        let verdict = engine
            .check_all(&[Rule::new(&policy, "k", 1)])
            .await
            .expect("verdict");
        if verdict.outcome() != Outcome::Allowed {
            assert_eq!(
                verdict.outcome(),
                Outcome::Error,
                "fail_closed answers once the lease is spent"
            );
            break;
        }
        local += 1;
        assert!(
            local <= MAX_UNITS,
            "admitted {local} without redis, more than a lease"
        );
    }
    assert!(local > 0, "the lease served while redis was down");
}
