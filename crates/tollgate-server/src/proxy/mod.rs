//! `tollgate proxy`: a rate limiting reverse proxy, so an app in any language is protected
//! without a code change.
//!
//! Each request's path is first [normalized](path) (or refused with 400 when it is ambiguous,
//! or when some server would fold it into another path: trailing dots, NTFS streams, Unicode
//! that folds to ASCII), and the normal path is both what is matched and what is forwarded. So
//! is its host: the listener refuses a `Host` that is not one host or that disagrees with the
//! request target, and the proxy forwards the host in normal form (ASCII lower case, no
//! trailing dot, no empty port), which is also what a route keyed by `header:Host` counts. It is then matched to a
//! [route](tollgate_config::routes) by path prefix, in any case unless the route is
//! case-sensitive (the path is forwarded in the case it was sent); the route's policies are
//! applied by the tower middleware (`tollgate-tower`), exactly as a Rust app would apply them,
//! and only an admitted request is forwarded (see [`forward`]). A denied one gets the same `429`
//! problem response, `Retry-After` and `RateLimit` headers; admitted responses carry the
//! `RateLimit` headers too. A request no route matches is forwarded unchecked.
//!
//! The client address is the peer's, or, when the peer is one of the `--trusted-proxy` blocks,
//! the rightmost untrusted address of its `X-Forwarded-For`; a client cannot choose its own key
//! by sending that header.
//!
//! [`serve_proxy`](crate::serve_proxy()) also reloads the routes and policies on SIGHUP and when the config's files change
//! (counters live in the store and survive), serves on a listener with the timeouts and limits
//! of the server's listeners, and, with `--admin ADDR`, serves `/healthz`, `/readyz` and `/metrics`
//! on a separate admin listener, off by default so the proxy takes no port it was not given.
//!
//! ```no_run
//! use tollgate_server::proxy::{self, Forward};
//! use tollgate_server::AnyStore;
//!
//! # async fn run() -> anyhow::Result<()> {
//! let limits = tollgate_config::demo()?; // the demo policies and routes
//! let app = proxy::app(&limits, AnyStore::memory(), Forward::new("http://127.0.0.1:3000")?, &[])?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8090").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```

pub mod forward;
pub mod path;

use std::borrow::Cow;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::HOST;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tollgate_tower::{Cidr, ClientIp, KeyExtractor, KeyedPolicy, RateLimit, RateLimitLayer};
use tower::{Layer, ServiceExt};

pub use forward::{Forward, ForwardOptions, UpstreamError};

use crate::ops::decision_log::Door;
use crate::runtime::listener::host;
use crate::runtime::problem::{bare_errors, problem};
use crate::runtime::store::AnyStore;
use tollgate_config::Limits;
use tollgate_config::{Route, RouteKey};

/// One route's policies in front of the forwarder.
#[derive(Clone)]
pub(crate) struct Gate {
    route: Route,
    service: RateLimit<Forward>,
}

/// The gates being served, swapped whole on reload; a request keeps the gates it started with.
pub(crate) type LiveGates = Arc<ArcSwap<Vec<Gate>>>;

#[derive(Clone)]
struct Proxy {
    gates: LiveGates,
    forward: Forward,
}

/// Everything a route's gate is built from, kept to rebuild the gates on reload.
#[derive(Clone)]
pub(crate) struct Gates {
    engine: Arc<tollgate::Engine<AnyStore>>,
    forward: Forward,
    client_ip: ClientIp,
    /// What every route's layer decided, across reloads: the admin listener's `/metrics`.
    pub(crate) stats: tollgate_tower::Stats,
}

impl Gates {
    pub(crate) fn build(&self, limits: &Limits) -> anyhow::Result<Vec<Gate>> {
        // The config's allow and deny lists, applied by the engine every route shares (entries
        // added through the server's admin API are the server's; the proxy has no admin API).
        self.engine.set_access_lists(tollgate::access::AccessLists::new(
            limits.access_entries().iter().cloned(),
        ));
        let mut gates = Vec::with_capacity(limits.routes().len());
        for route in limits.routes() {
            let mut layer = RateLimitLayer::builder_engine(self.engine.clone());
            for name in route.policies() {
                // `config` checked that every named policy exists.
                let named = limits
                    .policy(name)
                    .with_context(|| format!("route {}: unknown policy {name:?}", route.prefix()))?;
                let key = match route.key() {
                    RouteKey::ClientIp => KeyExtractor::client_ip(self.client_ip.clone()),
                    RouteKey::Header(header) => KeyExtractor::header(
                        HeaderName::from_bytes(header.as_bytes())
                            .with_context(|| format!("route {}: header {header:?}", route.prefix()))?,
                    ),
                };
                layer = layer.policy(KeyedPolicy::new(named.policy().clone(), key).shadow(named.shadow()));
            }
            // Counted as every door counts a verdict: `tollgate_decisions_total`, the dashboard.
            let layer = layer
                .stats(self.stats.clone())
                .on_verdict(|rules, verdict| {
                    crate::ops::count::verdict(rules, verdict);
                    crate::ops::count::answered(Door::Proxy, rules, verdict.outcome());
                })
                .build()
                .with_context(|| format!("route {}", route.prefix()))?;
            gates.push(Gate {
                route: route.clone(),
                service: layer.layer(self.forward.clone()),
            });
        }
        Ok(gates)
    }
}

/// The proxy as an axum router: every method and path goes through [`route_for`]'s route and its
/// policies to `forward`. Serve it with connection info
/// (`into_make_service_with_connect_info::<SocketAddr>()`), which the client IP key needs.
///
/// [`route_for`]: tollgate_config::route_for
pub fn app(
    limits: &Limits,
    store: AnyStore,
    forward: Forward,
    trusted_proxies: &[Cidr],
) -> anyhow::Result<Router> {
    let (router, _gates, _live) = build_app(limits, store, forward, trusted_proxies)?;
    Ok(router)
}

/// The router, what rebuilds its gates, and the live gates a reload swaps.
pub(crate) fn build_app(
    limits: &Limits,
    store: AnyStore,
    forward: Forward,
    trusted_proxies: &[Cidr],
) -> anyhow::Result<(Router, Gates, LiveGates)> {
    let client_ip = ClientIp::peer().trust_proxies(trusted_proxies.iter().copied());
    // One engine for every route: one `local` fallback limiter, as the server has, so a policy
    // named by two routes keeps one budget while the store is away too.
    let gates = Gates {
        engine: Arc::new(tollgate::Engine::new(store)),
        forward: forward.clone(),
        client_ip,
        stats: tollgate_tower::Stats::default(),
    };
    let live = Arc::new(ArcSwap::from_pointee(gates.build(limits)?));
    let proxy = Proxy {
        gates: Arc::clone(&live),
        forward,
    };
    let router = Router::new().fallback(handle).with_state(proxy);
    Ok((router, gates, live))
}

async fn handle(State(proxy): State<Proxy>, request: Request) -> Response {
    let request = match normal_host(request).and_then(normal_path) {
        Ok(request) => request,
        Err(detail) => {
            crate::ops::metrics::request_refused("proxy", StatusCode::BAD_REQUEST);
            return problem(StatusCode::BAD_REQUEST, detail, None);
        }
    };
    let gates = proxy.gates.load();
    let path = request.uri().path();
    let gate = gates
        .iter()
        .filter(|gate| gate.route.matches(path))
        .max_by_key(|gate| gate.route.prefix().len());
    match gate {
        Some(gate) => match gate.service.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        None => proxy.forward.forward(request).await,
    }
}

/// The request with its `Host` set to the request's host in normal form (the header's, else the
/// target's; see [`host`]), so that the upstream and a route keyed by `header:Host` see one
/// spelling of each host. The listener has refused what [`host::check`] refuses already; the
/// check is repeated for a router served without it.
fn normal_host(mut request: Request) -> Result<Request, String> {
    let normal =
        host::check(request.version(), request.uri(), request.headers()).map_err(|e| e.to_string())?;
    let value = match normal {
        Some(Cow::Owned(normal)) => Some(normal),
        // An HTTP/2 `:authority`, or an HTTP/1.0 absolute-form target, without a `Host`.
        Some(Cow::Borrowed(normal)) if !request.headers().contains_key(HOST) => Some(normal.to_owned()),
        _ => None,
    };
    if let Some(value) = value {
        let value = HeaderValue::try_from(value).map_err(|e| e.to_string())?;
        request.headers_mut().insert(HOST, value);
    }
    Ok(request)
}

/// The request with its path [normalized](path::normalize), the query kept as sent.
fn normal_path(mut request: Request) -> Result<Request, String> {
    let uri = request.uri();
    let normal = match path::normalize(uri.path()).map_err(|e| e.to_string())? {
        Cow::Borrowed(_) => return Ok(request),
        Cow::Owned(normal) => normal,
    };
    let target = match uri.query() {
        Some(query) => format!("{normal}?{query}"),
        None => normal,
    };
    let mut parts = uri.clone().into_parts();
    let bad = || path::PathError::BadEscape.to_string();
    parts.path_and_query = Some(target.parse().map_err(|_| bad())?);
    *request.uri_mut() = Uri::from_parts(parts).map_err(|_| bad())?;
    Ok(request)
}

/// The admin listener's routes: liveness, store reachability and Prometheus metrics, with what
/// the routes' layers decided (`stats`).
pub(crate) fn admin_router(store: AnyStore, stats: tollgate_tower::Stats) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let store = store.clone();
                async move {
                    if store.ready().await {
                        "ready".into_response()
                    } else {
                        problem(
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("{} store unreachable", store.kind()),
                            None,
                        )
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                crate::ops::metrics::proxy_decisions(&stats.snapshot());
                async { crate::ops::metrics::install().render() }
            }),
        )
        .fallback(|| async { problem(StatusCode::NOT_FOUND, "no such route", None) })
        .layer(axum::middleware::from_fn(bare_errors))
}
