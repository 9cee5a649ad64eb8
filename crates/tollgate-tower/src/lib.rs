//! Rate limiting middleware for tower, axum and hyper, over any tollgate store: the embedded
//! `MemoryStore` for one instance, `RedisStore` for a fleet. The layer is a door to tollgate's
//! [`Engine`](tollgate::Engine): it turns a request into rules (policy, key, cost, shadow), has
//! the engine decide them in one call, and turns the verdict into a response.
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use tollgate::{Algorithm, MemoryStore, Policy};
//! use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
//!
//! // 100 requests per minute per client address.
//! let per_ip = Policy::new("api", Algorithm::sliding_window(100, Duration::from_secs(60))?)?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(per_ip, KeyExtractor::peer_ip())));
//! // Serve with `app.into_make_service_with_connect_info::<std::net::SocketAddr>()`.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every clone of a layer and of the services it makes shares one limiter, so the limit holds
//! across axum's per-request clones and across connections (tower's own `RateLimit` keeps its
//! state per clone, which under axum does not limit at all). A denied request gets `429` with an
//! RFC 9457 `application/problem+json` body, `Retry-After` and the IETF `RateLimit-Policy` /
//! `RateLimit` headers; allowed responses carry the two rate limit headers too.
//!
//! # Layout
//!
//! - [`rate_limit`]: the middleware: [`RateLimitLayer`] (configuration, `Clone`) and its
//!   builder, the [`RateLimit`] service and its [`ResponseFuture`]; how several rules are
//!   decided together and what a store failure does.
//! - [`charge_after`]: [`ChargeAfterLayer`], for costs known only after the response (LLM
//!   tokens): it asks whether the key is past its limit before the inner service, and charges
//!   the cost a closure reads off the response after it.
//! - [`concurrency_limit`]: the concurrency limit middleware: [`ConcurrencyLimitLayer`] and
//!   the [`ConcurrencyLimit`] service, which acquire a lease before the inner service and
//!   release it when the response body ends ([`LeaseBody`]), fails or is dropped.
//! - [`keyed_policy`]: [`KeyedPolicy`], a policy with the key extractor it counts against, its
//!   cost, shadow mode and [`MissingKey`] choice: each request makes one core
//!   [`Rule`](tollgate::Rule) of it.
//! - [`key`]: [`KeyExtractor`] (client address, header, route and address, custom function), and
//!   [`ClientIp`] with [`Cidr`] and [`ProxyHeader`] for clients behind trusted proxies.
//! - [`problem`]: the 429, 400 and 503 problem responses and the rate limit headers.
//! - [`stats`]: [`Stats`], counters of what a layer decided.
//! - [`error`]: [`Error`], for settings refused when a layer is built.
//! - `engine` (private): the engine behind a layer, with its store type erased.
//!
//! # Choices worth knowing
//!
//! - A request passes only if every enforced rule allows it. Its rules are decided all or
//!   nothing in one atomic step: a denied request spends nothing on any rule, and the
//!   `block_for` penalty starts on every rule that denied; see [`rate_limit`].
//! - A request without a key (no `X-Api-Key`, say) is rejected with 400 unless its
//!   rule says [`MissingKey::Skip`]; a key above
//!   [`MAX_KEY_LEN`](tollgate::bounds::MAX_KEY_LEN) bytes is always a 400.
//! - A rule keyed on the client address needs the peer address: an app served without
//!   `into_make_service_with_connect_info::<SocketAddr>()` gets `500` problems whose detail
//!   says so, and one error line in the log per layer, rather than a 400 blamed on every client.
//! - A store failure (Redis away, a full memory store) follows each policy's
//!   [`FailureMode`](tollgate::FailureMode), applied by the engine: `FailClosed` answers 503,
//!   `FailOpen` lets the request through, `Local` limits on the engine's in-memory limiter.
//! - Shadow rules are checked and counted but never deny and add no headers.

pub mod charge_after;
pub mod concurrency_limit;
mod engine;
pub mod error;
pub mod key;
pub mod keyed_policy;
pub mod problem;
pub mod rate_limit;
mod sampler;
pub mod stats;

pub use charge_after::{ChargeAfter, ChargeAfterLayer};
pub use concurrency_limit::{ConcurrencyLimit, ConcurrencyLimitLayer, LeaseBody};
pub use error::Error;
pub use key::{Cidr, ClientIp, KeyExtractor, ProxyHeader};
pub use keyed_policy::{KeyedPolicy, MissingKey};
pub use rate_limit::{RateLimit, RateLimitLayer, RateLimitLayerBuilder, ResponseFuture};
pub use sampler::LogSampler;
pub use stats::{Stats, StatsSnapshot};

/// The README's examples, compiled (and, where they need no server, run) as doc tests. They live
/// here because this crate sees the core, the middleware and (as a dev-dependency) the Redis
/// store.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/concurrency.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/concurrency.md")]
pub struct ConcurrencyDoctests;

/// The examples of `docs/refunds.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/refunds.md")]
struct RefundsDoc;
