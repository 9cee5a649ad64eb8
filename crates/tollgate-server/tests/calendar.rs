//! Calendar quotas through the HTTP API, on memory, Redis and Redis Cluster: the limit holds per
//! calendar day, and every answer, the first included, says when the day ends in the policy's
//! time zone (bracketed by the wall clock read before and after the call, no timing threshold).

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tower::ServiceExt;

const POLICIES: &str = "\
policies:
  daily:
    algorithm: calendar_quota
    limit: 2
    period: day
    time_zone: Asia/Kolkata
";

fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write policies");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    AppState::new(limits, store, Settings::default())
}

async fn check(state: &SharedState, key: &str) -> (StatusCode, Value) {
    let request = Request::builder()
        .method("POST")
        .uri("/v1/check")
        .header("content-type", "application/json")
        .body(Body::from(json!({"policy": "daily", "key": key}).to_string()))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (parts.status, serde_json::from_slice(&bytes).expect("json"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// The next midnight in Kolkata (UTC+05:30, no daylight saving) after `at_ms`.
fn next_midnight_ms(at_ms: u64) -> u64 {
    let offset = 5 * 3_600_000 + 30 * 60_000;
    let day = 86_400_000;
    ((at_ms + offset) / day + 1) * day - offset
}

async fn the_day_ends_at_midnight_in_the_zone(store: AnyStore) {
    let state = state(store);
    for expected in [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
        let before = now_ms();
        let (status, body) = check(&state, "tenant-a").await;
        let after = now_ms();
        assert_eq!(status, expected, "{body}");
        // Unless the day turned during the call, the answer points at the next midnight.
        if next_midnight_ms(before) != next_midnight_ms(after) {
            return;
        }
        let reset = body["reset_after_ms"].as_u64().expect("reset_after_ms");
        let midnight = next_midnight_ms(before);
        assert!(
            midnight - after <= reset && reset <= midnight - before + 1,
            "reset {reset} ms, midnight {midnight}, called between {before} and {after}"
        );
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(body["retry_after_ms"], body["reset_after_ms"]);
        }
    }
}

#[tokio::test]
async fn daily_quota_on_memory() {
    the_day_ends_at_midnight_in_the_zone(AnyStore::memory()).await;
}

#[tokio::test]
async fn daily_quota_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    the_day_ends_at_midnight_in_the_zone(common::redis_store(&redis.url()).await).await;
}

#[tokio::test]
async fn daily_quota_on_a_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let url = cluster.store_url();
    the_day_ends_at_midnight_in_the_zone(common::redis_store(&url).await).await;
}
