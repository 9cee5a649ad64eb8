//! [`RedisSentinel`]: a master, its replica and three Sentinels watching them, all on loopback,
//! built the way an operator builds a Sentinel setup, so the store's Sentinel support is tested
//! against real discovery and real failovers rather than a simulation.
//!
//! Every process is a [`RedisServer`] (the same program, so [`SERVER_VAR`] switches all of them
//! to Valkey): the master on a free port; the replica started with `--replicaof` it; each
//! sentinel started with `--sentinel` and a `sentinel.conf` of its own, generated in its own
//! temporary directory:
//!
//! ```text
//! sentinel monitor tollgate-master 127.0.0.1 <master port> 2
//! sentinel down-after-milliseconds tollgate-master 1000
//! sentinel failover-timeout tollgate-master 5000
//! ```
//!
//! A quorum of two of three sentinels, as an operator would run them. The constructor returns
//! once the replica's link is up and every sentinel knows the replica and the two other
//! sentinels (they find each other through hello messages on the master, every 2 s): only then
//! can they agree that the master is down and elect one of them to promote the replica. Start-up
//! takes about 2 s.
//!
//! [`RedisSentinel::fail_over`] kills the master (its own child process, by its handle, as a crash
//! would) and waits until the sentinels have promoted the replica: they notice after
//! `down-after-milliseconds` (1000 ms here), agree, elect a leader and promote it, which takes
//! about 3 to 5 s on loopback. To lose writes on the way, as a replica that lags does, cut the
//! replica from its master first with [`RedisServer::cut_from_master`].
//!
//! Dropping it stops the sentinels first (so none starts a failover while the servers stop),
//! then the servers, each killed and reaped as [`RedisServer`] does.
//!
//! [`SERVER_VAR`]: crate::redis_server::SERVER_VAR

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis_cluster::Failover;
use crate::redis_server::RedisServer;
use crate::resp;

/// The name the sentinels monitor the master under.
const MASTER_NAME: &str = "tollgate-master";
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
/// How long a master may not answer before a sentinel thinks it down.
const DOWN_AFTER_MS: u64 = 1000;
/// The bound on one failover attempt; a failed election is tried again after twice this.
const FAILOVER_TIMEOUT_MS: u64 = 5000;
/// How long the setup gets to settle after a start or a failover.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Bound on each connect, read and write of a command sent to a sentinel or a server.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A master, its replica and three sentinels on `127.0.0.1`, each a [`RedisServer`].
///
/// ```no_run
/// use tollgate_testkit::RedisSentinel;
///
/// let setup = RedisSentinel::start();
/// assert_eq!(setup.sentinels().len(), 3);
/// assert!(setup.store_url().starts_with("redis+sentinel://127.0.0.1:"));
/// assert!(setup.master().cli(&["INFO", "replication"]).contains("role:master"));
/// ```
#[derive(Debug)]
pub struct RedisSentinel {
    /// Declared first, so they are dropped (stopped) before the servers they watch.
    sentinels: Vec<RedisServer>,
    /// The master and its replica, in start order; a killed one stays, stopped.
    servers: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts the master, its replica and three sentinels, and waits until the sentinels know
    /// the replica and each other.
    ///
    /// # Panics
    ///
    /// When a process cannot be started or the setup does not settle within 30 s; the message
    /// says which.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// ```
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("could not start a sentinel setup: {e}"))
    }

    /// [`RedisSentinel::start`] that returns the error instead of panicking.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::try_start()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_start() -> io::Result<Self> {
        let master = RedisServer::try_start()?;
        let master_port = master.port().to_string();
        let replica = RedisServer::try_start_with_args(&["--replicaof", "127.0.0.1", &master_port])?;
        let mut setup = RedisSentinel {
            sentinels: vec![],
            servers: vec![master, replica],
        };
        setup.try_wait(|setup| Ok(link_down(&setup.servers[1])))?;
        let conf = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {QUORUM}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
        );
        for _ in 0..SENTINELS {
            setup.sentinels.push(RedisServer::try_start_sentinel(&conf)?);
        }
        setup.try_wait(|setup| {
            for sentinel in &setup.sentinels {
                let view = master_view(sentinel)?;
                let field = |name: &str| view.iter().position(|f| f == name).and_then(|i| view.get(i + 1));
                let replicas = field("num-slaves").map(String::as_str);
                let others = field("num-other-sentinels").map(String::as_str);
                if replicas != Some("1") || others != Some(&(SENTINELS - 1).to_string()) {
                    return Ok(Some(format!(
                        "the sentinel at port {} knows {} replicas and {} other sentinels",
                        sentinel.port(),
                        replicas.unwrap_or("?"),
                        others.unwrap_or("?")
                    )));
                }
            }
            Ok(None)
        })?;
        Ok(setup)
    }

    /// The name the sentinels monitor the master under, as a client asks for it.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert_eq!(setup.master_name(), "tollgate-master");
    /// ```
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// The sentinels, in start order.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert!(setup.sentinels()[0].cli(&["SENTINEL", "MASTERS"]).contains("tollgate-master"));
    /// ```
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The master and its replica, in start order (the first started as the master). A master
    /// killed by [`RedisSentinel::fail_over`] stays in the list, stopped.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert_eq!(setup.servers().len(), 2);
    /// ```
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The sentinels' addresses, `127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3`, as lists of them are
    /// written (envoyproxy/ratelimit's `REDIS_URL` puts the master's name before them).
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert_eq!(setup.sentinel_addrs().split(',').count(), 3);
    /// ```
    pub fn sentinel_addrs(&self) -> String {
        let addrs: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        addrs.join(",")
    }

    /// The one address tollgate's `--store` takes for this setup:
    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/tollgate-master`.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert!(setup.store_url().ends_with("/tollgate-master"));
    /// ```
    pub fn store_url(&self) -> String {
        format!("redis+sentinel://{}/{MASTER_NAME}", self.sentinel_addrs())
    }

    /// The running server the sentinels name as the master.
    ///
    /// # Panics
    ///
    /// When no sentinel answers, or the one asked names a server that does not run.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert_eq!(setup.master().port(), setup.servers()[0].port());
    /// ```
    pub fn master(&self) -> &RedisServer {
        let port = self
            .sentinels
            .iter()
            .find_map(|sentinel| master_port(sentinel).ok())
            .unwrap_or_else(|| panic!("no sentinel names the master {MASTER_NAME}"));
        self.running(port)
            .unwrap_or_else(|| panic!("the sentinels name port {port} as the master, which does not run"))
    }

    /// The running server that is a replica, if any (none after a failover, until the old master
    /// comes back).
    ///
    /// # Panics
    ///
    /// When a running server cannot be asked.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// assert_eq!(setup.replica().map(|r| r.port()), Some(setup.servers()[1].port()));
    /// ```
    pub fn replica(&self) -> Option<&RedisServer> {
        self.servers
            .iter()
            .filter(|server| server.pid().is_some())
            .find(|server| server.command(&["INFO", "replication"]).contains("role:slave"))
    }

    /// Waits until the replica has received every write of the master: the master's
    /// `master_repl_offset` equals the offset its replica acknowledged. A replica [cut from its
    /// master](RedisServer::cut_from_master) is not waited for.
    ///
    /// # Panics
    ///
    /// When that does not happen within 30 s.
    ///
    /// ```no_run
    /// let setup = tollgate_testkit::RedisSentinel::start();
    /// setup.master().cli(&["SET", "k", "v"]);
    /// setup.wait_until_replicated();
    /// ```
    pub fn wait_until_replicated(&self) {
        let master = self.master();
        self.try_wait(|_| {
            let info = master.command(&["INFO", "replication"]);
            Ok(crate::redis_cluster::replicas_behind(&info)
                .then(|| format!("the replica of the master at port {} lags", master.port())))
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Kills the master (SIGKILL of its own child process, as a crash would) and waits until
    /// the sentinels have promoted its replica: every sentinel names the replica as the master,
    /// and it reports `role:master`. A replica cut from its master
    /// ([`RedisServer::cut_from_master`]) is let go first, so it is promoted with exactly the
    /// writes it had.
    ///
    /// # Panics
    ///
    /// When there is no replica, or it is not promoted within 30 s.
    ///
    /// ```no_run
    /// let mut setup = tollgate_testkit::RedisSentinel::start();
    /// let failover = setup.fail_over();
    /// assert_eq!(setup.master().port(), failover.new_master);
    /// ```
    pub fn fail_over(&mut self) -> Failover {
        let old_master = self.master().port();
        let new_master = self
            .replica()
            .map(RedisServer::port)
            .unwrap_or_else(|| panic!("the master at port {old_master} has no replica to promote"));
        let index = self
            .servers
            .iter()
            .position(|server| server.port() == old_master)
            .expect("the master is one of the servers");
        self.servers[index].kill();
        let replica = self.running(new_master).expect("the replica runs");
        replica.rejoin_master();
        self.try_wait(|setup| {
            for sentinel in &setup.sentinels {
                let named = master_port(sentinel)?;
                if named != new_master {
                    return Ok(Some(format!(
                        "the sentinel at port {} still names port {named} as the master",
                        sentinel.port()
                    )));
                }
            }
            Ok(
                (!replica.command(&["INFO", "replication"]).contains("role:master"))
                    .then(|| format!("the server at port {new_master} is not a master yet")),
            )
        })
        .unwrap_or_else(|e| panic!("no failover from port {old_master} to port {new_master}: {e}"));
        Failover {
            old_master,
            new_master,
        }
    }

    /// The running server on `port`.
    fn running(&self, port: u16) -> Option<&RedisServer> {
        self.servers
            .iter()
            .find(|server| server.port() == port && server.pid().is_some())
    }

    /// Polls `problem` until it finds none (`Ok(None)`), for at most [`SETTLE_TIMEOUT`]; the
    /// error names the last problem seen.
    fn try_wait(&self, problem: impl Fn(&Self) -> io::Result<Option<String>>) -> io::Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let last = match problem(self) {
                Ok(None) => return Ok(()),
                Ok(Some(problem)) => problem,
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("sentinel setup not settled after {SETTLE_TIMEOUT:?}: {last}"),
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }
}

/// `Some` problem while `replica`'s link to its master is not up.
fn link_down(replica: &RedisServer) -> Option<String> {
    let info = replica.try_command(&["INFO", "replication"]).unwrap_or_default();
    (!info
        .lines()
        .any(|line| line.trim_end() == "master_link_status:up"))
    .then(|| format!("the replica at port {} has no link to its master", replica.port()))
}

/// `SENTINEL MASTER <name>` on `sentinel`: field, value, field, value, ...
fn master_view(sentinel: &RedisServer) -> io::Result<Vec<String>> {
    resp::command(
        sentinel.addr(),
        &["SENTINEL", "MASTER", MASTER_NAME],
        COMMAND_TIMEOUT,
    )?
    .into_texts()
}

/// The port of the master `sentinel` names (`SENTINEL get-master-addr-by-name`).
fn master_port(sentinel: &RedisServer) -> io::Result<u16> {
    let addr = resp::command(
        sentinel.addr(),
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
        COMMAND_TIMEOUT,
    )?
    .into_texts()?;
    addr.get(1)
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no master address in {addr:?}")))
}
