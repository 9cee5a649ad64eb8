//! [`RedisServer`]: one real `redis-server`, run as a child process of the test on a free loopback
//! port, and stopped when the value is dropped.
//!
//! Choices, and why:
//!
//! - **Not daemonized** (`--daemonize no`). A daemonizing server forks away from the process we
//!   spawned, so the only handle on it would be a PID file or its name, and killing by name takes
//!   down other people's servers. As a direct child it can be killed by its own handle and then
//!   *waited for*, which reaps it: no zombie is left behind (zombies still pass `kill -0`, so a
//!   leaked one looks alive to naive checks).
//! - **A fresh temporary directory** (`--dir`) per server, with persistence off (`--save ''`,
//!   `--appendonly no`). Nothing one test writes can be read by the next, and cluster nodes get a
//!   new `nodes.conf` each run (an old one would make a node believe it still belongs to a cluster
//!   that no longer exists). The directory is kept across [`RedisServer::restart`], so a cluster
//!   node keeps its identity, and is deleted on drop.
//! - **A free port** found by binding port 0 and releasing it. Another process can take the port
//!   in between; the server then exits with "Address already in use" in its log, and we retry on a
//!   new port. Readiness is confirmed by the server reporting *our child's* PID in `INFO server`,
//!   so a different server that happens to answer on the port is never mistaken for ours.
//! - **Logs in a file** (`redis.log` in the directory) rather than a pipe: a pipe nobody reads
//!   fills up and stalls the server. The log's tail is quoted in every start-up error.
//! - **The program is `redis-server` unless [`SERVER_VAR`] names another**
//!   (`TOLLGATE_REDIS_SERVER=/path/to/valkey-server`), and `redis-cli` unless [`CLI_VAR`] does:
//!   the same suites then run against another server that speaks the protocol (Valkey), with no
//!   test knowing. [`server_program`] and [`cli_program`] are the one place that choice is read.
//!
//! Drop runs on an unwinding panic too, so a failing test still stops its servers. A test process
//! killed outright (SIGKILL, `panic = "abort"`) cannot run it; its servers then live on until
//! killed by hand.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::resp::{self, Reply};

mod faults;
mod programs;

pub use programs::{CLI_VAR, SERVER_VAR, cli_program, server_program};
use programs::{SERVER_NOT_FOUND, not_found};
pub(crate) use programs::{run_redis_cli, try_run_redis_cli};

/// How long a server gets to answer after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports [`RedisServer::try_start`] tries when the chosen one turns out taken.
const PORT_ATTEMPTS: usize = 5;
/// Bound on each connect, read and write of the testkit's own commands.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Shorter bound for the `SHUTDOWN NOSAVE` sent from `Drop`: the child is killed right after
/// anyway, so a paused or hung server must not slow the test down.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(200);
const POLL_INTERVAL: Duration = Duration::from_millis(10);
const LOG_FILE: &str = "redis.log";
const LOG_TAIL_LINES: usize = 20;

/// The file a sentinel keeps its configuration in (it rewrites it as it learns the topology).
const SENTINEL_CONF: &str = "sentinel.conf";

/// What kind of server a [`RedisServer`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Plain,
    /// A Redis Cluster node, with its cluster bus port.
    ClusterNode,
    /// A Sentinel (`--sentinel`), its configuration file written from this text at first start.
    Sentinel {
        conf: String,
    },
}

/// A real `redis-server` running as a child of the test process, on `127.0.0.1` and a free port,
/// with persistence off and its own temporary directory.
///
/// Dropping it sends `SHUTDOWN NOSAVE`, then kills the child and waits for it, so neither the
/// process nor its port outlives the value.
///
/// ```
/// use tollgate_testkit::RedisServer;
///
/// let redis = RedisServer::start();
/// assert_eq!(redis.url(), format!("redis://127.0.0.1:{}/", redis.port()));
/// redis.cli(&["SET", "greeting", "hello"]);
/// assert_eq!(redis.cli(&["GET", "greeting"]), "hello");
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The cluster bus port, for a node started with `--cluster-enabled yes`.
    cluster_port: Option<u16>,
    kind: Kind,
    /// Arguments added after the defaults, kept so a restart starts the same server.
    extra_args: Vec<String>,
    dir: TempDir,
    /// `None` once killed.
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server and waits until it answers.
    ///
    /// # Panics
    ///
    /// When the server cannot be started or does not answer within 10 s; the message says why
    /// (for example that `redis-server` is not installed) and quotes the server's log.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// assert_eq!(redis.cli(&["PING"]), "PONG");
    /// ```
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts a server and waits until it answers, or returns why it could not.
    ///
    /// The error kind is [`io::ErrorKind::NotFound`] when `redis-server` is not installed and
    /// [`io::ErrorKind::TimedOut`] when it did not answer in time.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::try_start()?;
    /// assert!(redis.port() > 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_start() -> io::Result<Self> {
        Self::launch(Kind::Plain, &[])
    }

    /// Starts a server with extra `redis-server` arguments, given after the defaults so that they
    /// override them, and waits until it answers. Leave `--port`, `--bind`, `--dir` and
    /// `--daemonize` alone: the server is found and stopped through them.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start`]; also when an argument is invalid, with the server's complaint.
    ///
    /// ```
    /// use tollgate_testkit::RedisServer;
    ///
    /// let redis = RedisServer::start_with_args(&["--maxmemory", "10mb"]);
    /// assert_eq!(redis.cli(&["CONFIG", "GET", "maxmemory"]), "maxmemory\n10485760");
    /// ```
    pub fn start_with_args(args: &[&str]) -> Self {
        Self::try_start_with_args(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::start_with_args`] that returns the error instead of panicking.
    ///
    /// ```
    /// use tollgate_testkit::RedisServer;
    ///
    /// let err = RedisServer::try_start_with_args(&["--no-such-option", "1"]).unwrap_err();
    /// assert!(err.to_string().contains("no-such-option"), "{err}");
    /// ```
    pub fn try_start_with_args(args: &[&str]) -> io::Result<Self> {
        Self::launch(Kind::Plain, args)
    }

    /// Starts a node for [`RedisCluster`](crate::RedisCluster): cluster mode on, `nodes.conf` in
    /// the node's own directory, and a cluster bus port of its own (so the port does not have to
    /// be the data port + 10000, which is past 65535 for much of the ephemeral range).
    pub(crate) fn try_start_cluster_node() -> io::Result<Self> {
        Self::launch(Kind::ClusterNode, &[])
    }

    /// Starts a Sentinel for [`RedisSentinel`](crate::RedisSentinel): the same program with
    /// `--sentinel`, its configuration file (`sentinel.conf` in its directory, which the sentinel
    /// rewrites as it learns the topology) written from `conf` first.
    pub(crate) fn try_start_sentinel(conf: &str) -> io::Result<Self> {
        Self::launch(
            Kind::Sentinel {
                conf: conf.to_owned(),
            },
            &[],
        )
    }

    fn launch(kind: Kind, extra_args: &[&str]) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("tollgate-redis-").tempdir()?;
        if let Kind::Sentinel { conf } = &kind {
            fs::write(dir.path().join(SENTINEL_CONF), conf)?;
        }
        let cluster = kind == Kind::ClusterNode;
        let mut server = RedisServer {
            port: 0,
            cluster_port: None,
            kind,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            dir,
            child: None,
        };
        let mut attempt = 1;
        loop {
            let ports = free_ports(if cluster { 2 } else { 1 })?;
            server.port = ports[0];
            server.cluster_port = ports.get(1).copied();
            match server.spawn() {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && attempt < PORT_ATTEMPTS => attempt += 1,
                other => return other.map(|()| server),
            }
        }
    }

    /// The port the server listens on, on `127.0.0.1`. It stays the same across
    /// [`RedisServer::restart`].
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// assert_eq!(redis.addr().port(), redis.port());
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's URL, `redis://127.0.0.1:PORT/`, as Redis clients take it.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// assert!(redis.url().starts_with("redis://127.0.0.1:"));
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's socket address, `127.0.0.1:PORT`.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// assert!(std::net::TcpStream::connect(redis.addr()).is_ok());
    /// ```
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The child's process id while it runs; `None` after [`RedisServer::kill`].
    ///
    /// ```
    /// let mut redis = tollgate_testkit::RedisServer::start();
    /// assert!(redis.pid().is_some());
    /// redis.kill();
    /// assert_eq!(redis.pid(), None);
    /// ```
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory (`--dir`), which also holds its log, `redis.log`.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// assert!(redis.dir().join("redis.log").exists());
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the server with SIGKILL, as a crash would, and waits for the process to be gone.
    /// Its port refuses connections from then on. Does nothing when it is not running.
    ///
    /// ```
    /// let mut redis = tollgate_testkit::RedisServer::start();
    /// redis.kill();
    /// assert!(std::net::TcpStream::connect(redis.addr()).is_err());
    /// ```
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Only this child, by its own handle. Errors mean it has already exited; `wait`
            // then reaps it all the same.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, directory and arguments, killing it first if
    /// it still runs, and waits until it answers. Data is not kept (persistence is off), but a
    /// cluster node keeps its `nodes.conf`, and so its identity and slots.
    ///
    /// # Panics
    ///
    /// When the server does not come back within 10 s, for example because another process has
    /// taken the port in the meantime.
    ///
    /// ```
    /// let mut redis = tollgate_testkit::RedisServer::start();
    /// let port = redis.port();
    /// redis.kill();
    /// redis.restart();
    /// assert_eq!(redis.port(), port);
    /// assert_eq!(redis.cli(&["PING"]), "PONG");
    /// ```
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The port cannot change, so wait for whoever holds it to let go.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                    thread::sleep(POLL_INTERVAL * 5)
                }
                Err(e) => panic!("could not restart redis-server: {e}"),
            }
        }
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT <args>` and returns its standard output without the
    /// trailing newline. The output is redis-cli's raw form: one line per element of an array.
    ///
    /// redis-cli exits successfully on an *error reply* too, so the error text (for example
    /// `ERR unknown command ...`) is returned like any other output.
    ///
    /// # Panics
    ///
    /// When redis-cli is missing or exits with a failure (for example because the server is not
    /// running), with its standard error in the message.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// redis.cli(&["RPUSH", "list", "a", "b"]);
    /// assert_eq!(redis.cli(&["LRANGE", "list", "0", "-1"]), "a\nb");
    /// ```
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self.port.to_string();
        let mut full = vec!["-h", "127.0.0.1", "-p", &port];
        full.extend_from_slice(args);
        run_redis_cli(&full)
    }

    /// How many script calls (`EVALSHA` and `FCALL`) the server has run, from `INFO commandstats`.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// let sha = redis.cli(&["SCRIPT", "LOAD", "return 1"]);
    /// redis.cli(&["EVALSHA", &sha, "0"]);
    /// assert_eq!(redis.script_calls(), 1);
    /// ```
    pub fn script_calls(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("fcall")
    }

    /// How many times the server has run `command` (lower case, as `INFO commandstats` names
    /// it), 0 when never.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// redis.cli(&["SET", "k", "v"]);
    /// assert_eq!(redis.command_calls("set"), 1);
    /// assert_eq!(redis.command_calls("fcall"), 0);
    /// ```
    pub fn command_calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }

    /// The server's name and version, from `INFO server`: `redis 7.0.15`, or `valkey 9.1.2`
    /// (Valkey reports `server_name:valkey` and `valkey_version`), for test output and for tests
    /// that try what only one of them offers.
    ///
    /// # Panics
    ///
    /// When the server cannot be asked.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// let version = redis.version();
    /// assert!(version.starts_with("redis ") || version.starts_with("valkey "), "{version}");
    /// ```
    pub fn version(&self) -> String {
        let info = self.command(&["INFO", "server"]);
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim_end().strip_prefix(name))
                .map(str::to_owned)
        };
        match (field("server_name:"), field("valkey_version:")) {
            (Some(name), Some(version)) if name == "valkey" => format!("valkey {version}"),
            _ => format!("redis {}", field("redis_version:").unwrap_or_default()),
        }
    }

    /// Sends one command with the testkit's own client and returns the text reply.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or replies with an error.
    pub(crate) fn command(&self, args: &[&str]) -> String {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("`{}` on redis at port {}: {e}", args.join(" "), self.port))
    }

    /// [`RedisServer::command`] that returns the error instead of panicking.
    pub(crate) fn try_command(&self, args: &[&str]) -> io::Result<String> {
        resp::command(self.addr(), args, COMMAND_TIMEOUT)?.into_text()
    }

    fn args(&self) -> Vec<String> {
        let dir = self.dir.path().display().to_string();
        let port = self.port.to_string();
        let mut args: Vec<String> = vec![];
        if let Kind::Sentinel { .. } = self.kind {
            // The configuration file comes first; a sentinel keeps no data, so it needs none of
            // the persistence or debug settings below.
            let conf = self.dir.path().join(SENTINEL_CONF).display().to_string();
            for arg in [
                conf.as_str(),
                "--sentinel",
                "--daemonize",
                "no",
                "--bind",
                "127.0.0.1",
                "--port",
                &port,
                "--protected-mode",
                "no",
                "--dir",
                &dir,
            ] {
                args.push(arg.to_owned());
            }
            args.extend(self.extra_args.iter().cloned());
            return args;
        }
        for arg in [
            "--daemonize",
            "no",
            "--bind",
            "127.0.0.1",
            "--port",
            &port,
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &dir,
            // For fault tests that need a slow server (`DEBUG SLEEP`); it is off by default.
            "--enable-debug-command",
            "yes",
        ] {
            args.push(arg.to_owned());
        }
        if let Some(cluster_port) = self.cluster_port {
            let nodes_conf = self.dir.path().join("nodes.conf").display().to_string();
            for arg in [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &nodes_conf,
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &cluster_port.to_string(),
            ] {
                args.push(arg.to_string());
            }
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    /// Spawns the child on the current port and waits until it answers. On failure the child is
    /// gone; the error kind is `AddrInUse` when the port was taken.
    fn spawn(&mut self) -> io::Result<()> {
        let log_path = self.log_path();
        let log = OpenOptions::new().create(true).append(true).open(&log_path)?;
        // Appending keeps the log of earlier runs; errors quote only this run's part.
        let log_start = log.metadata()?.len();
        let program = server_program();
        let child = Command::new(&program)
            .args(self.args())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => io::Error::new(
                    io::ErrorKind::NotFound,
                    not_found(SERVER_VAR, &program, SERVER_NOT_FOUND),
                ),
                _ => io::Error::new(
                    e.kind(),
                    format!("could not spawn {}: {e}", program.to_string_lossy()),
                ),
            })?;
        self.child = Some(child);
        let ready = self.wait_ready(log_start);
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    fn wait_ready(&mut self, log_start: u64) -> io::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let pid_line = format!("process_id:{}", self.pid().unwrap_or_default());
        loop {
            let child = self.child.as_mut().expect("wait_ready runs right after spawning");
            if let Some(status) = child.try_wait()? {
                let log = read_log_from(&self.log_path(), log_start);
                let kind = if log.contains("Address already in use") {
                    io::ErrorKind::AddrInUse
                } else {
                    io::ErrorKind::Other
                };
                return Err(io::Error::new(
                    kind,
                    format!(
                        "redis-server on port {} exited ({status}) before it was ready; log:\n{log}",
                        self.port
                    ),
                ));
            }
            // Another server could hold the port for a moment, until our child fails to bind:
            // only a reply naming our child's PID counts.
            match resp::command(self.addr(), &["INFO", "server"], POLL_INTERVAL * 10) {
                Ok(Reply::Bulk(Some(info)))
                    if String::from_utf8_lossy(&info).lines().any(|l| l == pid_line) =>
                {
                    return Ok(());
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                let log = read_log_from(&self.log_path(), log_start);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server on port {} did not answer within {READY_TIMEOUT:?}; log:\n{log}",
                        self.port
                    ),
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A clean shutdown first; errors are expected (the server closes the connection
            // without replying) and do not matter, since the kill below makes sure.
            let _ = resp::command(self.addr(), &["SHUTDOWN", "NOSAVE"], SHUTDOWN_TIMEOUT);
            self.kill();
        }
    }
}

/// `n` distinct ports that were free on `127.0.0.1` a moment ago: all are bound at once (so the
/// OS hands out different ones), then released for the server to take.
fn free_ports(n: usize) -> io::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
        .collect::<io::Result<Vec<_>>>()?;
    listeners.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

/// The last lines of the log written since `start`, for error messages.
fn read_log_from(path: &Path, start: u64) -> String {
    let mut text = String::new();
    let read = fs::File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(start))?;
        file.read_to_string(&mut text)
    });
    if let Err(e) = read {
        return format!("(could not read {}: {e})", path.display());
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}
