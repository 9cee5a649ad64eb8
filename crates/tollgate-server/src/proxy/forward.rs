//! Forwarding one request to the upstream and streaming the answer back.
//!
//! Bodies are streamed both ways, never buffered. End-to-end headers pass unchanged (`Host`
//! included, so name-based virtual hosts upstream keep working); hop-by-hop headers (RFC 9110
//! §7.6.1: `Connection` and the headers it names, `Keep-Alive`, `TE`, `Transfer-Encoding`,
//! `Upgrade`, `Proxy-Connection`, `Proxy-Authorization`, `Proxy-Authenticate`, `Trailer`) are
//! dropped. The peer's address is appended to `X-Forwarded-For`.
//!
//! When the upstream cannot be reached or breaks off its answer head, the client gets a 502
//! problem response. The request was checked once, before forwarding, and is never checked
//! again: a client is not charged twice for one request because the upstream failed.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::header::{CONNECTION, CONTENT_TYPE, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use axum::http::uri::{PathAndQuery, Uri};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

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
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Forward {
            client,
            upstream: Upstream {
                scheme: scheme.clone(),
                authority: authority.clone(),
                base_path: uri.path().trim_end_matches('/').to_owned(),
            },
        })
    }

    /// Sends `request` upstream; a failure to get an answer head is a 502.
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
        if !parts.headers.contains_key(HOST)
            && let Ok(host) = HeaderValue::from_str(self.upstream.authority.as_str())
        {
            parts.headers.insert(HOST, host);
        }
        let mut upstream_request = Request::new(body);
        *upstream_request.method_mut() = parts.method;
        *upstream_request.uri_mut() = uri;
        *upstream_request.headers_mut() = parts.headers;
        // The upstream speaks HTTP/1.1 to us whatever the client spoke to tollgate.
        *upstream_request.version_mut() = axum::http::Version::HTTP_11;
        match self.client.request(upstream_request).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, Body::new(body))
            }
            Err(err) => {
                tracing::warn!(error = %err, upstream = %self.upstream.authority, "upstream request failed");
                bad_gateway("the upstream server could not be reached or did not answer")
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
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Bad Gateway",
        "status": 502,
        "detail": detail,
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    response
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
