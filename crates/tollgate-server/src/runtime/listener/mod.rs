//! Serving a socket to clients that may be hostile: every listener of `tollgate serve` and
//! `tollgate proxy` (HTTP API, Envoy gRPC, proxy, proxy admin) goes through here, so each has
//! the same timeouts, the same connection limit and the same shutdown drain.
//!
//! What each setting of [`ListenerOptions`] stops:
//!
//! - **header read timeout**: a client that sends its request head a byte at a time (slowloris).
//!   In HTTP/1 the wait for the next request on a kept-alive connection counts too, so it is also
//!   the keep-alive idle limit there.
//! - **body read timeout** and **max body bytes**: a body that trickles in or never ends; the
//!   client gets 408 or 413 as a problem answer.
//! - **first-byte timeout**: a connection that sends nothing at all, whatever its protocol (no
//!   protocol timeout has started yet). Shorter than the idle timeout, so that thousands of
//!   silent connections let go of their slots in seconds. On a TLS listener (the gRPC port with
//!   [`ServerTls`]) it bounds the whole handshake too ([`handshake`]).
//! - **idle timeout**: a connection with no bytes in either direction once it has spoken (a
//!   client that stops sending or reading).
//! - **max connections**: past it a new connection is accepted, answered `503` with a problem
//!   body and `Connection: close` (HTTP) or closed at once (gRPC), and counted in
//!   `tollgate_connections_refused_total`; the slots held by slow clients cannot take the file
//!   descriptors the server needs.
//! - **max connections per address**: past it a new connection from that client address (IPv6:
//!   its /64) is closed at once, without an answer, and counted in
//!   `tollgate_connections_refused_per_address_total`; one address cannot hold the listener's
//!   whole connection budget and lock every other client out.
//! - **max URI bytes** / **max header bytes**: 414 and 431 problem answers.
//! - **`Host`**: an HTTP/1.1 request without exactly one `Host` header, any request with two,
//!   a `Host` that is not one host (a list, whitespace, userinfo, a bad port), or one that
//!   disagrees with the request target's host, gets a 400 problem answer ([`host`]).
//! - **HTTP/2 keep-alive** and **max concurrent streams**: dead peers are found by pings; one
//!   connection cannot open unbounded streams.
//! - **drain timeout**: on shutdown the listener stops accepting and every connection is asked
//!   to finish; whatever is still open when the timeout passes is closed, so SIGTERM always
//!   completes.
//!
//! Connections are counted per listener by a semaphore, and per client address in a map
//! ([`per_address`]): both slots are taken at accept and given back when the connection is
//! dropped, whatever ended it.

mod guarded;
mod handshake;
pub(crate) mod host;
mod inline;
pub(crate) mod limits;
mod per_address;

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

pub(crate) use guarded::Guarded;
use guarded::{Deadlines, Slots};
pub(crate) use limits::BodyLimitError;
use per_address::AddressSlots;

use super::tls::ServerTls;

/// The largest request body accepted by default: the HTTP API's and `/json`'s bodies are small
/// JSON ([`ListenerOptions::max_body_bytes`]).
pub(crate) const MAX_BODY: usize = 64 * 1024;
use limits::RequestLimits;

/// Timeouts and limits of one listener. The defaults are safe for a server on a private network
/// behind a load balancer; `docs/operations.md` explains each.
///
/// ```
/// use std::time::Duration;
/// use tollgate_server::ListenerOptions;
///
/// let options = ListenerOptions {
///     max_connections: 100,
///     header_read_timeout: Duration::from_secs(2),
///     ..ListenerOptions::default()
/// };
/// assert_eq!(options.max_body_bytes, 64 * 1024);
/// ```
#[derive(Debug, Clone)]
pub struct ListenerOptions {
    /// How long a client may take to send a request head (HTTP/1; also the keep-alive idle
    /// limit there). Default 10 s.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request body, from the end of its head. Default 30 s.
    pub body_read_timeout: Duration,
    /// A connection whose client sends no byte for this long after connecting is closed; a
    /// value above the idle timeout counts as the idle timeout. On a TLS listener the whole
    /// handshake must end within it. Default 10 s.
    pub first_byte_timeout: Duration,
    /// A connection with no bytes in either direction for this long is closed. Default 120 s.
    pub idle_timeout: Duration,
    /// Open connections per listener; more are refused. Default 10 000.
    pub max_connections: usize,
    /// Open connections per client address (an IPv6 client: its /64) per listener; more from
    /// that address are closed at once. Default 1 000; behind a load balancer or a proxy that
    /// does not keep the client's address, raise it to `max_connections`.
    pub max_connections_per_address: usize,
    /// The longest request target (path and query). Default 8 KiB.
    pub max_uri_bytes: usize,
    /// The largest header section (names, values and 4 bytes of framing per line). Default
    /// 16 KiB.
    pub max_header_bytes: usize,
    /// The largest request body. Default 64 KiB (the HTTP API's bodies are small JSON); the
    /// proxy's default is [`ListenerOptions::PROXY_MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// HTTP/2 and gRPC: concurrent streams per connection. Default 256.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2 and gRPC: how often an idle connection is pinged. Default 30 s.
    pub http2_keepalive_interval: Duration,
    /// HTTP/2 and gRPC: how long a ping may go unanswered before the connection is closed.
    /// Default 10 s.
    pub http2_keepalive_timeout: Duration,
    /// On shutdown, how long open connections get to finish before they are closed. Default 10 s.
    pub drain_timeout: Duration,
}

impl ListenerOptions {
    /// The proxy's default body limit: 16 MiB. Bodies are streamed to the upstream, not held.
    pub const PROXY_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

    /// Checks that every duration and limit is above zero: a zero timeout or limit would refuse
    /// everything, which is never what an operator meant.
    ///
    /// ```
    /// use tollgate_server::ListenerOptions;
    ///
    /// assert!(ListenerOptions::default().validate().is_ok());
    /// let zero = ListenerOptions { max_connections: 0, ..ListenerOptions::default() };
    /// assert_eq!(zero.validate().unwrap_err(), "max connections must be at least 1");
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        let durations = [
            ("header read timeout", self.header_read_timeout),
            ("body read timeout", self.body_read_timeout),
            ("first-byte timeout", self.first_byte_timeout),
            ("idle timeout", self.idle_timeout),
            ("http2 keep-alive interval", self.http2_keepalive_interval),
            ("http2 keep-alive timeout", self.http2_keepalive_timeout),
        ];
        for (name, value) in durations {
            if value.is_zero() {
                return Err(format!("{name} must be more than zero"));
            }
        }
        let counts = [
            ("max connections", self.max_connections),
            ("max connections per address", self.max_connections_per_address),
            ("max uri bytes", self.max_uri_bytes),
            ("max header bytes", self.max_header_bytes),
            ("max body bytes", self.max_body_bytes),
            (
                "http2 max concurrent streams",
                self.http2_max_concurrent_streams as usize,
            ),
        ];
        for (name, value) in counts {
            if value == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        if self.max_connections > Semaphore::MAX_PERMITS {
            return Err(format!(
                "max connections must be at most {}",
                Semaphore::MAX_PERMITS
            ));
        }
        Ok(())
    }

    /// The request limits the HTTP middleware applies.
    pub(crate) fn request_limits(&self, listener: &'static str) -> RequestLimits {
        RequestLimits {
            listener,
            max_uri_bytes: self.max_uri_bytes,
            max_header_bytes: self.max_header_bytes,
            max_body_bytes: self.max_body_bytes,
            body_read_timeout: self.body_read_timeout,
        }
    }

    /// The HTTP parser's own hard cap on a request head, above ours so that an oversized request
    /// normally gets our problem answer; past it the parser answers a bare 431 and closes.
    fn parser_head_cap(&self) -> usize {
        (2 * (self.max_uri_bytes + self.max_header_bytes) + 8192).max(16 * 1024)
    }
}

impl Default for ListenerOptions {
    fn default() -> Self {
        ListenerOptions {
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            first_byte_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connections: 10_000,
            max_connections_per_address: 1_000,
            max_uri_bytes: 8 * 1024,
            max_header_bytes: 16 * 1024,
            max_body_bytes: MAX_BODY,
            http2_max_concurrent_streams: 256,
            http2_keepalive_interval: Duration::from_secs(30),
            http2_keepalive_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Adds the request limits of `options` to `app` (414, 431, 413, the body deadline and the
/// `Host` rule's 400), as
/// [`serve_http`] expects of the routers it serves.
pub(crate) fn with_request_limits(app: Router, listener: &'static str, options: &ListenerOptions) -> Router {
    app.layer(axum::middleware::from_fn_with_state(
        options.request_limits(listener),
        limits::check,
    ))
}

/// Serves `app` (HTTP/1.1 and HTTP/2 without TLS) on `listener` with `options`, until `shutdown`
/// completes; then stops accepting, lets open connections finish for up to the drain timeout
/// and closes the rest. `name` labels metrics and logs (`http`, `proxy`, `admin`).
///
/// Requests carry `ConnectInfo<SocketAddr>` as `axum::serve` with connect info does. Wrap `app`
/// with [`with_request_limits`] for the request-level limits.
pub(crate) async fn serve_http(
    name: &'static str,
    listener: TcpListener,
    app: Router,
    options: &ListenerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let builder = http_builder(options);
    accept_loop(
        name,
        listener,
        options,
        shutdown,
        refuse_http,
        |io, peer, stopping| {
            let service = hyper::service::service_fn({
                let app = app.clone();
                move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    app.clone().oneshot(request)
                }
            });
            let builder = builder.clone();
            async move {
                let connection = builder.serve_connection(TokioIo::new(io), service);
                let mut connection = pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => {}
                    () = stopping.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.as_mut().await;
                    }
                }
            }
        },
    )
    .await
}

/// Serves gRPC `routes` (HTTP/2 with prior knowledge, or over `tls` when given) on `listener`
/// with `options`, until `shutdown` completes, with the same connection limits, timeouts and
/// drain as [`serve_http`]; a connection past the limit is closed at once, before any
/// handshake. With TLS the handshake must end within the first-byte timeout ([`handshake`]),
/// and each connection shakes hands with the files current when it was accepted. The calls of
/// one connection run in its own task ([`inline`]), so the answers that are ready together are
/// written together. A call with a `grpc-timeout` header is answered `CANCELLED` once it passes,
/// as tonic's own server does.
pub(crate) async fn serve_grpc(
    name: &'static str,
    listener: TcpListener,
    routes: tonic::service::Routes,
    tls: Option<ServerTls>,
    options: &ListenerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let refuse = |name: &'static str, stream: TcpStream| {
        crate::ops::metrics::connection_refused(name);
        crate::ops::metrics::warn_sampled_refusal(name);
        drop(stream);
    };
    let handshake_deadline = options.first_byte_timeout.min(options.idle_timeout);
    accept_loop(
        name,
        listener,
        options,
        shutdown,
        refuse,
        |io, _peer, stopping| {
            let service = hyper::service::service_fn({
                let routes = routes.clone();
                move |request: hyper::Request<Incoming>| {
                    let deadline = grpc_timeout(request.headers());
                    let answer = routes.clone().oneshot(request);
                    async move {
                        match deadline {
                            None => answer.await,
                            Some(deadline) => match tokio::time::timeout(deadline, answer).await {
                                Ok(answer) => answer,
                                Err(_) => Ok(tonic::Status::cancelled("Timeout expired").into_http()),
                            },
                        }
                    }
                }
            });
            let executor = inline::Inline::default();
            let builder = grpc_builder(options, executor.clone());
            let acceptor = tls.as_ref().map(ServerTls::acceptor);
            async move {
                // The shutdown is watched inside the driven future, never by dropping `drive`:
                // the streams it runs (calls in flight, health watches) live only as long as
                // one `drive`, and must see the graceful shutdown through.
                let connection = async move {
                    let io = match acceptor {
                        None => Either::Left(io),
                        Some(acceptor) => {
                            match handshake::handshake(name, acceptor, io, handshake_deadline, &stopping)
                                .await
                            {
                                // Boxed: a TLS session is large, and the plaintext path need not
                                // carry its size.
                                Some(tls) => Either::Right(Box::new(tls)),
                                None => return,
                            }
                        }
                    };
                    let connection = builder.serve_connection(TokioIo::new(io), service);
                    let mut connection = pin!(connection);
                    tokio::select! {
                        _ = connection.as_mut() => {}
                        () = stopping.cancelled() => {
                            connection.as_mut().graceful_shutdown();
                            let _ = connection.await;
                        }
                    }
                };
                executor.drive(pin!(connection)).await;
            }
        },
    )
    .await
}

/// A gRPC call's own deadline (`grpc-timeout: <at most 8 digits><H|M|S|m|u|n>`); none when the
/// header is missing or malformed, as tonic treats it.
fn grpc_timeout(headers: &hyper::HeaderMap) -> Option<Duration> {
    let (unit, digits) = headers.get("grpc-timeout")?.as_bytes().split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 8 digits: no overflow, even in hours.
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3_600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The accept loop every listener shares: takes a slot of the client address's limit (else
/// closes the connection at once) and of the listener's (else `refuse`s it), sets
/// `TCP_NODELAY`, wraps the socket in [`Guarded`] and runs `serve` on it in a task of its own;
/// `serve` gets the token that asks its connection to finish. After `shutdown`, stops accepting
/// and drains.
async fn accept_loop<F, Fut>(
    name: &'static str,
    listener: TcpListener,
    options: &ListenerOptions,
    shutdown: impl Future<Output = ()> + Send,
    refuse: impl Fn(&'static str, TcpStream),
    mut serve: F,
) -> io::Result<()>
where
    F: FnMut(Guarded<TcpStream>, std::net::SocketAddr, CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    crate::ops::metrics::start_at_zero("tollgate_connections_refused_total", "listener", &[name]);
    crate::ops::metrics::start_at_zero(
        "tollgate_connections_refused_per_address_total",
        "listener",
        &[name],
    );
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let per_address = AddressSlots::new(options.max_connections_per_address);
    let deadlines = Deadlines {
        // A silent connection never gets longer than an idle one.
        first_byte: options.first_byte_timeout.min(options.idle_timeout),
        idle: options.idle_timeout,
    };
    let stopping = CancellationToken::new();
    let closing = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        accept_failed(name, &err).await;
                        continue;
                    }
                };
                // The address first: a flood from one address is closed without an answer and
                // without touching the listener's slots.
                let Some(address) = per_address.try_take(peer.ip()) else {
                    crate::ops::metrics::connection_refused_per_address(name);
                    drop(stream);
                    continue;
                };
                let Ok(listener_slot) = Arc::clone(&slots).try_acquire_owned() else {
                    refuse(name, stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let slots = Slots::new(listener_slot, address);
                let io = Guarded::new(stream, slots, name, deadlines, &closing);
                connections.spawn(serve(io, peer, stopping.clone()));
            }
        }
    }
    drop(listener);
    stopping.cancel();
    drain(name, &mut connections, options.drain_timeout, &closing).await;
    Ok(())
}

/// Waits for `connections` to finish, up to `timeout`; then closes what is left.
async fn drain(
    name: &'static str,
    connections: &mut JoinSet<()>,
    timeout: Duration,
    closing: &CancellationToken,
) {
    let finished = tokio::time::timeout(timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            listener = name,
            connections = connections.len(),
            ?timeout,
            "drain timeout passed; closing the remaining connections"
        );
        closing.cancel();
        // Closed sockets end their tasks; aborting covers one stuck elsewhere.
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
}

fn http_builder(options: &ListenerOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true)
        .max_buf_size(options.parser_head_cap())
        .max_headers(512);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(options.http2_keepalive_interval)
        .keep_alive_timeout(options.http2_keepalive_timeout)
        .max_concurrent_streams(options.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(options.parser_head_cap()).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(256);
    builder
}

/// The HTTP/2 settings of a gRPC connection. Flow-control windows are hyper's (1 MiB per
/// stream and per connection): rate limit messages are a few hundred bytes, so no window ever
/// holds a call back, and no adaptive window is needed. No `date` header: gRPC has no use for it.
fn grpc_builder(
    options: &ListenerOptions,
    executor: inline::Inline,
) -> hyper::server::conn::http2::Builder<inline::Inline> {
    let mut builder = hyper::server::conn::http2::Builder::new(executor);
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(options.http2_keepalive_interval)
        .keep_alive_timeout(options.http2_keepalive_timeout)
        .max_concurrent_streams(options.http2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(options.max_header_bytes).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(64)
        .max_local_error_reset_streams(256)
        .auto_date_header(false);
    builder
}

/// The canned answer to a connection past the limit. Written without waiting: a fresh socket's
/// send buffer has room, and a client that does not read it loses nothing it asked for.
const REFUSAL: &str = "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"too many open connections; try again shortly\"}";

fn refuse_http(name: &'static str, stream: TcpStream) {
    crate::ops::metrics::connection_refused(name);
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{REFUSAL}",
        REFUSAL.len()
    );
    // Straight to the socket (still non-blocking), without waiting for the reactor to report it
    // writable: the answer is written now or not at all, and the socket is closed on return.
    if let Ok(socket) = stream.into_std() {
        let _ = std::io::Write::write(&mut &socket, answer.as_bytes());
    }
    crate::ops::metrics::warn_sampled_refusal(name);
}

/// An accept that failed. Out of file descriptors (or memory) is waited out briefly instead of
/// spinning; a connection that died before it was accepted is no error of ours.
async fn accept_failed(name: &'static str, err: &io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted};
    if matches!(err.kind(), ConnectionAborted | ConnectionReset | Interrupted) {
        return;
    }
    crate::ops::metrics::accept_failed(name, err);
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout(value: &str) -> Option<Duration> {
        let mut headers = hyper::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().expect("header value"));
        grpc_timeout(&headers)
    }

    #[test]
    fn grpc_timeouts_are_read_in_every_unit() {
        assert_eq!(timeout("20m"), Some(Duration::from_millis(20)));
        assert_eq!(timeout("3S"), Some(Duration::from_secs(3)));
        assert_eq!(timeout("2M"), Some(Duration::from_secs(120)));
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(timeout("500u"), Some(Duration::from_micros(500)));
        assert_eq!(timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
    }

    #[test]
    fn malformed_grpc_timeouts_are_ignored() {
        for value in ["", "m", "20", "20x", "123456789m", "-1m", "1.5S", "२m"] {
            assert_eq!(timeout(value), None, "{value:?}");
        }
        assert_eq!(grpc_timeout(&hyper::HeaderMap::new()), None);
    }
}
