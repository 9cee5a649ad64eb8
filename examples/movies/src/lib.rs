//! A small movies API whose list is rate limited per client IP: 20 requests in any minute, and a
//! client that goes over is shut out for 60 s. Health checks are not limited.
//!
//! ```
//! use tollgate::MemoryStore;
//! use tollgate_tower::ClientIp;
//!
//! // One instance: the embedded store. A fleet passes a `tollgate_redis::RedisStore` instead.
//! let app: axum::Router = tollgate_example_movies::app(MemoryStore::new(), ClientIp::peer());
//! // Serve with `app.into_make_service_with_connect_info::<std::net::SocketAddr>()`, so the
//! // limiter can see each client's address.
//! # let _ = app;
//! ```
//!
//! `main.rs` only parses arguments, picks the store and serves this router.

use std::time::Duration;

use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use tollgate::{Algorithm, Policy, Store};
use tollgate_tower::{ClientIp, KeyExtractor, KeyedPolicy, RateLimitLayer};

/// Requests each client may make to `/v4/movies` in any [`WINDOW`].
pub const LIMIT: u64 = 20;
/// The sliding window of [`LIMIT`].
pub const WINDOW: Duration = Duration::from_secs(60);
/// How long a client that exceeded the limit is refused, counted from the refused request.
pub const BLOCK_FOR: Duration = Duration::from_secs(60);

/// One entry of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Movie {
    /// Title.
    pub title: &'static str,
    /// Year of release.
    pub year: u16,
    /// Director.
    pub director: &'static str,
}

/// The catalogue `GET /v4/movies` returns: this app's content.
pub const MOVIES: &[Movie] = &[
    Movie {
        title: "Metropolis",
        year: 1927,
        director: "Fritz Lang",
    },
    Movie {
        title: "Rashomon",
        year: 1950,
        director: "Akira Kurosawa",
    },
    Movie {
        title: "Vertigo",
        year: 1958,
        director: "Alfred Hitchcock",
    },
    Movie {
        title: "Stalker",
        year: 1979,
        director: "Andrei Tarkovsky",
    },
    Movie {
        title: "Spirited Away",
        year: 2001,
        director: "Hayao Miyazaki",
    },
];

/// The limit on `/v4/movies`: a sliding log, so it is exact over *every* 60 s interval (no burst
/// of 40 across a window boundary), plus a 60 s block once a client goes over.
///
/// ```
/// let policy = tollgate_example_movies::policy();
/// assert_eq!(policy.name(), "movies");
/// assert_eq!(policy.block_for(), Some(tollgate_example_movies::BLOCK_FOR));
/// ```
pub fn policy() -> Policy {
    let algorithm = Algorithm::sliding_log(LIMIT, WINDOW).expect("20 per 60 s is a valid sliding log");
    Policy::new("movies", algorithm)
        .and_then(|policy| policy.with_block_for(BLOCK_FOR))
        .expect("the movies policy's name and block are valid")
}

/// The router: `GET /v4/movies` (limited per client as `client_ip` finds it) and `GET /healthz`
/// (not limited). `store` holds the limit: a `MemoryStore` for one instance, a `RedisStore` to
/// share it across a fleet.
///
/// ```
/// use tollgate::MemoryStore;
/// use tollgate_tower::ClientIp;
///
/// // Behind a load balancer on 198.51.100.0/24 that appends the client to X-Forwarded-For.
/// let behind_proxy = ClientIp::peer().trust_proxies(["198.51.100.0/24".parse()?]);
/// let app: axum::Router = tollgate_example_movies::app(MemoryStore::new(), behind_proxy);
/// # let _ = app;
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
pub fn app<S: Store + 'static>(store: S, client_ip: ClientIp) -> Router {
    let limit = RateLimitLayer::new(
        store,
        KeyedPolicy::new(policy(), KeyExtractor::client_ip(client_ip)),
    );
    // `layer` wraps only the routes added before it, so `/healthz`, merged in after, is free.
    let limited = Router::new().route("/v4/movies", get(list_movies)).layer(limit);
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(limited)
}

async fn list_movies() -> Json<&'static [Movie]> {
    Json(MOVIES)
}
