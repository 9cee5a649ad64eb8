//! The tollgate server as a library: rate limit decisions for many services from one place,
//! over an HTTP/JSON API and Envoy's rate limit service, with the limits reloaded while serving,
//! and `tollgate proxy`, a rate limiting reverse proxy.
//!
//! The limits come from [`tollgate_config`]; the `tollgate` binary (crate `tollgate-cli`) only
//! parses arguments and calls [`serve::serve`] or [`proxy::run`]. [`run`] serves on listeners the
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
//! - [`serve`]: running the server: [`run`] on given [`Listeners`] until a shutdown future
//!   completes, and [`serve::serve`], which loads the config, opens the store, binds, reloads and
//!   stops on ctrl-c or SIGTERM, as `tollgate serve` does.
//! - [`http`]: the HTTP/JSON API ([`http::router`]).
//! - [`concurrency`]: the HTTP routes of concurrency limits: acquire and release a lease.
//! - [`admin`]: its admin routes for allow and deny list entries and the top offenders.
//! - [`access`]: the allow and deny lists in force: the config's and the admin API's entries,
//!   kept in the store for the fleet and compiled into the engine.
//! - [`explain`]: what a check would decide and why, spending nothing ([`explain::explain`],
//!   `GET /v1/explain`, `tollgate explain`).
//! - [`overrides`]: the admin API of runtime overrides (`/v1/overrides/...`), part of that
//!   router.
//! - [`grpc`]: the Envoy rate limit service (`ShouldRateLimit`), answered as envoyproxy/ratelimit
//!   does ([`grpc::service`], [`grpc::serve`]), and its HTTP door `POST /json` ([`grpc::json`]).
//! - [`health`]: the gRPC health service and `/healthcheck`, following the store's health.
//! - [`dashboard`]: the live dashboard page (`/dashboard`) and its data: decisions per second,
//!   the most denied keys, config, store health, last reload.
//! - [`debug`]: the opt-in debug port: `/rlconfig` and `/metrics`.
//! - [`envoy_env`]: envoyproxy/ratelimit's environment settings, mapped to tollgate's options.
//! - [`proxy`]: `tollgate proxy`, a rate limiting reverse proxy over the tower middleware.
//! - [`reload`]: swapping in a new config on SIGHUP or file change; a broken one is rejected.
//! - [`store`]: [`store::AnyStore`], the memory or Redis store chosen at start-up.
//! - [`state`]: what handlers share: live limits (swapped on reload), the engine over the store,
//!   settings.
//! - [`listener`]: serving a socket to hostile clients: timeouts, the connection limit, request
//!   size limits and the shutdown drain, the same on every listener.
//! - [`problem`]: RFC 9457 problem answers, the shape of every error.
//! - [`metrics`]: Prometheus metric names and the recorder.

mod api;
mod envoy;
pub mod explain;
pub mod grpc;
mod ops;
pub mod proxy;
pub mod reload;
mod runtime;
mod serve;

pub use api::router as api_router;
pub use ops::{count, metrics};
pub use runtime::{
    AnyStore, AppState, EnvoySettings, ListenerOptions, ResponseHeaders, Settings, SharedState, StoreOptions,
};
pub use serve::{Listeners, ServeOptions, run, serve};
