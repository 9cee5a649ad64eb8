//! Runtime, the bottom layer beside [`ops`](crate::ops): what every door shares while the server
//! runs. Nothing here knows a door, so the doors can change without touching what they stand on.
//!
//! - [`state`]: [`AppState`], the live limits (swapped whole on reload), the engine over the
//!   store, and the fixed [`Settings`], including the one key check every HTTP route uses.
//! - [`store`]: [`AnyStore`], the memory or Redis store chosen at start-up.
//! - [`access`]: the allow and deny list entries added through the admin API, kept in the store
//!   for the fleet and compiled into the engine with the config's.
//! - [`listener`]: serving a socket to hostile clients: timeouts, the connection limit, request
//!   size limits and the shutdown drain, the same on every listener.
//! - [`envoy_settings`]: how the Envoy rate limit service answers (upstream's global settings),
//!   part of [`Settings`].
//! - [`problem`]: RFC 9457 problem answers, the shape of every error.
//! - [`tokens`]: who may do what, the one comparison of the admin and app tokens for every door.
//! - [`tls`]: a listener's TLS (the gRPC port's): certificate, key, client CA and name, read from
//!   PEM files and swapped whole when they are reloaded.
//! - [`utc`]: times as RFC 3339 in UTC.

pub(crate) mod access;
pub(crate) mod envoy_settings;
pub(crate) mod listener;
pub(crate) mod problem;
pub(crate) mod state;
pub(crate) mod store;
pub(crate) mod tls;
pub(crate) mod tokens;
pub(crate) mod utc;

pub use envoy_settings::{EnvoySettings, ResponseHeaders};
pub use listener::ListenerOptions;
pub use state::{AppState, Settings, SharedState};
pub use store::{AnyStore, StoreClock, StoreOptions};
pub use tls::{ServerTls, TlsError, TlsFiles, TlsSetting};
