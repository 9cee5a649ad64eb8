//! The decision and batch scripts as a Redis function library: called with `FCALL` where the
//! server has functions, loaded again when a node has lost them, and replaced by the scripts
//! (`EVALSHA`) on a server without them, with every decision made exactly once either way.

mod common;

use std::time::Duration;

use common::exact_store;
use tollgate::{Algorithm, Anchor, ManualClock, Policy};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::vectors::T0_US;
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};

fn window() -> Policy {
    Policy::new(
        "lib",
        Algorithm::fixed_window(5, Duration::from_secs(3600), Anchor::Epoch).unwrap(),
    )
    .unwrap()
}

/// A store connected on first use, with the test clock and no deny cache.
async fn lazy_store(url: String, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(Target::Standalone(url))
        .clock(clock.clone())
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect_lazy()
        .await
        .unwrap()
}

/// Checks `key` `times` times; returns how many were allowed.
async fn allowed(store: &RedisStore, key: &[u8], times: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..times {
        allowed += u64::from(store.check(&window(), key, 1).await.unwrap().allowed);
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_function_calls_that_survive_a_flush() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    assert!(
        server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"),
        "loaded on connect"
    );
    assert_eq!(allowed(&store, b"a", 3).await, 3);
    assert_eq!(server.command_calls("fcall"), 3);
    assert_eq!(server.command_calls("evalsha"), 0);

    // Forgotten (as after a restart without persistence): the next call loads it and runs once.
    server.cli(&["FUNCTION", "FLUSH"]);
    assert_eq!(allowed(&store, b"a", 4).await, 2, "5 per window, 3 spent before");
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"));
    assert_eq!(server.cli(&["HGET", "tollgate:{lib:a}", "c"]), "5");
}

/// A server that will not run functions (here `FCALL` and `FUNCTION` renamed away, as on Redis 6)
/// gets the scripts, from connect on; a lazily connected store finds out on its first call, which
/// still decides, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_functions_gets_the_scripts() {
    let server = RedisServer::start_with_args(&[
        "--rename-command",
        "FCALL",
        "",
        "--rename-command",
        "FUNCTION",
        "",
    ]);
    let clock = ManualClock::new(T0_US);
    let store = exact_store(Target::Standalone(server.url()), &clock).await;
    assert_eq!(allowed(&store, b"a", 7).await, 5);
    assert_eq!(server.command_calls("evalsha"), 7);

    let lazy = lazy_store(server.url(), &clock).await;
    assert_eq!(allowed(&lazy, b"b", 7).await, 5);
    assert_eq!(server.cli(&["HGET", "tollgate:{lib:b}", "c"]), "5");
}

/// A user allowed to call functions but not to load them, connected lazily: the first call finds
/// no function, cannot load the library, and is made by the script; later calls go straight to
/// the script. Every decision once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_load_functions_gets_the_scripts() {
    let server = RedisServer::start();
    server.cli(&[
        "ACL",
        "SETUSER",
        "limited",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-function",
    ]);
    let clock = ManualClock::new(T0_US);
    let url = format!("redis://limited:pw@127.0.0.1:{}", server.port());
    let lazy = lazy_store(url, &clock).await;
    assert_eq!(allowed(&lazy, b"c", 7).await, 5);
    assert_eq!(server.cli(&["HGET", "tollgate:{lib:c}", "c"]), "5");
    assert_eq!(server.command_calls("fcall"), 1, "tried once, then the scripts");
    // Seven decisions, plus the scripts' own first NOSCRIPT answers.
    assert!(server.command_calls("evalsha") >= 7);
    assert_eq!(server.cli(&["FUNCTION", "LIST"]), "");
}
