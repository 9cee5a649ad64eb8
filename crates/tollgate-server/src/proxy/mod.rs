//! `tollgate proxy`: a rate limiting reverse proxy, so an app in any language is protected
//! without a code change.
//!
//! Each request is matched to a [route](tollgate_config::routes) by path prefix; the route's policies are
//! applied by the tower middleware (`tollgate-tower`), exactly as a Rust app would apply them,
//! and only an admitted request is forwarded (see [`forward`]). A denied one gets the same `429`
//! problem response, `Retry-After` and `RateLimit` headers; admitted responses carry the
//! `RateLimit` headers too. A request no route matches is forwarded unchecked.
//!
//! The client address is the peer's, or, when the peer is one of the `--trusted-proxy` blocks,
//! the rightmost untrusted address of its `X-Forwarded-For`; a client cannot choose its own key
//! by sending that header. Routes are read at start-up; restart the proxy to change them.
//!
//! ```no_run
//! use tollgate_server::proxy::{self, Forward};
//! use tollgate_server::store::AnyStore;
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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderName;
use axum::response::Response;
use tollgate_tower::{Cidr, ClientIp, KeyExtractor, RateLimit, RateLimitLayer, Rule};
use tower::{Layer, ServiceExt};

pub use forward::{Forward, UpstreamError};

use crate::store::AnyStore;
use tollgate_config::Limits;
use tollgate_config::load_or_demo;
use tollgate_config::{Route, RouteKey};

/// What `tollgate proxy` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where admitted requests go: `http://host:port[/base]`.
    pub upstream: String,
    /// A config file or directory with `policies` and `routes`; `None` uses the demo ones.
    pub config: Option<PathBuf>,
    /// `redis://...` or `redis+cluster://...`; `None` uses the embedded memory store.
    pub store: Option<String>,
    /// How to open the store: required or not, its deadline, TLS.
    pub store_options: crate::store::StoreOptions,
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// Peers whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<Cidr>,
}

/// One route's policies in front of the forwarder.
#[derive(Clone)]
struct Gate {
    route: Route,
    service: RateLimit<Forward>,
}

#[derive(Clone)]
struct Proxy {
    gates: Arc<[Gate]>,
    forward: Forward,
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
    let client_ip = ClientIp::peer().trust_proxies(trusted_proxies.iter().copied());
    // One engine for every route: one `local` fallback limiter, as the server has, so a policy
    // named by two routes keeps one budget while the store is away too.
    let engine = Arc::new(tollgate::Engine::new(store));
    let mut gates = Vec::with_capacity(limits.routes().len());
    for route in limits.routes() {
        let mut layer = RateLimitLayer::builder_engine(engine.clone());
        for name in route.policies() {
            // `config` checked that every named policy exists.
            let named = limits
                .policy(name)
                .with_context(|| format!("route {}: unknown policy {name:?}", route.prefix()))?;
            let key = match route.key() {
                RouteKey::ClientIp => KeyExtractor::client_ip(client_ip.clone()),
                RouteKey::Header(header) => KeyExtractor::header(
                    HeaderName::from_bytes(header.as_bytes())
                        .with_context(|| format!("route {}: header {header:?}", route.prefix()))?,
                ),
            };
            layer = layer.rule(Rule::new(named.policy().clone(), key).shadow(named.shadow()));
        }
        let layer = layer
            .build()
            .with_context(|| format!("route {}", route.prefix()))?;
        gates.push(Gate {
            route: route.clone(),
            service: layer.layer(forward.clone()),
        });
    }
    let proxy = Proxy {
        gates: gates.into(),
        forward,
    };
    Ok(Router::new().fallback(handle).with_state(proxy))
}

async fn handle(State(proxy): State<Proxy>, request: Request) -> Response {
    let path = request.uri().path();
    let gate = proxy
        .gates
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

/// Runs the proxy until ctrl-c or SIGTERM; in-flight requests finish first.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let limits = load_or_demo(options.config.as_deref())?;
    let forward = Forward::new(&options.upstream)?;
    let store = AnyStore::open(options.store.as_deref(), &options.store_options).await?;
    if limits.routes().is_empty() {
        eprintln!("tollgate: the config has no `routes`; every request is forwarded unchecked");
    }
    let store_kind = store.kind();
    let app = app(&limits, store, forward, &options.trusted_proxies)?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    println!("tollgate: proxy listening on {}", listener.local_addr()?);
    println!(
        "tollgate: forwarding to {}, {store_kind} store, {} routes",
        options.upstream,
        limits.routes().len()
    );
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(crate::serve::shutdown_signal())
        .await
        .context("proxy server")
}
