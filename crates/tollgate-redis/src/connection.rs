//! One multiplexed connection per node, standalone or cluster, behind one type.
//!
//! Both kinds pipeline automatically: every task sends on the same connection and answers are
//! matched in order, so thousands of concurrent checks need no pool. The standalone kind
//! reconnects by itself after Redis restarts (the call in flight fails and the failure mode
//! covers it); the cluster kind follows MOVED and ASK and refreshes its slot map. Either can be
//! made lazily, so a service can start while Redis is away and decide by its failure modes
//! until Redis is back.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Where the store connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One Redis server, e.g. `redis://127.0.0.1:6379/`.
    Standalone(String),
    /// A Redis Cluster, given by one or more of its nodes.
    Cluster(Vec<String>),
}

impl Target {
    /// Parses `redis://host:port[/db]` (standalone) or `redis+cluster://host1:port,host2:port`
    /// (cluster).
    ///
    /// ```
    /// use tollgate_redis::Target;
    ///
    /// assert_eq!(Target::parse("redis://127.0.0.1:6379")?, Target::Standalone("redis://127.0.0.1:6379".into()));
    /// assert_eq!(
    ///     Target::parse("redis+cluster://192.0.2.10:7000,192.0.2.11:7000")?,
    ///     Target::Cluster(vec!["redis://192.0.2.10:7000".into(), "redis://192.0.2.11:7000".into()]),
    /// );
    /// assert!(Target::parse("http://x").is_err());
    /// # Ok::<(), tollgate_redis::ConnectError>(())
    /// ```
    pub fn parse(url: &str) -> Result<Self, crate::ConnectError> {
        if let Some(nodes) = url.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = nodes
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{n}"))
                .collect();
            if nodes.is_empty() {
                return Err(crate::ConnectError::BadUrl {
                    url: url.into(),
                    why: "no cluster nodes given".into(),
                });
            }
            return Ok(Target::Cluster(nodes));
        }
        if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("unix://") {
            return Ok(Target::Standalone(url.into()));
        }
        Err(crate::ConnectError::BadUrl {
            url: url.into(),
            why: "expected redis://host:port or redis+cluster://host:port,host:port".into(),
        })
    }
}

/// A cheap-to-clone handle on the shared connection.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(Arc<LazyCluster>),
}

/// A cluster connection made on first use, so a store can start while the cluster is away.
pub(crate) struct LazyCluster {
    client: ClusterClient,
    connection: OnceCell<ClusterConnection>,
}

impl LazyCluster {
    async fn get(&self) -> redis::RedisResult<ClusterConnection> {
        let connection = self
            .connection
            .get_or_try_init(|| self.client.get_async_connection())
            .await?;
        Ok(connection.clone())
    }
}

impl Connection {
    /// Whether this is a Redis Cluster, where one script call only reaches the keys of one slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(_))
    }

    /// Prepares the connection, with `timeout` for connecting and for each response at the
    /// driver level (the store adds its own deadline around each whole call). With `lazy`,
    /// nothing touches the network until the first call; otherwise an unreachable Redis is an
    /// error now.
    pub(crate) async fn open(target: &Target, timeout: Duration, lazy: bool) -> redis::RedisResult<Self> {
        match target {
            Target::Standalone(url) => {
                let client = redis::Client::open(url.as_str())?;
                // One connection attempt per call: a retry's backoff (100 ms and up) outlasts the
                // store's deadline anyway, and would report a refused or unauthenticated
                // connection as a timeout. The circuit breaker paces the attempts instead.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(0);
                let manager = if lazy {
                    ConnectionManager::new_lazy_with_config(client, config)?
                } else {
                    ConnectionManager::new_with_config(client, config).await?
                };
                Ok(Connection::Standalone(manager))
            }
            Target::Cluster(nodes) => {
                // Retries follow MOVED, ASK and TRYAGAIN, which a node answers without running
                // the script. A timed-out attempt is not retried: the whole call has the same
                // timeout, and a retry is dropped once its caller has given up. The client does
                // retry after a dropped connection, so a call whose node ran it and then died
                // before answering can run twice; Redis gives no way to tell the two apart.
                let client = ClusterClient::builder(nodes.clone())
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(3)
                    .build()?;
                let cluster = Arc::new(LazyCluster {
                    client,
                    connection: OnceCell::new(),
                });
                if !lazy {
                    cluster.get().await?;
                }
                Ok(Connection::Cluster(cluster))
            }
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Standalone(c) => c.req_packed_command(cmd),
            Connection::Cluster(c) => Box::pin(async move { c.get().await?.req_packed_command(cmd).await }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Connection::Cluster(c) => {
                Box::pin(async move { c.get().await?.req_packed_commands(pipeline, offset, count).await })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Standalone(c) => c.get_db(),
            Connection::Cluster(_) => 0,
        }
    }
}
