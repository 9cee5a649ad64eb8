//! Redis behind Sentinel: finding the master through the sentinels, and following it to its new
//! address after a failover, without ever sending a call twice.
//!
//! # Why the following is ours
//!
//! redis-rs's `SentinelClient` finds the master: it asks the sentinels (a few at once), checks
//! with `ROLE` that the server they name is a master, and hands back a client for it. A
//! connection made from that client stays with that address, though: after a failover it
//! reconnects to the old master, dead or demoted to a replica. So the store keeps redis-rs's
//! finding and does the following itself. A [`Watch`] knows the current master; each
//! [`MasterConnection`] (the store's main connection, and the one for calls that wait for
//! replicas, both on one watch) holds a `ConnectionManager` for the master the watch names, and
//! makes a new one when the watch names another.
//!
//! # When the sentinels are asked
//!
//! - on first use (a lazy store starts while they are away);
//! - after a call failed as an unavailable Redis fails (refused, dropped, timed out), or was
//!   answered `READONLY` (a master demoted to a replica): then again every
//!   [`RECHECK_AFTER_FAILURE`] until they name a master that answers;
//! - every [`RECHECK_EVERY`] otherwise, so that a master demoted without failing a call (a
//!   partition that healed the other way) is left within seconds.
//!
//! A look-up runs in a task of its own, one at a time, bounded by the connect timeout, and never
//! holds up a call: calls go to the master known until another one is named.
//!
//! # At most once
//!
//! A call that failed is never sent again, to the old master or the new one: a dropped
//! connection or a timeout cannot tell "ran, answer lost" from "never ran". The failure goes to
//! the caller, whose policy's failure mode answers it, and only later calls go to the new master.
//! `READONLY` proves the call did not run, but it is not sent again either: that costs one
//! failure mode per call in flight, once per failover, and keeps one rule for every call.
//!
//! # Failovers are seen
//!
//! A look-up that names another master than the one known is a failover: logged at `warn` (the
//! master's name, the old and the new address, the running count) and counted
//! (`StoreStats::failovers`, `tollgate_store_failovers_total`). Whether the promoted replica had
//! every write is `state_loss`'s to notice, as after a cluster's failover.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use percent_encoding::percent_decode_str;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    ErrorKind, IntoConnectionInfo, RedisError, RedisResult, ServerErrorKind, TlsCertificates, TlsMode,
};

use crate::error::{self, ConnectError, redact};

/// How often the sentinels are asked which master is current while calls succeed.
pub(crate) const RECHECK_EVERY: Duration = Duration::from_secs(5);
/// How often they are asked while calls fail, until they name a master that answers.
pub(crate) const RECHECK_AFTER_FAILURE: Duration = Duration::from_millis(100);
/// The port of a sentinel given without one: Sentinel's own default.
const SENTINEL_PORT: u16 = 26379;
/// The name of the node calls go to while no master is known yet.
pub(crate) const UNKNOWN_MASTER: &str = "sentinel";

/// A master that Redis Sentinel watches: the name the sentinels monitor it under, the sentinels,
/// and the credentials of each side. Parsed from
/// `redis+sentinel://[user:password@]host:port,host:port/<master-name>[?sentinel_auth=[user]:password]`
/// (`rediss+sentinel://` for TLS to the sentinels and the master) by
/// [`Target::parse`](crate::Target::parse).
///
/// ```
/// use tollgate_redis::{SentinelTarget, Target};
///
/// let Target::Sentinel(sentinel) =
///     Target::parse("redis+sentinel://:s3cret@192.0.2.1:26379,192.0.2.2:26379/mymaster")?
/// else {
///     unreachable!()
/// };
/// assert_eq!(sentinel.master_name, "mymaster");
/// assert_eq!(sentinel.sentinels, ["192.0.2.1:26379", "192.0.2.2:26379"]);
/// assert_eq!(sentinel.master_auth.as_deref(), Some(":s3cret"));
/// assert_eq!(sentinel.sentinel_auth, None);
/// assert!(!sentinel.tls);
/// # Ok::<(), tollgate_redis::ConnectError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelTarget {
    /// The name the sentinels monitor the master under (`sentinel monitor <name> ...`).
    pub master_name: String,
    /// The sentinels, `host:port` each.
    pub sentinels: Vec<String>,
    /// TLS to the sentinels and to the master.
    pub tls: bool,
    /// The master's credentials as a URL's user part, percent-encoded: `user:password`, or
    /// `:password` for `requirepass`.
    pub master_auth: Option<String>,
    /// The sentinels' credentials, in the same form.
    pub sentinel_auth: Option<String>,
}

impl SentinelTarget {
    /// Reads `rest`, what follows the scheme of `url`.
    pub(crate) fn parse(url: &str, rest: &str, tls: bool) -> Result<Self, ConnectError> {
        let bad = |why: &str| ConnectError::BadUrl {
            url: redact_query(&redact(url)),
            why: why.into(),
        };
        let (main, query) = match rest.split_once('?') {
            Some((main, query)) => (main, Some(query)),
            None => (rest, None),
        };
        let (master_auth, rest) = match main.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth.to_owned()), rest),
            None => (None, main),
        };
        let expected = "expected redis+sentinel://host:port,host:port/<master-name>";
        let Some((hosts, master_name)) = rest.split_once('/') else {
            return Err(bad(&format!("no master name: {expected}")));
        };
        if master_name.is_empty() || master_name.contains('/') {
            return Err(bad(&format!("no master name: {expected}")));
        }
        let sentinels: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| match host.rsplit_once(':') {
                Some((_, port)) if !port.ends_with(']') => host.to_owned(),
                _ => format!("{host}:{SENTINEL_PORT}"),
            })
            .collect();
        if sentinels.is_empty() {
            return Err(bad(&format!("no sentinels given: {expected}")));
        }
        let mut sentinel_auth = None;
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("sentinel_auth", value)) if value.contains(':') => {
                    sentinel_auth = Some(value.to_owned());
                }
                _ => {
                    return Err(bad(
                        "the one parameter is sentinel_auth=user:password or sentinel_auth=:password (percent-encoded)",
                    ));
                }
            }
        }
        for auth in [&master_auth, &sentinel_auth].into_iter().flatten() {
            if percent_decode_str(auth).decode_utf8().is_err() {
                return Err(bad("the credentials are not UTF-8 once percent-decoded"));
            }
        }
        Ok(SentinelTarget {
            master_name: percent_decode_str(master_name).decode_utf8_lossy().into_owned(),
            sentinels,
            tls,
            master_auth,
            sentinel_auth,
        })
    }

    /// The address without its passwords, for logs and errors.
    pub(crate) fn display(&self) -> String {
        let scheme = if self.tls {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        let auth = self
            .master_auth
            .as_deref()
            .map_or(String::new(), |auth| format!("{}@", redact_userinfo(auth)));
        let sentinel_auth = self.sentinel_auth.as_deref().map_or(String::new(), |auth| {
            format!("?sentinel_auth={}", redact_userinfo(auth))
        });
        format!(
            "{scheme}://{auth}{}/{}{sentinel_auth}",
            self.sentinels.join(","),
            self.master_name
        )
    }

    /// redis-rs's client for the sentinels: asks them for the master, and checks that the server
    /// they name is one, with the master's credentials.
    pub(crate) fn client(&self, ca_pem: Option<&[u8]>) -> RedisResult<SentinelClient> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let addrs = self
            .sentinels
            .iter()
            .map(|host| {
                Ok(format!("{scheme}://{host}")
                    .into_connection_info()?
                    .addr()
                    .clone())
            })
            .collect::<RedisResult<Vec<_>>>()?;
        let mut builder = SentinelClientBuilder::new(addrs, &self.master_name, SentinelServerType::Master)?;
        let (user, password) = credentials(self.sentinel_auth.as_deref());
        if let Some(user) = user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        let (user, password) = credentials(self.master_auth.as_deref());
        if let Some(user) = user {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = password {
            builder = builder.set_client_to_redis_password(password);
        }
        if self.tls {
            builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
            if let Some(pem) = ca_pem {
                let certificates = || TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.to_vec()),
                };
                builder = builder
                    .set_client_to_sentinel_certificates(certificates())
                    .set_client_to_redis_certificates(certificates());
            }
        }
        builder.build()
    }
}

/// A URL's user part (`user:password`, `:password`) decoded: the user (none when empty) and the
/// password.
fn credentials(userinfo: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(userinfo) = userinfo else {
        return (None, None);
    };
    let decode = |part: &str| percent_decode_str(part).decode_utf8_lossy().into_owned();
    match userinfo.split_once(':') {
        Some((user, password)) => ((!user.is_empty()).then(|| decode(user)), Some(decode(password))),
        None => (Some(decode(userinfo)), None),
    }
}

/// A user part with its password replaced by `***`.
fn redact_userinfo(userinfo: &str) -> String {
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_owned(),
    }
}

/// `url` with the value of its `sentinel_auth` parameter, if any, replaced by `***`.
fn redact_query(url: &str) -> String {
    match url.split_once("sentinel_auth=") {
        Some((before, after)) => {
            let rest = after.find('&').map_or("", |i| &after[i..]);
            format!("{before}sentinel_auth=***{rest}")
        }
        None => url.to_owned(),
    }
}

/// Which master the sentinels name, found on first use and looked up again after failures and
/// every few seconds, shared by the connections of one store.
pub(crate) struct Watch {
    master_name: String,
    /// redis-rs's sentinel client; the lock makes look-ups one at a time.
    client: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<Master>>,
    /// When the sentinels were last asked.
    asked: Mutex<Instant>,
    /// A call failed as calls to a master that is gone fail, and no look-up since found one
    /// that answers.
    suspect: AtomicBool,
    looking: AtomicBool,
    failovers: AtomicU64,
    /// The bound on one look-up.
    within: Duration,
}

/// The master known: its address (the node name of breakers and logs), a client for it, and how
/// many masters were known before it.
#[derive(Clone)]
struct Master {
    node: Arc<str>,
    client: redis::Client,
    generation: u64,
}

impl Watch {
    /// A watch of `target`'s master; asks nothing yet. Each look-up is bounded by `within`.
    pub(crate) fn new(
        target: &SentinelTarget,
        ca_pem: Option<&[u8]>,
        within: Duration,
    ) -> RedisResult<Arc<Self>> {
        Ok(Arc::new(Watch {
            master_name: target.master_name.clone(),
            client: tokio::sync::Mutex::new(target.client(ca_pem)?),
            current: RwLock::new(None),
            // Due at once.
            asked: Mutex::new(Instant::now() - RECHECK_EVERY),
            suspect: AtomicBool::new(false),
            looking: AtomicBool::new(false),
            failovers: AtomicU64::new(0),
            within,
        }))
    }

    /// How many times a look-up named another master than the one known.
    pub(crate) fn failovers(&self) -> u64 {
        self.failovers.load(Ordering::Relaxed)
    }

    /// The master known; on first use, asks the sentinels, in a task of its own so that a
    /// caller giving up at its deadline does not cancel a look-up that needs longer.
    async fn master(self: &Arc<Self>) -> RedisResult<Master> {
        if let Some(master) = self.current.read().clone() {
            return Ok(master);
        }
        let this = Arc::clone(self);
        tokio::spawn(async move { this.look_up(true).await })
            .await
            .map_err(|e| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    format!("asking the sentinels for the master stopped: {e}"),
                ))
            })?
    }

    /// Asks the sentinels which master is current; with `first`, only when none is known yet
    /// (a look-up made meanwhile is as good). A master other than the one known is a failover.
    async fn look_up(&self, first: bool) -> RedisResult<Master> {
        let mut client = self.client.lock().await;
        if first && let Some(master) = self.current.read().clone() {
            return Ok(master);
        }
        let found = tokio::time::timeout(self.within, client.async_get_client()).await;
        *self.asked.lock() = Instant::now();
        let found = match found {
            Ok(found) => found?,
            Err(_) => return Err(error::deadline(self.within)),
        };
        // redis-rs checked with `ROLE` that it answers as a master.
        self.suspect.store(false, Ordering::Release);
        let node: Arc<str> = Arc::from(found.get_connection_info().addr().to_string());
        let mut current = self.current.write();
        let master = match current.as_ref() {
            Some(known) if known.node == node => return Ok(known.clone()),
            Some(known) => {
                let failovers = self.failovers.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    master = %self.master_name,
                    from = %known.node,
                    to = %node,
                    failovers,
                    "redis sentinel failover: the sentinels name a new master; calls go to it from now on (calls in flight to the old one failed and are not sent again)"
                );
                Master {
                    node,
                    client: found,
                    generation: known.generation + 1,
                }
            }
            None => {
                tracing::info!(master = %self.master_name, node = %node, "redis sentinel named the master");
                Master {
                    node,
                    client: found,
                    generation: 0,
                }
            }
        };
        *current = Some(master.clone());
        Ok(master)
    }

    /// The address of the master known (the name of its breaker); starts a look-up when one is
    /// due.
    pub(crate) fn node(self: &Arc<Self>) -> Arc<str> {
        let node = self.current.read().as_ref().map(|master| master.node.clone());
        self.look_up_if_due();
        node.unwrap_or_else(|| Arc::from(UNKNOWN_MASTER))
    }

    /// Notes a failed call: one that failed as calls to a master that is gone fail makes the
    /// next look-up come soon.
    pub(crate) fn failed(self: &Arc<Self>, err: &RedisError) {
        let gone = error::is_unavailable(error::classify(err))
            || err.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly);
        if gone {
            self.suspect.store(true, Ordering::Release);
            self.look_up_if_due();
        }
    }

    /// Starts a look-up in the background when one is due and none is under way.
    fn look_up_if_due(self: &Arc<Self>) {
        let every = match self.suspect.load(Ordering::Acquire) {
            true => RECHECK_AFTER_FAILURE,
            false => RECHECK_EVERY,
        };
        if self.asked.lock().elapsed() < every || self.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        // Outside a runtime (one shutting down) there is nothing to look up for.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.looking.store(false, Ordering::Release);
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            // A failure is met again by the next call; the look-up after it is due by then.
            let _ = this.look_up(false).await;
            this.looking.store(false, Ordering::Release);
        });
    }
}

/// A connection to whichever master the watch names: a `ConnectionManager` per master, made
/// (lazily) when the watch names another.
pub(crate) struct MasterConnection {
    watch: Arc<Watch>,
    config: ConnectionManagerConfig,
    manager: RwLock<Option<(u64, ConnectionManager)>>,
}

impl MasterConnection {
    pub(crate) fn new(watch: Arc<Watch>, config: ConnectionManagerConfig) -> Self {
        MasterConnection {
            watch,
            config,
            manager: RwLock::new(None),
        }
    }

    pub(crate) fn watch(&self) -> &Arc<Watch> {
        &self.watch
    }

    /// Another connection on the same watch, with `config` (for calls that wait for replicas,
    /// which may take longer than the others).
    pub(crate) fn another(&self, config: ConnectionManagerConfig) -> Self {
        MasterConnection::new(self.watch.clone(), config)
    }

    /// The connection to the master known now.
    pub(crate) async fn get(&self) -> RedisResult<ConnectionManager> {
        let master = self.watch.master().await?;
        if let Some((generation, manager)) = &*self.manager.read()
            && *generation == master.generation
        {
            return Ok(manager.clone());
        }
        // Two callers may both make one; the last kept serves the calls after them.
        let manager = ConnectionManager::new_lazy_with_config(master.client, self.config.clone())?;
        *self.manager.write() = Some((master.generation, manager.clone()));
        Ok(manager)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Target;

    fn sentinel(url: &str) -> SentinelTarget {
        match Target::parse(url) {
            Ok(Target::Sentinel(target)) => target,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn reads_the_sentinels_the_master_name_and_both_credentials() {
        let target = sentinel("rediss+sentinel://app:pa%40ss@a:26379, b:26380,c/main?sentinel_auth=:s3nt");
        assert_eq!(target.master_name, "main");
        assert_eq!(target.sentinels, ["a:26379", "b:26380", "c:26379"]);
        assert!(target.tls);
        assert_eq!(
            credentials(target.master_auth.as_deref()),
            (Some("app".into()), Some("pa@ss".into()))
        );
        assert_eq!(
            credentials(target.sentinel_auth.as_deref()),
            (None, Some("s3nt".into()))
        );
        assert_eq!(
            Target::Sentinel(target).display(),
            "rediss+sentinel://app:***@a:26379,b:26380,c:26379/main?sentinel_auth=:***"
        );
    }

    #[test]
    fn only_failures_of_a_master_that_is_gone_make_the_sentinels_be_asked_soon() {
        let target = sentinel("redis+sentinel://127.0.0.1:1/main");
        let watch = Watch::new(&target, None, Duration::from_secs(1)).expect("a watch");
        let reply = |text: &[u8]| {
            redis::parse_redis_value(text)
                .expect("a reply")
                .extract_error()
                .expect_err("an error reply")
        };
        // Outside a runtime nothing is looked up; only the mark is set.
        watch.failed(&reply(b"-OOM command not allowed\r\n"));
        watch.failed(&reply(b"-WRONGTYPE Operation against a key\r\n"));
        assert!(!watch.suspect.load(Ordering::Acquire));
        watch.failed(&reply(
            b"-READONLY You can't write against a read only replica.\r\n",
        ));
        assert!(watch.suspect.load(Ordering::Acquire));
        let watch = Watch::new(&target, None, Duration::from_secs(1)).expect("a watch");
        watch.failed(&RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(watch.suspect.load(Ordering::Acquire));
        assert_eq!(&*watch.node(), UNKNOWN_MASTER);
        assert_eq!(watch.failovers(), 0);
    }

    #[test]
    fn an_address_without_a_master_name_or_sentinels_is_refused_without_its_passwords() {
        for (url, why) in [
            ("redis+sentinel://a:26379", "no master name"),
            ("redis+sentinel://a:26379/", "no master name"),
            ("redis+sentinel://a:1/m/x", "no master name"),
            ("redis+sentinel:///m", "no sentinels"),
            ("redis+sentinel://a:1/m?db=2", "sentinel_auth=user:password"),
            (
                "redis+sentinel://:pw@a:1/m?sentinel_auth=pw2",
                "sentinel_auth=user:password",
            ),
        ] {
            let err = Target::parse(url).expect_err(url).to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(!err.contains("pw"), "{url}: {err}");
        }
    }
}
