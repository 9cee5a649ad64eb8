//! Requests the OpenAPI fuzzer once found answered against the published document, pinned: for
//! each, the bound the document states is the bound the server holds (accepted at the bound,
//! refused with a problem one past it), so the document and the server cannot drift apart again.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::{AnyStore, AppState, Settings, SharedState};
use tower::ServiceExt;

fn state() -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("policies.yaml"),
        "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1m}\n",
    )
    .expect("write policies");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    AppState::new(limits, AnyStore::memory(), Settings::default())
}

async fn send(state: &SharedState, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if body.is_some() {
        request = request.header("content-type", "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request.body(body).expect("request"))
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn document(state: &SharedState) -> Value {
    send(state, "GET", "/openapi.json", None).await.1
}

/// `GET /v1/attempts/{purpose}/{key}/check?max=9223372036854775808` was answered 200.
#[tokio::test]
async fn the_attempts_check_holds_the_documented_maximum_of_max() {
    let state = state();
    let parameters =
        &document(&state).await["paths"]["/v1/attempts/{purpose}/{key}/check"]["get"]["parameters"];
    let max = parameters
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == "max"))
        .and_then(|p| p["schema"]["maximum"].as_u64())
        .expect("max has a maximum");
    let uri = |max: u64| format!("/v1/attempts/login/ann/check?max={max}");
    assert_eq!(send(&state, "GET", &uri(max), None).await.0, StatusCode::OK);
    for past in [max + 1, 9_223_372_036_854_775_808] {
        let (status, body) = send(&state, "GET", &uri(past), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "max={past}: {body}");
        assert!(body["detail"].is_string(), "a problem: {body}");
    }
}

/// `POST /v1/attempts/{purpose}/{key}` with `{"ttl_seconds": 9223372036854775806}` was refused
/// while the document allowed it.
#[tokio::test]
async fn counting_an_attempt_holds_the_documented_maximum_of_ttl_seconds() {
    let state = state();
    let ttl = document(&state).await["components"]["schemas"]["CountAttemptRequest"]["properties"]["ttl_seconds"]
        ["maximum"]
        .as_u64()
        .expect("ttl_seconds has a maximum");
    let (status, body) = send(
        &state,
        "POST",
        "/v1/attempts/login/ann",
        Some(json!({"ttl_seconds": ttl})),
    )
    .await;
    assert!(status.is_success(), "at the maximum: {status} {body}");
    let (status, body) = send(
        &state,
        "POST",
        "/v1/attempts/login/ann",
        Some(json!({"ttl_seconds": ttl + 1})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// `POST /v1/check` with `{"cost": 1, "key": "k", "policy": null, "rules": null}` was refused
/// while the document allowed it: the document now says a check names a policy or rules, never
/// null, and the server refuses exactly that.
#[tokio::test]
async fn a_check_names_a_policy_or_rules_as_documented() {
    let state = state();
    let schemas = &document(&state).await["components"]["schemas"];
    let one_rule = &schemas["OneRule"];
    let required: Vec<&str> = one_rule["required"]
        .as_array()
        .expect("OneRule lists what it requires")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(required.contains(&"policy"), "{one_rule}");
    assert_ne!(
        one_rule["properties"]["policy"]["type"],
        json!(["string", "null"])
    );
    let (status, body) = send(
        &state,
        "POST",
        "/v1/check",
        Some(json!({"cost": 1, "key": "k", "policy": null, "rules": null})),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = send(
        &state,
        "POST",
        "/v1/check",
        Some(json!({"cost": 1, "key": "k", "policy": "api"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}
