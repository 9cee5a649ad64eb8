//! Errors: connecting, and turning Redis failures into the core's typed store errors.
//!
//! The store never decides by itself when Redis fails: it reports a [`tollgate::Error::Store`]
//! whose class says what went wrong and whose `source()` is the `redis::RedisError` itself, and
//! the core's `Engine` applies the policy's failure mode. Classes come from the error's kind and
//! server error code, not from its message text, so a reworded message cannot move an error to
//! another class. The one exception is documented at `is_unauthenticated_request`.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tollgate::{Error, StoreErrorKind};

/// Setting up a `RedisStore` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The address is not one we understand.
    #[error("bad redis address `{url}`: {why}")]
    BadUrl {
        /// The address given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key prefix contains a brace, which would move the cluster hash tag.
    #[error("key prefix `{0}` must not contain `{{` or `}}`")]
    BadPrefix(String),
    /// The CA bundle given for TLS is not PEM, holds no certificate, or holds a malformed one.
    #[error("not a usable CA bundle: {why}")]
    BadCa {
        /// What is wrong with it.
        why: String,
    },
    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The server answers, but cannot run Lua scripts: scripting is turned off (Valkey without
    /// its Lua engine, `EVAL` and `SCRIPT` renamed away). Every decision is a script, so the store
    /// can never decide there.
    #[error(
        "the store at {store} cannot run Lua scripts ({answer}): tollgate needs EVALSHA (and SCRIPT LOAD); enable Lua scripting on the server"
    )]
    NoScripting {
        /// The store's address, without its password.
        store: String,
        /// What the server answered when the store loaded its script.
        answer: String,
    },
}

/// Whether an answer to loading or calling a script says the server cannot run Lua at all: no
/// such command (`EVAL`, `EVALSHA` or `SCRIPT` renamed away or never built), or no Lua engine
/// (Valkey 9 with its `lua` module unloaded answers "Could not find scripting engine" to scripts
/// and "Engine 'lua' not found" to libraries). Read from the text: servers give these no code of
/// their own.
pub(crate) fn no_scripting(err: &RedisError) -> bool {
    let detail = err.detail().unwrap_or_default();
    err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && (detail.starts_with("unknown command")
            || detail.contains("Could not find scripting engine")
            || detail.contains("Engine 'lua' not found"))
}

/// `url` with the password (between `user:` and `@`) replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// The error code our scripts raise on a value they did not write (`lua/common.lua` raises it as
/// an error reply, so it arrives as the reply's code).
const CORRUPT: &str = "TOLLGATE_CORRUPT";

/// Classifies a Redis failure by its kind and server error code:
///
/// - `Timeout`: no answer in time (the driver's response timeout or the store's deadline);
/// - `Connection`: refused, dropped or otherwise broken I/O;
/// - `OutOfMemory`: `OOM`, Redis at `maxmemory` with a policy that does not evict;
/// - `Auth`: `NOAUTH`, `WRONGPASS`, `NOPERM`, the handshake's authentication failure, or a
///   request Redis refused to read before authentication;
/// - `Cluster`: redirections and cluster states the client could not follow;
/// - `Corrupt`: `WRONGTYPE` or our scripts' own marker: one key holds a value we did not write;
/// - `Script`: everything else the server or the client rejected.
///
/// `Timeout`, `Connection` and `Cluster` mean Redis is unavailable: they feed the circuit breaker.
pub(crate) fn classify(err: &RedisError) -> StoreErrorKind {
    if err.is_timeout() {
        return StoreErrorKind::Timeout;
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return StoreErrorKind::Connection;
    }
    match err.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
            return StoreErrorKind::Auth;
        }
        ErrorKind::ClusterConnectionNotFound
        | ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::CrossSlot
            | ServerErrorKind::MasterDown,
        ) => return StoreErrorKind::Cluster,
        _ => {}
    }
    if is_unauthenticated_request(err) {
        return StoreErrorKind::Auth;
    }
    if is_cluster_support_disabled(err) {
        return StoreErrorKind::Cluster;
    }
    // Codes the client has no kind for arrive as extension errors with the code kept.
    match err.code() {
        Some("OOM") => StoreErrorKind::OutOfMemory,
        Some("NOAUTH" | "WRONGPASS") => StoreErrorKind::Auth,
        Some("WRONGTYPE" | CORRUPT) => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Script,
    }
}

/// Redis answers a request of more than 10 arguments from a client that has not authenticated
/// with `ERR Protocol error: unauthenticated multibulk length` (and closes the connection) rather
/// than `NOAUTH`. Every decision script call is that long, so this is how a missing password
/// shows. It is the one class read from the text, since Redis gives it no code of its own.
fn is_unauthenticated_request(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
        && err
            .detail()
            .is_some_and(|d| d.starts_with("Protocol error: unauthenticated"))
}

/// A cluster address pointed at a standalone server: the cluster client's `CLUSTER SLOTS` is
/// answered `ERR This instance has cluster support disabled`, a plain `ERR` whose text is the
/// only sign of the wrong mode.
fn is_cluster_support_disabled(err: &RedisError) -> bool {
    let text = err.to_string();
    text.contains("cluster support disabled")
}

/// The core's store error for a Redis failure, with the Redis error as its source.
pub(crate) fn store_error(err: RedisError) -> Error {
    Error::store(classify(&err), err)
}

/// The store error for a script reply of the wrong shape.
pub(crate) fn bad_reply(reply: &[u64]) -> Error {
    store_error(RedisError::from((
        ErrorKind::UnexpectedReturnType,
        "unexpected script reply",
        format!("{reply:?}"),
    )))
}

/// The Redis error for a call the store's deadline cut short: an I/O timeout, as the driver
/// reports its own, so every timeout carries a `RedisError` source of the same shape.
pub(crate) fn deadline(after: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from redis within {after:?}"),
    ))
}

/// A call refused at once by the open circuit breaker. Its source is the failure that opened
/// the breaker, so a refused call still leads to the Redis error behind it.
#[derive(Debug, Clone)]
pub(crate) struct BreakerOpen {
    pub(crate) next_probe_in: Duration,
    pub(crate) cause: Option<RedisError>,
}

impl std::fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redis unavailable; next probe in {:?}", self.next_probe_in)?;
        if let Some(cause) = &self.cause {
            write!(f, " (last failure: {cause})")?;
        }
        Ok(())
    }
}

impl std::error::Error for BreakerOpen {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

pub(crate) fn breaker_open(refusal: BreakerOpen) -> Error {
    Error::store(StoreErrorKind::Connection, refusal)
}

/// An admission its policy's replicas did not acknowledge
/// ([`Policy::with_replicas`](tollgate::Policy::with_replicas)).
#[derive(Debug, Clone)]
pub(crate) enum Unreplicated {
    /// The call's `WAIT` counted fewer replicas than the policy asks for. The decision was
    /// applied on the node that decided; it could be lost if that node failed over now.
    Short { wanted: u32, acknowledged: u64 },
    /// Not waited for: the node's replicas fell short lately, so the call was sent without
    /// `WAIT` until the next probe (see `breaker`). The decision was applied on the node.
    NotWaited,
}

impl std::fmt::Display for Unreplicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreplicated::Short { wanted, acknowledged } => write!(
                f,
                "{acknowledged} of the {wanted} replicas the policy waits for acknowledged the admission in time"
            ),
            Unreplicated::NotWaited => f.write_str(
                "the node's replicas fell short of acknowledging admissions lately; this one was not waited for",
            ),
        }
    }
}

impl std::error::Error for Unreplicated {}

fn unreplicated(why: Unreplicated) -> Error {
    Error::store(StoreErrorKind::Unreplicated, why)
}

/// `Ok` unless an admission of a policy that waits for `wanted` replicas was acknowledged by
/// fewer (`replicas`: how many; `None` when the call did not wait).
pub(crate) fn acknowledged(wanted: u32, replicas: Option<u64>) -> Result<(), Error> {
    match replicas {
        _ if wanted == 0 => Ok(()),
        None => Err(unreplicated(Unreplicated::NotWaited)),
        Some(acknowledged) if acknowledged < u64::from(wanted) => {
            Err(unreplicated(Unreplicated::Short { wanted, acknowledged }))
        }
        Some(_) => Ok(()),
    }
}

/// The cause a replicas breaker keeps when a call's `WAIT` fell short.
pub(crate) fn replicas_short(wanted: u32, acknowledged: u64) -> RedisError {
    RedisError::from((
        ErrorKind::Client,
        "replicas fell short",
        format!("{acknowledged} of {wanted} replicas acknowledged the call's writes in time"),
    ))
}

/// A Redis in the other mode than the address says: a standalone address at a cluster node, or
/// a cluster address at a standalone server.
#[derive(Debug)]
pub(crate) struct WrongMode(pub(crate) &'static str);

impl std::fmt::Display for WrongMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for WrongMode {}

pub(crate) fn wrong_mode(why: &'static str) -> Error {
    Error::store(StoreErrorKind::Cluster, WrongMode(why))
}

/// True for classes that mean Redis itself is unavailable, as opposed to one bad key or a
/// rejected write.
pub(crate) fn is_unavailable(kind: StoreErrorKind) -> bool {
    matches!(
        kind,
        StoreErrorKind::Timeout | StoreErrorKind::Connection | StoreErrorKind::Cluster
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_reply(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn classes_come_from_kinds_and_codes() {
        let io = |kind| RedisError::from(std::io::Error::from(kind));
        let cases = [
            (deadline(Duration::from_millis(5)), StoreErrorKind::Timeout),
            (io(std::io::ErrorKind::TimedOut), StoreErrorKind::Timeout),
            (
                io(std::io::ErrorKind::ConnectionRefused),
                StoreErrorKind::Connection,
            ),
            (io(std::io::ErrorKind::BrokenPipe), StoreErrorKind::Connection),
            (
                server_reply("OOM", "command not allowed"),
                StoreErrorKind::OutOfMemory,
            ),
            (
                server_reply("NOAUTH", "authentication required"),
                StoreErrorKind::Auth,
            ),
            (
                server_reply("WRONGPASS", "invalid password"),
                StoreErrorKind::Auth,
            ),
            (
                RedisError::from((ErrorKind::AuthenticationFailed, "password authentication failed")),
                StoreErrorKind::Auth,
            ),
            (
                server_reply("WRONGTYPE", "wrong kind of value"),
                StoreErrorKind::Corrupt,
            ),
            (
                server_reply(CORRUPT, "field t holds soon"),
                StoreErrorKind::Corrupt,
            ),
            (
                RedisError::from((ErrorKind::ClusterConnectionNotFound, "no node")),
                StoreErrorKind::Cluster,
            ),
            (server_reply("BUSY", "script running"), StoreErrorKind::Script),
            (
                redis::parse_redis_value(b"-ERR Protocol error: unauthenticated multibulk length\r\n")
                    .expect("a reply")
                    .extract_error()
                    .expect_err("an error reply"),
                StoreErrorKind::Auth,
            ),
        ];
        for (err, expected) in cases {
            assert_eq!(classify(&err), expected, "{err}");
        }
    }

    #[test]
    fn an_admission_fewer_replicas_acknowledged_is_unreplicated() {
        assert!(acknowledged(0, None).is_ok());
        assert!(acknowledged(1, Some(1)).is_ok());
        assert!(acknowledged(1, Some(2)).is_ok());
        let err = acknowledged(2, Some(1)).expect_err("one of two");
        assert_eq!(err.class(), Some("unreplicated"));
        assert_eq!(
            err.to_string(),
            "store unreplicated error: 1 of the 2 replicas the policy waits for acknowledged the admission in time"
        );
        let err = acknowledged(1, None).expect_err("not waited for");
        assert_eq!(err.class(), Some("unreplicated"));
    }

    #[test]
    fn a_server_without_lua_is_told_from_other_errors() {
        let reply = |text: &[u8]| {
            redis::parse_redis_value(text)
                .expect("a reply")
                .extract_error()
                .expect_err("an error reply")
        };
        assert!(no_scripting(&reply(
            b"-ERR unknown command 'SCRIPT', with args beginning with: 'LOAD' \r\n"
        )));
        assert!(no_scripting(&reply(
            b"-ERR Could not find scripting engine 'lua'\r\n"
        )));
        assert!(!no_scripting(&reply(b"-NOSCRIPT No matching script.\r\n")));
        assert!(!no_scripting(&reply(b"-NOPERM this user has no permissions\r\n")));
        assert!(!no_scripting(&reply(b"-ERR Error compiling script\r\n")));
    }

    #[test]
    fn the_message_alone_never_picks_a_class() {
        // An ordinary error reply whose text mentions other classes' codes.
        let err = server_reply("ERR", "user_script:1: OOM WRONGTYPE NOAUTH TOLLGATE_CORRUPT");
        assert_eq!(classify(&err), StoreErrorKind::Script);
    }

    #[test]
    fn store_errors_keep_the_redis_error_as_source() {
        let err = store_error(server_reply("OOM", "command not allowed"));
        assert_eq!(err.class(), Some("out_of_memory"));
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.downcast_ref::<RedisError>().is_some(), "{source:?}");

        let refused = breaker_open(BreakerOpen {
            next_probe_in: Duration::from_millis(10),
            cause: Some(deadline(Duration::from_millis(5))),
        });
        assert_eq!(refused.class(), Some("connection"));
        // The refusal, then the Redis error that opened the breaker (then its I/O error).
        let chain: Vec<&(dyn std::error::Error + 'static)> =
            std::iter::successors(std::error::Error::source(&refused), |e| e.source()).collect();
        assert!(chain[0].to_string().starts_with("redis unavailable"), "{chain:?}");
        let cause = chain[1].downcast_ref::<RedisError>().expect("the redis error");
        assert!(cause.is_timeout(), "{cause}");
    }
}
