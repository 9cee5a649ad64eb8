//! `POST /v1/charge` over HTTP, on the memory store and a real Redis: a budget whose cost is
//! known only after the response. The client peeks before the work and charges what it really
//! cost after it; a charge past the limit puts the key in debt, and checks are refused until the
//! algorithm has paid it back.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::{AnyStore, AppState, Settings, SharedState};
use tollgate_testkit::RedisServer;
use tower::ServiceExt;

const POLICIES: &str = "policies:\n  tokens: {algorithm: sliding_log, limit: 1000, window: 1h}\n  bucket: {algorithm: token_bucket, capacity: 100, refill: 100/1m}\n";

fn state(store: AnyStore) -> SharedState {
    let limits = tollgate_config::parse("charges.yaml", POLICIES).expect("policies");
    AppState::new(limits, store, Settings::default())
}

async fn call(state: &SharedState, request: Request<Body>) -> (StatusCode, Option<u64>, Value) {
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("answer");
    let status = response.status();
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        status,
        retry,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn post(path: &str, body: Value) -> Request<Body> {
    Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request")
}

fn peek(policy: &str, key: &str) -> Request<Body> {
    Request::get(format!("/v1/limits/{policy}/{key}"))
        .body(Body::empty())
        .expect("request")
}

/// The LLM pattern: peek ("is the key over?"), then charge 600 tokens. On a budget of 1000 the
/// second request finds 400 left and passes, its charge goes into debt, and every later peek is
/// refused: two requests, not ten.
async fn peek_then_charge_passes_at_most_two(store: AnyStore) {
    let state = state(store);
    let mut passed = 0;
    for i in 0..10 {
        let (status, _, answer) = call(&state, peek("tokens", "tenant-a")).await;
        assert_eq!(status, StatusCode::OK, "request {i}: {answer}");
        if !answer["allowed"].as_bool().expect("allowed") {
            continue;
        }
        passed += 1;
        let (status, _, charged) = call(
            &state,
            post(
                "/v1/charge",
                json!({"policy": "tokens", "key": "tenant-a", "cost": 600}),
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{charged}");
        assert_eq!(charged["recorded"], true, "{charged}");
        if passed == 2 {
            assert_eq!(charged["debt"], 200, "1200 used of 1000: {charged}");
            assert_eq!(charged["remaining"], 0);
            assert_eq!(charged["allowed"], false);
        }
    }
    assert_eq!(passed, 2);
    let (status, retry, _) = call(
        &state,
        post("/v1/check", json!({"policy": "tokens", "key": "tenant-a"})),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(retry.is_some_and(|secs| secs > 0 && secs <= 3600), "{retry:?}");
}

/// A token bucket of 100 refilled at 100 a minute, charged 150: 50 owed, and a check of 1
/// waits for 51 tokens, about 30.6 s.
async fn a_bucket_in_debt_waits_for_its_refill(store: AnyStore) {
    let state = state(store);
    let (status, _, charged) = call(
        &state,
        post("/v1/charge", json!({"policy": "bucket", "key": "b", "cost": 150})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{charged}");
    assert_eq!(charged["debt"], 50, "{charged}");
    let (status, retry, answer) =
        call(&state, post("/v1/check", json!({"policy": "bucket", "key": "b"}))).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    let retry_ms = answer["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!((30_000..=30_600).contains(&retry_ms), "{retry_ms} ms");
    assert_eq!(retry, Some(31), "Retry-After rounds up");
}

/// A list is charged together, each rule answered; bad input is a problem naming the rule.
async fn lists_and_bad_input(store: AnyStore) {
    let state = state(store);
    let (status, _, answer) = call(
        &state,
        post(
            "/v1/charge",
            json!({"rules": [{"policy": "tokens", "key": "t", "cost": 1500}, {"policy": "bucket", "key": "t", "cost": 1}]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["rules"][0]["policy"], "tokens");
    assert_eq!(
        answer["rules"][0]["debt"], 500,
        "a charge may exceed the limit: {answer}"
    );
    assert_eq!(answer["rules"][1]["debt"], 0, "{answer}");
    let (status, _, problem) = call(
        &state,
        post(
            "/v1/charge",
            json!({"rules": [{"policy": "tokens", "key": "t"}, {"policy": "nope", "key": "t"}]}),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap_or("").starts_with("rules[1]"),
        "{problem}"
    );
    let (status, _, problem) = call(
        &state,
        post("/v1/charge", json!({"policy": "tokens", "key": "t", "cost": 0})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
}

#[tokio::test]
async fn charges_on_the_memory_store() {
    peek_then_charge_passes_at_most_two(AnyStore::memory()).await;
    a_bucket_in_debt_waits_for_its_refill(AnyStore::memory()).await;
    lists_and_bad_input(AnyStore::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charges_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    peek_then_charge_passes_at_most_two(common::redis_store(&url).await).await;
    redis.cli(&["FLUSHALL"]);
    a_bucket_in_debt_waits_for_its_refill(common::redis_store(&url).await).await;
    redis.cli(&["FLUSHALL"]);
    lists_and_bad_input(common::redis_store(&url).await).await;
}
