//! `POST /v1/refund` on memory, Redis and Redis Cluster: an admitted request's cost comes back,
//! the next check sees it, a block stays, bad input is a problem, and the answer is the key's
//! override when it has one.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tower::ServiceExt;

const POLICIES: &str = "\
policies:
  exports: {algorithm: fixed_window, limit: 3, window: 1h}
  uploads: {algorithm: token_bucket, capacity: 2, refill: 1/h}
  signin: {algorithm: sliding_log, limit: 1, window: 1h, block_for: 1h}
";

fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write policies");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    AppState::new(limits, store, Settings::default())
}

async fn post(state: &SharedState, uri: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::builder()
        .method("POST")
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (parts.status, serde_json::from_slice(&bytes).expect("json"))
}

async fn check(state: &SharedState, policy: &str, key: &str, cost: u64) -> StatusCode {
    post(
        state,
        "/v1/check",
        json!({"policy": policy, "key": key, "cost": cost}),
    )
    .await
    .0
}

async fn refunds_give_the_budget_back(store: AnyStore) {
    let state = state(store);
    // A window: spend it all, refund two, and two more pass.
    assert_eq!(check(&state, "exports", "tenant-a", 3).await, StatusCode::OK);
    assert_eq!(
        check(&state, "exports", "tenant-a", 1).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let (status, body) = post(
        &state,
        "/v1/refund",
        json!({"policy": "exports", "key": "tenant-a", "cost": 2}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["allowed"], true);
    assert_eq!(body["remaining"], 1, "what a check of cost 1 would leave");
    assert_eq!(check(&state, "exports", "tenant-a", 2).await, StatusCode::OK);
    assert_eq!(
        check(&state, "exports", "tenant-a", 1).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A bucket: never past full. The cost defaults to 1.
    assert_eq!(check(&state, "uploads", "bob", 1).await, StatusCode::OK);
    for _ in 0..3 {
        let (status, body) = post(&state, "/v1/refund", json!({"policy": "uploads", "key": "bob"})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["remaining"], 1);
    }
    assert_eq!(check(&state, "uploads", "bob", 2).await, StatusCode::OK);
    assert_eq!(
        check(&state, "uploads", "bob", 1).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A block stays.
    assert_eq!(check(&state, "signin", "eve", 1).await, StatusCode::OK);
    assert_eq!(
        check(&state, "signin", "eve", 1).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let (status, body) = post(&state, "/v1/refund", json!({"policy": "signin", "key": "eve"})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["allowed"], false);
    assert!(body["retry_after_ms"].as_u64().unwrap() > 3_000_000, "{body}");
    assert_eq!(
        check(&state, "signin", "eve", 1).await,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Bad input.
    let (status, body) = post(&state, "/v1/refund", json!({"policy": "nope", "key": "k"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = post(
        &state,
        "/v1/refund",
        json!({"policy": "exports", "key": "k", "cost": 4}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["detail"],
        "cost 4 is above 3, the most policy `exports` can ever admit at once"
    );
    let (status, body) = post(
        &state,
        "/v1/refund",
        json!({"policy": "exports", "key": "k", "cost": 0}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = post(&state, "/v1/refund", json!({"policy": "exports"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

async fn put_override(state: &SharedState, uri: &str, body: &str) {
    let request = Request::builder()
        .method("PUT")
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK, "{uri}");
}

/// A refund's answer is the key's limit as it applies now: its override's, key or prefix.
async fn refunds_answer_with_the_override_in_force(store: AnyStore) {
    let state = state(store);
    put_override(
        &state,
        "/v1/overrides/exports/keys/big",
        r#"{"limit": 1000, "window": "1h"}"#,
    )
    .await;
    put_override(
        &state,
        "/v1/overrides/uploads/prefixes/vip:",
        r#"{"capacity": 100, "refill": "1/h"}"#,
    )
    .await;
    for (policy, key) in [("exports", "big"), ("uploads", "vip:acme")] {
        for _ in 0..3 {
            assert_eq!(check(&state, policy, key, 2).await, StatusCode::OK, "{policy}");
        }
        // 6 spent, 2 given back: 4 spent, and a check of cost 1 would leave 95 or 995.
        let (status, body) = post(
            &state,
            "/v1/refund",
            json!({"policy": policy, "key": key, "cost": 2}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{policy}: {body}");
        let limit = if policy == "exports" { 1000 } else { 100 };
        assert_eq!(body["allowed"], true, "{policy}: {body}");
        assert_eq!(body["limit"], limit, "{policy}: {body}");
        assert_eq!(body["remaining"], limit - 5, "{policy}: {body}");
        // The refund kept the whole budget: the next check agrees.
        let (_, checked) = post(&state, "/v1/check", json!({"policy": policy, "key": key})).await;
        assert_eq!(checked["remaining"], limit - 5, "{policy}: {checked}");
    }
}

#[tokio::test]
async fn refunds_on_memory() {
    refunds_give_the_budget_back(AnyStore::memory()).await;
    refunds_answer_with_the_override_in_force(AnyStore::memory()).await;
}

#[tokio::test]
async fn refunds_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    refunds_give_the_budget_back(common::redis_store(&redis.url()).await).await;
    refunds_answer_with_the_override_in_force(common::redis_store(&redis.url()).await).await;
}

#[tokio::test]
async fn refunds_on_a_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let url = cluster.store_url();
    refunds_give_the_budget_back(common::redis_store(&url).await).await;
    refunds_answer_with_the_override_in_force(common::redis_store(&url).await).await;
}
