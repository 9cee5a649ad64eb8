//! Key extractors: what a rule counts a request against (an address, an API key, a route).
//!
//! A [`KeyExtractor`] reads the request head ([`Parts`]) and returns the key's bytes, or `None`
//! when this request has no key (a header is missing, say); the rule's
//! [`MissingKey`](crate::MissingKey) then decides. The address extractors are the exception: a
//! request with no peer address at all means the app was served without connect info, a
//! mistake of the app's and not the client's, so the layer answers `500` with the fix instead. An empty key counts as no key. Keys are
//! namespaced by the policy, so two rules with different extractors never share counters.
//!
//! - [`KeyExtractor::peer_ip`] and [`KeyExtractor::client_ip`]: the client address, see
//!   [`ClientIp`] for proxies, normalisation and IPv6 prefix grouping.
//! - [`KeyExtractor::header`]: a header's value, such as an API key.
//! - [`KeyExtractor::route_and_ip`]: method, route and client address, for per-endpoint limits.
//! - [`KeyExtractor::custom`]: any function of the request head.

mod client_ip;
mod forwarded;

use std::fmt;
use std::sync::Arc;

use axum::extract::MatchedPath;
use axum::http::HeaderName;
use axum::http::request::Parts;

pub(crate) use client_ip::InlineKey;
pub use client_ip::{ClientIp, ProxyHeader};
pub use tollgate::Cidr;

type KeyFn = dyn Fn(&Parts) -> Option<Vec<u8>> + Send + Sync;

/// Reads a rate limit key from a request head. Cheap to clone.
///
/// ```
/// use axum::http::{HeaderName, Request};
/// use tollgate_tower::KeyExtractor;
///
/// let api_key = KeyExtractor::header(HeaderName::from_static("x-api-key"));
/// let request = Request::builder().header("x-api-key", "k-123").body(())?;
/// assert_eq!(api_key.extract(&request.into_parts().0), Some(b"k-123".to_vec()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct KeyExtractor {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Ip(ClientIp),
    Header(HeaderName),
    RouteAndIp(ClientIp),
    Custom(Arc<KeyFn>),
}

impl KeyExtractor {
    /// The peer address of the connection: [`ClientIp::peer`], one key per address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use axum::http::Request;
    /// use tollgate_tower::KeyExtractor;
    ///
    /// let request = Request::builder()
    ///     .extension(ConnectInfo("192.0.2.1:5000".parse::<SocketAddr>()?))
    ///     .body(())?;
    /// assert_eq!(KeyExtractor::peer_ip().extract(&request.into_parts().0), Some(b"192.0.2.1".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peer_ip() -> Self {
        Self::client_ip(ClientIp::peer())
    }

    /// The client address as `ip` finds and groups it (see [`ClientIp::key`]).
    ///
    /// ```
    /// use tollgate_tower::{ClientIp, KeyExtractor};
    ///
    /// let per_slash_64 = KeyExtractor::client_ip(ClientIp::peer().ipv6_prefix(64)?);
    /// # let _ = per_slash_64;
    /// # Ok::<(), tollgate_tower::Error>(())
    /// ```
    pub fn client_ip(ip: ClientIp) -> Self {
        KeyExtractor { kind: Kind::Ip(ip) }
    }

    /// The first value of header `name`, as raw bytes. A missing or empty header is no key.
    ///
    /// ```
    /// use axum::http::{HeaderName, Request};
    /// use tollgate_tower::KeyExtractor;
    ///
    /// let tenant = KeyExtractor::header(HeaderName::from_static("x-tenant"));
    /// let request = Request::builder().header("x-tenant", "").body(())?;
    /// assert_eq!(tenant.extract(&request.into_parts().0), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn header(name: HeaderName) -> Self {
        KeyExtractor {
            kind: Kind::Header(name),
        }
    }

    /// Method, route and client address: `GET /users/{id} 192.0.2.1`. The route is axum's
    /// [`MatchedPath`] when the request has one, so `/users/1` and `/users/2` share a budget; an
    /// axum `Router` sets it before calling the layers of the matched route, whether they were
    /// added with `layer` or `route_layer`. Without it (a request no route matched, reaching the
    /// fallback; the layer wrapped around a whole `Router` or another service) the route is the
    /// request path. No key without a client address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::http::Request;
    /// use tollgate_tower::{ClientIp, KeyExtractor};
    ///
    /// let request = Request::post("/login")
    ///     .extension("192.0.2.1:5000".parse::<SocketAddr>()?)
    ///     .body(())?;
    /// let key = KeyExtractor::route_and_ip(ClientIp::peer()).extract(&request.into_parts().0);
    /// assert_eq!(key, Some(b"POST /login 192.0.2.1".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route_and_ip(ip: ClientIp) -> Self {
        KeyExtractor {
            kind: Kind::RouteAndIp(ip),
        }
    }

    /// Any function of the request head. Return `None` when the request has no key.
    ///
    /// ```
    /// use axum::http::Request;
    /// use tollgate_tower::KeyExtractor;
    ///
    /// // The first path segment, e.g. a tenant in `/acme/orders`.
    /// let tenant = KeyExtractor::custom(|parts| {
    ///     parts.uri.path().split('/').nth(1).map(str::to_owned)
    /// });
    /// let request = Request::get("/acme/orders").body(())?;
    /// assert_eq!(tenant.extract(&request.into_parts().0), Some(b"acme".to_vec()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn custom<F, K>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
        K: Into<Vec<u8>>,
    {
        KeyExtractor {
            kind: Kind::Custom(Arc::new(move |parts: &Parts| f(parts).map(Into::into))),
        }
    }

    /// The key of this request, `None` when it has none (an empty key counts as none).
    ///
    /// ```
    /// use axum::http::Request;
    /// use tollgate_tower::KeyExtractor;
    ///
    /// // No connection info: no peer address.
    /// let request = Request::new(());
    /// assert_eq!(KeyExtractor::peer_ip().extract(&request.into_parts().0), None);
    /// ```
    pub fn extract(&self, parts: &Parts) -> Option<Vec<u8>> {
        self.key(parts).map(|key| key.as_bytes().to_vec())
    }

    /// The key of this request without a `Vec` of its own where it can be helped: a header's
    /// value is borrowed from the request, an address is written into an inline buffer. The
    /// same bytes as [`extract`](Self::extract).
    pub(crate) fn key<'p>(&self, parts: &'p Parts) -> Option<Key<'p>> {
        let key = match &self.kind {
            Kind::Ip(ip) => ip.inline_key(parts).map(Key::Inline),
            Kind::Header(name) => parts.headers.get(name).map(|v| Key::Borrowed(v.as_bytes())),
            Kind::RouteAndIp(ip) => ip.inline_key(parts).map(|client| route_and_ip(parts, &client)),
            Kind::Custom(f) => f(parts).map(Key::Owned),
        };
        key.filter(|k| !k.as_bytes().is_empty())
    }

    /// Whether this extractor reads the connection's peer address, so that a request without
    /// one (an app served without connect info) is a setup error rather than a client's.
    pub(crate) fn needs_peer(&self) -> bool {
        matches!(self.kind, Kind::Ip(_) | Kind::RouteAndIp(_))
    }

    /// What this extractor reads, in words, for problem details and logs.
    ///
    /// ```
    /// use axum::http::HeaderName;
    /// use tollgate_tower::KeyExtractor;
    ///
    /// assert_eq!(KeyExtractor::header(HeaderName::from_static("x-api-key")).describe(), "the `x-api-key` header");
    /// ```
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Ip(_) => "the client address".to_owned(),
            Kind::Header(name) => format!("the `{name}` header"),
            Kind::RouteAndIp(_) => "the route and client address".to_owned(),
            Kind::Custom(_) => "a custom key".to_owned(),
        }
    }
}

/// The key of [`KeyExtractor::route_and_ip`]: method, route and `client`, joined by spaces.
#[inline(never)]
fn route_and_ip(parts: &Parts, client: &InlineKey) -> Key<'static> {
    let route = match parts.extensions.get::<MatchedPath>() {
        Some(matched) => matched.as_str(),
        None => parts.uri.path(),
    };
    let method = parts.method.as_str();
    let mut key = Vec::with_capacity(method.len() + route.len() + client.as_bytes().len() + 2);
    key.extend_from_slice(method.as_bytes());
    key.push(b' ');
    key.extend_from_slice(route.as_bytes());
    key.push(b' ');
    key.extend_from_slice(client.as_bytes());
    Key::Owned(key)
}

/// One request's key for one rule, borrowed, inline or owned.
#[derive(Debug)]
pub(crate) enum Key<'p> {
    /// Bytes of the request itself (a header's value).
    Borrowed(&'p [u8]),
    /// A client address, written into a buffer on the stack.
    Inline(InlineKey),
    /// Anything longer or computed.
    Owned(Vec<u8>),
}

impl Key<'_> {
    /// The key's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Borrowed(bytes) => bytes,
            Key::Inline(key) => key.as_bytes(),
            Key::Owned(bytes) => bytes,
        }
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Ip(ip) => f.debug_tuple("ClientIp").field(ip).finish(),
            Kind::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Kind::RouteAndIp(ip) => f.debug_tuple("RouteAndIp").field(ip).finish(),
            Kind::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}
