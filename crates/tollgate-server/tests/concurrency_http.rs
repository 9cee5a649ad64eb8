//! The concurrency routes over the router (`oneshot`, no socket): acquire until full (429
//! problem with `Retry-After`), release (twice: the second is `released: false`), bad input as
//! problems, a concurrency policy in `/v1/check` as a 400 that says where to go, and the same on
//! a real Redis and a dead one (`fail_closed`: 503), and an admin clearing a full key on both.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::RedisServer;
use tower::ServiceExt;

const LIMITS: &str = "\
policies:
  exports:
    algorithm: concurrency
    max_in_flight: 2
    lease_timeout: 30s
  strict:
    algorithm: concurrency
    max_in_flight: 1
    lease_timeout: 5s
    on_store_failure: fail_closed
  api:
    algorithm: gcra
    rate: 10/s
    burst: 10
";

fn state(store: AnyStore) -> SharedState {
    let limits = tollgate_config::parse("limits.yaml", LIMITS).expect("limits parse");
    AppState::new(limits, store, Settings::default())
}

async fn call(
    state: &SharedState,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value, String) {
    let request = Request::builder().method(method).uri(uri);
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (
        status,
        value,
        format!("{content_type}|{}", retry_after.unwrap_or_default()),
    )
}

/// Acquire to full, release, release again, acquire again: the same on any store that answers.
async fn acquire_and_release(state: &SharedState) {
    let acquire = "/v1/concurrency/exports/alice/acquire";
    let (status, first, _) = call(state, "POST", acquire, None).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["in_flight"], 1);
    assert_eq!(first["limit"], 2);
    assert_eq!(first["degraded"], false);
    let expires = first["expires_in_ms"].as_u64().unwrap();
    assert!(expires > 0 && expires <= 30_000, "{first}");
    let id = first["lease_id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32);

    let (status, second, _) = call(state, "POST", acquire, None).await;
    assert_eq!((status, second["in_flight"].as_u64()), (StatusCode::OK, Some(2)));

    let (status, full, headers) = call(state, "POST", acquire, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{full}");
    assert!(headers.starts_with("application/problem+json|"), "{headers}");
    let retry_after_s: u64 = headers.split('|').nth(1).unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry_after_s), "{headers}");
    assert_eq!(full["status"], 429);
    assert_eq!(full["policy"], "exports");
    assert_eq!(
        (full["in_flight"].as_u64(), full["limit"].as_u64()),
        (Some(2), Some(2))
    );
    assert!(full["retry_after_ms"].as_u64().unwrap() <= 30_000);

    // Another key is not affected.
    let (status, _, _) = call(state, "POST", "/v1/concurrency/exports/bob/acquire", None).await;
    assert_eq!(status, StatusCode::OK);

    let release = "/v1/concurrency/exports/alice/release";
    let (status, released, _) = call(state, "POST", release, Some(json!({"lease_id": id}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(released, json!({"released": true, "in_flight": 1}));
    let (status, again, _) = call(state, "POST", release, Some(json!({"lease_id": id}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, json!({"released": false, "in_flight": null}));
    // The lease belongs to alice's key: bob cannot release it.
    let (_, wrong_key, _) = call(
        state,
        "POST",
        "/v1/concurrency/exports/bob/release",
        Some(json!({"lease_id": second["lease_id"]})),
    )
    .await;
    assert_eq!(wrong_key["released"], false);

    let (status, _, _) = call(state, "POST", acquire, None).await;
    assert_eq!(status, StatusCode::OK, "the released slot is free again");
}

#[tokio::test]
async fn leases_are_acquired_until_full_and_released_on_memory() {
    acquire_and_release(&state(AnyStore::memory())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_acquired_until_full_and_released_on_redis() {
    let redis = RedisServer::start();
    let store = common::redis_store(&redis.url()).await;
    acquire_and_release(&state(store)).await;
}

/// An admin clears a full key at once: its slots are free, its old leases are not held, and
/// without the admin token nothing is cleared.
async fn clear_a_full_key(store: AnyStore) {
    let settings = Settings {
        admin_token: Some("s3cret".into()),
        ..Settings::default()
    };
    let limits = tollgate_config::parse("limits.yaml", LIMITS).expect("limits parse");
    let state = AppState::new(limits, store, settings);
    let acquire = "/v1/concurrency/exports/carol/acquire";
    let (_, first, _) = call(&state, "POST", acquire, None).await;
    call(&state, "POST", acquire, None).await;
    let (status, _, _) = call(&state, "POST", acquire, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    let clear = |token: Option<&str>, uri: &str| {
        let mut request = Request::builder().method("DELETE").uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let state = state.clone();
        let request = request.body(Body::empty()).unwrap();
        async move {
            let response = tollgate_server::api_router(state).oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            (
                status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let key = "/v1/concurrency/exports/carol";
    let (status, refused) = clear(None, key).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
    let (status, _, _) = call(&state, "POST", acquire, None).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "nothing cleared without the token"
    );

    let (status, cleared) = clear(Some("s3cret"), key).await;
    assert_eq!((status, cleared), (StatusCode::OK, json!({"cleared": 2})));
    let (status, again) = clear(Some("s3cret"), key).await;
    assert_eq!((status, again), (StatusCode::OK, json!({"cleared": 0})));
    let (status, granted, _) = call(&state, "POST", acquire, None).await;
    assert_eq!((status, granted["in_flight"].as_u64()), (StatusCode::OK, Some(1)));
    // A release is an app call: on a server with only the admin token, it takes that token.
    let release = Request::builder()
        .method("POST")
        .uri("/v1/concurrency/exports/carol/release")
        .header("content-type", "application/json")
        .header("authorization", "Bearer s3cret")
        .body(Body::from(json!({"lease_id": first["lease_id"]}).to_string()))
        .unwrap();
    let response = tollgate_server::api_router(state.clone())
        .oneshot(release)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let old: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(old["released"], false, "a cleared lease is not held");

    let (status, rate) = clear(Some("s3cret"), "/v1/concurrency/api/carol").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{rate}");
    let (status, unknown) = clear(Some("s3cret"), "/v1/concurrency/nope/carol").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");
}

#[tokio::test]
async fn an_admin_clears_a_full_key_on_memory() {
    clear_a_full_key(AnyStore::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_clears_a_full_key_on_redis() {
    let redis = RedisServer::start();
    clear_a_full_key(common::redis_store(&redis.url()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_store_fails_closed_with_503_and_a_failed_release_is_503() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.kill();
    let store = common::redis_store(&url).await;
    let state = state(store);
    let (status, body, headers) = call(&state, "POST", "/v1/concurrency/strict/k/acquire", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(headers.starts_with("application/problem+json|"), "{headers}");
    assert!(!headers.ends_with('|'), "a Retry-After: {headers}");
    assert_eq!(body["policy"], "strict");
    let (status, body, _) = call(
        &state,
        "POST",
        "/v1/concurrency/strict/k/release",
        Some(json!({"lease_id": "0123456789abcdef0123456789abcdef"})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("ends by itself"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_input_is_a_problem_naming_what_is_wrong() {
    let state = state(AnyStore::memory());
    let cases: [(&str, &str, Option<Value>, StatusCode, &str); 7] = [
        (
            "POST",
            "/v1/concurrency/nope/k/acquire",
            None,
            StatusCode::NOT_FOUND,
            "unknown policy `nope`",
        ),
        (
            "POST",
            "/v1/concurrency/api/k/acquire",
            None,
            StatusCode::BAD_REQUEST,
            "`api` is a rate policy, not a concurrency policy: check it with POST /v1/check",
        ),
        (
            "POST",
            "/v1/concurrency/exports/k/release",
            Some(json!({"lease_id": "not-an-id"})),
            StatusCode::BAD_REQUEST,
            "lease_id: a lease id is 32 hexadecimal digits, got \"not-an-id\"",
        ),
        (
            "POST",
            "/v1/concurrency/exports/k/release",
            Some(json!({})),
            StatusCode::BAD_REQUEST,
            "invalid JSON body: missing field `lease_id` at line 1 column 2",
        ),
        (
            "POST",
            "/v1/check",
            Some(json!({"policy": "exports", "key": "k"})),
            StatusCode::BAD_REQUEST,
            "`exports` is a concurrency policy, not a rate limit: acquire a lease with POST /v1/concurrency/exports/{key}/acquire and give it back with .../release",
        ),
        (
            "POST",
            "/v1/check",
            Some(json!({"rules": [{"policy": "api", "key": "k"}, {"policy": "exports", "key": "k"}]})),
            StatusCode::BAD_REQUEST,
            "rules[1]: `exports` is a concurrency policy, not a rate limit: acquire a lease with POST /v1/concurrency/exports/{key}/acquire and give it back with .../release",
        ),
        (
            "GET",
            "/v1/concurrency/exports/k/acquire",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed on this route (see `Allow`)",
        ),
    ];
    for (method, uri, body, status, detail) in cases {
        let (got, problem, headers) = call(&state, method, uri, body).await;
        assert_eq!(got, status, "{method} {uri}: {problem}");
        assert!(
            headers.starts_with("application/problem+json"),
            "{method} {uri}: {headers}"
        );
        assert_eq!(problem["detail"], detail, "{method} {uri}");
    }
    // Nothing above took a slot.
    let (status, first, _) = call(&state, "POST", "/v1/concurrency/exports/k/acquire", None).await;
    assert_eq!((status, first["in_flight"].as_u64()), (StatusCode::OK, Some(1)));
}
