//! A server that answers but cannot run Lua scripts is refused when the store opens, with an
//! error saying so (`ConnectError::NoScripting`), eagerly (`connect`) and, for a lazy store,
//! through `check_scripting`, which `tollgate serve` calls at start-up.
//!
//! Two ways to turn scripting off: every server can rename the script commands away
//! (`rename-command EVAL ""`, ...); Valkey 9 also runs Lua as a module of its own that can be
//! unloaded (`MODULE UNLOAD lua`), while Redis's Lua is built in and cannot be.

use std::time::Duration;

use tollgate_redis::{ConnectError, RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};

/// Every command that runs or loads Lua, renamed to nothing.
const RENAMED: [&str; 8] = [
    "EVAL",
    "EVALSHA",
    "EVAL_RO",
    "EVALSHA_RO",
    "SCRIPT",
    "FCALL",
    "FCALL_RO",
    "FUNCTION",
];

/// Opens a store on `server` eagerly and lazily; both must be refused as a server without Lua,
/// and the message must quote `answer` (what the server said) and name the address.
async fn assert_refused(server: &RedisServer, answer: &str) {
    let target = Target::parse(&server.url()).expect("an address");
    let eager = RedisStore::builder(target.clone())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .err()
        .expect("refused");
    let lazy = RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .connect_lazy()
        .await
        .expect("a lazy store")
        .check_scripting(Duration::from_secs(5))
        .await
        .expect_err("refused");
    for err in [eager, lazy] {
        assert!(matches!(err, ConnectError::NoScripting { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("the store at {} cannot run Lua scripts (", server.url())),
            "{message}"
        );
        assert!(message.contains(answer), "{message}");
        assert!(message.contains("tollgate needs EVALSHA"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_run_lua_is_refused_when_the_store_opens() {
    let mut args = vec![];
    for command in RENAMED {
        args.extend(["--rename-command", command, ""]);
    }
    let renamed = RedisServer::start_with_args(&args);
    assert!(
        renamed
            .cli(&["EVAL", "return 1", "0"])
            .starts_with("ERR unknown command")
    );
    assert_refused(&renamed, "unknown command 'SCRIPT'").await;

    let server = RedisServer::start_with_args(&["--enable-module-command", "yes"]);
    let version = server.version();
    let unloaded = server.cli(&["MODULE", "UNLOAD", "lua"]);
    if version.starts_with("valkey") {
        assert_eq!(unloaded, "OK", "{version}");
        assert_refused(&server, "Could not find scripting engine").await;
    } else {
        // Redis's Lua is no module: it stays, and the store opens and decides.
        assert!(unloaded.starts_with("ERR"), "{version}: {unloaded}");
        let store = RedisStore::builder(Target::parse(&server.url()).expect("an address"))
            .timeout(STORE_TIMEOUT)
            .connect()
            .await
            .expect("a server with Lua");
        store
            .check_scripting(Duration::from_secs(5))
            .await
            .expect("it runs Lua");
    }
    println!("{version}: renamed script commands refused; MODULE UNLOAD lua answered {unloaded:?}");
}
