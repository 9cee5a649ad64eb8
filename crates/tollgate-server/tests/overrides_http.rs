//! The overrides admin API over HTTP, on the memory store, Redis and Redis Cluster: set, read,
//! list, remove, with checks answered at the new limit, validation errors naming the field, and
//! the admin token.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate::ManualClock;
use tollgate_redis::{RedisStore, Target};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::{RedisCluster, RedisServer};
use tower::ServiceExt;

const POLICIES: &str = "\
policies:
  api: {algorithm: gcra, rate: 1/m, burst: 1}
  export: {algorithm: fixed_window, limit: 1, window: 1h, anchor: first_hit}
";

const TOKEN: &str = "Bearer s3cret";

fn state(store: AnyStore) -> SharedState {
    let limits = tollgate_config::parse("overrides.yaml", POLICIES).expect("config");
    let settings = Settings {
        admin_token: Some("s3cret".to_owned()),
        ..Settings::default()
    };
    AppState::new(limits, store, settings)
}

async fn call(
    state: &SharedState,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header("authorization", token);
    }
    let request = request
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn admin(state: &SharedState, method: &str, uri: &str, body: Option<&str>) -> (StatusCode, Value) {
    call(state, method, uri, Some(TOKEN), body).await
}

async fn check(state: &SharedState, policy: &str, key: &str) -> Value {
    let body = json!({"policy": policy, "key": key}).to_string();
    call(state, "POST", "/v1/check", None, Some(&body)).await.1
}

async fn the_override_api_works(store: AnyStore) {
    let state = state(store);

    // The token guards every override route.
    let (status, _) = call(&state, "GET", "/v1/overrides/api", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = call(&state, "PUT", "/v1/overrides/api/keys/k", None, Some("{}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // (GCRA's state is a time: a key that spent at the old rate owes that time even after its
    // rate is raised; tenant-1 has not spent yet.)
    assert_eq!(check(&state, "api", "tenant-0").await["limit"], 1);
    let (status, body) = admin(
        &state,
        "PUT",
        "/v1/overrides/api/keys/tenant-1",
        Some(r#"{"rate": "100/1m", "burst": 50, "ttl": "1h"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "key");
    assert_eq!(body["key"], "tenant-1");
    assert_eq!(body["algorithm"], "gcra");
    assert_eq!(body["parameters"], json!({"rate": "100/1m", "burst": 50}));
    assert!(body["expires_in_ms"].as_u64().is_some_and(|ms| ms <= 3_600_000));
    let answer = check(&state, "api", "tenant-1").await;
    assert_eq!(
        (answer["allowed"].clone(), answer["limit"].clone()),
        (json!(true), json!(50))
    );
    assert_eq!(check(&state, "api", "tenant-2").await["limit"], 1);

    // A prefix override, on its own route; a fixed window keeps the policy's anchor.
    let (status, body) = admin(
        &state,
        "PUT",
        "/v1/overrides/export/prefixes/gold:",
        Some(r#"{"limit": 10, "window": "1h"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["kind"], "prefix");
    assert_eq!(body["prefix"], "gold:");
    assert_eq!(body["parameters"]["anchor"], "first_hit");
    assert_eq!(body["expires_in_ms"], Value::Null);
    assert_eq!(check(&state, "export", "gold:acme").await["limit"], 10);
    assert_eq!(check(&state, "export", "tin:acme").await["limit"], 1);

    // Read back, listed.
    let (status, body) = admin(&state, "GET", "/v1/overrides/export/prefixes/gold:", None).await;
    assert_eq!(
        (status, body["parameters"]["limit"].clone()),
        (StatusCode::OK, json!(10))
    );
    let (status, body) = admin(&state, "GET", "/v1/overrides/export/keys/gold:", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a key is not a prefix: {body}");
    assert_eq!(body["detail"], "no override for key `gold:`");
    let (status, body) = admin(&state, "GET", "/v1/overrides/api", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["policy"], "api");
    assert_eq!(body["parameters"], json!({"rate": "1/1m", "burst": 1}));
    assert_eq!(body["overrides"].as_array().map(Vec::len), Some(1));
    assert_eq!(body["overrides"][0]["key"], "tenant-1");

    // What a PUT answers can be PUT again as it is.
    let again = body["overrides"][0]["parameters"].to_string();
    let (status, _) = admin(&state, "PUT", "/v1/overrides/api/keys/tenant-3", Some(&again)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(check(&state, "api", "tenant-3").await["limit"], 50);

    // Validated like the config, each error naming its field.
    for (body, detail) in [
        (
            r#"{"rate": "100/1m", "burst": 0}"#,
            "body: burst: burst must be at least 1",
        ),
        (
            r#"{"limit": 5, "window": "1m"}"#,
            "body: limit: `limit` is not used by gcra, which takes `rate` and `burst`",
        ),
        (
            r#"{"rate": "100/1m", "burst": 5, "ttl": "0s"}"#,
            "body: ttl: a duration must be more than zero, got \"0s\"",
        ),
    ] {
        let (status, problem) = admin(&state, "PUT", "/v1/overrides/api/keys/x", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(problem["detail"], detail, "{body}");
    }
    let (status, problem) = admin(&state, "PUT", "/v1/overrides/nope/keys/x", Some("{}")).await;
    assert_eq!(
        (status, problem["detail"].clone()),
        (StatusCode::NOT_FOUND, json!("unknown policy `nope`"))
    );

    // Removed: the policy's limit again; removing twice is a 404.
    let (status, _) = admin(&state, "DELETE", "/v1/overrides/api/keys/tenant-1", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = admin(&state, "DELETE", "/v1/overrides/api/keys/tenant-1", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(check(&state, "api", "tenant-1").await["limit"], 1);
    let (status, _) = admin(&state, "DELETE", "/v1/overrides/export/prefixes/gold:", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(check(&state, "export", "gold:zeta").await["limit"], 1);
}

#[tokio::test]
async fn the_override_api_on_the_memory_store() {
    the_override_api_works(AnyStore::memory()).await;
}

async fn redis_store(target: Target) -> AnyStore {
    let store = RedisStore::builder(target)
        .clock(ManualClock::new(tollgate_testkit::vectors::T0_US))
        .timeout(tollgate_testkit::STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    AnyStore::Redis(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_override_api_on_redis() {
    let server = RedisServer::start();
    the_override_api_works(redis_store(Target::Standalone(server.url())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_override_api_on_a_cluster() {
    let cluster = RedisCluster::start();
    the_override_api_works(redis_store(Target::Cluster(cluster.urls())).await).await;
}

/// Listing is read page by page: every override once, keys then prefixes in byte order, at most
/// `limit` an answer; a policy's prefix overrides are bounded per policy (409), so one policy
/// never takes another's room.
async fn pages_and_bounds(store: AnyStore) {
    let state = state(store);
    let body = r#"{"rate": "100/1m", "burst": 5}"#;
    for i in 0..25 {
        let uri = format!("/v1/overrides/api/keys/tenant-{i:02}");
        assert_eq!(admin(&state, "PUT", &uri, Some(body)).await.0, StatusCode::OK);
    }
    for prefix in ["b:", "a:", "c:"] {
        let uri = format!("/v1/overrides/api/prefixes/{prefix}");
        assert_eq!(admin(&state, "PUT", &uri, Some(body)).await.0, StatusCode::OK);
    }
    let mut seen: Vec<String> = Vec::new();
    let mut uri = "/v1/overrides/api?limit=10".to_owned();
    for page in 0.. {
        assert!(page < 10, "the listing never ended");
        let (status, listed) = admin(&state, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let overrides = listed["overrides"].as_array().unwrap();
        assert!(overrides.len() <= 10);
        seen.extend(overrides.iter().map(|o| {
            format!(
                "{}={}",
                o["kind"].as_str().unwrap(),
                o[o["kind"].as_str().unwrap()].as_str().unwrap()
            )
        }));
        match listed["next_cursor"].as_str() {
            Some(cursor) => {
                let cursor: String = form_urlencoded::byte_serialize(cursor.as_bytes()).collect();
                uri = format!("/v1/overrides/api?limit=10&cursor={cursor}");
            }
            None => break,
        }
    }
    let expected: Vec<String> = (0..25)
        .map(|i| format!("key=tenant-{i:02}"))
        .chain(["prefix=a:", "prefix=b:", "prefix=c:"].map(String::from))
        .collect();
    assert_eq!(seen, expected);
    let (_, first) = admin(&state, "GET", "/v1/overrides/api", None).await;
    assert_eq!(
        first["overrides"].as_array().map(Vec::len),
        Some(28),
        "100 by default"
    );
    assert_eq!(first["next_cursor"], Value::Null);

    for query in ["limit=0", "limit=1001", "cursor=bogus", "page=2"] {
        let (status, problem) = admin(&state, "GET", &format!("/v1/overrides/api?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
    }

    let max = tollgate::overrides::MAX_PREFIX_OVERRIDES;
    for i in 3..max {
        let uri = format!("/v1/overrides/api/prefixes/p{i}:");
        let (status, problem) = admin(&state, "PUT", &uri, Some(body)).await;
        assert_eq!(status, StatusCode::OK, "prefix {i}: {problem}");
    }
    let (status, problem) = admin(&state, "PUT", "/v1/overrides/api/prefixes/one-more:", Some(body)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    assert_eq!(
        problem["detail"],
        format!("policy `api` has {max} prefix overrides, the most a policy may have")
    );
    // Replacing one is not one more; another policy has room of its own.
    assert_eq!(
        admin(&state, "PUT", "/v1/overrides/api/prefixes/a:", Some(body))
            .await
            .0,
        StatusCode::OK
    );
    let window = r#"{"limit": 5, "window": "1h"}"#;
    let (status, problem) = admin(&state, "PUT", "/v1/overrides/export/prefixes/x:", Some(window)).await;
    assert_eq!(status, StatusCode::OK, "{problem}");
}

#[tokio::test]
async fn pages_and_bounds_on_the_memory_store() {
    pages_and_bounds(AnyStore::memory()).await;
}

/// A store whose calls may take a second: the bound takes a thousand calls in a row, and on a
/// busy machine one of them may take longer than the default deadline of 50 ms.
async fn patient_store(target: Target) -> AnyStore {
    let store = RedisStore::builder(target)
        .clock(ManualClock::new(tollgate_testkit::vectors::T0_US))
        .timeout(std::time::Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    AnyStore::Redis(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_bounds_on_redis() {
    let server = RedisServer::start();
    pages_and_bounds(patient_store(Target::Standalone(server.url())).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_and_bounds_on_a_cluster() {
    let cluster = RedisCluster::start();
    pages_and_bounds(patient_store(Target::Cluster(cluster.urls())).await).await;
}
