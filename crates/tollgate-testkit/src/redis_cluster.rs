//! [`RedisCluster`]: a real three-master Redis Cluster on loopback, built the way an operator
//! builds one, so the store is tested against real `MOVED`/`ASK` redirections and per-node script
//! caches rather than a simulation.
//!
//! Each node is a [`RedisServer`] in cluster mode with its own fresh directory, so `nodes.conf`
//! never survives from an earlier run, and its own cluster bus port (`--cluster-port`), so the bus
//! does not need the data port + 10000 to be free. `redis-cli --cluster create` assigns the slots
//! (no replicas), and [`RedisCluster::start`] returns only once every node reports
//! `cluster_state:ok` and all agree on who owns which slot. Startup takes about 2 s, mostly
//! redis-cli waiting for the nodes to meet.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, run_redis_cli, try_run_redis_cli};

/// How many masters a cluster has.
const MASTERS: usize = 3;
/// Redis Cluster's fixed number of hash slots.
const SLOTS: u32 = 16384;
/// How long the nodes get to agree on a healthy cluster after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A three-master Redis Cluster on `127.0.0.1`, without replicas, each node a [`RedisServer`].
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
        let nodes = (0..MASTERS)
            .map(|_| RedisServer::try_start_cluster_node())
            .collect::<io::Result<Vec<_>>>()?;
        let cluster = RedisCluster { nodes };
        let addrs: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        try_run_redis_cli(&args)?;
        cluster.try_wait_until_ok()?;
        Ok(cluster)
    }

    /// The nodes, in start order. Each is a full [`RedisServer`], for `cli`, `pause` and the like.
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
        let owner = self.nodes.iter().find(|node| {
            let view = node.command(&["CLUSTER", "NODES"]);
            let own = view.lines().find(|line| is_myself(line));
            own.is_some_and(|line| owned_ranges(line).any(|(lo, hi)| (lo..=hi).contains(&u32::from(slot))))
        });
        owner
            .map(RedisServer::port)
            .unwrap_or_else(|| panic!("no node of the cluster owns slot {slot}"))
    }

    /// Moves `slots` hash slots, the lowest ones first, from the node that owns slot 0 to the
    /// next node, with `redis-cli --cluster reshard`, and waits until the cluster is healthy
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
        let from_index = self
            .nodes
            .iter()
            .position(|n| n.port() == from_port)
            .expect("owner is a node");
        let from = &self.nodes[from_index];
        let to = &self.nodes[(from_index + 1) % self.nodes.len()];
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

    /// Waits until every node reports `cluster_state:ok` and all nodes agree on the owner of
    /// every slot, as after a restart of a node.
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
        for node in &self.nodes {
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
