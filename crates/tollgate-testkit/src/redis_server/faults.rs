//! What a test does to a [`RedisServer`] to make it fail as production servers do: pause it,
//! freeze it, cut a replica from its master, ask for a password, fill its memory, lose its
//! scripts.

use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{COMMAND_TIMEOUT, POLL_INTERVAL, READY_TIMEOUT, RedisServer};
use crate::resp;

/// The password a replica cut from its master sends: its master has none, so every reconnection
/// fails.
const CUT_PASSWORD: &str = "tollgate-testkit-cut-from-master";

impl RedisServer {
    /// Pauses every client of the server for `duration` (`CLIENT PAUSE <ms> ALL`), to make it
    /// look hung: commands sent meanwhile block until the pause ends. Returns at once.
    ///
    /// # Panics
    ///
    /// When the server does not accept the command.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    ///
    /// let redis = tollgate_testkit::RedisServer::start();
    /// let paused_at = Instant::now();
    /// redis.pause(Duration::from_millis(200));
    /// redis.cli(&["PING"]);
    /// assert!(paused_at.elapsed() >= Duration::from_millis(200));
    /// ```
    pub fn pause(&self, duration: Duration) {
        let ms = duration.as_millis().to_string();
        self.command(&["CLIENT", "PAUSE", &ms, "ALL"]);
    }

    /// Stops the server process with SIGSTOP (by its PID), as a hung machine would: the kernel
    /// still accepts connections and buffers what clients send, but nothing is answered until
    /// [`RedisServer::thaw`]. Unlike [`RedisServer::pause`] this lasts as long as the test wants,
    /// and what was sent meanwhile runs after the thaw, once. Does nothing when not running.
    ///
    /// # Panics
    ///
    /// When the `kill` program cannot be run or fails.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::time::Duration;
    ///
    /// let redis = tollgate_testkit::RedisServer::start();
    /// redis.freeze();
    /// let mut client = std::net::TcpStream::connect(redis.addr())?;
    /// client.set_read_timeout(Some(Duration::from_millis(100)))?;
    /// client.write_all(b"PING\r\n")?;
    /// let mut reply = [0; 7];
    /// assert!(client.read(&mut reply).is_err(), "a frozen server answers nothing");
    /// redis.thaw();
    /// client.set_read_timeout(None)?;
    /// client.read_exact(&mut reply)?;
    /// assert_eq!(&reply, b"+PONG\r\n");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a server stopped by [`RedisServer::freeze`] (SIGCONT). Does nothing when not
    /// running.
    ///
    /// # Panics
    ///
    /// When the `kill` program cannot be run or fails.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    /// Sends `signal` to our own child, by its PID.
    fn signal(&self, signal: &str) {
        let Some(pid) = self.pid() else { return };
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .stdin(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("could not run `kill {signal} {pid}`: {e}"));
        assert!(status.success(), "`kill {signal} {pid}` failed ({status})");
    }

    /// Makes a replica stop receiving its master's writes, as a replica that lags behind or lost
    /// its link does: its link to the master is dropped (`CLIENT KILL TYPE master`) and every
    /// reconnection fails, because the replica now sends a password its master does not have
    /// (`masterauth`). It keeps its data and stays a replica, so the cluster can still promote it
    /// when its master dies; it then lacks every write its master took since. Returns once the
    /// replica reports `master_link_status:down`. [`RedisServer::rejoin_master`] undoes it.
    ///
    /// # Panics
    ///
    /// When the server is not a replica, does not accept the commands, or its link is still up
    /// after 10 s.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    /// let master = cluster.slot_owner(0);
    /// let replica = cluster.replica_of(master).expect("a replica");
    /// replica.cut_from_master();
    /// assert!(replica.cli(&["INFO", "replication"]).contains("master_link_status:down"));
    /// replica.rejoin_master();
    /// ```
    pub fn cut_from_master(&self) {
        let info = self.command(&["INFO", "replication"]);
        assert!(
            info.lines().any(|line| line.trim_end() == "role:slave"),
            "redis at port {} is not a replica:\n{info}",
            self.port
        );
        self.command(&["CONFIG", "SET", "masterauth", CUT_PASSWORD]);
        // The reply is the number of connections closed: 1, or 0 when the link was down already.
        resp::command(
            self.addr(),
            &["CLIENT", "KILL", "TYPE", "master"],
            COMMAND_TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("`CLIENT KILL TYPE master` on redis at port {}: {e}", self.port));
        let deadline = Instant::now() + READY_TIMEOUT;
        while !self.replication_info().contains("master_link_status:down") {
            assert!(
                Instant::now() < deadline,
                "the replica at port {} kept its link to its master",
                self.port
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Lets a replica cut by [`RedisServer::cut_from_master`] reconnect to its master (it does
    /// within a second, and catches up from the master's backlog). Also harmless on a replica
    /// that was never cut, or one promoted since.
    ///
    /// # Panics
    ///
    /// When the server does not accept the command.
    pub fn rejoin_master(&self) {
        self.command(&["CONFIG", "SET", "masterauth", ""]);
    }

    /// `INFO replication`, or an empty text when the server cannot be asked.
    fn replication_info(&self) -> String {
        self.try_command(&["INFO", "replication"]).unwrap_or_default()
    }

    /// Makes the server require `password` from new connections (`CONFIG SET requirepass`);
    /// connections already open stay authenticated. The testkit's own commands ([`cli`],
    /// [`pause`], ...) do not authenticate, so they fail from then on; stopping the server on drop
    /// still works.
    ///
    /// [`cli`]: RedisServer::cli
    /// [`pause`]: RedisServer::pause
    ///
    /// # Panics
    ///
    /// When the server does not accept the command.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// redis.require_password("secret");
    /// assert!(redis.cli(&["PING"]).starts_with("NOAUTH"));
    /// assert_eq!(redis.cli(&["--no-auth-warning", "-a", "secret", "PING"]), "PONG");
    /// ```
    pub fn require_password(&self, password: &str) {
        self.command(&["CONFIG", "SET", "requirepass", password]);
    }

    /// Makes every write fail with `OOM` while reads still work: `maxmemory` of 1 byte with the
    /// `noeviction` policy, as a full Redis that may not evict answers.
    ///
    /// # Panics
    ///
    /// When the server does not accept the commands.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// redis.cli(&["SET", "k", "v"]);
    /// redis.fill_memory();
    /// assert!(redis.cli(&["SET", "k2", "v"]).starts_with("OOM"));
    /// assert_eq!(redis.cli(&["GET", "k"]), "v");
    /// ```
    pub fn fill_memory(&self) {
        self.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        self.command(&["CONFIG", "SET", "maxmemory", "1"]);
    }

    /// Removes every cached Lua script and every function library (`SCRIPT FLUSH`, `FUNCTION
    /// FLUSH`), so the next `EVALSHA` gets `NOSCRIPT` and the next `FCALL` "Function not found".
    ///
    /// # Panics
    ///
    /// When the server does not accept the commands.
    ///
    /// ```
    /// let redis = tollgate_testkit::RedisServer::start();
    /// let sha = redis.cli(&["SCRIPT", "LOAD", "return 1"]);
    /// redis.cli(&["FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('f', function() return 1 end)"]);
    /// redis.script_flush();
    /// assert_eq!(redis.cli(&["SCRIPT", "EXISTS", &sha]), "0");
    /// assert_eq!(redis.cli(&["FUNCTION", "LIST"]), "");
    /// ```
    pub fn script_flush(&self) {
        self.command(&["SCRIPT", "FLUSH"]);
        self.command(&["FUNCTION", "FLUSH"]);
    }
}
