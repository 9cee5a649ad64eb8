//! `refund_on_server_error`: a request the inner service fails (5xx) gives its cost back, on a
//! memory store (decided in `call`) and on Redis (decided in the boxed future); a 4xx or 2xx
//! keeps its spend, and without the option a 5xx keeps it too.

mod common;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use common::{policy, request, send};
use tollgate::{MemoryStore, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};
use tollgate_tower::{KeyExtractor, KeyedPolicy, RateLimitLayer, Stats};

const HOUR: Duration = Duration::from_secs(3600);

/// `/fail` answers 500, `/missing` 404, `/ok` 200; 2 requests an hour per client.
fn app<S: Store + 'static>(store: S, refund: bool) -> (Router, Stats) {
    let layer = RateLimitLayer::builder(store)
        .policy(KeyedPolicy::new(policy("api", 2, HOUR), KeyExtractor::peer_ip()))
        .refund_on_server_error(refund)
        .build()
        .expect("layer");
    let stats = layer.stats();
    let router = Router::new()
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "upstream broke") }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such thing") }),
        )
        .route("/ok", get(|| async { "ok" }))
        .layer(layer);
    (router, stats)
}

async fn status(app: &Router, path: &str) -> StatusCode {
    send(app, request(path, "192.0.2.7:1000", &[])).await.status
}

async fn server_errors_give_the_cost_back(app: Router, stats: Stats) {
    // Failures never use up the budget...
    for _ in 0..5 {
        assert_eq!(status(&app, "/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(stats.snapshot().refunds, 5);
    // ...a 4xx and a 2xx do.
    assert_eq!(status(&app, "/missing").await, StatusCode::NOT_FOUND);
    assert_eq!(status(&app, "/ok").await, StatusCode::OK);
    assert_eq!(status(&app, "/ok").await, StatusCode::TOO_MANY_REQUESTS);
    // A denied request reached nothing, so there is nothing to give back.
    assert_eq!(status(&app, "/fail").await, StatusCode::TOO_MANY_REQUESTS);
    let snapshot = stats.snapshot();
    assert_eq!((snapshot.refunds, snapshot.refund_failures), (5, 0));
}

#[tokio::test]
async fn server_errors_give_the_cost_back_on_memory() {
    let (app, stats) = app(MemoryStore::new(), true);
    server_errors_give_the_cost_back(app, stats).await;
}

#[tokio::test]
async fn server_errors_give_the_cost_back_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    let (app, stats) = app(store, true);
    server_errors_give_the_cost_back(app, stats).await;
}

#[tokio::test]
async fn without_the_option_a_server_error_keeps_its_spend() {
    let (app, stats) = app(MemoryStore::new(), false);
    assert_eq!(status(&app, "/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(status(&app, "/fail").await, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(status(&app, "/ok").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(stats.snapshot().refunds, 0);
}
