//! Runtime overrides on Redis and Redis Cluster: what the shared vectors (in `conformance.rs`)
//! do not show: a fleet of instances sharing one store, expiry as a Redis TTL, the deny cache, and
//! the stored keys.

mod common;

use std::time::Duration;

use common::exact_store;
use tollgate::overrides::{Override, OverrideStore, OverrideTarget};
use tollgate::{Algorithm, HashTag, ManualClock, Policy, Rate, Rule, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisCluster, RedisServer, STORE_TIMEOUT};

fn log(name: &str, limit: u64) -> Policy {
    Policy::new(
        name,
        Algorithm::sliding_log(limit, Duration::from_secs(60)).unwrap(),
    )
    .unwrap()
}

fn more(policy: &Policy, target: OverrideTarget, limit: u64, ttl: Option<Duration>) -> Override {
    Override::new(
        policy,
        target,
        Algorithm::sliding_log(limit, Duration::from_secs(60)).unwrap(),
        ttl,
    )
    .unwrap()
}

/// Checks on `store` until one is answered with `limit`: a prefix override set elsewhere reaches
/// this instance when its copy is next reloaded, by a task of its own. Bounded.
async fn until_limit(store: &RedisStore, policy: &Policy, key: &[u8], limit: u64) -> u64 {
    for _ in 0..500 {
        let seen = store.peek(policy, key, 1).await.unwrap().limit;
        if seen == limit {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.peek(policy, key, 1).await.unwrap().limit
}

async fn fleet_applies_overrides(target: impl Fn() -> Target) {
    let clock = ManualClock::new(T0_US);
    let a = exact_store(target(), &clock).await;
    let b = exact_store(target(), &clock).await;
    let policy = log("fleet", 1);

    // A key override set on one instance is read by the other's very next decision.
    assert!(b.check(&policy, b"k", 1).await.unwrap().allowed);
    assert!(!b.check(&policy, b"k", 1).await.unwrap().allowed);
    a.set_override(&policy, &more(&policy, OverrideTarget::key("k"), 3, None))
        .await
        .unwrap();
    let d = b.check(&policy, b"k", 1).await.unwrap();
    assert!(d.allowed && d.limit == 3, "{d:?}");

    // A prefix override applies at once on the instance that set it, and on the other once its
    // copy is older than the refresh interval (1 s here) and reloaded.
    a.set_override(&policy, &more(&policy, OverrideTarget::prefix("t:"), 5, None))
        .await
        .unwrap();
    assert_eq!(a.peek(&policy, b"t:1", 1).await.unwrap().limit, 5);
    assert_eq!(
        b.peek(&policy, b"t:1", 1).await.unwrap().limit,
        1,
        "b's copy is fresh"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(until_limit(&b, &policy, b"t:1", 5).await, 5);

    // Both see both, and the list is the same from either.
    let listed = b.list_overrides(&policy, None, 10).await.unwrap();
    let targets: Vec<_> = listed.overrides.iter().map(|o| o.target.clone()).collect();
    assert_eq!(targets, [OverrideTarget::key("k"), OverrideTarget::prefix("t:")]);
    assert_eq!(listed.next, None);
    assert_eq!(a.list_overrides(&policy, None, 10).await.unwrap(), listed);
    let first = a.list_overrides(&policy, None, 1).await.unwrap();
    assert_eq!(first.next, Some(OverrideTarget::key("k")));
    let second = a.list_overrides(&policy, first.next.as_ref(), 1).await.unwrap();
    assert_eq!(second.overrides[0].target, OverrideTarget::prefix("t:"));
    assert_eq!(second.next, None);
    assert_eq!(
        b.override_for(&policy, b"t:9").await.unwrap().map(|o| o.target),
        Some(OverrideTarget::prefix("t:"))
    );

    // Removed on b: a's next decision of the key is the policy's again.
    assert!(
        b.remove_override(&policy, &OverrideTarget::key("k"))
            .await
            .unwrap()
    );
    assert_eq!(a.peek(&policy, b"k", 1).await.unwrap().limit, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_of_a_fleet_applies_overrides_on_redis() {
    let server = RedisServer::start();
    fleet_applies_overrides(|| Target::Standalone(server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_of_a_fleet_applies_overrides_on_a_cluster() {
    let cluster = RedisCluster::start();
    fleet_applies_overrides(|| Target::Cluster(cluster.urls())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_override_is_one_hash_next_to_the_state_with_its_ttl() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10).unwrap(), 10).unwrap()).unwrap();
    let value = Override::new(
        &policy,
        OverrideTarget::key("u:{1}"),
        Algorithm::gcra(Rate::per_second(100).unwrap(), 50).unwrap(),
        Some(Duration::from_secs(3600)),
    )
    .unwrap();
    store.set_override(&policy, &value).await.unwrap();
    let name = "tollgate:{api:u\\;\\(1\\)}:ovr";
    assert_eq!(server.cli(&["HGET", name, "a"]), "gcra");
    assert_eq!(server.cli(&["HGET", name, "p1"]), "10000");
    assert_eq!(server.cli(&["HGET", name, "p2"]), "50");
    let ttl_ms: u64 = server.cli(&["PTTL", name]).parse().unwrap();
    assert!(ttl_ms > 0 && ttl_ms <= 3_600_000, "{ttl_ms}");
    let read = store
        .get_override(&policy, &OverrideTarget::key("u:{1}"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.algorithm, value.algorithm);
    assert!(read.expires_in.is_some_and(|t| t <= Duration::from_secs(3600)));
    // The rate reads back as given, not as its interval.
    assert_eq!(
        read.algorithm,
        Algorithm::gcra(Rate::per_second(100).unwrap(), 50).unwrap()
    );
    assert_eq!(store.check(&policy, b"u:{1}", 1).await.unwrap().limit, 50);

    // Removed: the hash is gone.
    assert!(
        store
            .remove_override(&policy, &OverrideTarget::key("u:{1}"))
            .await
            .unwrap()
    );
    assert_eq!(server.cli(&["EXISTS", name]), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_limit_is_not_hidden_behind_a_cached_denial() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    let policy = log("cached", 1);
    assert!(store.check(&policy, b"k", 1).await.unwrap().allowed);
    assert!(!store.check(&policy, b"k", 1).await.unwrap().allowed);
    assert!(!store.check(&policy, b"k", 1).await.unwrap().allowed);
    assert!(store.stats().deny_cache_hits > 0);
    store
        .set_override(&policy, &more(&policy, OverrideTarget::key("k"), 2, None))
        .await
        .unwrap();
    assert!(store.check(&policy, b"k", 1).await.unwrap().allowed);

    // The same through a prefix override.
    assert!(store.check(&policy, b"p:1", 1).await.unwrap().allowed);
    assert!(!store.check(&policy, b"p:1", 1).await.unwrap().allowed);
    let hits = store.stats().deny_cache_hits;
    assert!(!store.check(&policy, b"p:1", 1).await.unwrap().allowed);
    assert_eq!(store.stats().deny_cache_hits, hits + 1, "the denial is cached");
    store
        .set_override(&policy, &more(&policy, OverrideTarget::prefix("p:"), 2, None))
        .await
        .unwrap();
    assert!(store.check(&policy, b"p:1", 1).await.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_on_one_slot_each_read_their_override_in_one_call_on_a_cluster() {
    let cluster = RedisCluster::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Cluster(cluster.urls()), &clock).await;
    let api = log("api", 1).with_hash_tag(HashTag::Key);
    let export = log("export", 1).with_hash_tag(HashTag::Key);
    store
        .set_override(&export, &more(&export, OverrideTarget::key("u1"), 4, None))
        .await
        .unwrap();
    let calls = store.stats().redis_calls;
    let rules = [Rule::new(&api, "u1", 1), Rule::new(&export, "u1", 1)];
    let decisions = store.decide(&rules, true).await.unwrap();
    let limits: Vec<u64> = decisions.as_slice().iter().map(|d| d.limit).collect();
    assert_eq!(limits, [1, 4]);
    assert_eq!(store.stats().redis_calls, calls + 1, "one script call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_overrides_are_bounded_per_policy_in_redis_too() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = RedisStore::builder(Target::Standalone(server.url()))
        .clock(clock.clone())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let (policy, other) = (log("many", 1), log("other", 1));
    let max = tollgate::overrides::MAX_PREFIX_OVERRIDES;
    for i in 0..max {
        // The first lapses after a minute.
        let ttl = (i == 0).then_some(Duration::from_secs(60));
        store
            .set_override(
                &policy,
                &more(&policy, OverrideTarget::prefix(format!("p{i}:")), 2, ttl),
            )
            .await
            .unwrap();
    }
    let err = store
        .set_override(&policy, &more(&policy, OverrideTarget::prefix("x"), 2, None))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy `many` has 1024 prefix overrides, the most a policy may have"
    );
    assert!(matches!(
        err,
        tollgate::Error::TooManyOverrides { kind: "prefix", .. }
    ));
    // Another policy has room of its own; a replaced one is not one more.
    store
        .set_override(&other, &more(&other, OverrideTarget::prefix("x"), 2, None))
        .await
        .unwrap();
    store
        .set_override(&policy, &more(&policy, OverrideTarget::prefix("p7:"), 3, None))
        .await
        .unwrap();
    // A lapsed one makes room, and is gone from Redis.
    clock.advance(Duration::from_secs(60));
    store
        .set_override(&policy, &more(&policy, OverrideTarget::prefix("x"), 2, None))
        .await
        .unwrap();
    let fields = redis_cli(server.port(), &["HLEN", "tollgate:{:}prefixes"]);
    assert_eq!(
        fields.trim(),
        (max + 1).to_string(),
        "1024 of `many`, 1 of `other`"
    );
}

/// A policy's key overrides are bounded in Redis as in memory. The list is filled to one below
/// the bound directly (100 000 calls through the store would take minutes), as the listing
/// script writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_overrides_are_bounded_per_policy_in_redis_too() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    let (policy, other) = (log("many", 1), log("other", 1));
    let max = tollgate::overrides::MAX_KEY_OVERRIDES;
    let fill = format!(
        "for i = 1, {} do \
           redis.call('HSET', KEYS[1], 'seeded-' .. i, '- sliding_log 2 60000000') \
           redis.call('ZADD', KEYS[2], 0, 'seeded-' .. i) \
         end return redis.call('HLEN', KEYS[1])",
        max - 1
    );
    let filled = redis_cli(
        server.port(),
        &[
            "EVAL",
            &fill,
            "2",
            "tollgate:{:}keys:many",
            "tollgate:{:}key-order:many",
        ],
    );
    assert_eq!(filled.trim(), (max - 1).to_string());
    store
        .set_override(&policy, &more(&policy, OverrideTarget::key("last"), 2, None))
        .await
        .unwrap();
    let err = store
        .set_override(&policy, &more(&policy, OverrideTarget::key("one-more"), 2, None))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy `many` has 100000 key overrides, the most a policy may have"
    );
    assert_eq!(
        store
            .get_override(&policy, &OverrideTarget::key("one-more"))
            .await
            .unwrap(),
        None,
        "nothing written"
    );
    store
        .set_override(&policy, &more(&policy, OverrideTarget::key("last"), 3, None))
        .await
        .unwrap();
    store
        .set_override(&other, &more(&other, OverrideTarget::key("one-more"), 2, None))
        .await
        .unwrap();
    assert!(
        store
            .remove_override(&policy, &OverrideTarget::key("last"))
            .await
            .unwrap()
    );
    store
        .set_override(&policy, &more(&policy, OverrideTarget::key("one-more"), 2, None))
        .await
        .unwrap();
    // Pages of the list, from the middle: in byte order (`seeded-9999` < `seeded-99990`), at
    // most the limit.
    let after = OverrideTarget::key("seeded-99997");
    let page = store.list_overrides(&policy, Some(&after), 1).await.unwrap();
    let keys: Vec<_> = page.overrides.iter().map(|o| o.target.clone()).collect();
    assert_eq!(keys, [OverrideTarget::key("seeded-99998")]);
    assert_eq!(page.next, Some(OverrideTarget::key("seeded-99998")));
    let page = store
        .list_overrides(&policy, page.next.as_ref(), 5)
        .await
        .unwrap();
    let keys: Vec<_> = page.overrides.iter().map(|o| o.target.clone()).collect();
    assert_eq!(keys, [OverrideTarget::key("seeded-99999")]);
    assert_eq!(page.next, None);
}

/// `redis-cli -p port args...`, its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fixed window of 2 per hour on key "k", with a key override of `limit` per hour.
fn window_override(policy: &Policy, limit: u64) -> Override {
    Override::new(
        policy,
        OverrideTarget::key("k"),
        Algorithm::fixed_window(limit, Duration::from_secs(3600), tollgate::Anchor::Epoch).unwrap(),
        None,
    )
    .unwrap()
}

/// A key's state records whether the key had an override when it was written (`v`), so the
/// decisions of a busy key skip reading the override hash. An override set while the state
/// exists marks it, so the very next decision reads the override; a removed override leaves the
/// mark (the next decisions read, find nothing and use the policy); and a state without the mark,
/// as written before it existed, is read as "may have one".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_says_whether_its_key_has_an_override() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    let policy = Policy::new(
        "marked",
        Algorithm::fixed_window(2, Duration::from_secs(3600), tollgate::Anchor::Epoch).unwrap(),
    )
    .unwrap();
    let state = "tollgate:{marked:k}";
    let mark = || server.cli(&["HGET", state, "v"]);

    assert_eq!(store.check(&policy, b"k", 1).await.unwrap().limit, 2);
    assert_eq!(mark(), "0", "written while the key had no override");

    store
        .set_override(&policy, &window_override(&policy, 5))
        .await
        .unwrap();
    assert_eq!(mark(), "1", "setting an override marks the existing state");
    let d = store.check(&policy, b"k", 1).await.unwrap();
    assert!(d.allowed && d.limit == 5 && d.remaining == 3, "{d:?}");

    assert!(
        store
            .remove_override(&policy, &OverrideTarget::key("k"))
            .await
            .unwrap()
    );
    let d = store.check(&policy, b"k", 1).await.unwrap();
    assert!(!d.allowed && d.limit == 2, "the policy's limit again: {d:?}");

    // A state without the mark, with an override beside it: the override is read.
    store
        .set_override(&policy, &window_override(&policy, 9))
        .await
        .unwrap();
    server.cli(&["HDEL", state, "v"]);
    let d = store.check(&policy, b"k", 1).await.unwrap();
    assert!(d.allowed && d.limit == 9, "{d:?}");

    // Without the override's hash, a marked state must not keep the override's limit.
    server.cli(&["DEL", &format!("{state}:ovr")]);
    let d = store.check(&policy, b"k", 1).await.unwrap();
    assert!(!d.allowed && d.limit == 2, "{d:?}");
}
