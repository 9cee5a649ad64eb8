//! One multiplexed connection per node, standalone, cluster or the master behind Sentinel,
//! behind one type, and the one way a script call reaches Redis: at most once.
//!
//! Every kind pipelines automatically: every task sends on the same connection and answers are
//! matched in order, so thousands of concurrent checks need no pool. The standalone kind
//! reconnects by itself after Redis restarts (the call in flight fails and the failure mode
//! covers it); the Sentinel kind is the standalone one on whichever master the sentinels name
//! (see `sentinel`). Each can be made lazily, so a service can start while Redis is away and
//! decide by its failure modes until Redis is back.
//!
//! # At most once
//!
//! A decision script that may have reached Redis is never sent again: a timeout or an I/O error
//! after sending cannot tell "ran, answer lost" from "never ran". The cluster client is built
//! without retries of its own (it would retry a dropped connection and its own response
//! timeouts), and [`Connection::invoke`] sends a call again only on answers that say the node
//! did not run it: "Function not found" and `NOSCRIPT` (load, then call again), an unknown
//! `FCALL` (the script instead: see `scripts::Library`), `MOVED`, `ASK`,
//! `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, and a node the client has no connection to yet. The
//! standalone client never sends a command twice (its reconnection only serves later calls). A
//! call followed by `WAIT` ([`Wait`]) is one pipeline, judged by the call's own answer: `WAIT`
//! only waits, so sending it again with a call that did not run changes nothing.
//!
//! # Nodes
//!
//! The store keeps a circuit breaker per node, so it needs to know which node a call goes to.
//! Standalone Redis is one node, named by its address. On a cluster, the connection keeps its own
//! copy of the slot map (`CLUSTER SLOTS`), fetched in the background on first use, after a
//! redirection and every few seconds; a call goes to the node the client routes it to, which is
//! the same node unless the map is changing, and then the redirection refreshes both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::OnceCell;

use crate::error::redact;
use crate::scripts::Library;
use crate::sentinel::{MasterConnection, SentinelTarget, Watch};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Script, ServerErrorKind, Value};

/// Where the store connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis server, e.g. `redis://127.0.0.1:6379/`, `rediss://` for TLS.
    Standalone(String),
    /// A Redis Cluster, given by one or more of its nodes (each a `redis://` or `rediss://` URL).
    Cluster(Vec<String>),
    /// A master found through Redis Sentinel, and followed to its new address after a failover.
    Sentinel(SentinelTarget),
}

impl Target {
    /// Parses `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS) for one server;
    /// `redis+cluster://[user:password@]host1:port,host2:port` or `rediss+cluster://...` for
    /// a cluster (the credentials apply to every node); and
    /// `redis+sentinel://[user:password@]host1:port,host2:port/<master-name>` or
    /// `rediss+sentinel://...` for a master found through Redis Sentinel: the hosts are the
    /// sentinels (port 26379 when none is given), the credentials the master's, and
    /// `?sentinel_auth=user:password` (or `:password`, percent-encoded) gives the sentinels'.
    ///
    /// ```
    /// use tollgate_redis::Target;
    ///
    /// assert_eq!(Target::parse("redis://127.0.0.1:6379")?, Target::Standalone("redis://127.0.0.1:6379".into()));
    /// assert_eq!(
    ///     Target::parse("redis+cluster://192.0.2.10:7000,192.0.2.11:7000")?,
    ///     Target::Cluster(vec!["redis://192.0.2.10:7000".into(), "redis://192.0.2.11:7000".into()]),
    /// );
    /// assert_eq!(
    ///     Target::parse("rediss+cluster://app:s3cret@192.0.2.10:7000,192.0.2.11:7000")?,
    ///     Target::Cluster(vec![
    ///         "rediss://app:s3cret@192.0.2.10:7000".into(),
    ///         "rediss://app:s3cret@192.0.2.11:7000".into(),
    ///     ]),
    /// );
    /// assert!(matches!(
    ///     Target::parse("redis+sentinel://192.0.2.1:26379,192.0.2.2:26379/mymaster")?,
    ///     Target::Sentinel(sentinel) if sentinel.master_name == "mymaster",
    /// ));
    /// assert!(Target::parse("http://x").is_err());
    /// # Ok::<(), tollgate_redis::ConnectError>(())
    /// ```
    pub fn parse(url: &str) -> Result<Self, crate::error::ConnectError> {
        check_userinfo(url)?;
        let sentinel = [("redis+sentinel://", false), ("rediss+sentinel://", true)]
            .into_iter()
            .find_map(|(prefix, tls)| url.strip_prefix(prefix).map(|rest| (rest, tls)));
        if let Some((rest, tls)) = sentinel {
            return SentinelTarget::parse(url, rest, tls).map(Target::Sentinel);
        }
        let cluster = [
            ("redis+cluster://", "redis://"),
            ("rediss+cluster://", "rediss://"),
        ]
        .into_iter()
        .find_map(|(prefix, scheme)| url.strip_prefix(prefix).map(|rest| (rest, scheme)));
        if let Some((rest, scheme)) = cluster {
            let (userinfo, hosts) = match rest.rsplit_once('@') {
                Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
                None => (String::new(), rest),
            };
            let nodes: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| format!("{scheme}{userinfo}{n}"))
                .collect();
            if nodes.is_empty() {
                return Err(crate::error::ConnectError::BadUrl {
                    url: redact(url),
                    why: "no cluster nodes given".into(),
                });
            }
            return Ok(Target::Cluster(nodes));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://") {
            return Ok(Target::Standalone(url.into()));
        }
        Err(crate::error::ConnectError::BadUrl {
            url: redact(url),
            why: "expected redis://host:port, rediss://host:port, redis+cluster://host:port,host:port \
                  or redis+sentinel://host:port,host:port/<master-name>"
                .into(),
        })
    }

    /// The address without its password, for logs and errors.
    ///
    /// ```
    /// use tollgate_redis::Target;
    ///
    /// let target = Target::parse("redis://app:s3cret@127.0.0.1:6379")?;
    /// assert_eq!(target.display(), "redis://app:***@127.0.0.1:6379");
    /// # Ok::<(), tollgate_redis::ConnectError>(())
    /// ```
    pub fn display(&self) -> String {
        match self {
            Target::Standalone(url) => redact(url),
            Target::Cluster(nodes) => nodes.iter().map(|n| redact(n)).collect::<Vec<_>>().join(","),
            Target::Sentinel(sentinel) => sentinel.display(),
        }
    }
}

/// Refuses credentials the URL parser would cut short. The user part ends at the last `@` (so a
/// raw `@` or `:` in a password is read right), but `/`, `?` and `#` end a URL's authority
/// before it: `redis://:se/cret@host` would be read as the host `se` and a path, and fail far
/// from its cause as an unparsable or wrong address. The error names the fix and never the
/// password.
fn check_userinfo(url: &str) -> Result<(), crate::error::ConnectError> {
    let Some((_, rest)) = url.split_once("://") else {
        return Ok(());
    };
    let Some((userinfo, _)) = rest.rsplit_once('@') else {
        return Ok(());
    };
    if !userinfo.contains(['/', '?', '#']) {
        return Ok(());
    }
    Err(crate::error::ConnectError::BadUrl {
        url: redact(url),
        why: "the user name or password holds a `/`, `?` or `#`, which ends the address's user part; \
              percent-encode the password (`/` as %2F, `?` as %3F, `#` as %23, `@` as %40, `:` as %3A, `%` as %25)"
            .into(),
    })
}

/// How to reach Redis besides the address.
#[derive(Clone, Default)]
pub(crate) struct ConnectOptions {
    /// A PEM bundle of certificate authorities to trust for `rediss://` instead of the system's.
    pub(crate) ca_pem: Option<Vec<u8>>,
}

/// A cheap-to-clone handle on the shared connection.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone {
        manager: ConnectionManager,
        /// `host:port`: the name of the one node.
        node: Arc<str>,
    },
    Cluster(Arc<LazyCluster>),
    /// Whichever master the sentinels name (see `sentinel`).
    Sentinel(Arc<MasterConnection>),
}

/// A cluster connection made on first use, so a store can start while the cluster is away, and
/// our own copy of its slot map, to name the node a call goes to.
pub(crate) struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
    timeout: Duration,
    slots: RwLock<Option<SlotTable>>,
    refreshing: AtomicBool,
}

/// Which master serves each slot.
struct SlotTable {
    fetched: Instant,
    /// Index into `names` per slot; `u16::MAX` for a slot no node serves.
    owner: Vec<u16>,
    names: Vec<Arc<str>>,
}

/// The name of the node a call goes to while the slot map is unknown.
pub(crate) const UNKNOWN_NODE: &str = "cluster";

/// How often the slot map is fetched again when nothing redirected.
const SLOT_MAP_AGE: Duration = Duration::from_secs(5);

/// At most this many redirections (or retries of answers that say the call did not run) per
/// call; the store's deadline bounds them too.
const MAX_REDIRECTIONS: u32 = 8;

impl LazyCluster {
    /// The connection, made on first use. Connecting runs in its own task, so that a call
    /// giving up at its deadline does not cancel a connection that needs longer (a TLS
    /// handshake); later calls find it made.
    async fn get(self: &Arc<Self>) -> RedisResult<ClusterConnection> {
        if let Some(connection) = self.connection.get() {
            return Ok(connection.clone());
        }
        let this = Arc::clone(self);
        let connecting = tokio::spawn(async move {
            this.connection
                .get_or_try_init(|| this.client.get_async_connection())
                .await
                .cloned()
        });
        connecting.await.map_err(|e| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!("connecting to the cluster stopped: {e}"),
            ))
        })?
    }

    /// The node serving `slot`, as far as our copy of the map knows; starts a refresh when the
    /// map is missing or old.
    fn node_of(self: &Arc<Self>, slot: u16) -> Arc<str> {
        let (node, stale) = match &*self.slots.read() {
            Some(table) => {
                let node = table
                    .owner
                    .get(usize::from(slot))
                    .and_then(|&i| table.names.get(usize::from(i)))
                    .cloned();
                (node, table.fetched.elapsed() > SLOT_MAP_AGE)
            }
            None => (None, true),
        };
        if stale {
            self.refresh();
        }
        node.unwrap_or_else(|| Arc::from(UNKNOWN_NODE))
    }

    /// Fetches the slot map in the background, unless a fetch is under way.
    fn refresh(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let fetched = tokio::time::timeout(this.timeout.max(Duration::from_millis(200)), async {
                let mut conn = this.get().await?;
                let reply = conn
                    .route_command(
                        redis::cmd("CLUSTER").arg("SLOTS").clone(),
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                    )
                    .await?;
                Ok::<_, RedisError>(SlotTable::parse(&reply))
            })
            .await;
            match fetched {
                Ok(Ok(Some(table))) => *this.slots.write() = Some(table),
                // Keep the old map; the next call after the age tries again.
                _ => {
                    if let Some(table) = this.slots.write().as_mut() {
                        table.fetched = Instant::now();
                    }
                }
            }
            this.refreshing.store(false, Ordering::Release);
        });
    }

    fn forget_slot_map(&self) {
        if let Some(table) = self.slots.write().as_mut() {
            table.fetched = Instant::now() - SLOT_MAP_AGE * 2;
        }
    }
}

impl SlotTable {
    /// Reads a `CLUSTER SLOTS` reply: `[start, end, [host, port, ...], replicas...]` per range.
    fn parse(reply: &Value) -> Option<SlotTable> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut table = SlotTable {
            fetched: Instant::now(),
            owner: vec![u16::MAX; usize::from(crate::keys::SLOTS)],
            names: vec![],
        };
        for range in ranges {
            let Value::Array(fields) = range else { return None };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return None;
            };
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return None;
            };
            let name: Arc<str> = Arc::from(format!("{host}:{port}"));
            let index = match table.names.iter().position(|n| *n == name) {
                Some(i) => i,
                None => {
                    table.names.push(name);
                    table.names.len() - 1
                }
            };
            let index = u16::try_from(index).ok()?;
            let (start, end) = (usize::try_from(*start).ok()?, usize::try_from(*end).ok()?);
            for slot in table.owner.get_mut(start..=end)? {
                *slot = index;
            }
        }
        Some(table)
    }
}

impl Connection {
    /// Whether this is a Redis Cluster, where one script call only reaches the keys of one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Prepares the connection, with `timeout` (at least a second) for connecting. With `lazy`, nothing touches the
    /// network until the first call; otherwise an unreachable Redis is an error now.
    ///
    /// Responses have no driver-level timeout shorter than the store's own deadline: a driver
    /// timeout would be retried by the cluster client, and the store's deadline drops the call
    /// instead (a dropped call is never sent again).
    pub(crate) async fn open(
        target: &Target,
        timeout: Duration,
        lazy: bool,
        options: &ConnectOptions,
    ) -> RedisResult<Self> {
        Self::open_for(target, timeout, timeout, lazy, options).await
    }

    /// [`open`](Self::open), for calls whose deadline may reach `longest` (a decision that
    /// waits for replicas has their wait on top of `timeout`): no driver-level timeout of a
    /// response is shorter.
    async fn open_for(
        target: &Target,
        timeout: Duration,
        longest: Duration,
        lazy: bool,
        options: &ConnectOptions,
    ) -> RedisResult<Self> {
        let tls = options.ca_pem.as_ref().map(|pem| {
            install_crypto_provider();
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            }
        });
        if target_uses_tls(target) {
            install_crypto_provider();
        }
        match target {
            Target::Sentinel(sentinel) => {
                let watch = Watch::new(sentinel, options.ca_pem.as_deref(), connect_timeout(timeout))?;
                let connection = MasterConnection::new(watch, manager_config(timeout, longest));
                if !lazy {
                    // The sentinels answer and name a master that answers as one.
                    connection.get().await?;
                }
                Ok(Connection::Sentinel(Arc::new(connection)))
            }
            Target::Standalone(url) => {
                let client = match tls {
                    Some(certs) => redis::Client::build_with_tls(url.as_str(), certs)?,
                    None => redis::Client::open(url.as_str())?,
                };
                let node: Arc<str> = Arc::from(client.get_connection_info().addr().to_string());
                let config = manager_config(timeout, longest);
                let manager = if lazy {
                    ConnectionManager::new_lazy_with_config(client, config)?
                } else {
                    ConnectionManager::new_with_config(client, config).await?
                };
                Ok(Connection::Standalone { manager, node })
            }
            Target::Cluster(nodes) => {
                let mut builder = ClusterClient::builder(nodes.clone())
                    .connection_timeout(connect_timeout(timeout))
                    // Longer than any store deadline: the store drops the call first, and the
                    // client never retries (see the module docs; `tests/at_most_once.rs` fails
                    // with any other number of retries).
                    .response_timeout(
                        timeout
                            .saturating_mul(20)
                            .max(Duration::from_secs(5))
                            .max(longest.saturating_mul(2)),
                    )
                    .retries(0);
                if let Some(certs) = tls {
                    builder = builder.certs(certs);
                }
                let cluster = Arc::new(LazyCluster {
                    client: builder.build()?,
                    connection: OnceCell::new(),
                    timeout,
                    slots: RwLock::new(None),
                    refreshing: AtomicBool::new(false),
                });
                if !lazy {
                    cluster.get().await?;
                    cluster.refresh();
                }
                Ok(Connection::Cluster(cluster))
            }
        }
    }

    /// A second connection to the same target, made on first use, for calls whose deadline may
    /// reach `longest` (see [`open`](Self::open)): for standalone Redis and a cluster a
    /// connection of its own; behind Sentinel one on the same watch of the master, so that a
    /// failover is looked up, logged and counted once.
    pub(crate) async fn another(
        &self,
        target: &Target,
        timeout: Duration,
        longest: Duration,
        options: &ConnectOptions,
    ) -> RedisResult<Self> {
        match self {
            Connection::Sentinel(connection) => Ok(Connection::Sentinel(Arc::new(
                connection.another(manager_config(timeout, longest)),
            ))),
            _ => Connection::open_for(target, timeout, longest, true, options).await,
        }
    }

    /// The node a call on keys of `slot` goes to (the one node of a standalone Redis, the
    /// master known behind Sentinel).
    pub(crate) fn node_of(&self, slot: u16) -> Arc<str> {
        match self {
            Connection::Standalone { node, .. } => node.clone(),
            Connection::Cluster(cluster) => cluster.node_of(slot),
            Connection::Sentinel(connection) => connection.watch().node(),
        }
    }

    /// Notes a call that failed, also one its deadline cut short: behind Sentinel, one that
    /// failed as calls to a master that is gone fail makes the sentinels be asked again soon.
    pub(crate) fn failed(&self, err: &RedisError) {
        if let Connection::Sentinel(connection) = self {
            connection.watch().failed(err);
        }
    }

    /// How many times the sentinels named a new master (0 without Sentinel).
    pub(crate) fn failovers(&self) -> u64 {
        match self {
            Connection::Sentinel(connection) => connection.watch().failovers(),
            _ => 0,
        }
    }

    /// Runs `script` once: sent again only after an answer that says it did not run (see the
    /// module docs). With `wait`, the call is followed by `WAIT` on the same connection (see
    /// [`Wait`]), and the reply comes with how many replicas acknowledged the call's writes.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        library: &Library,
        script: &Script,
        keys: &[Vec<u8>],
        args: &[String],
        wait: Option<Wait>,
    ) -> RedisResult<Replied<T>> {
        let call = Call {
            library,
            script,
            keys,
            args,
            wait,
        };
        match self {
            Connection::Standalone { manager, .. } => {
                let mut conn = manager.clone();
                run(&call, &mut conn).await
            }
            // Like standalone Redis, on the master known: never sent twice, not even to a new
            // master after a failover (see `sentinel`).
            Connection::Sentinel(connection) => {
                let mut conn = connection.get().await?;
                let replied = run(&call, &mut conn).await;
                if let Err(err) = &replied {
                    connection.watch().failed(err);
                }
                replied
            }
            Connection::Cluster(cluster) => {
                let mut conn = cluster.get().await?;
                let mut attempt = 0;
                loop {
                    match run(&call, &mut conn).await {
                        Err(err) if attempt < MAX_REDIRECTIONS && did_not_run(&err) => {
                            if matches!(
                                err.kind(),
                                ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
                            ) {
                                cluster.forget_slot_map();
                            }
                            // The client refreshes its slot map after MOVED; give it a moment,
                            // more with each attempt.
                            tokio::time::sleep(Duration::from_millis(1 << attempt.min(6))).await;
                            attempt += 1;
                        }
                        other => return other,
                    }
                }
            }
        }
    }

    /// Sends `PING` (standalone) or `PING` to a random node (cluster).
    pub(crate) async fn ping(&self) -> RedisResult<()> {
        let mut conn = self.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
    }

    /// Whether the server behind a standalone address is a cluster node (`cluster_enabled:1` in
    /// `INFO cluster`): each call for a slot it does not serve would be redirected, and the
    /// standalone client does not follow redirections. `false` for a cluster target.
    pub(crate) async fn standalone_is_cluster_node(&self) -> RedisResult<bool> {
        match self {
            Connection::Standalone { .. } | Connection::Sentinel(_) => {
                let info: String = redis::cmd("INFO")
                    .arg("cluster")
                    .query_async(&mut self.clone())
                    .await?;
                Ok(info.lines().any(|line| line.trim() == "cluster_enabled:1"))
            }
            Connection::Cluster(_) => Ok(false),
        }
    }
}

/// A script call: the script, its keys and arguments, and the `WAIT` that follows it, if any.
struct Call<'a> {
    library: &'a Library,
    script: &'a Script,
    keys: &'a [Vec<u8>],
    args: &'a [String],
    wait: Option<Wait>,
}

/// `WAIT replicas timeout_ms` sent right behind a script call, in one pipeline on the same
/// connection: Redis answers it once `replicas` replicas acknowledged every write this
/// connection made so far (the call's included), or after `timeout_ms` with how many did.
///
/// `WAIT` cannot run inside a script or a function, so it is a command of its own; in a
/// pipeline it goes where the call goes. The cluster client routes a pipeline by its first
/// command with a key, the call's (`route_for_pipeline` in redis-rs: `WAIT` alone would go to
/// every master, but in a pipeline it names no node), so both reach the master of the call's
/// slot on one connection, one after the other. Redis blocks the connection while `WAIT`
/// waits, so calls that wait go on a connection of their own (see `transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    /// At least 1: `WAIT n 0` would wait forever.
    pub(crate) timeout_ms: u64,
}

/// What a decision call waits for once it ran: `replicas` replicas' acknowledgement of its
/// writes, for at most `wait` ([`Wait`]), which adds to the call's deadline (see `transport`):
/// under load an acknowledgement may come later than the store's deadline, since the calls that
/// wait on one node queue behind each other's `WAIT`, and it is the replica's lateness, not the
/// node's, that the wait bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) wait: Duration,
}

impl ReplicaWait {
    /// Waiting for no replica.
    pub(crate) const NONE: ReplicaWait = ReplicaWait {
        replicas: 0,
        wait: Duration::ZERO,
    };

    /// What an admission of `policy` waits for.
    pub(crate) fn of(policy: &tollgate::Policy) -> Self {
        match policy.replicas() {
            0 => Self::NONE,
            replicas => ReplicaWait {
                replicas,
                wait: policy.replica_wait(),
            },
        }
    }

    /// The most replicas and the longest wait of both: what a call deciding for both waits for.
    pub(crate) fn max(self, other: Self) -> Self {
        ReplicaWait {
            replicas: self.replicas.max(other.replicas),
            wait: self.wait.max(other.wait),
        }
    }
}

/// A call's reply, and with a [`Wait`] how many replicas acknowledged its writes.
#[derive(Debug)]
pub(crate) struct Replied<T> {
    pub(crate) value: T,
    pub(crate) replicas: Option<u64>,
}

/// The call: its function in the library while the server has functions for us, else the
/// script itself. Every answer that leads to another command proves nothing ran: FCALL unknown
/// or refused (Redis 6, an ACL), "Function not found" (a restart, `FUNCTION FLUSH`, a new node:
/// the library is loaded, then called again), and a library that cannot be loaded now
/// (`FUNCTION LOAD` refused out of memory, say: the script, this once). A `WAIT` behind the call
/// runs whatever the call answered; it only waits, so sending it again is harmless.
async fn run<T: redis::FromRedisValue>(
    call: &Call<'_>,
    conn: &mut impl ConnectionLike,
) -> RedisResult<Replied<T>> {
    let Some(function) = call.library.function_of(call.script) else {
        return evalsha(call, conn).await;
    };
    let mut fcall = redis::cmd("FCALL");
    fcall
        .arg(function)
        .arg(call.keys.len())
        .arg(call.keys)
        .arg(call.args);
    match query(&fcall, call.wait, conn).await {
        Err(err) if no_functions(&err) => {
            call.library.unusable();
            evalsha(call, conn).await
        }
        Err(err) if function_missing(&err) => match load_library(call.library, conn).await {
            Ok(()) => match query(&fcall, call.wait, conn).await {
                Err(err) if function_missing(&err) => evalsha(call, conn).await,
                other => other,
            },
            Err(err) => {
                if no_functions(&err) {
                    call.library.unusable();
                }
                evalsha(call, conn).await
            }
        },
        other => other,
    }
}

/// Sends `cmd`, alone or followed by `WAIT` in one pipeline. An error answer to `cmd` is the
/// result (so the caller can tell whether it ran), whatever `WAIT` answered.
async fn query<T: redis::FromRedisValue>(
    cmd: &Cmd,
    wait: Option<Wait>,
    conn: &mut impl ConnectionLike,
) -> RedisResult<Replied<T>> {
    let Some(wait) = wait else {
        let value = cmd.query_async(conn).await?;
        return Ok(Replied {
            value,
            replicas: None,
        });
    };
    let mut pipeline = redis::pipe();
    pipeline
        .add_command(cmd.clone())
        .cmd("WAIT")
        .arg(wait.replicas)
        .arg(wait.timeout_ms.max(1))
        // Each reply as it is, errors included, so the call's own error is seen as its own.
        .ignore_errors();
    let replies: Vec<Value> = pipeline.query_async(conn).await?;
    let [reply, acknowledged] = <[Value; 2]>::try_from(replies).map_err(|replies| {
        RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "expected two replies to a call and its WAIT",
            format!("{replies:?}"),
        ))
    })?;
    let value = redis::from_redis_value(reply.extract_error()?)?;
    let replicas = redis::from_redis_value::<u64>(acknowledged.extract_error()?)?;
    Ok(Replied {
        value,
        replicas: Some(replicas),
    })
}

/// Whether an answer says the node has no such function (it ran nothing).
fn function_missing(err: &RedisError) -> bool {
    err.detail().is_some_and(|d| d.contains("Function not found"))
}

/// `FUNCTION LOAD REPLACE` of the library (on a cluster, on every master).
pub(crate) async fn load_library(library: &Library, conn: &mut impl ConnectionLike) -> RedisResult<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library.code)
        .query_async::<Value>(conn)
        .await
        .map(drop)
}

/// Whether an answer says this server will not run our functions for us: no such command
/// (before Redis 7), or not allowed to this user.
pub(crate) fn no_functions(err: &RedisError) -> bool {
    err.code() == Some("NOPERM") || err.detail().is_some_and(|d| d.starts_with("unknown command"))
}

/// EVALSHA of the script with its keys and arguments written straight into one command buffer
/// (no copy per argument); on NOSCRIPT (a restart, `SCRIPT FLUSH`, a failover, a node that never
/// saw it, all answers that say it did not run) the script is loaded and sent again, as
/// `redis::Script` does.
async fn evalsha<T: redis::FromRedisValue>(
    call: &Call<'_>,
    conn: &mut impl ConnectionLike,
) -> RedisResult<Replied<T>> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(call.script.get_hash())
        .arg(call.keys.len())
        .arg(call.keys)
        .arg(call.args);
    match query(&cmd, call.wait, conn).await {
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            call.script.load_async(conn).await?;
            query(&cmd, call.wait, conn).await
        }
        other => other,
    }
}

/// Whether the answer says the node did not run the call, so sending it again cannot apply a
/// decision twice. `NOSCRIPT` is handled by `evalsha` and never reaches this.
fn did_not_run(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        ) | ErrorKind::ClusterConnectionNotFound
    )
}

/// How the connection to one server behaves (standalone, or the master behind Sentinel).
///
/// One connection attempt per call: a retry's backoff (100 ms and up) outlasts the store's
/// deadline anyway, and would report a refused or unauthenticated connection as a timeout. The
/// circuit breaker paces the attempts instead. Connecting may take longer than a call may (a TLS
/// handshake to a distant Redis): the manager connects in the background while calls keep their
/// own deadline, so a slow handshake completes instead of being cut off each time.
/// A standalone connection's settings: `timeout` (at least a second) for connecting, `longest`
/// (the longest deadline of a call on it) for a response.
fn manager_config(timeout: Duration, longest: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout(timeout)))
        .set_response_timeout(Some(longest))
        .set_number_of_retries(0)
}

/// How long one connection attempt may take: the call deadline, but at least a second.
fn connect_timeout(call_timeout: Duration) -> Duration {
    call_timeout.max(Duration::from_secs(1))
}

fn target_uses_tls(target: &Target) -> bool {
    match target {
        Target::Standalone(url) => url.starts_with("rediss://"),
        Target::Cluster(nodes) => nodes.iter().any(|n| n.starts_with("rediss://")),
        Target::Sentinel(sentinel) => sentinel.tls,
    }
}

/// redis-rs's TLS asks rustls for the process's crypto provider; install ring's unless the
/// program chose one already.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Standalone { manager, .. } => manager.req_packed_command(cmd),
            Connection::Cluster(c) => Box::pin(async move { c.get().await?.req_packed_command(cmd).await }),
            Connection::Sentinel(c) => Box::pin(async move {
                let replied = c.get().await?.req_packed_command(cmd).await;
                if let Err(err) = &replied {
                    c.watch().failed(err);
                }
                replied
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Standalone { manager, .. } => manager.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => {
                Box::pin(async move { c.get().await?.req_packed_commands(pipeline, offset, count).await })
            }
            Connection::Sentinel(c) => Box::pin(async move {
                let replied = c.get().await?.req_packed_commands(pipeline, offset, count).await;
                if let Err(err) = &replied {
                    c.watch().failed(err);
                }
                replied
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Standalone { manager, .. } => manager.get_db(),
            Connection::Cluster(_) | Connection::Sentinel(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("rediss://u:pw@h:1"), "rediss://u:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        let err = Target::parse("http://u:pw@h:1").unwrap_err();
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    #[test]
    fn a_password_that_breaks_the_url_is_one_clear_error_without_the_password() {
        for url in [
            "redis://:se/cret@127.0.0.1:6379",
            "redis://app:se?cret@127.0.0.1:6379",
            "rediss://app:se#cret@127.0.0.1:6379/0",
            "redis://:a/b:c@d@127.0.0.1:6379",
            "redis+cluster://:se/cret@127.0.0.1:7000,127.0.0.1:7001",
        ] {
            let err = Target::parse(url).expect_err(url).to_string();
            assert!(err.contains("percent-encode"), "{url}: {err}");
            assert!(err.contains("%2F"), "{url}: {err}");
            assert!(!err.contains("cret") && !err.contains("a/b"), "{url}: {err}");
        }
        // `@` and `:` in a password are read right as they are (the last `@` ends it), and
        // encoded ones stay encoded for the driver to decode.
        for url in [
            "redis://:p@ss:w@127.0.0.1:6379",
            "redis://:p%2Fss@127.0.0.1:6379",
            "redis://127.0.0.1:6379/0",
            "redis+cluster://:p@ss@127.0.0.1:7000",
        ] {
            assert!(Target::parse(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn a_slot_map_names_the_master_of_each_slot() {
        let range = |start, end, port| {
            Value::Array(vec![
                Value::Int(start),
                Value::Int(end),
                Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec()), Value::Int(port)]),
            ])
        };
        let reply = Value::Array(vec![range(0, 99, 7000), range(100, 16383, 7001)]);
        let table = SlotTable::parse(&reply).expect("a map");
        assert_eq!(&*table.names[usize::from(table.owner[99])], "127.0.0.1:7000");
        assert_eq!(&*table.names[usize::from(table.owner[100])], "127.0.0.1:7001");
        assert!(SlotTable::parse(&Value::Nil).is_none());
    }

    #[test]
    fn only_answers_that_say_the_call_did_not_run_are_sent_again() {
        let reply = |text: &[u8]| {
            redis::parse_redis_value(text)
                .expect("a reply")
                .extract_error()
                .expect_err("an error reply")
        };
        assert!(did_not_run(&reply(b"-MOVED 3999 127.0.0.1:6381\r\n")));
        assert!(did_not_run(&reply(b"-ASK 3999 127.0.0.1:6381\r\n")));
        assert!(did_not_run(&reply(b"-TRYAGAIN multiple keys\r\n")));
        assert!(did_not_run(&reply(b"-CLUSTERDOWN the cluster is down\r\n")));
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        assert!(!did_not_run(&io(std::io::ErrorKind::TimedOut)));
        assert!(!did_not_run(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!did_not_run(&reply(b"-OOM no memory\r\n")));
    }

    #[test]
    fn only_a_server_without_functions_for_us_turns_them_off() {
        let reply = |text: &[u8]| {
            redis::parse_redis_value(text)
                .expect("a reply")
                .extract_error()
                .expect_err("an error reply")
        };
        assert!(no_functions(&reply(
            b"-ERR unknown command 'FCALL', with args beginning with: 'f'\r\n"
        )));
        assert!(no_functions(&reply(
            b"-NOPERM this user has no permissions to run the 'fcall' command\r\n"
        )));
        assert!(!no_functions(&reply(b"-ERR Function not found\r\n")));
        assert!(!no_functions(&reply(
            b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
        )));
        assert!(!no_functions(&reply(b"-WRONGTYPE Operation against a key\r\n")));
    }
}
