//! The charge-after layer: a handler reports what its answer cost in a response header, and the
//! layer charges that cost once the response is there; a tenant past its budget is refused
//! before the handler runs, until its debt is paid back. On the memory store and a real Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::post;
use tollgate::{Algorithm, MemoryStore, Policy, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;
use tollgate_tower::{ChargeAfterLayer, KeyExtractor};
use tower::ServiceExt;

/// An LLM-like route whose answers cost 600 tokens, counting how often it ran, behind a budget
/// of 1000 tokens an hour per tenant.
fn app(store: impl Store + 'static, served: Arc<AtomicU64>) -> Router {
    let tokens = Policy::new(
        "tokens",
        Algorithm::sliding_log(1_000, Duration::from_secs(3_600)).expect("algorithm"),
    )
    .expect("policy");
    let tenant = KeyExtractor::header(HeaderName::from_static("x-tenant"));
    let layer = ChargeAfterLayer::new(store, tokens, tenant, |response| {
        response
            .headers
            .get("x-tokens-used")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    Router::new()
        .route(
            "/chat",
            post(move || {
                let served = served.clone();
                async move {
                    served.fetch_add(1, Ordering::Relaxed);
                    ([("x-tokens-used", "600")], "an answer")
                }
            }),
        )
        .layer(layer)
}

async fn ask(app: &Router, tenant: Option<&str>) -> (StatusCode, Option<String>) {
    let mut request = Request::post("/chat");
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answer");
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (response.status(), retry)
}

async fn a_handler_reporting_its_cost_is_charged_it(store: impl Store + 'static) {
    let served = Arc::new(AtomicU64::new(0));
    let app = app(store, served.clone());
    let mut statuses = vec![];
    for _ in 0..5 {
        statuses.push(ask(&app, Some("acme")).await.0);
    }
    // 600, then 1200 of 1000: the second answer crossed the budget and nothing passes after it.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(served.load(Ordering::Relaxed), 2, "refused before the handler");
    let (_, retry) = ask(&app, Some("acme")).await;
    assert!(retry.is_some_and(|secs| secs.parse::<u64>().is_ok_and(|s| s > 0 && s <= 3_600)));
    // Another tenant has its own budget; a request without a tenant is refused.
    assert_eq!(ask(&app, Some("globex")).await.0, StatusCode::OK);
    assert_eq!(ask(&app, None).await.0, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn charged_on_the_memory_store() {
    a_handler_reporting_its_cost_is_charged_it(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charged_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    a_handler_reporting_its_cost_is_charged_it(store).await;
}
