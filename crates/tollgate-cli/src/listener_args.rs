//! The listener flags `serve` and `proxy` share: timeouts and limits of every listener
//! (`tollgate_server::ListenerOptions`), each with an environment variable. The
//! defaults are the library's; `docs/operations.md` says what each protects against.

use std::time::Duration;

use clap::Args;
use tollgate_server::ListenerOptions;

/// A duration flag or variable: `"10s"`, `"500ms"`, `"2m"`, `"1m30s"` (Go's durations too).
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    tollgate_config::duration::parse_duration(text).map_err(|err| err.to_string())
}

#[derive(Args, Debug, Clone)]
pub(crate) struct ListenerArgs {
    /// Time a client has to send a request head; in HTTP/1 also the keep-alive idle limit.
    #[arg(long, env = "TOLLGATE_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = duration)]
    header_read_timeout: Duration,
    /// Time a client has to send a request body (408 after it).
    #[arg(long, env = "TOLLGATE_BODY_READ_TIMEOUT", default_value = "30s", value_parser = duration)]
    body_read_timeout: Duration,
    /// A connection whose client sends no byte for this long is closed (capped at --idle-timeout).
    #[arg(long, env = "TOLLGATE_FIRST_BYTE_TIMEOUT", default_value = "10s", value_parser = duration)]
    first_byte_timeout: Duration,
    /// A connection with no bytes in either direction for this long is closed.
    #[arg(long, env = "TOLLGATE_IDLE_TIMEOUT", default_value = "2m", value_parser = duration)]
    idle_timeout: Duration,
    /// Open connections per listener; more are refused (503, or closed on gRPC).
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
    /// Open connections per client address (IPv6: per /64) per listener; more from it are
    /// closed at once. Behind a load balancer, raise it to --max-connections.
    #[arg(long, env = "TOLLGATE_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 1_000)]
    max_connections_per_address: usize,
    /// Longest request target (path and query), in bytes (414 past it).
    #[arg(long, env = "TOLLGATE_MAX_URI_BYTES", default_value_t = 8 * 1024)]
    max_uri_bytes: usize,
    /// Largest header section, in bytes (431 past it).
    #[arg(long, env = "TOLLGATE_MAX_HEADER_BYTES", default_value_t = 16 * 1024)]
    max_header_bytes: usize,
    /// Largest request body, in bytes (413 past it) [default: 65536 for serve, 16777216 for proxy].
    #[arg(long, env = "TOLLGATE_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// HTTP/2 and gRPC: concurrent streams per connection.
    #[arg(long, env = "TOLLGATE_HTTP2_MAX_STREAMS", default_value_t = 256)]
    http2_max_streams: u32,
    /// HTTP/2 and gRPC: ping interval on a connection.
    #[arg(long, env = "TOLLGATE_HTTP2_KEEPALIVE_INTERVAL", default_value = "30s", value_parser = duration)]
    http2_keepalive_interval: Duration,
    /// HTTP/2 and gRPC: how long a ping may go unanswered.
    #[arg(long, env = "TOLLGATE_HTTP2_KEEPALIVE_TIMEOUT", default_value = "10s", value_parser = duration)]
    http2_keepalive_timeout: Duration,
    /// On shutdown, time open connections get to finish before they are closed.
    #[arg(long, env = "TOLLGATE_DRAIN_TIMEOUT", default_value = "10s", value_parser = duration)]
    drain_timeout: Duration,
}

impl ListenerArgs {
    /// The options, with `default_body` when `--max-body-bytes` is not given.
    pub(crate) fn options(&self, default_body: usize) -> ListenerOptions {
        ListenerOptions {
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            first_byte_timeout: self.first_byte_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            max_uri_bytes: self.max_uri_bytes,
            max_header_bytes: self.max_header_bytes,
            max_body_bytes: self.max_body_bytes.unwrap_or(default_body),
            http2_max_concurrent_streams: self.http2_max_streams,
            http2_keepalive_interval: self.http2_keepalive_interval,
            http2_keepalive_timeout: self.http2_keepalive_timeout,
            drain_timeout: self.drain_timeout,
        }
    }
}

/// Deadlines of the proxy's upstream calls.
#[derive(Args, Debug, Clone)]
pub(crate) struct UpstreamArgs {
    /// Time to connect to the upstream (504 after it).
    #[arg(long, env = "TOLLGATE_UPSTREAM_CONNECT_TIMEOUT", default_value = "5s", value_parser = duration)]
    upstream_connect_timeout: Duration,
    /// Time for the upstream to send its answer's head (504 after it).
    #[arg(long, env = "TOLLGATE_UPSTREAM_TIMEOUT", default_value = "30s", value_parser = duration)]
    upstream_timeout: Duration,
}

impl UpstreamArgs {
    pub(crate) fn options(&self) -> tollgate_server::proxy::ForwardOptions {
        tollgate_server::proxy::ForwardOptions {
            connect_timeout: self.upstream_connect_timeout,
            response_timeout: self.upstream_timeout,
        }
    }
}
