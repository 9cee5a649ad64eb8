//! The tollgate server: rate limit decisions for many services from one place, configured with
//! YAML files in tollgate's own format or in envoyproxy/ratelimit's, unchanged.
//!
//! This crate holds the server's library; `main.rs` only parses arguments.
//!
//! ```
//! let limits = tollgate_server::config::parse(
//!     "limits.yaml",
//!     r#"
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit: {unit: day, requests_per_unit: 5}
//! "#,
//! )?;
//! let resolved = limits
//!     .resolve(
//!         "messaging",
//!         &[
//!             ("message_type".to_owned(), "marketing".to_owned()),
//!             ("to_number".to_owned(), "2061111111".to_owned()),
//!         ],
//!     )
//!     .expect("five marketing messages a day per number");
//! assert_eq!(resolved.policy().unwrap().max_cost(), 5);
//! # Ok::<(), tollgate_server::config::ConfigError>(())
//! ```
//!
//! # Layout
//!
//! - [`config`]: reads configuration files (a file or a directory) into [`Limits`], with errors
//!   that name the file and the field; [`config::duration`] holds the duration and rate grammar.
//! - [`limits`]: [`Limits`], the compiled configuration, and the envoyproxy/ratelimit descriptor
//!   matcher ([`Limits::resolve`]) with its store keys.
//! - [`routes`]: which policies `tollgate proxy` applies to a request path, and its key.
//! - [`http`]: the HTTP/JSON API ([`http::router`]).
//! - [`grpc`]: the Envoy rate limit service (`ShouldRateLimit`), answered as envoyproxy/ratelimit
//!   does ([`grpc::service`], [`grpc::serve`]).
//! - [`serve`]: running the server: listeners, graceful shutdown.
//! - [`proxy`]: `tollgate proxy`, a rate limiting reverse proxy over the tower middleware.
//! - [`reload`]: swapping in a new config on SIGHUP or file change; a broken one is rejected.
//! - [`store`]: [`store::AnyStore`], the memory or Redis store chosen at start-up.
//! - [`state`]: what handlers share: live limits (swapped on reload), store, settings.
//! - [`metrics`]: Prometheus metric names and the recorder.

pub mod config;
pub mod grpc;
pub mod http;
pub mod limits;
pub mod metrics;
pub mod proxy;
pub mod reload;
pub mod routes;
pub mod serve;
pub mod state;
pub mod store;

pub use config::{ConfigError, ConfigErrorKind};
pub use limits::{Limits, NamedPolicy, Resolved};
