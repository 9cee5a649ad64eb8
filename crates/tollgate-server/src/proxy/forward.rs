//! Forwarding one request to the upstream and streaming the answer back.
//!
//! Bodies are streamed both ways, never buffered. End-to-end headers pass unchanged (`Host`
//! included, so name-based virtual hosts upstream keep working; the proxy has put it in normal
//! form first; an HTTP/2 client's `:authority` becomes `Host`); hop-by-hop headers (RFC 9110
//! §7.6.1: `Connection` and the headers it names, `Keep-Alive`, `TE`, `Transfer-Encoding`,
//! `Upgrade`, `Proxy-Connection`, `Proxy-Authorization`, `Proxy-Authenticate`, `Trailer`) are
//! dropped. The peer's address is appended to `X-Forwarded-For`.
//!
//! Every upstream call has deadlines ([`ForwardOptions`]): connecting (default 5 s) and the
//! answer's head (default 30 s); the answer's body then streams for as long as it flows. When
//! the upstream cannot be reached or breaks off its answer head, the client gets a 502 problem
//! response; when a deadline passes, a 504. Both are counted in
//! `tollgate_upstream_errors_total{kind}` and logged (sampled). A request body the client was too
//! slow to send, or that grew past the limit, gets 408 or 413. The request was checked once,
//! before forwarding, and is never checked again: a client is not charged twice for one request
//! because the upstream failed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{CONNECTION, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use axum::http::uri::{PathAndQuery, Uri};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::runtime::problem::problem;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Hop-by-hop headers that are never forwarded, besides those `Connection` names.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// A tower service that sends each request to `upstream` (scheme, authority and an optional
/// base path) and answers with the upstream's response. Cheap to clone: clones share one
/// connection pool.
#[derive(Clone, Debug)]
pub struct Forward {
    client: Client<HttpConnector, Body>,
    upstream: Upstream,
    response_timeout: Duration,
}

/// Deadlines of upstream calls.
#[derive(Debug, Clone, Copy)]
pub struct ForwardOptions {
    /// Connecting to the upstream (TCP). Default 5 s.
    pub connect_timeout: Duration,
    /// From sending the request until the answer's head arrives. Default 30 s.
    pub response_timeout: Duration,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(30),
        }
    }
}

/// Where requests go: `http://host:port` and a base path the request path is appended to.
#[derive(Clone, Debug)]
struct Upstream {
    scheme: axum::http::uri::Scheme,
    authority: axum::http::uri::Authority,
    base_path: String,
}

/// Why an upstream URL is refused.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Not a URL.
    #[error("upstream `{url}` is not a URL: {reason}")]
    Invalid {
        /// The text given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// A scheme other than `http`.
    #[error(
        "upstream `{url}`: only http:// upstreams are supported (terminate TLS in front of tollgate or beside the upstream)"
    )]
    Scheme {
        /// The text given.
        url: String,
    },
    /// A query string, which would be ambiguous with the request's.
    #[error("upstream `{url}` must not have a query string")]
    Query {
        /// The text given.
        url: String,
    },
}

impl Forward {
    /// A forwarder to `upstream`, an `http://host:port[/base]` URL.
    ///
    /// ```
    /// use tollgate_server::proxy::Forward;
    ///
    /// assert!(Forward::new("http://127.0.0.1:3000").is_ok());
    /// assert!(Forward::new("http://127.0.0.1:3000/api/").is_ok());
    /// assert_eq!(
    ///     Forward::new("ftp://example.com").unwrap_err().to_string(),
    ///     "upstream `ftp://example.com`: only http:// upstreams are supported (terminate TLS in front of tollgate or beside the upstream)"
    /// );
    /// assert!(Forward::new("not a url").is_err());
    /// ```
    pub fn new(upstream: &str) -> Result<Self, UpstreamError> {
        Self::with_options(upstream, ForwardOptions::default())
    }

    /// [`Forward::new`] with other deadlines.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_server::proxy::{Forward, ForwardOptions};
    ///
    /// let options = ForwardOptions { response_timeout: Duration::from_secs(5), ..ForwardOptions::default() };
    /// assert!(Forward::with_options("http://127.0.0.1:3000", options).is_ok());
    /// ```
    pub fn with_options(upstream: &str, options: ForwardOptions) -> Result<Self, UpstreamError> {
        let invalid = |reason: String| UpstreamError::Invalid {
            url: upstream.to_owned(),
            reason,
        };
        let uri: Uri = upstream
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| invalid(e.to_string()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(invalid("expected http://host:port".to_owned()));
        };
        if scheme.as_str() != "http" {
            return Err(UpstreamError::Scheme {
                url: upstream.to_owned(),
            });
        }
        if uri.query().is_some() {
            return Err(UpstreamError::Query {
                url: upstream.to_owned(),
            });
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(options.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Ok(Forward {
            client,
            response_timeout: options.response_timeout,
            upstream: Upstream {
                scheme: scheme.clone(),
                authority: authority.clone(),
                base_path: uri.path().trim_end_matches('/').to_owned(),
            },
        })
    }

    /// Sends `request` upstream; a failure to get an answer head is a 502, a deadline passed a 504.
    pub async fn forward(&self, request: Request<Body>) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let path_and_query = parts.uri.path_and_query().map_or("/", PathAndQuery::as_str);
        let target = format!("{}{path_and_query}", self.upstream.base_path);
        let uri = Uri::builder()
            .scheme(self.upstream.scheme.clone())
            .authority(self.upstream.authority.clone())
            .path_and_query(target)
            .build();
        let uri = match uri {
            Ok(uri) => uri,
            Err(err) => return bad_gateway(&format!("cannot build the upstream URL: {err}")),
        };
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip());
        strip_hop_by_hop(&mut parts.headers);
        if let Some(peer) = peer {
            append_forwarded_for(&mut parts.headers, peer);
        }
        // An HTTP/2 client names the host in `:authority`, not `Host`: passed on as `Host`, so the
        // upstream sees the host the client asked for whichever protocol it spoke. Only an
        // HTTP/1.0 request has neither (the listener refuses HTTP/1.1 without `Host`).
        if !parts.headers.contains_key(HOST) {
            let authority = parts.uri.authority().unwrap_or(&self.upstream.authority);
            if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
                parts.headers.insert(HOST, host);
            }
        }
        let mut upstream_request = Request::new(body);
        *upstream_request.method_mut() = parts.method;
        *upstream_request.uri_mut() = uri;
        *upstream_request.headers_mut() = parts.headers;
        // The upstream speaks HTTP/1.1 to us whatever the client spoke to tollgate.
        *upstream_request.version_mut() = axum::http::Version::HTTP_11;
        let answer = tokio::time::timeout(self.response_timeout, self.client.request(upstream_request)).await;
        let upstream = self.upstream.authority.as_str();
        match answer {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Ok(Err(err)) => {
                if let Some(cut) = crate::runtime::listener::BodyLimitError::find(&err) {
                    if matches!(cut, crate::runtime::listener::BodyLimitError::TimedOut(_)) {
                        crate::ops::metrics::connection_timed_out("proxy", "body");
                    }
                    return problem(cut.status(), cut.to_string(), None);
                }
                if err.is_connect() && timed_out(&err) {
                    crate::ops::metrics::upstream_error("connect_timeout", upstream, &ErrorChain(&err));
                    return problem(
                        StatusCode::GATEWAY_TIMEOUT,
                        "the upstream server did not accept the connection in time",
                        None,
                    );
                }
                let kind = if err.is_connect() { "connect" } else { "protocol" };
                crate::ops::metrics::upstream_error(kind, upstream, &ErrorChain(&err));
                bad_gateway("the upstream server could not be reached or did not answer")
            }
            Err(_) => {
                let waited = format!("no answer within {:?}", self.response_timeout);
                crate::ops::metrics::upstream_error("response_timeout", upstream, &waited);
                problem(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "the upstream server did not answer within {:?}",
                        self.response_timeout
                    ),
                    None,
                )
            }
        }
    }
}

impl tower::Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let forward = self.clone();
        Box::pin(async move { Ok(forward.forward(request).await) })
    }
}

/// Removes the hop-by-hop headers, and the headers `Connection` names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    // Listed above by name; kept here so a typo there cannot let them through.
    for name in [CONNECTION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE] {
        headers.remove(name);
    }
}

/// Appends `peer` to `X-Forwarded-For`, folding earlier lines into one.
fn append_forwarded_for(headers: &mut HeaderMap, peer: std::net::IpAddr) {
    let earlier: Vec<&str> = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .collect();
    let value = if earlier.is_empty() {
        peer.to_string()
    } else {
        format!("{}, {peer}", earlier.join(", "))
    };
    if let Ok(value) = HeaderValue::from_str(&value) {
        headers.insert(X_FORWARDED_FOR, value);
    }
}

/// A 502 problem response.
fn bad_gateway(detail: &str) -> Response<Body> {
    problem(StatusCode::BAD_GATEWAY, detail, None)
}

/// Whether an I/O timeout is among `err`'s causes (the connector's connect deadline).
fn timed_out(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    for _ in 0..16 {
        let Some(current) = next else { return false };
        if current
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            || current.to_string().contains("timed out")
            || current.to_string().contains("timeout")
        {
            return true;
        }
        next = current.source();
    }
    false
}

/// An error with its causes, for a log line.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        for _ in 0..16 {
            let Some(cause) = next else { break };
            write!(f, ": {cause}")?;
            next = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut headers = HeaderMap::new();
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, x-secret"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("x-secret", HeaderValue::from_static("1"));
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        headers.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers["x-kept"], "yes");
    }

    #[test]
    fn forwarded_for_appends_the_peer() {
        let mut headers = HeaderMap::new();
        append_forwarded_for(&mut headers, "192.0.2.1".parse().unwrap());
        assert_eq!(headers[&X_FORWARDED_FOR], "192.0.2.1");
        headers.append(&X_FORWARDED_FOR, HeaderValue::from_static("198.51.100.2"));
        append_forwarded_for(&mut headers, "2001:db8::1".parse().unwrap());
        assert_eq!(headers[&X_FORWARDED_FOR], "192.0.2.1, 198.51.100.2, 2001:db8::1");
    }

    #[test]
    fn a_base_path_is_kept() {
        let forward = Forward::new("http://127.0.0.1:9/api/").unwrap();
        assert_eq!(forward.upstream.base_path, "/api");
        assert!(matches!(
            Forward::new("http://127.0.0.1:9/?a=1"),
            Err(UpstreamError::Query { .. })
        ));
    }
}
