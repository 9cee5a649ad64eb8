//! `GET /v1/explain` and `POST /v1/explain` on the memory store, Redis and Redis Cluster: why
//! each rule or descriptor applies, the override in force, the budget as it stands (a
//! concurrency policy's leases), the decision a check would get; that explaining changes nothing
//! in the store; and that a caller without the admin token is told of no override and no list
//! membership.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::{RedisCluster, RedisServer};
use tower::ServiceExt;

const POLICIES: &str = "\
policies:
  login: {algorithm: sliding_log, limit: 2, window: 1h, block_for: 10m}
  api: {algorithm: token_bucket, capacity: 5, refill: 1/m}
  watch: {algorithm: fixed_window, limit: 1, window: 1h, shadow: true}
  exports: {algorithm: concurrency, max_in_flight: 2, lease_timeout: 30s}
";

const DESCRIPTORS: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: remote_address
    value: 203.0.113.1
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 5, name: api_paths}
  - key: path
    value: /api/export
    rate_limit: {unit: hour, requests_per_unit: 2, replaces: [{name: api_paths}]}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: path
    value: /banned
    rate_limit: {unit: minute, requests_per_unit: 0}
";

fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write");
    std::fs::write(dir.path().join("edge.yaml"), DESCRIPTORS).expect("write");
    let limits = tollgate_config::load(dir.path()).expect("config");
    AppState::new(limits, store, Settings::default())
}

async fn call(state: &SharedState, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    call_as(state, None, method, uri, body).await
}

/// [`call`] with `Authorization: Bearer <token>` when a token is given.
async fn call_as(
    state: &SharedState,
    token: Option<&str>,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
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

async fn explain(state: &SharedState, query: &str) -> Value {
    let (status, body) = call(state, "GET", &format!("/v1/explain?{query}"), None).await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    body
}

async fn check(state: &SharedState, policy: &str, key: &str) -> Value {
    call(
        state,
        "POST",
        "/v1/check",
        Some(json!({"policy": policy, "key": key})),
    )
    .await
    .1
}

/// `value` without its `..._ms` fields.
fn timeless(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(name, _)| !name.ends_with("_ms"))
                .map(|(name, v)| (name.clone(), timeless(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(timeless).collect()),
        other => other.clone(),
    }
}

/// Explains `query` twice around nothing: both answers, and a snapshot of the store before and
/// after, must be the same.
async fn explain_changes_nothing(
    state: &SharedState,
    query: &str,
    snapshot: &impl Fn() -> Vec<String>,
) -> Value {
    let before = snapshot();
    let first = explain(state, query).await;
    let second = explain(state, query).await;
    // Times run on between the two (Redis has its own clock); the rest is the same.
    assert_eq!(
        timeless(&first),
        timeless(&second),
        "{query}: explaining twice gives one answer"
    );
    assert_eq!(snapshot(), before, "{query}: the store is unchanged");
    first
}

async fn explain_tells_why(store: AnyStore, snapshot: impl Fn() -> Vec<String>) {
    let state = state(store);

    // A tollgate rule: its policy, parameters, a whole budget.
    let fresh = explain_changes_nothing(&state, "policy=login&key=ann", &snapshot).await;
    assert_eq!(fresh["allowed"], true);
    let rule = &fresh["rules"][0];
    assert_eq!(rule["matched"], "policy");
    assert_eq!(rule["algorithm"], "sliding_log");
    assert_eq!(rule["parameters"], json!({"limit": 2, "window": "1h"}));
    assert_eq!(
        rule["state"],
        json!({"limit": 2, "remaining": 2, "used": 0, "reset_after_ms": 0, "penalty_left_ms": null, "debt_left_ms": null})
    );
    assert_eq!(rule["decision"], "allowed");

    // Spent, then over: explain shows it and still spends nothing, nor starts the penalty.
    check(&state, "login", "ann").await;
    check(&state, "login", "ann").await;
    let spent = explain_changes_nothing(&state, "policy=login&key=ann", &snapshot).await;
    assert_eq!(spent["allowed"], false);
    assert_eq!(spent["outcome"], "denied");
    assert_eq!(spent["rules"][0]["state"]["used"], 2);
    assert_eq!(spent["rules"][0]["decision"], "denied");
    assert!(
        spent["rules"][0]["retry_after_ms"]
            .as_u64()
            .is_some_and(|ms| ms <= 3_600_000)
    );
    assert_eq!(
        spent["rules"][0]["state"]["penalty_left_ms"],
        Value::Null,
        "not blocked yet"
    );
    // A check denies and starts the 10 min penalty: explain shows the wait.
    assert_eq!(check(&state, "login", "ann").await["allowed"], false);
    let blocked = explain_changes_nothing(&state, "policy=login&key=ann", &snapshot).await;
    assert_eq!(blocked["rules"][0]["decision"], "denied");
    let left = blocked["rules"][0]["state"]["penalty_left_ms"].as_u64();
    assert!(left.is_some_and(|ms| ms > 0 && ms <= 600_000), "{blocked}");

    // An override in force: named, and its parameters are the ones shown and decided.
    let (status, _) = call(
        &state,
        "PUT",
        "/v1/overrides/api/prefixes/gold:",
        Some(json!({"capacity": 50, "refill": "10/1m", "ttl": "1h"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let gold = explain_changes_nothing(&state, "policy=api&key=gold:acme&cost=5", &snapshot).await;
    let rule = &gold["rules"][0];
    assert_eq!(rule["override"]["kind"], "prefix");
    assert_eq!(rule["override"]["prefix"], "gold:");
    assert_eq!(rule["parameters"], json!({"capacity": 50, "refill": "10/1m"}));
    assert_eq!(rule["state"]["limit"], 50);
    assert_eq!(rule["cost"], 5);
    let tin = explain(&state, "policy=api&key=tin:acme").await;
    assert_eq!(tin["rules"][0]["override"], Value::Null);
    assert_eq!(tin["rules"][0]["state"]["limit"], 5);

    // A shadow policy over its limit: the rule is shadow_denied, the request allowed.
    check(&state, "watch", "bob").await;
    let watched = explain_changes_nothing(&state, "policy=watch&key=bob", &snapshot).await;
    assert_eq!(watched["allowed"], true);
    assert_eq!(watched["rules"][0]["decision"], "shadow_denied");

    // Envoy descriptors: default, exact, wildcard, replaced, unlimited, deny-all, no match.
    let query = "domain=edge&descriptor=remote_address=198.51.100.7&descriptor=remote_address=203.0.113.1\
                 &descriptor=path=/api/orders&descriptor=path=/api/export&descriptor=path=/health\
                 &descriptor=user=ann";
    let edge = explain_changes_nothing(&state, query, &snapshot).await;
    let matched: Vec<&str> = edge["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["matched"].as_str().unwrap())
        .collect();
    // /api/orders is replaced by /api/export's limit, which names it in `replaces`.
    assert_eq!(
        matched,
        ["default", "exact", "replaced", "exact", "unlimited", "no_match"]
    );
    assert_eq!(edge["rules"][1]["state"]["limit"], 100);
    assert_eq!(edge["rules"][2]["entries"][0]["pattern"], "/api/*");
    assert_eq!(edge["rules"][2]["decision"], "no_match");
    assert_eq!(edge["rules"][4]["decision"], "unlimited");
    assert_eq!(edge["allowed"], true);
    let banned = explain(&state, "domain=edge&descriptor=path=/banned").await;
    assert_eq!(banned["rules"][0]["matched"], "deny_all");
    assert_eq!(banned["allowed"], false);
    assert_eq!(banned["rules"][0]["retry_after_ms"], 60_000);

    // The JSON body takes the same input, several rules at once.
    let (status, body) = call(
        &state,
        "POST",
        "/v1/explain",
        Some(json!({"rules": [{"policy": "api", "key": "gold:acme"}, {"policy": "login", "key": "ann"}]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["allowed"], false, "login is blocked");
    assert_eq!(body["rules"][0]["decision"], "allowed");

    // Bad input is a problem naming what is wrong.
    for (query, status, detail) in [
        (
            "policy=nope&key=k",
            StatusCode::NOT_FOUND,
            "unknown policy `nope`",
        ),
        (
            "domain=nowhere&descriptor=a=b",
            StatusCode::NOT_FOUND,
            "unknown domain `nowhere`",
        ),
        (
            "domain=edge&descriptor=path",
            StatusCode::BAD_REQUEST,
            "descriptor[0]: expected `key=value`, got `path`",
        ),
        (
            "policy=api&key=k&cost=0",
            StatusCode::BAD_REQUEST,
            "cost must be at least 1",
        ),
        (
            "policy=api",
            StatusCode::BAD_REQUEST,
            "explain takes `rules`, or `policy` and `key`, or `domain` and `descriptors` (each with an optional `cost`)",
        ),
    ] {
        let (got, problem) = call(&state, "GET", &format!("/v1/explain?{query}"), None).await;
        assert_eq!(
            (got, problem["detail"].as_str()),
            (status, Some(detail)),
            "{query}"
        );
    }
}

/// A deny-listed key is blocked by the list, not by what it spent: explain shows its budget as
/// the store holds it (whole for a fresh key), in both forms.
async fn a_deny_listed_key_shows_what_it_spent(store: AnyStore, snapshot: impl Fn() -> Vec<String>) {
    let state = state(store);
    check(&state, "api", "spent-two").await;
    check(&state, "api", "spent-two").await;
    for value in ["fresh", "spent-two", "203.0.113.66"] {
        let body = json!({"list": "deny", "kind": "key", "value": value});
        let (status, answer) = call(&state, "POST", "/v1/admin/access", Some(body)).await;
        assert!(status.is_success(), "{answer}");
    }
    for (key, used) in [("fresh", 0), ("spent-two", 2)] {
        let answer = explain_changes_nothing(&state, &format!("policy=api&key={key}"), &snapshot).await;
        let rule = &answer["rules"][0];
        assert_eq!(answer["allowed"], false, "{answer}");
        assert_eq!(rule["decision"], "blocked", "{answer}");
        assert_eq!(rule["state"]["limit"], 5, "{answer}");
        assert_eq!(rule["state"]["used"], used, "{key}: {answer}");
        assert_eq!(rule["state"]["remaining"], 5 - used, "{key}: {answer}");
        assert_eq!(rule["retry_after_ms"], Value::Null, "{answer}");
    }
    // An Envoy descriptor whose key is deny-listed: nothing used either.
    let query = "domain=edge&descriptor=remote_address=203.0.113.66";
    let answer = explain_changes_nothing(&state, query, &snapshot).await;
    let rule = &answer["rules"][0];
    assert_eq!(rule["decision"], "blocked", "{answer}");
    assert_eq!(rule["state"]["used"], 0, "{answer}");
    assert_eq!(rule["state"]["remaining"], rule["state"]["limit"], "{answer}");
}

/// A concurrency policy is explained by its leases as they stand, without taking a slot.
async fn a_concurrency_policy_shows_its_leases(store: AnyStore, snapshot: impl Fn() -> Vec<String>) {
    let state = state(store);
    for _ in 0..2 {
        let (status, body) = call(&state, "POST", "/v1/concurrency/exports/alice/acquire", None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let full = explain_changes_nothing(&state, "policy=exports&key=alice", &snapshot).await;
    assert_eq!(
        (full["allowed"].clone(), full["outcome"].clone()),
        (json!(false), json!("denied")),
        "{full}"
    );
    let rule = &full["rules"][0];
    assert_eq!(rule["matched"], "policy", "{full}");
    assert_eq!(rule["algorithm"], "concurrency", "{full}");
    assert_eq!(
        rule["parameters"],
        json!({"max_in_flight": 2, "lease_timeout": "30s"}),
        "{full}"
    );
    assert_eq!(rule["state"]["limit"], 2, "{full}");
    assert_eq!(rule["state"]["used"], 2, "{full}");
    assert_eq!(rule["state"]["remaining"], 0, "{full}");
    assert_eq!(rule["decision"], "denied", "{full}");
    let wait = rule["retry_after_ms"].as_u64();
    assert!(wait.is_some_and(|ms| ms > 0 && ms <= 30_000), "{full}");
    let free = explain_changes_nothing(&state, "policy=exports&key=bob", &snapshot).await;
    assert_eq!(free["allowed"], true, "{free}");
    assert_eq!(free["rules"][0]["state"]["used"], 0, "{free}");
    assert_eq!(free["rules"][0]["state"]["reset_after_ms"], 0, "{free}");
    assert_eq!(free["rules"][0]["decision"], "allowed", "{free}");
    // A check never holds a lease beside rate limits, so explain does not either.
    let rules = json!({"rules": [{"policy": "api", "key": "k"}, {"policy": "exports", "key": "k"}]});
    let (status, problem) = call(&state, "POST", "/v1/explain", Some(rules)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("concurrency")),
        "{problem}"
    );
}

#[tokio::test]
async fn without_the_admin_token_explain_shows_no_override_and_no_list_membership() {
    const TOKEN: &str = "s3cret";
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = format!("access:\n  deny:\n    cidrs: [203.0.113.0/24]\n{POLICIES}");
    std::fs::write(dir.path().join("policies.yaml"), policies).expect("write");
    std::fs::write(dir.path().join("edge.yaml"), DESCRIPTORS).expect("write");
    let limits = tollgate_config::load(dir.path()).expect("config");
    let settings = Settings {
        admin_token: Some(TOKEN.into()),
        ..Settings::default()
    };
    let state = AppState::new(limits, AnyStore::memory(), settings);
    let (status, _) = call_as(
        &state,
        Some(TOKEN),
        "PUT",
        "/v1/overrides/api/keys/vip-7",
        Some(json!({"capacity": 50, "refill": "10/1m"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A key past its limit, then allow-listed: only the list lets it through.
    for _ in 0..3 {
        check(&state, "login", "office").await;
    }
    let entry = json!({"list": "allow", "kind": "key", "value": "office"});
    let (status, _) = call_as(&state, Some(TOKEN), "POST", "/v1/admin/access", Some(entry)).await;
    assert_eq!(status, StatusCode::CREATED);
    let asked = [
        ("policy=api&key=vip-7", "override"),
        ("policy=api&key=203.0.113.9", "deny list"),
        ("policy=login&key=office", "allow list"),
        (
            "domain=edge&descriptor=remote_address=203.0.113.9",
            "deny list, envoy",
        ),
    ];
    for (query, what) in asked {
        let uri = format!("/v1/explain?{query}");
        let (status, admin) = call_as(&state, Some(TOKEN), "GET", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{what}: {admin}");
        assert_eq!(admin["hidden"], json!([]), "{what}: {admin}");
        let (status, public) = call_as(&state, None, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{what}: {public}");
        assert_eq!(
            public["hidden"],
            json!(["overrides", "access_lists"]),
            "{what}: {public}"
        );
        let text = public.to_string();
        assert!(!text.contains("blocked"), "{what}: {public}");
        assert_eq!(public["rules"][0]["override"], Value::Null, "{what}: {public}");
        match what {
            "override" => {
                assert_eq!(admin["rules"][0]["override"]["key"], "vip-7", "{admin}");
                assert_eq!(admin["rules"][0]["parameters"]["capacity"], 50, "{admin}");
                // The policy's own parameters, not the override's.
                assert_eq!(public["rules"][0]["parameters"]["capacity"], 5, "{public}");
            }
            "allow list" => {
                assert_eq!(admin["allowed"], true, "{admin}");
                assert_eq!(public["allowed"], false, "decided without the list: {public}");
                assert_eq!(public["rules"][0]["decision"], "denied", "{public}");
            }
            _ => {
                assert_eq!(admin["outcome"], "blocked", "{what}: {admin}");
                assert_eq!(public["outcome"], "allowed", "{what}: {public}");
                assert_eq!(public["rules"][0]["decision"], "allowed", "{what}: {public}");
            }
        }
    }
    // The JSON body is answered the same way.
    let body = json!({"policy": "api", "key": "vip-7"});
    let (_, public) = call_as(&state, None, "POST", "/v1/explain", Some(body)).await;
    assert_eq!(public["rules"][0]["override"], Value::Null, "{public}");
    assert_eq!(public["hidden"], json!(["overrides", "access_lists"]), "{public}");
}

#[tokio::test]
async fn explain_on_the_memory_store() {
    let memory = std::sync::Arc::new(
        tollgate::MemoryStore::builder()
            .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
            .build(),
    );
    let seen = memory.clone();
    // The memory store's own view: how many keys it holds (explain must add none).
    explain_tells_why(AnyStore::Memory(memory), move || vec![seen.len().to_string()]).await;
    let memory = std::sync::Arc::new(
        tollgate::MemoryStore::builder()
            .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
            .build(),
    );
    let seen = memory.clone();
    a_deny_listed_key_shows_what_it_spent(AnyStore::Memory(memory), move || vec![seen.len().to_string()])
        .await;
    let memory = std::sync::Arc::new(
        tollgate::MemoryStore::builder()
            .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
            .build(),
    );
    let seen = memory.clone();
    a_concurrency_policy_shows_its_leases(AnyStore::Memory(memory), move || vec![seen.len().to_string()])
        .await;
}

/// Every key of `server` with its value, serialized: equal snapshots mean nothing changed.
fn dump(servers: &[&RedisServer]) -> Vec<String> {
    let mut out = vec![];
    for server in servers {
        let keys = server.cli(&["--scan"]);
        let mut keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        keys.sort_unstable();
        for key in keys {
            out.push(format!("{key} {}", server.cli(&["DUMP", key])));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_on_redis() {
    let server = RedisServer::start();
    explain_tells_why(common::redis_store(&server.url()).await, || dump(&[&server])).await;
    let server = RedisServer::start();
    a_deny_listed_key_shows_what_it_spent(common::redis_store(&server.url()).await, || dump(&[&server]))
        .await;
    let server = RedisServer::start();
    a_concurrency_policy_shows_its_leases(common::redis_store(&server.url()).await, || dump(&[&server]))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_on_a_cluster() {
    let cluster = RedisCluster::start();
    let store = common::redis_store(&cluster.store_url()).await;
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    explain_tells_why(store, || dump(&nodes)).await;
}
