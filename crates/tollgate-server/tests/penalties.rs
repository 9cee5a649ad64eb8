//! Escalating penalties through the HTTP API, on memory, Redis and Redis Cluster: a repeat
//! offense answers with the next, longer block in `retry_after_ms` and `Retry-After`, and the
//! offense count outlives the algorithm's own state (on Redis, the key's TTL covers the memory).

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tower::ServiceExt;

/// A window of 1 s, so the budget is back before each block ends, and a check right after an
/// admission is denied even on a loaded machine; blocks of 2 s, then an hour. The test waits out
/// the first block, so it must be short; the memory is an hour.
const POLICIES: &str = "\
policies:
  signin:
    algorithm: sliding_log
    limit: 1
    window: 1s
    block_for: [2s, 1h, 1d]
    block_memory: 1h
";

fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write policies");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    AppState::new(limits, store, Settings::default())
}

async fn check(state: &SharedState, key: &str) -> (StatusCode, HeaderMap, Value) {
    let request = Request::builder()
        .method("POST")
        .uri("/v1/check")
        .header("content-type", "application/json")
        .body(Body::from(json!({"policy": "signin", "key": key}).to_string()))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (
        parts.status,
        parts.headers,
        serde_json::from_slice(&bytes).expect("json"),
    )
}

/// Checks until one is admitted (the block is over), at most 500 times 10 ms apart.
async fn wait_until_admitted(state: &SharedState, key: &str) {
    for _ in 0..500 {
        if check(state, key).await.0 == StatusCode::OK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the first block never ended");
}

async fn repeat_offenses_block_longer(store: AnyStore) {
    let state = state(store);
    let key = "203.0.113.9";
    wait_until_admitted(&state, key).await;
    let (status, _, first) = check(&state, key).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(first["retry_after_ms"], 2_000);

    // Well past the window and the block: only the offense count is left of the key.
    tokio::time::sleep(Duration::from_millis(100)).await;
    wait_until_admitted(&state, key).await;
    let (status, headers, second) = check(&state, key).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second["retry_after_ms"], 3_600_000, "{second}");
    assert_eq!(headers["retry-after"], "3600");

    // Another key starts from the first step.
    wait_until_admitted(&state, "198.51.100.1").await;
    assert_eq!(check(&state, "198.51.100.1").await.2["retry_after_ms"], 2_000);
}

#[tokio::test]
async fn repeat_offenses_block_longer_on_memory() {
    repeat_offenses_block_longer(AnyStore::memory()).await;
}

#[tokio::test]
async fn repeat_offenses_block_longer_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    repeat_offenses_block_longer(common::redis_store(&redis.url()).await).await;
}

#[tokio::test]
async fn repeat_offenses_block_longer_on_a_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let url = cluster.store_url();
    repeat_offenses_block_longer(common::redis_store(&url).await).await;
}
