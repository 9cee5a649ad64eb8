//! Every class of store failure under every failure mode, through the core's `Engine`.
//!
//! The Redis store only reports failures; the engine applies each policy's failure mode. Each
//! test makes one real fault (a frozen server, a killed one, a full one, a password the store
//! does not have, keys holding another program's values, a server busy with another client's
//! script, a full memory store) and runs the same matrix through it: `FailOpen` admits and
//! says degraded, `FailClosed` refuses with `Outcome::Error`, `Local` decides on the engine's own
//! limiter with this instance's share of the limit, shadow rules never deny, one request mixing
//! modes follows the strictest, and the verdict names the class of failure and keeps the Redis
//! error behind it.

use std::num::NonZeroU32;
use std::time::Duration;

use tollgate::{
    Algorithm, Engine, FailureMode, ManualClock, MemoryStore, Outcome, Policy, Rate, Rule, Store, Verdict,
};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};

const HOUR: Duration = Duration::from_secs(3600);

/// The policies of the matrix: a limit of 4 per hour under each failure mode. `Local` assumes 2
/// instances, so this one may admit 2 on its own.
struct Policies {
    open: Policy,
    closed: Policy,
    local: Policy,
}

impl Policies {
    fn new() -> Self {
        let policy = |name: &str, mode| {
            // GCRA's first write is HSET, which Redis refuses when out of memory. (A script whose
            // first write is a deletion is let through: Redis does not stop a script halfway.)
            Policy::new(
                name,
                Algorithm::gcra(Rate::new(4, HOUR).expect("rate"), 4).expect("algorithm"),
            )
            .expect("policy")
            .with_failure_mode(mode)
        };
        Policies {
            open: policy("open", FailureMode::FailOpen),
            closed: policy("closed", FailureMode::FailClosed),
            local: policy(
                "local",
                FailureMode::Local {
                    instances: NonZeroU32::new(2).expect("nonzero"),
                },
            ),
        }
    }
}

/// How the failure shows in a verdict.
#[derive(Clone, Copy)]
struct Expected {
    /// `Error::class()` of the store error.
    class: &'static str,
    /// Whether the store error leads to a `redis::RedisError` through `source()`.
    redis_source: bool,
}

/// The store error's chain of sources, from the error itself down.
fn chain(err: &tollgate::Error) -> Vec<&(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err as &(dyn std::error::Error + 'static)), |e| e.source()).collect()
}

/// Asserts that `verdict` was decided by a failure mode because of a failure of the expected
/// class, and returns the verdict's outcome.
#[track_caller]
fn degraded(verdict: &Verdict, expected: Expected, what: &str) -> Outcome {
    let err = verdict
        .store_error()
        .unwrap_or_else(|| panic!("{what}: no store error in {verdict:?}"));
    assert!(verdict.degraded(), "{what}: {verdict:?}");
    assert_eq!(err.class(), Some(expected.class), "{what}: {err}");
    assert!(!err.is_bad_input(), "{what}: {err}");
    let redis_errors: Vec<&redis::RedisError> = chain(err)
        .into_iter()
        .filter_map(|e| e.downcast_ref::<redis::RedisError>())
        .collect();
    if expected.redis_source {
        assert!(!redis_errors.is_empty(), "{what}: no redis error behind {err}");
        // The store's error hands the Redis error over directly, or through a breaker refusal.
        assert!(std::error::Error::source(err).is_some(), "{what}: {err}");
    }
    for rule in verdict.rules() {
        assert!(rule.decision.degraded, "{what}: {rule:?}");
    }
    verdict.outcome()
}

async fn run<S: Store>(engine: &Engine<S>, rules: &[Rule<'_>]) -> Verdict {
    engine.check_all(rules).await.expect("valid input")
}

/// The key names the matrix uses, after its tag.
const KEY_NAMES: [&str; 9] = [
    "open",
    "closed",
    "local",
    "local-big",
    "shadow-closed",
    "shadow-local",
    "mixed-open",
    "mixed-closed",
    "mixed-local",
];

/// Runs the whole matrix on `engine`, whose store fails with `expected` on every call. `tag`
/// keeps the keys apart from other runs on the same engine.
async fn assert_failure_modes<S: Store>(engine: &Engine<S>, p: &Policies, expected: Expected, tag: &str) {
    let key = |name: &str| format!("{tag}-{name}");

    // FailOpen: admitted.
    let v = run(engine, &[Rule::new(&p.open, key("open").as_bytes(), 1)]).await;
    assert_eq!(degraded(&v, expected, "fail open"), Outcome::Degraded);
    assert!(v.allowed());

    // FailClosed: refused as an error, not as a denial.
    let v = run(engine, &[Rule::new(&p.closed, key("closed").as_bytes(), 1)]).await;
    assert_eq!(degraded(&v, expected, "fail closed"), Outcome::Error);
    assert!(!v.allowed());
    assert!(v.retry_after().is_some(), "{v:?}");

    // Local: the share of 4 over 2 instances, decided by the engine's own limiter.
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        let v = run(engine, &[Rule::new(&p.local, key("local").as_bytes(), 1)]).await;
        let outcome = degraded(&v, expected, "local");
        assert_eq!(v.allowed(), outcome == Outcome::Degraded, "{v:?}");
        outcomes.push(outcome);
    }
    assert_eq!(
        outcomes,
        [
            Outcome::Degraded,
            Outcome::Degraded,
            Outcome::Denied,
            Outcome::Denied
        ]
    );

    // A cost above the local share is denied: the share can never admit it.
    let v = run(engine, &[Rule::new(&p.local, key("local-big").as_bytes(), 3)]).await;
    assert_eq!(degraded(&v, expected, "local above its share"), Outcome::Denied);
    assert!(!v.allowed());

    // Shadow rules never deny: not when failing closed, not when the local share is spent.
    let v = run(
        engine,
        &[Rule::new(&p.closed, key("shadow-closed").as_bytes(), 1).as_shadow()],
    )
    .await;
    assert_eq!(degraded(&v, expected, "shadow fail closed"), Outcome::Degraded);
    assert!(v.allowed());
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let v = run(
            engine,
            &[Rule::new(&p.local, key("shadow-local").as_bytes(), 1).as_shadow()],
        )
        .await;
        outcomes.push(degraded(&v, expected, "shadow local"));
        assert!(v.allowed(), "{v:?}");
    }
    assert_eq!(
        outcomes,
        [Outcome::Degraded, Outcome::Degraded, Outcome::ShadowDenied]
    );

    // One FailClosed rule makes the whole request an error.
    let v = run(
        engine,
        &[
            Rule::new(&p.open, key("mixed-open").as_bytes(), 1),
            Rule::new(&p.closed, key("mixed-closed").as_bytes(), 1),
        ],
    )
    .await;
    assert_eq!(degraded(&v, expected, "open + closed"), Outcome::Error);
    assert!(!v.allowed());
    let rules: Vec<Outcome> = v.rules().iter().map(|r| r.outcome).collect();
    assert_eq!(rules, [Outcome::Degraded, Outcome::Error]);

    // FailOpen beside a Local rule whose share is spent (above): the local denial wins.
    let v = run(
        engine,
        &[
            Rule::new(&p.open, key("mixed-open").as_bytes(), 1),
            Rule::new(&p.local, key("local").as_bytes(), 1),
        ],
    )
    .await;
    assert_eq!(degraded(&v, expected, "open + spent local"), Outcome::Denied);
    assert!(!v.allowed());
    let rules: Vec<Outcome> = v.rules().iter().map(|r| r.outcome).collect();
    assert_eq!(rules, [Outcome::Degraded, Outcome::Denied]);

    // And beside a Local rule with budget left, the request passes, degraded.
    let v = run(
        engine,
        &[
            Rule::new(&p.open, key("mixed-open").as_bytes(), 1),
            Rule::new(&p.local, key("mixed-local").as_bytes(), 1),
        ],
    )
    .await;
    assert_eq!(degraded(&v, expected, "open + local"), Outcome::Degraded);
    assert!(v.allowed());
}

/// An engine whose `Local` limiter runs on a manual clock, so its share never refills mid-test.
fn engine<S>(store: S) -> Engine<S> {
    Engine::builder(store).clock(ManualClock::new(1)).build()
}

/// A store with the test kit's deadline: each fault below is answered by Redis or by the
/// socket, never by the deadline, except the frozen server's, which sets its own.
fn builder(url: &str) -> tollgate_redis::RedisStoreBuilder {
    RedisStore::builder(Target::parse(url).expect("url")).timeout(STORE_TIMEOUT)
}

/// Asserts that the store works, through the engine, before the fault.
async fn healthy(engine: &Engine<RedisStore>, p: &Policies) {
    let v = engine.check(&p.closed, b"healthy", 1).await.expect("valid input");
    assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
    assert!(v.store_error().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_times_out_under_every_failure_mode() {
    let redis = RedisServer::start();
    // No circuit breaker, so every call meets the frozen server and times out on its own; a
    // deadline of its own, short, since every call of the matrix waits for it.
    let store = builder(&redis.url())
        .timeout(Duration::from_millis(100))
        .probe_interval(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let engine = engine(store);
    let p = Policies::new();
    healthy(&engine, &p).await;

    redis.freeze();
    let expected = Expected {
        class: "timeout",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "frozen").await;
    let err = engine
        .check(&p.open, b"frozen-source", 1)
        .await
        .expect("valid input");
    let source = chain(err.store_error().expect("a store error"))[1];
    let redis_err = source
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert!(redis_err.is_timeout(), "{redis_err}");
    redis.thaw();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_is_a_connection_failure_under_every_failure_mode() {
    let mut redis = RedisServer::start();
    let store = builder(&redis.url()).connect().await.expect("connect");
    let engine = engine(store);
    let p = Policies::new();
    healthy(&engine, &p).await;

    redis.kill();
    let expected = Expected {
        class: "connection",
        redis_source: true,
    };
    // The first call finds the connection gone and opens the breaker; the rest are refused by
    // the breaker, which is a connection failure too and still names the Redis error.
    assert_failure_modes(&engine, &p, expected, "stopped").await;
    assert!(engine.store().stats().breaker_refusals > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_without_a_breaker_names_the_refusal() {
    let mut redis = RedisServer::start();
    redis.kill();
    let store = builder(&redis.url())
        .probe_interval(Duration::ZERO)
        .connect_lazy()
        .await
        .expect("a lazy store needs no server");
    let engine = engine(store);
    let p = Policies::new();
    let expected = Expected {
        class: "connection",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "refused").await;
    let v = engine
        .check(&p.open, b"refused-source", 1)
        .await
        .expect("valid input");
    let err = v.store_error().expect("a store error");
    let redis_err = chain(err)[1]
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert!(
        redis_err.is_connection_refusal() || redis_err.is_connection_dropped(),
        "{redis_err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_out_of_memory_is_its_own_class_under_every_failure_mode() {
    let redis = RedisServer::start();
    let store = builder(&redis.url()).connect().await.expect("connect");
    let engine = engine(store);
    let p = Policies::new();
    healthy(&engine, &p).await;

    redis.fill_memory();
    let expected = Expected {
        class: "out_of_memory",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "oom").await;
    let v = engine
        .check(&p.open, b"oom-source", 1)
        .await
        .expect("valid input");
    let redis_err = chain(v.store_error().expect("a store error"))[1]
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert_eq!(redis_err.code(), Some("OOM"), "{redis_err}");
    // Redis answered: a full Redis is not a dead one, so the breaker stays closed.
    assert!(!engine.store().is_degraded());
    assert_eq!(engine.store().stats().breaker_refusals, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_the_password_is_refused_as_an_auth_failure() {
    let redis = RedisServer::start();
    redis.require_password("right");
    let store = builder(&redis.url())
        .connect_lazy()
        .await
        .expect("a lazy store connects on first use");
    let engine = engine(store);
    let p = Policies::new();
    // Redis refuses to read a script call before authentication and then closes the connection,
    // so the next call finds it gone: an auth failure, then connection failures until the store
    // reconnects and is refused again. Every one of them is answered by the failure mode.
    let v = engine
        .check(&p.closed, b"no-password", 1)
        .await
        .expect("valid input");
    let expected = Expected {
        class: "auth",
        redis_source: true,
    };
    assert_eq!(degraded(&v, expected, "first call"), Outcome::Error);
    let redis_err = chain(v.store_error().expect("a store error"))[1]
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert_eq!(
        redis_err.kind(),
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
    );
    for i in 0..5 {
        let v = engine
            .check(&p.closed, b"no-password", 1)
            .await
            .expect("valid input");
        assert_eq!(v.outcome(), Outcome::Error, "call {i}: {v:?}");
        let class = v.store_error().and_then(|e| e.class());
        assert!(matches!(class, Some("auth" | "connection")), "call {i}: {v:?}");
        let v = engine
            .check(&p.open, b"no-password", 1)
            .await
            .expect("valid input");
        assert_eq!(v.outcome(), Outcome::Degraded, "call {i}: {v:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_a_wrong_password_is_an_auth_failure_under_every_failure_mode() {
    let redis = RedisServer::start();
    redis.require_password("right");
    let url = format!("redis://:wrong@127.0.0.1:{}/", redis.port());
    assert!(
        builder(&url).connect().await.is_err(),
        "an eager connect reports the refused password"
    );
    let store = builder(&url)
        .connect_lazy()
        .await
        .expect("a lazy store connects on first use");
    let engine = engine(store);
    let p = Policies::new();
    let expected = Expected {
        class: "auth",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "wrong-password").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_we_did_not_write_are_corrupt_under_every_failure_mode() {
    let redis = RedisServer::start();
    let store = builder(&redis.url()).connect().await.expect("connect");
    let engine = engine(store);
    let p = Policies::new();
    // Let the store write every key the matrix will use, then overwrite each with a string, as
    // another program sharing the Redis might: whatever the key layout, every call now meets a
    // value of the wrong type.
    for policy in [&p.open, &p.closed, &p.local] {
        for name in KEY_NAMES {
            let v = engine
                .check(policy, format!("corrupt-{name}").as_bytes(), 1)
                .await
                .expect("valid input");
            assert_eq!(v.outcome(), Outcome::Allowed, "{v:?}");
        }
    }
    let keys = redis.cli(&["--scan"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert!(keys.len() >= KEY_NAMES.len() * 3, "{keys:?}");
    for key in keys {
        redis.cli(&["SET", key, "not ours"]);
    }
    let expected = Expected {
        class: "corrupt",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "corrupt").await;
    let v = engine
        .check(&p.open, b"corrupt-open", 1)
        .await
        .expect("valid input");
    let redis_err = chain(v.store_error().expect("a store error"))[1]
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert_eq!(redis_err.code(), Some("WRONGTYPE"), "{redis_err}");
    // One bad key says nothing about Redis: the breaker stays closed.
    assert!(!engine.store().is_degraded());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_busy_with_another_script_is_a_script_failure_under_every_failure_mode() {
    let redis = RedisServer::start();
    let store = builder(&redis.url()).connect().await.expect("connect");
    let engine = engine(store);
    let p = Policies::new();
    healthy(&engine, &p).await;

    // Another client runs a script that never ends; past the threshold Redis answers every
    // other call with BUSY.
    redis.cli(&["CONFIG", "SET", "busy-reply-threshold", "1"]);
    let mut endless = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "EVAL", "while true do end", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("redis-cli");
    let mut busy = false;
    for _ in 0..500 {
        if redis.cli(&["PING"]).starts_with("BUSY") {
            busy = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(busy, "the endless script never made redis busy");

    let expected = Expected {
        class: "script",
        redis_source: true,
    };
    assert_failure_modes(&engine, &p, expected, "busy").await;
    let v = engine
        .check(&p.open, b"busy-source", 1)
        .await
        .expect("valid input");
    let redis_err = chain(v.store_error().expect("a store error"))[1]
        .downcast_ref::<redis::RedisError>()
        .expect("the redis error");
    assert_eq!(redis_err.code(), Some("BUSY"), "{redis_err}");

    assert_eq!(redis.cli(&["SCRIPT", "KILL"]), "OK");
    endless.wait().expect("the endless script's client exits");
    healthy(&engine, &p).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_memory_store_follows_every_failure_mode() {
    // One key, held by a client serving a long penalty: it cannot be evicted, so every new key
    // is refused.
    let clock = ManualClock::new(1);
    let store = MemoryStore::builder().max_keys(1).clock(clock.clone()).build();
    let login = Policy::new("login", Algorithm::sliding_log(1, HOUR).expect("algorithm"))
        .expect("policy")
        .with_block_for(HOUR)
        .expect("block_for");
    let engine = engine(store);
    assert!(
        engine
            .check(&login, b"mallory", 1)
            .await
            .expect("valid input")
            .allowed()
    );
    assert_eq!(
        engine
            .check(&login, b"mallory", 1)
            .await
            .expect("valid input")
            .outcome(),
        Outcome::Denied
    );
    let p = Policies::new();
    let expected = Expected {
        class: "full",
        redis_source: false,
    };
    assert_failure_modes(&engine, &p, expected, "full").await;
}
