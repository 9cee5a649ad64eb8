//! What ends up in Redis: every key has a TTL (but the slot sequences, one per slot), keys of one
//! decision share a slot, bad input never reaches Redis, and values we did not write give a typed
//! error.

mod common;

use std::time::Duration;

use tollgate::{Algorithm, Anchor, Error, Policy, Rate, StoreErrorKind};
use tollgate_redis::{ConnectError, RedisStore, Target};
use tollgate_testkit::RedisServer;

fn every_algorithm() -> Vec<Policy> {
    let minute = Duration::from_secs(60);
    let rate = Rate::per_second(10).unwrap();
    [
        Algorithm::fixed_window(10, minute, Anchor::Epoch),
        Algorithm::fixed_window(10, minute, Anchor::FirstHit),
        Algorithm::sliding_log(10, minute),
        Algorithm::sliding_window(10, minute),
        Algorithm::token_bucket(10, rate),
        Algorithm::leaky_bucket(10, rate),
        Algorithm::gcra(rate, 10),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, a)| {
        Policy::new(format!("ttl-{i}"), a.unwrap())
            .unwrap()
            .with_block_for(Duration::from_secs(30))
            .unwrap()
    })
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_gets_a_ttl_and_idle_keys_vanish() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    for policy in every_algorithm() {
        for _ in 0..12 {
            store.check(&policy, b"user:{7} x", 1).await.unwrap();
        }
    }
    store
        .increment_attempts(b"login:alice", Duration::from_secs(600))
        .await
        .unwrap();
    let keys = server.cli(&["--scan", "--pattern", "tollgate:*"]);
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert!(keys.len() >= 9, "{keys:?}");
    // The one exception: a slot's sequence (standalone Redis has one), which must not vanish
    // while idle, or it would look like lost state (see `state_loss`). One per slot at most.
    let (sequences, keys): (Vec<&str>, Vec<&str>) = keys.into_iter().partition(|k| k.ends_with("}:seq"));
    assert_eq!(sequences, ["tollgate:{3560}:seq"]);
    for key in keys {
        let ttl: i64 = server.cli(&["PTTL", key]).trim().parse().unwrap();
        assert!(ttl > 0, "{key} has no ttl ({ttl})");
    }
    // A policy with a 5 ms window leaves nothing behind soon after.
    let short = Policy::new(
        "short",
        Algorithm::sliding_log(1, Duration::from_millis(5)).unwrap(),
    )
    .unwrap();
    store.check(&short, b"k", 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(server.cli(&["EXISTS", "tollgate:{short:k}"]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_before_any_redis_call() {
    let mut server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    server.kill();
    let policy = Policy::new("p", Algorithm::sliding_log(5, Duration::from_secs(1)).unwrap()).unwrap();
    assert!(matches!(
        store.check(&policy, b"k", 0).await,
        Err(Error::ZeroCost)
    ));
    assert!(matches!(
        store.check(&policy, b"k", 6).await,
        Err(Error::CostTooLarge { .. })
    ));
    assert!(matches!(store.peek(&policy, b"", 1).await, Err(Error::EmptyKey)));
    assert!(matches!(
        store.check(&policy, &[b'k'; 9000], 1).await,
        Err(Error::KeyTooLong { .. })
    ));
    assert!(matches!(
        store.check_limit(b"k", 0).await,
        Err(Error::ZeroMaxAttempts)
    ));
    assert!(matches!(
        store.increment_attempts(b"k", Duration::ZERO).await,
        Err(Error::TtlOutOfRange { .. })
    ));
    assert!(matches!(
        RedisStore::builder(Target::Standalone(server.url()))
            .prefix("a{b")
            .timeout(tollgate_testkit::STORE_TIMEOUT)
            .connect()
            .await,
        Err(ConnectError::BadPrefix(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_we_did_not_write_give_a_typed_error() {
    let server = RedisServer::start();
    let store = common::store_at(&server.url()).await;
    let gcra = Policy::new("g", Algorithm::gcra(Rate::per_second(1).unwrap(), 5).unwrap()).unwrap();
    let log = Policy::new("l", Algorithm::sliding_log(5, Duration::from_secs(1)).unwrap()).unwrap();
    let corrupt = |result: Result<tollgate::Decision, Error>| match result {
        Err(Error::Store {
            kind: StoreErrorKind::Corrupt,
            source,
        }) => source.to_string(),
        other => panic!("expected a corrupt-value error, got {other:?}"),
    };

    server.cli(&["SET", "tollgate:{g:string}", "hello"]);
    let message = corrupt(store.check(&gcra, b"string", 1).await);
    assert!(message.contains("WRONGTYPE"), "{message}");

    server.cli(&["HSET", "tollgate:{g:text}", "a", "gcra", "t", "soon"]);
    let message = corrupt(store.check(&gcra, b"text", 1).await);
    assert!(message.contains("field t holds soon"), "{message}");

    server.cli(&["HSET", "tollgate:{g:negative}", "a", "gcra", "t", "-5"]);
    corrupt(store.peek(&gcra, b"negative", 1).await);

    server.cli(&["SET", "tollgate:{l:k}:log", "not a set"]);
    corrupt(store.check(&log, b"k", 1).await);

    server.cli(&["SET", "tollgate:{:login}", "7"]);
    assert!(matches!(
        store.get_attempts(b"login").await,
        Err(Error::Store {
            kind: StoreErrorKind::Corrupt,
            ..
        })
    ));
    // The store is not marked down by one bad key.
    assert!(!store.is_degraded());
    assert!(store.check(&gcra, b"clean", 1).await.unwrap().allowed);
}

/// The memory store's calls, with its key types, work on Redis as they are, plus `.await`: a
/// `&str`, a `String`, bytes and a `Vec` naming the same bytes are one key, on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn str_string_and_byte_keys_are_one_key_as_on_the_memory_store() {
    let server = RedisServer::start();
    let redis = common::store_at(&server.url()).await;
    let memory = tollgate::MemoryStore::new();
    let policy = Policy::new(
        "same-key",
        Algorithm::sliding_log(3, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    let owned = String::from("tenant-7");
    let bytes = b"tenant-7".to_vec();

    let on_redis = [
        redis.check(&policy, "tenant-7", 1).await.unwrap(),
        redis.check(&policy, &owned, 1).await.unwrap(),
        redis.check(&policy, b"tenant-7", 1).await.unwrap(),
        redis.check(&policy, &bytes, 1).await.unwrap(),
    ];
    let on_memory = [
        memory.check(&policy, "tenant-7", 1).unwrap(),
        memory.check(&policy, &owned, 1).unwrap(),
        memory.check(&policy, b"tenant-7", 1).unwrap(),
        memory.check(&policy, &bytes, 1).unwrap(),
    ];
    let remaining =
        |ds: &[tollgate::Decision]| ds.iter().map(|d| (d.allowed, d.remaining)).collect::<Vec<_>>();
    assert_eq!(
        remaining(&on_redis),
        vec![(true, 2), (true, 1), (true, 0), (false, 0)]
    );
    assert_eq!(remaining(&on_redis), remaining(&on_memory));
    assert!(!redis.peek(&policy, owned.clone(), 1).await.unwrap().allowed);

    redis.reset(&policy, "tenant-7").await.unwrap();
    assert!(redis.check(&policy, owned, 1).await.unwrap().allowed);

    // Attempts counters, the same way.
    let hour = Duration::from_secs(3600);
    assert_eq!(redis.increment_attempts("login:alice", hour).await.unwrap(), 1);
    assert_eq!(
        redis
            .increment_attempts(String::from("login:alice"), hour)
            .await
            .unwrap(),
        2
    );
    assert_eq!(redis.get_attempts(b"login:alice").await.unwrap(), 2);
    assert!(redis.get_ttl("login:alice").await.unwrap().is_some());
    assert!(!redis.check_limit("login:alice", 2).await.unwrap().allowed);
    redis.reset_attempts("login:alice").await.unwrap();
    assert!(redis.check_limit("login:alice", 2).await.unwrap().allowed);
}
