//! Test support for tollgate: real Redis servers and a real Redis Cluster, run as child processes
//! of the test, so the Redis store is tested against the real thing; our own binaries run the
//! same way; apps served on real sockets. There are no mocks here.
//!
//! ```
//! use tollgate_testkit::RedisServer;
//!
//! let mut redis = RedisServer::start();
//! redis.cli(&["SET", "k", "v"]);
//! redis.kill(); // as a crash would
//! redis.restart(); // same port, empty (persistence is off)
//! assert_eq!(redis.cli(&["EXISTS", "k"]), "0");
//! ```
//!
//! # Layout
//!
//! - [`child`]: [`ChildProcess`], the one way tests run a program (the `tollgate` binary, the
//!   examples): output read line by line, the address a server prints, signals by PID, killed
//!   and reaped on drop.
//! - [`app_server`]: [`AppServer`], an axum app served on `127.0.0.1:0` in the test's runtime,
//!   stopped on drop.
//! - [`redis_server`]: [`RedisServer`], one `redis-server` on a free loopback port in a temporary
//!   directory, with fault helpers (kill, restart, pause, freeze, password, full memory, script
//!   flush, a replica cut from its master).
//! - [`redis_cluster`]: [`RedisCluster`], three such servers joined into a cluster with
//!   `redis-cli --cluster create` (or six: three masters with a replica each), with helpers to
//!   reshard, to flush scripts on every node, and to kill a master and wait for its replica's
//!   promotion ([`RedisCluster::fail_over`]).
//! - [`redis_sentinel`]: [`RedisSentinel`], a master, its replica (`--replicaof`) and three
//!   sentinels (`--sentinel`, a generated `sentinel.conf` each), with a failover that kills the
//!   master and waits for the sentinels to promote the replica ([`RedisSentinel::fail_over`]).
//! - [`store_timeout`]: [`STORE_TIMEOUT`], the deadline of each store call in tests, chosen once
//!   for a loaded CI machine, and [`store_timeout_arg`] for the binaries' `--store-timeout`.
//! - [`vectors`]: the step tables every store must agree on (memory, Redis, Redis Cluster), read
//!   from one table file per kind.
//! - `resp` (private): just enough of the Redis protocol to poll readiness and send commands
//!   without a client crate or an async runtime.
//!
//! The tests need `redis-server` and `redis-cli` on `PATH` (Debian: `apt-get install -y
//! redis-server`, which `./scripts/test.sh` runs when they are missing). Without them the
//! spawners panic with that advice: tests fail loudly, they never skip. `TOLLGATE_REDIS_SERVER`
//! (and `TOLLGATE_REDIS_CLI`) name another program for every spawner, such as Valkey's
//! `valkey-server` (see [`redis_server::SERVER_VAR`]): `./scripts/test.sh` runs the Redis suites
//! once more that way.

pub mod app_server;
pub mod child;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
mod resp;
pub mod store_timeout;
pub mod vectors;

pub use app_server::AppServer;
pub use child::ChildProcess;
pub use redis_cluster::{Failover, RedisCluster};
pub use redis_sentinel::RedisSentinel;
pub use redis_server::RedisServer;
pub use store_timeout::{STORE_TIMEOUT, store_timeout_arg};
