//! The tollgate server as a library: rate limit decisions for many services from one place,
//! over an HTTP/JSON API and Envoy's rate limit service, with the limits reloaded while serving,
//! and `tollgate proxy`, a rate limiting reverse proxy.
//!
//! The limits come from [`tollgate_config`]; the `tollgate` binary (crate `tollgate-cli`) only
//! parses arguments and calls [`serve()`] or [`serve_proxy()`]. [`run`] serves on listeners the
//! caller bound and stops when the caller says, so a test binds port 0 and stops the server when
//! it is done:
//!
//! ```
//! use tollgate_server::{AnyStore, AppState, Listeners, Settings, run};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> anyhow::Result<()> {
//! let state = AppState::new(tollgate_config::demo()?, AnyStore::memory(), Settings::default());
//! let listeners = Listeners::bind("127.0.0.1:0".parse()?, "127.0.0.1:0".parse()?).await?;
//! let http = listeners.http.local_addr()?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(run(state, listeners, async {
//!     let _ = stopped.await;
//! }));
//! // ... send requests to `http` ...
//! # assert_ne!(http.port(), 0);
//! let _ = stop.send(());
//! server.await??;
//! # Ok(())
//! # }
//! ```
//!
//! Every door here is an adapter: it turns its request into a list of [`tollgate::Rule`]s, asks
//! the core's [`tollgate::Engine`] once (all or nothing, shadow rules, penalties, failure modes
//! and outcome labels are decided there), and turns the [`tollgate::Verdict`] back into its
//! protocol. So the HTTP API, the Envoy service and the proxy answer one policy the same way.
//!
//! # Layout
//!
//! Three layers, and every import points down: a module never names one above it, and the
//! modules of one layer do not lean on each other in a circle. So a door can be rewritten
//! without touching what counts or stores, and what counts or stores cannot start depending on
//! one door's idea of a request.
//!
//! **Entry points**, which put the server together and run it:
//!
//! - `serve` ([`run`], [`serve()`], [`Listeners`]): [`run`] binds nothing itself, so tests bind
//!   port 0 and stop it with a future; [`serve()`] is `tollgate serve` around it (load, open,
//!   bind, signals).
//! - [`reload`]: swapping in a new config on SIGHUP or file change; a broken one is rejected and
//!   the old one kept, so an edit can never take the limits away.
//! - [`xds`]: the limits pushed by an xDS management server (Envoy Gateway's way), each push
//!   applied as a reload and ACKed, or NACKed with the old limits kept.
//! - `serve_proxy` ([`serve_proxy()`], [`ProxyOptions`]): `tollgate proxy`'s start, reload
//!   and shutdown around the proxy's door.
//! - [`policy_test`]: `tollgate test`, policy test files run through the doors on a virtual
//!   clock, on the memory store or Redis, with each answer that differed from the expected one.
//! - [`replay`]: `tollgate replay`, a decision log decided again under a new config (and a
//!   baseline) on a virtual clock, with the requests whose outcome flips.
//!
//! **Doors**, each only translating its protocol to rules and the verdict back:
//!
//! - `api` ([`api_router`](fn@api_router)): the HTTP/JSON API, one file per feature (check and peek, refund and
//!   reset, attempts, concurrency leases, overrides, admin access lists and top offenders,
//!   operations, the dashboard page), with what they share in small modules of their own: the
//!   router, the error type, body reading, admin authorization, policy lookup, the rule bodies
//!   and the answer types the OpenAPI document is derived from; and [`explain`], what a check
//!   would decide and why, spending nothing (its routes, and the CLI's `tollgate explain`).
//! - `envoy`: [`grpc`], the Envoy rate limit service and its `/json` door, answered as
//!   envoyproxy/ratelimit does; its health (gRPC health service, `/healthcheck`) and the
//!   opt-in debug port. What an Envoy request means is the planner's
//!   ([`tollgate_config::envoy_plan`]): gRPC, `/json` and explain all plan with it, so they
//!   cannot disagree, and the gRPC door only reads the wire and writes the answer.
//! - [`proxy`]: the rate limiting reverse proxy over the tower middleware.
//!
//! **Operations and runtime**, which know no door:
//!
//! - `ops`: [`count::verdict`], the one place a verdict is counted for every door (Prometheus
//!   and the dashboard fed together, so they cannot disagree), [`count::settled`], where
//!   every door reports its one engine call and the one path to the opt-in [`decision_log`],
//!   the dashboard's bounded recorder
//!   and most denied keys, and the [`metrics`] recorder.
//! - `runtime`: [`AppState`] (live limits, the engine, [`Settings`]), [`AnyStore`], the access
//!   lists added at run time, the listeners' timeouts and limits ([`ListenerOptions`]), the gRPC
//!   listener's TLS ([`ServerTls`], reloaded when its files change), the Envoy settings, and RFC
//!   9457 problems, the shape of every error.

mod api;
mod envoy;
mod ops;
pub mod policy_test;
pub mod proxy;
pub mod reload;
pub mod replay;
mod runtime;
mod serve;
mod serve_proxy;
pub mod xds;

pub use api::explain;
pub use api::router as api_router;
pub use envoy::grpc;
pub use ops::{count, decision_log, metrics, statsd};
pub use runtime::{
    AnyStore, AppState, EnvoySettings, ListenerOptions, ResponseHeaders, ServerTls, Settings, SharedState,
    StoreClock, StoreOptions, TlsError, TlsFiles, TlsSetting,
};
pub use serve::{Listeners, ServeOptions, XdsSource, run, serve, server_runtime};
pub use serve_proxy::{ProxyOptions, serve_proxy};
pub use xds::{XdsOptions, XdsTls};
