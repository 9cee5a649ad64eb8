//! [`RedisCluster`]: a real Redis Cluster on loopback, three masters with or without a replica
//! each, built the way an operator builds one, so the store is tested against real `MOVED`/`ASK`
//! redirections, per-node script caches and failovers rather than a simulation.
//!
//! Each node is a [`RedisServer`] in cluster mode with its own fresh directory, so `nodes.conf`
//! never survives from an earlier run, and its own cluster bus port (`--cluster-port`), so the bus
//! does not need the data port + 10000 to be free. `redis-cli --cluster create` assigns the slots
//! (and the replicas, `--cluster-replicas 1`), and the constructors return only once every node
//! reports `cluster_state:ok`, all agree on who owns which slot, and every replica has its link
//! to its master up. Startup takes about 2 s without replicas, mostly redis-cli waiting for the
//! nodes to meet, and a few seconds more with them.
//!
//! With replicas, [`RedisCluster::fail_over`] kills the master of a slot (its own child, by its
//! handle) and waits until its replica is promoted: the cluster notices after
//! `cluster-node-timeout` (2000 ms here) and elects the replica within about a second more. To
//! lose writes on the way, as a replica that lags does, [`RedisServer::cut_from_master`] stops a
//! replica from receiving its master's writes before the master dies.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, run_redis_cli, try_run_redis_cli};
use crate::resp::{self, Reply};

/// How many masters a cluster has.
const MASTERS: usize = 3;
/// How many replicas each master has in [`RedisCluster::start_with_replicas`].
const REPLICAS_PER_MASTER: usize = 1;
/// Redis Cluster's fixed number of hash slots.
const SLOTS: u32 = 16384;
/// How long the nodes get to agree on a healthy cluster after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Bound on each connect, read and write of a command the cluster sends a node itself.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// A three-master Redis Cluster on `127.0.0.1`, each node a [`RedisServer`]: without replicas
/// ([`RedisCluster::start`]) or with one replica per master
/// ([`RedisCluster::start_with_replicas`]).
///
/// Dropping it stops every node as [`RedisServer`] does.
///
/// ```no_run
/// use tollgate_testkit::RedisCluster;
///
/// let cluster = RedisCluster::start();
/// assert_eq!(cluster.urls().len(), 3);
/// for node in cluster.nodes() {
///     assert!(node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
/// }
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes, joins them into a cluster and waits until it is healthy.
    ///
    /// # Panics
    ///
    /// When a node cannot be started, `redis-cli --cluster create` fails, or the cluster is not
    /// healthy within 20 s; the message says which.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// ```
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("could not start a redis cluster: {e}"))
    }

    /// [`RedisCluster::start`] that returns the error instead of panicking.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::try_start()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_start() -> io::Result<Self> {
        Self::launch(0)
    }

    /// Starts six nodes and joins them into a cluster of three masters with one replica each
    /// (`redis-cli --cluster create ... --cluster-replicas 1`), and waits until it is healthy and
    /// every replica has its link to its master up. For failovers: see
    /// [`RedisCluster::fail_over`]. Which node is a master is redis-cli's choice: ask
    /// [`RedisCluster::slot_owner`] and [`RedisCluster::replica_of`].
    ///
    /// # Panics
    ///
    /// As [`RedisCluster::start`].
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    /// assert_eq!(cluster.nodes().len(), 6);
    /// let master = cluster.slot_owner(0);
    /// assert!(cluster.replica_of(master).is_some());
    /// ```
    pub fn start_with_replicas() -> Self {
        Self::try_start_with_replicas()
            .unwrap_or_else(|e| panic!("could not start a redis cluster with replicas: {e}"))
    }

    /// [`RedisCluster::start_with_replicas`] that returns the error instead of panicking.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::try_start_with_replicas()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_start_with_replicas() -> io::Result<Self> {
        Self::launch(REPLICAS_PER_MASTER)
    }

    fn launch(replicas_per_master: usize) -> io::Result<Self> {
        let nodes = (0..MASTERS * (1 + replicas_per_master))
            .map(|_| RedisServer::try_start_cluster_node())
            .collect::<io::Result<Vec<_>>>()?;
        let cluster = RedisCluster { nodes };
        let addrs: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let replicas = replicas_per_master.to_string();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        try_run_redis_cli(&args)?;
        cluster.try_wait_until_ok()?;
        Ok(cluster)
    }

    /// The nodes, in start order. Each is a full [`RedisServer`], for `cli`, `pause` and the like.
    /// A node killed by [`RedisCluster::fail_over`] stays in the list, stopped.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// let first = &cluster.nodes()[0];
    /// assert_eq!(first.cli(&["CLUSTER", "MYID"]).len(), 40);
    /// ```
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, mutably, to [`kill`](RedisServer::kill) and [`restart`](RedisServer::restart)
    /// one. A restarted node rejoins with its old identity and slots; call
    /// [`RedisCluster::wait_until_ok`] before relying on the cluster again. That takes about 2 s:
    /// a restarted master waits one node timeout (2000 ms here) before it reports
    /// `cluster_state:ok`, to give the cluster a chance to reconfigure it (after a failover, for
    /// example) before it takes writes again.
    ///
    /// ```no_run
    /// let mut cluster = tollgate_testkit::RedisCluster::start();
    /// let node = &mut cluster.nodes_mut()[1];
    /// node.kill();
    /// node.restart();
    /// cluster.wait_until_ok();
    /// ```
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The nodes' ports, in start order.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// assert_eq!(cluster.ports()[0], cluster.nodes()[0].port());
    /// ```
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The nodes' URLs (`redis://127.0.0.1:PORT/`), in start order, as cluster clients take
    /// their seed nodes.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// assert!(cluster.urls().iter().all(|url| url.starts_with("redis://127.0.0.1:")));
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The one address tollgate's `--store` takes for this cluster:
    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`, the nodes in start order.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// assert!(cluster.store_url().starts_with("redis+cluster://127.0.0.1:"));
    /// ```
    pub fn store_url(&self) -> String {
        let nodes: Vec<String> = self.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// Removes every cached Lua script on every node (`SCRIPT FLUSH`), so the next `EVALSHA`
    /// on any node gets `NOSCRIPT`.
    ///
    /// # Panics
    ///
    /// When a node does not accept the command.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// cluster.script_flush_all();
    /// ```
    pub fn script_flush_all(&self) {
        for node in &self.nodes {
            node.script_flush();
        }
    }

    /// The port of the node that owns `slot`, by the nodes' own account of their slots.
    ///
    /// # Panics
    ///
    /// When `slot` is not below 16384, a node cannot be asked, or no node owns the slot.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// // `redis-cli --cluster create` gives the first node the lowest slots.
    /// assert_eq!(cluster.slot_owner(0), cluster.ports()[0]);
    /// ```
    pub fn slot_owner(&self, slot: u16) -> u16 {
        assert!(
            u32::from(slot) < SLOTS,
            "slot {slot} out of range: Redis Cluster has {SLOTS} slots"
        );
        let owner = self.live_nodes().find(|node| owns(node, slot));
        owner
            .map(RedisServer::port)
            .unwrap_or_else(|| panic!("no node of the cluster owns slot {slot}"))
    }

    /// The hash slot of the key `name`, as the cluster computes it (`CLUSTER KEYSLOT`): the slot
    /// of its hash tag (the part between the first `{` and the next `}`) when it has one.
    ///
    /// # Panics
    ///
    /// When no running node answers.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// assert_eq!(cluster.key_slot("foo"), 12182);
    /// assert_eq!(cluster.key_slot("{user1000}.following"), cluster.key_slot("{user1000}.followers"));
    /// ```
    pub fn key_slot(&self, name: &str) -> u16 {
        let node = self.live_nodes().next().expect("a running node");
        match resp::command(node.addr(), &["CLUSTER", "KEYSLOT", name], COMMAND_TIMEOUT) {
            Ok(Reply::Integer(slot)) => u16::try_from(slot).expect("a slot below 16384"),
            other => panic!("`CLUSTER KEYSLOT {name}` on port {}: {other:?}", node.port()),
        }
    }

    /// Waits until every replica linked to its master has received all of its master's writes:
    /// each master's `master_repl_offset` equals the offset each of its online replicas
    /// acknowledged (`INFO replication`). A replica [cut from its
    /// master](RedisServer::cut_from_master) is not online and not waited for.
    ///
    /// # Panics
    ///
    /// When that does not happen within 20 s.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    /// let owner = cluster.slot_owner(cluster.key_slot("k"));
    /// let master = cluster.nodes().iter().find(|n| n.port() == owner).unwrap();
    /// master.cli(&["SET", "k", "v"]);
    /// cluster.wait_until_replicated();
    /// ```
    pub fn wait_until_replicated(&self) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let behind = self.live_nodes().find_map(|node| {
                let info = node.try_command(&["INFO", "replication"]).unwrap_or_default();
                replicas_behind(&info).then(|| node.port())
            });
            let Some(port) = behind else { return };
            assert!(
                Instant::now() < deadline,
                "the replicas of the master at port {port} did not catch up within {SETTLE_TIMEOUT:?}"
            );
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The running replica of the master listening on `master_port`, by the master's own
    /// account of its replicas (`CLUSTER NODES`); `None` when it has none (a cluster started
    /// without replicas, or a master promoted after its own master died).
    ///
    /// # Panics
    ///
    /// When the master cannot be asked.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    /// let master = cluster.slot_owner(0);
    /// let replica = cluster.replica_of(master).expect("a replica");
    /// assert!(replica.cli(&["INFO", "replication"]).contains("role:slave"));
    /// ```
    pub fn replica_of(&self, master_port: u16) -> Option<&RedisServer> {
        let master = self.node(master_port);
        let view = master.command(&["CLUSTER", "NODES"]);
        let id = view
            .lines()
            .find(|line| is_myself(line))
            .and_then(|line| field(line, 0))?;
        let replica_port = view
            .lines()
            .filter(|line| field(line, 3) == Some(id))
            .filter(|line| field(line, 2).is_some_and(|flags| !flags.split(',').any(|f| f == "fail")))
            .find_map(|line| field(line, 1).and_then(port_of))?;
        self.live_nodes().find(|node| node.port() == replica_port)
    }

    /// Kills the master that owns `slot` (SIGKILL of its own child process, as a crash would) and
    /// waits until its replica is promoted to take its slots and the cluster is healthy again:
    /// every running node reports `cluster_state:ok` and agrees on the slot map. That takes about
    /// 3 s: the cluster notices after `cluster-node-timeout` (2000 ms), then elects the replica.
    /// A replica cut from its master ([`RedisServer::cut_from_master`]) is let go first, so it is
    /// promoted with exactly the writes it had.
    ///
    /// The dead master stays in [`RedisCluster::nodes`], stopped; its port and URL stay in
    /// [`RedisCluster::urls`] and [`RedisCluster::store_url`] (clients skip a seed that does not
    /// answer).
    ///
    /// # Panics
    ///
    /// When the master of `slot` has no replica (see [`RedisCluster::start_with_replicas`]), or the
    /// replica is not promoted or the cluster not healthy within 20 s.
    ///
    /// ```no_run
    /// let mut cluster = tollgate_testkit::RedisCluster::start_with_replicas();
    /// let failover = cluster.fail_over(0);
    /// assert_eq!(cluster.slot_owner(0), failover.new_master);
    /// assert_ne!(failover.new_master, failover.old_master);
    /// ```
    pub fn fail_over(&mut self, slot: u16) -> Failover {
        let old_master = self.slot_owner(slot);
        let new_master = self
            .replica_of(old_master)
            .map(RedisServer::port)
            .unwrap_or_else(|| {
                panic!("the master of slot {slot} (port {old_master}) has no replica: start the cluster with replicas")
            });
        let index = self
            .nodes
            .iter()
            .position(|node| node.port() == old_master)
            .expect("the owner is a node");
        self.nodes[index].kill();
        let replica = self.node(new_master);
        replica.rejoin_master();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        while !owns(replica, slot) {
            assert!(
                Instant::now() < deadline,
                "the replica at port {new_master} was not promoted to serve slot {slot} within {SETTLE_TIMEOUT:?}"
            );
            thread::sleep(POLL_INTERVAL);
        }
        self.wait_until_ok();
        Failover {
            old_master,
            new_master,
        }
    }

    /// Moves `slots` hash slots, the lowest ones first, from the node that owns slot 0 to the
    /// next master, with `redis-cli --cluster reshard`, and waits until the cluster is healthy
    /// again. Clients that still route by the old slot map then get `MOVED`.
    ///
    /// Returns the ports of the two nodes: `(from, to)`.
    ///
    /// # Panics
    ///
    /// When redis-cli fails, or the cluster is not healthy within 20 s afterwards.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// let (_from, to) = cluster.reshard(100);
    /// assert_eq!(cluster.slot_owner(0), to);
    /// ```
    pub fn reshard(&self, slots: u32) -> (u16, u16) {
        let from_port = self.slot_owner(0);
        let masters: Vec<&RedisServer> = self.live_nodes().filter(|node| is_master(node)).collect();
        let from_index = masters
            .iter()
            .position(|n| n.port() == from_port)
            .expect("owner is a master");
        let from = masters[from_index];
        let to = masters[(from_index + 1) % masters.len()];
        let from_id = from.command(&["CLUSTER", "MYID"]);
        let to_id = to.command(&["CLUSTER", "MYID"]);
        let seed = format!("127.0.0.1:{from_port}");
        let count = slots.to_string();
        run_redis_cli(&[
            "--cluster",
            "reshard",
            &seed,
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            &count,
            "--cluster-yes",
        ]);
        self.wait_until_ok();
        (from_port, to.port())
    }

    /// Waits until every running node reports `cluster_state:ok`, all of them agree on the owner
    /// of every slot, and every replica has its link to its master up, as after a restart of a
    /// node. (A replica [cut from its master](RedisServer::cut_from_master) never is.)
    ///
    /// # Panics
    ///
    /// When that does not happen within 20 s; the message quotes the last disagreement.
    ///
    /// ```no_run
    /// let cluster = tollgate_testkit::RedisCluster::start();
    /// cluster.wait_until_ok();
    /// ```
    pub fn wait_until_ok(&self) {
        self.try_wait_until_ok().unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_wait_until_ok(&self) -> io::Result<()> {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let problem = match self.health() {
                Ok(None) => return Ok(()),
                Ok(Some(problem)) => problem,
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis cluster not healthy after {SETTLE_TIMEOUT:?}: {problem}"),
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// `None` when the cluster is healthy, otherwise what is wrong.
    fn health(&self) -> io::Result<Option<String>> {
        let mut first_map: Option<(u16, SlotMap)> = None;
        for node in self.live_nodes() {
            let replication = node.try_command(&["INFO", "replication"])?;
            if replication.lines().any(|line| line.trim_end() == "role:slave")
                && !replication
                    .lines()
                    .any(|line| line.trim_end() == "master_link_status:up")
            {
                return Ok(Some(format!(
                    "the replica at port {} does not have its link to its master up",
                    node.port()
                )));
            }
            let info = node.try_command(&["CLUSTER", "INFO"])?;
            if !info.lines().any(|line| line.trim_end() == "cluster_state:ok") {
                return Ok(Some(format!(
                    "node {} does not report cluster_state:ok",
                    node.port()
                )));
            }
            let map = slot_map(&node.try_command(&["CLUSTER", "NODES"])?);
            match &first_map {
                None => first_map = Some((node.port(), map)),
                Some((port, first)) if *first != map => {
                    return Ok(Some(format!(
                        "nodes {port} and {} disagree on the slot map: {first:?} vs {map:?}",
                        node.port()
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(None)
    }
}

impl RedisCluster {
    /// The nodes that run (not killed by [`RedisCluster::fail_over`]).
    fn live_nodes(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|node| node.pid().is_some())
    }

    /// The node listening on `port`.
    fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no node of the cluster listens on port {port}"))
    }
}

/// What [`RedisCluster::fail_over`] did: the ports of the master it killed and of the replica
/// promoted in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failover {
    /// The port of the master killed; nothing listens there any more.
    pub old_master: u16,
    /// The port of its replica, now the master of its slots.
    pub new_master: u16,
}

/// Whether `node` serves `slot`, by its own account.
fn owns(node: &RedisServer, slot: u16) -> bool {
    let Ok(view) = node.try_command(&["CLUSTER", "NODES"]) else {
        return false;
    };
    let own = view.lines().find(|line| is_myself(line));
    own.is_some_and(|line| owned_ranges(line).any(|(lo, hi)| (lo..=hi).contains(&u32::from(slot))))
}

/// Whether `node` is a master, by its own account.
fn is_master(node: &RedisServer) -> bool {
    let view = node.command(&["CLUSTER", "NODES"]);
    let own = view.lines().find(|line| is_myself(line));
    own.and_then(|line| field(line, 2))
        .is_some_and(|flags| flags.split(',').any(|f| f == "master"))
}

/// Whether a master's `INFO replication` shows an online replica that has not acknowledged
/// every write (`slave0:ip=...,port=...,state=online,offset=N,lag=0` below `master_repl_offset`).
pub(crate) fn replicas_behind(info: &str) -> bool {
    let value = |line: &str, name: &str| -> Option<u64> {
        line.split(',')
            .find_map(|part| part.trim_end().strip_prefix(name))
            .and_then(|n| n.parse().ok())
    };
    let Some(offset) = info
        .lines()
        .find_map(|line| line.trim_end().strip_prefix("master_repl_offset:"))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return false;
    };
    let is_master = info.lines().any(|line| line.trim_end() == "role:master");
    is_master
        && info
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .any(|line| value(line, "offset=").is_none_or(|acked| acked < offset))
}

/// Field `n` of a `CLUSTER NODES` line: `<id> <addr> <flags> <master id or -> ...`.
fn field(line: &str, n: usize) -> Option<&str> {
    line.split(' ').nth(n)
}

/// The data port of a `CLUSTER NODES` address, `host:port@bus-port`.
fn port_of(addr: &str) -> Option<u16> {
    let data = addr.split('@').next()?;
    data.rsplit(':').next()?.parse().ok()
}

/// Whether a `CLUSTER NODES` line describes the node that was asked.
fn is_myself(line: &str) -> bool {
    line.split(' ')
        .nth(2)
        .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
}

/// The slot ranges a `CLUSTER NODES` line assigns to its node:
/// `<id> <addr> <flags> <master> <ping> <pong> <epoch> <link> <slot or lo-hi>...`.
/// Entries in brackets are slots being migrated or imported, which are still owned by the source.
fn owned_ranges(line: &str) -> impl Iterator<Item = (u32, u32)> + '_ {
    line.split(' ')
        .skip(8)
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
            None => s.parse().ok().map(|slot| (slot, slot)),
        })
}

/// The slot map a node believes in: `(lo, hi, owner id)` ranges, sorted.
type SlotMap = Vec<(u32, u32, String)>;

/// The [`SlotMap`] in a node's `CLUSTER NODES` reply.
fn slot_map(cluster_nodes: &str) -> SlotMap {
    let mut map: SlotMap = cluster_nodes
        .lines()
        .flat_map(|line| {
            let id = line.split(' ').next().unwrap_or_default().to_owned();
            owned_ranges(line).map(move |(lo, hi)| (lo, hi, id.clone()))
        })
        .collect();
    map.sort();
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str = "\
b 127.0.0.1:7102@17202 master - 0 1795344610573 4 connected 0-99 5461-10922
a 127.0.0.1:7101@17201 myself,master - 0 1795344610472 1 connected 100-5460 [5->-b]
c 127.0.0.1:7103@17203 master - 0 1795344610000 3 connected 10923-16382 16383
";

    #[test]
    fn a_master_is_replicated_once_its_online_replicas_acknowledged_its_offset() {
        let info = |acked: u64| {
            format!(
                "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1,port=7104,state=online,offset={acked},lag=0\r\nslave1:ip=127.0.0.1,port=7105,state=wait_bgsave,offset=0,lag=0\r\nmaster_repl_offset:900\r\n"
            )
        };
        assert!(replicas_behind(&info(899)));
        assert!(!replicas_behind(&info(900)));
        assert!(!replicas_behind("role:slave\r\nmaster_repl_offset:900\r\n"));
    }

    #[test]
    fn reads_a_replica_line() {
        let line = "d 127.0.0.1:7104@17204 slave a 0 1795344610573 1 connected";
        assert_eq!(field(line, 3), Some("a"));
        assert_eq!(field(line, 1).and_then(port_of), Some(7104));
        assert_eq!(owned_ranges(line).count(), 0);
    }

    #[test]
    fn finds_the_asked_node_line() {
        let own: Vec<&str> = NODES.lines().filter(|l| is_myself(l)).collect();
        assert_eq!(own.len(), 1);
        assert!(own[0].starts_with("a "));
    }

    #[test]
    fn reads_ranges_single_slots_and_skips_migrations() {
        let lines: Vec<&str> = NODES.lines().collect();
        assert_eq!(owned_ranges(lines[1]).collect::<Vec<_>>(), [(100, 5460)]);
        assert_eq!(
            owned_ranges(lines[2]).collect::<Vec<_>>(),
            [(10923, 16382), (16383, 16383)]
        );
    }

    #[test]
    fn slot_map_is_sorted_by_slot() {
        let owners: Vec<(u32, String)> = slot_map(NODES).into_iter().map(|(lo, _, id)| (lo, id)).collect();
        assert_eq!(
            owners,
            [
                (0, "b".to_owned()),
                (100, "a".to_owned()),
                (5461, "b".to_owned()),
                (10923, "c".to_owned()),
                (16383, "c".to_owned())
            ]
        );
    }
}
