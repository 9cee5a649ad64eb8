//! Allow and deny list entries kept in Redis for the whole fleet, and the engine applying lists
//! and gradual enforcement over a Redis store and a cluster.

mod common;

use std::time::Duration;

use tollgate::access::{AccessEntry, AccessLists, Added, EntryKind, Listed};
use tollgate::{Algorithm, Enforcement, Engine, Outcome, Policy, Rule};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisCluster, RedisServer};

fn entry(policy: Option<&str>, list: Listed, kind: EntryKind, value: &str) -> AccessEntry {
    AccessEntry::new(policy, list, kind, value).unwrap()
}

/// Two instances over one store see each other's entries; the hash has a TTL.
async fn entries_are_shared(target: Target, ttl_of: impl Fn() -> i64) {
    let one = common::store(target.clone()).await;
    let two = common::store(target).await;
    let deny = entry(Some("login"), Listed::Deny, EntryKind::Cidr, "203.0.113.0/24");
    let allow = entry(None, Listed::Allow, EntryKind::Prefix, "office:");
    assert_eq!(one.add_access_entry(&deny).await.unwrap(), Added::New);
    assert_eq!(one.add_access_entry(&allow).await.unwrap(), Added::New);
    assert_eq!(two.add_access_entry(&deny).await.unwrap(), Added::AlreadyThere);
    let mut seen: Vec<AccessEntry> = two
        .access_entries()
        .await
        .unwrap()
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    seen.sort();
    assert_eq!(seen, [allow.clone(), deny.clone()]);
    let ttl = ttl_of();
    assert!(ttl > 0, "the hash has a TTL, got {ttl}");
    assert!(two.remove_access_entry(&deny).await.unwrap());
    assert!(!one.remove_access_entry(&deny).await.unwrap());
    let left: Vec<AccessEntry> = one
        .access_entries()
        .await
        .unwrap()
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(left, [allow]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_added_on_one_instance_are_read_by_another() {
    let server = RedisServer::start();
    let port = server.port();
    entries_are_shared(Target::Standalone(server.url()), || ttl(port)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_are_shared_on_a_cluster() {
    let cluster = RedisCluster::start();
    let ports = cluster.ports();
    entries_are_shared(Target::Cluster(cluster.urls()), || {
        ports.iter().map(|&p| ttl(p)).max().unwrap_or(-2)
    })
    .await;
}

/// `PTTL` of the entries hash (default prefix) on the node at `port`, -2 when absent there.
fn ttl(port: u16) -> i64 {
    let out = std::process::Command::new("redis-cli")
        .args([
            "-p",
            &port.to_string(),
            "--no-raw",
            "PTTL",
            "tollgate:{access-lists}",
        ])
        .output()
        .expect("redis-cli runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().trim_start_matches("(integer) ").parse().unwrap_or(-2)
}

/// Deny blocks without spending, allow never limits, a gradual share shadows the others.
async fn lists_and_shares_decide(store: RedisStore) {
    let engine = Engine::builder(store)
        .access_lists(AccessLists::new([
            entry(None, Listed::Deny, EntryKind::Cidr, "2001:db8:bad::/48"),
            entry(Some("api"), Listed::Allow, EntryKind::Key, "office"),
        ]))
        .build();
    let api = Policy::new(
        "api",
        Algorithm::gcra(tollgate::Rate::per_minute(1).unwrap(), 1).unwrap(),
    )
    .unwrap();
    let login = Policy::new(
        "login",
        Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    let blocked = engine
        .check_all(&[Rule::new(&api, "k", 1), Rule::new(&login, "2001:db8:bad::1", 1)])
        .await
        .unwrap();
    assert_eq!(blocked.outcome(), Outcome::Blocked);
    assert!(
        engine.check(&api, b"k", 1).await.unwrap().allowed(),
        "nothing was spent"
    );
    for _ in 0..3 {
        let office = engine.check(&api, b"office", 1).await.unwrap();
        assert_eq!(office.outcome(), Outcome::Allowed);
        assert_eq!(office.rules()[0].decision.remaining, 1, "read, not spent");
    }
    let share = Enforcement::percent(50).unwrap();
    let half = Policy::new(
        "half",
        Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap(),
    )
    .unwrap()
    .with_enforcement(share);
    for i in 0..40 {
        let key = format!("client-{i}");
        engine.check(&half, key.as_bytes(), 1).await.unwrap();
        let second = engine.check(&half, key.as_bytes(), 1).await.unwrap();
        let expected = if share.enforces("half", key.as_bytes()) {
            Outcome::Denied
        } else {
            Outcome::ShadowDenied
        };
        assert_eq!(second.outcome(), expected, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_gradual_enforcement_on_redis() {
    let server = RedisServer::start();
    lists_and_shares_decide(common::store(Target::Standalone(server.url())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_gradual_enforcement_on_a_cluster() {
    let cluster = RedisCluster::start();
    lists_and_shares_decide(common::store(Target::Cluster(cluster.urls())).await).await;
}

/// Entries of 8 KiB reach the byte bound long before the count bound: the hash never holds more
/// than `MAX_ACCESS_BYTES` of them, and a removal makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_entries_are_bounded_by_their_bytes() {
    let server = RedisServer::start();
    let store = common::store(Target::Standalone(server.url())).await;
    let value = |i: usize| format!("{i:08}{}", "k".repeat(tollgate::bounds::MAX_KEY_LEN - 8));
    let size = entry(None, Listed::Deny, EntryKind::Key, &value(0)).encoded_len();
    let fit = tollgate_redis::MAX_ACCESS_BYTES / size;
    assert!(fit < tollgate_redis::MAX_ACCESS_ENTRIES);
    for i in 0..fit {
        let added = store
            .add_access_entry(&entry(None, Listed::Deny, EntryKind::Key, &value(i)))
            .await
            .unwrap();
        assert_eq!(added, Added::New, "entry {i}");
    }
    let past = entry(None, Listed::Deny, EntryKind::Key, &value(fit));
    assert_eq!(
        store.add_access_entry(&past).await.unwrap(),
        Added::TooLarge {
            held_bytes: (fit * size) as u64,
            max_bytes: tollgate_redis::MAX_ACCESS_BYTES as u64,
        }
    );
    assert_eq!(store.access_entries().await.unwrap().len(), fit);
    assert!(
        store
            .remove_access_entry(&entry(None, Listed::Deny, EntryKind::Key, &value(0)))
            .await
            .unwrap()
    );
    assert_eq!(store.add_access_entry(&past).await.unwrap(), Added::New);
}
