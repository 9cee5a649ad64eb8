//! Calendar quotas through the HTTP API, on memory, Redis and Redis Cluster: the limit holds per
//! calendar day, and every answer, the first included, says when the day ends in the policy's
//! time zone. Every store runs on a clock the test sets: the quota is spent two hours before
//! midnight in Kolkata, is still spent a millisecond before it, and comes back exactly at
//! midnight.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate::ManualClock;
use tollgate_redis::{RedisStore, Target};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tower::ServiceExt;

const DAY_MS: u64 = 86_400_000;

const POLICIES: &str = "\
policies:
  daily:
    algorithm: calendar_quota
    limit: 2
    period: day
    time_zone: Asia/Kolkata
";

fn state(store: AnyStore) -> SharedState {
    let limits = tollgate_config::parse("policies.yaml", POLICIES).expect("config parses");
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

/// The status, `reset_after_ms` and `retry_after_ms` (`None` when absent) of an answer.
fn answer((status, body): (StatusCode, Value)) -> (StatusCode, u64, Option<u64>) {
    let reset = body["reset_after_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no reset_after_ms: {body}"));
    (status, reset, body["retry_after_ms"].as_u64())
}

/// Midnight in Kolkata, 2024-07-01T00:00+05:30 (2024-06-30T18:30:00Z), in ms since the epoch.
const MIDNIGHT_MS: u64 = 1_719_772_200_000;

/// Two a day in Kolkata (UTC+05:30, no daylight saving), on a store whose clock is `clock`:
/// spent at 22:00 local time, refused until midnight, and back at midnight exactly.
async fn the_day_ends_at_midnight_in_the_zone(store: AnyStore, clock: &ManualClock) {
    let state = state(store);
    let two_hours = 2 * 3_600_000;
    // 22:00 in Kolkata: midnight is two hours away. (Two hours, not two seconds: the key's TTL
    // in Redis runs on Redis's own clock.)
    clock.set_us((MIDNIGHT_MS - two_hours) * 1_000);
    assert_eq!(
        answer(check(&state, "tenant-a").await),
        (StatusCode::OK, two_hours, None)
    );
    assert_eq!(
        answer(check(&state, "tenant-a").await),
        (StatusCode::OK, two_hours, None)
    );
    assert_eq!(
        answer(check(&state, "tenant-a").await),
        (StatusCode::TOO_MANY_REQUESTS, two_hours, Some(two_hours))
    );
    // Another key has a day of its own.
    assert_eq!(
        answer(check(&state, "tenant-b").await),
        (StatusCode::OK, two_hours, None)
    );
    // A millisecond before midnight the day is still spent.
    clock.set_us((MIDNIGHT_MS - 1) * 1_000);
    assert_eq!(
        answer(check(&state, "tenant-a").await),
        (StatusCode::TOO_MANY_REQUESTS, 1, Some(1))
    );
    // At midnight a new day starts, a whole one to go.
    clock.set_us(MIDNIGHT_MS * 1_000);
    assert_eq!(
        answer(check(&state, "tenant-a").await),
        (StatusCode::OK, DAY_MS, None)
    );
}

async fn redis_store(target: Target, clock: &ManualClock) -> AnyStore {
    let store = RedisStore::builder(target)
        .clock(clock.clone())
        .timeout(tollgate_testkit::STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    AnyStore::Redis(store)
}

#[tokio::test]
async fn daily_quota_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    let clock = ManualClock::new(0);
    let store = redis_store(Target::Standalone(redis.url()), &clock).await;
    the_day_ends_at_midnight_in_the_zone(store, &clock).await;
}

#[tokio::test]
async fn daily_quota_on_a_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    let clock = ManualClock::new(0);
    let store = redis_store(Target::Cluster(cluster.urls()), &clock).await;
    the_day_ends_at_midnight_in_the_zone(store, &clock).await;
}

#[tokio::test]
async fn daily_quota_on_memory() {
    let clock = ManualClock::new(0);
    let store = AnyStore::manual_memory(clock.clone());
    the_day_ends_at_midnight_in_the_zone(store, &clock).await;
}
