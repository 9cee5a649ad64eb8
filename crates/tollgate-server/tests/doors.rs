//! HTTP and gRPC as two doors onto one engine: a list of rules over HTTP is decided all or
//! nothing, even when two such requests race; and when the store fails, both doors give the
//! same failure-mode answer for the same policy settings. The HTTP API is driven in process with
//! `oneshot`; the gRPC service over a socket with the generated client, on the same state.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{Barrier, oneshot};
use tollgate::MemoryStore;
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use tollgate_server::{AppState, Settings, SharedState};
use tower::ServiceExt;

const POLICIES: &str = "\
policies:
  roomy: {algorithm: fixed_window, limit: 10, window: 1h}
  tight: {algorithm: fixed_window, limit: 1, window: 1h}
  watch: {algorithm: fixed_window, limit: 1, window: 1h, shadow: true}
  filler: {algorithm: fixed_window, limit: 1, window: 1h}
  open: {algorithm: fixed_window, limit: 5, window: 1h, on_store_failure: fail_open}
  closed: {algorithm: fixed_window, limit: 5, window: 1h, on_store_failure: fail_closed}
  local: {algorithm: fixed_window, limit: 5, window: 1h, on_store_failure: local}
";

/// The same failure modes as `open`, `closed` and `local`, as Envoy descriptors.
const DESCRIPTORS: &str = "\
domain: modes
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: fail_open}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: fail_closed}
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: local}
";

/// Shared state over both config files and `store`.
fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write policies");
    std::fs::write(dir.path().join("modes.yaml"), DESCRIPTORS).expect("write descriptors");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    AppState::new(limits, store, Settings::default())
}

/// One HTTP call: status, headers and the JSON body.
async fn call(
    state: &SharedState,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, json)
}

async fn check(state: &SharedState, body: Value) -> (StatusCode, HeaderMap, Value) {
    call(state, "POST", "/v1/check", Some(body)).await
}

fn rules(pairs: &[(&str, &str)]) -> Value {
    let rules: Vec<Value> = pairs
        .iter()
        .map(|(policy, key)| json!({"policy": policy, "key": key}))
        .collect();
    json!({ "rules": rules })
}

#[tokio::test]
async fn a_list_where_one_rule_denies_spends_nothing_on_the_others() {
    list_all_or_nothing(&state(AnyStore::memory())).await;
}

#[tokio::test]
async fn a_list_is_all_or_nothing_in_redis_too() {
    let redis = tollgate_testkit::RedisServer::start();
    let store = common::redis_store(&redis.url()).await;
    list_all_or_nothing(&state(store)).await;
}

async fn list_all_or_nothing(state: &SharedState) {
    let list = rules(&[("roomy", "k"), ("tight", "k")]);
    let (status, headers, body) = check(state, list.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["allowed"], true);
    assert_eq!(body["rules"][0]["remaining"], 9);
    assert_eq!(body["rules"][1]["remaining"], 0);
    assert_eq!(
        headers["ratelimit-policy"],
        r#""roomy";q=10;w=3600, "tight";q=1;w=3600"#
    );
    assert!(headers.get("retry-after").is_none());

    for _ in 0..3 {
        let (status, headers, body) = check(state, list.clone()).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["allowed"], false);
        assert_eq!(body["rules"][0]["outcome"], "allowed");
        assert_eq!(body["rules"][0]["remaining"], 9, "untouched");
        assert_eq!(body["rules"][1]["outcome"], "denied");
        assert_eq!(body["rules"][1]["policy"], "tight");
        let retry_ms = body["retry_after_ms"].as_u64().expect("retry_after_ms");
        assert!((1..=3_600_000).contains(&retry_ms), "{retry_ms}");
        assert_eq!(
            headers["retry-after"].to_str().expect("ascii"),
            retry_ms.div_ceil(1000).to_string()
        );
    }
    // The denied lists spent nothing of roomy: one unit of it has gone, not four.
    let (status, _, body) = check(state, json!({"policy": "roomy", "key": "k"})).await;
    assert_eq!((status, body["remaining"].clone()), (StatusCode::OK, json!(8)));
}

#[tokio::test]
async fn shadow_rules_in_a_list_are_reported_but_never_deny() {
    let state = state(AnyStore::memory());
    let list = rules(&[("roomy", "s"), ("watch", "s")]);
    check(&state, list.clone()).await;
    let (status, headers, body) = check(&state, list).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["allowed"], true);
    assert_eq!(body["rules"][1]["outcome"], "shadow_denied");
    assert_eq!(body["rules"][1]["shadow"], true);
    assert_eq!(body["rules"][0]["remaining"], 8, "spent twice");
    // Headers speak for the enforced rules only.
    assert_eq!(headers["ratelimit-policy"], r#""roomy";q=10;w=3600"#);
    let budget = headers["ratelimit"].to_str().expect("ascii");
    assert!(budget.starts_with(r#""roomy";r=8;t="#), "{budget}");
}

#[tokio::test]
async fn bad_lists_are_problems_naming_the_rule() {
    let state = state(AnyStore::memory());
    let seventeen: Vec<Value> = (0..17)
        .map(|i| json!({"policy": "roomy", "key": format!("k{i}")}))
        .collect();
    let cases = [
        (
            json!({"rules": []}),
            StatusCode::BAD_REQUEST,
            "rules must not be empty",
        ),
        (
            json!({ "rules": seventeen }),
            StatusCode::BAD_REQUEST,
            "17 rules, above the maximum of 16",
        ),
        (
            rules(&[("roomy", "k"), ("nope", "k")]),
            StatusCode::NOT_FOUND,
            "rules[1]: unknown policy `nope`",
        ),
        (
            json!({"rules": [{"policy": "roomy", "key": "k", "cost": 0}]}),
            StatusCode::BAD_REQUEST,
            "rules[0]: cost must be at least 1",
        ),
        (
            json!({"rules": [{"policy": "roomy", "key": "k"}, {"policy": "tight", "key": "k", "cost": 2}]}),
            StatusCode::BAD_REQUEST,
            "rules[1]: cost 2 is above 1",
        ),
        (
            json!({"rules": [{"policy": "roomy", "key": "k".repeat(1025)}]}),
            StatusCode::BAD_REQUEST,
            "rules[0]: key is 1025 bytes, above the maximum of 1024",
        ),
        (
            json!({"rules": [{"policy": "roomy", "key": ""}]}),
            StatusCode::BAD_REQUEST,
            "rules[0]: key must not be empty",
        ),
        (
            json!({"rules": [{"policy": "roomy", "key": "k", "extra": 1}]}),
            StatusCode::BAD_REQUEST,
            "unknown field `extra`",
        ),
        (
            json!({"policy": "roomy", "key": "k", "rules": [{"policy": "roomy", "key": "k"}]}),
            StatusCode::BAD_REQUEST,
            "either `rules` or",
        ),
    ];
    for (body, status, message) in cases {
        let (got, headers, problem) = check(&state, body.clone()).await;
        let shown = format!("{body:.100}");
        assert_eq!(got, status, "{shown}");
        assert_eq!(headers["content-type"], "application/problem+json", "{shown}");
        assert_eq!(problem["status"], status.as_u16(), "{shown}");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains(message), "{shown}: {detail}");
    }
    // None of them spent anything.
    let (_, _, body) = check(&state, json!({"policy": "roomy", "key": "k"})).await;
    assert_eq!(body["remaining"], 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_racing_lists_where_only_one_fits_exactly_one_passes() {
    let state = state(AnyStore::memory());
    for round in 0..100 {
        // Both need the one unit of `tight` for the shared key; each has its own `roomy` key.
        let shared = format!("shared-{round}");
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = ["a", "b"]
            .into_iter()
            .map(|side| {
                let (state, barrier) = (state.clone(), barrier.clone());
                let own = format!("{side}-{round}");
                let list = rules(&[("roomy", own.as_str()), ("tight", shared.as_str())]);
                tokio::spawn(async move {
                    barrier.wait().await;
                    check(&state, list).await.0
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.expect("task"));
        }
        let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        let denied = statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count();
        assert_eq!((passed, denied), (1, 1), "round {round}: {statuses:?}");
        // The loser spent nothing of its own key: its roomy budget is whole.
        let loser = if statuses[0] == StatusCode::OK { "b" } else { "a" };
        let uri = format!("/v1/limits/roomy/{loser}-{round}");
        let (_, _, peek) = call(&state, "GET", &uri, None).await;
        assert_eq!(peek["remaining"], 9, "round {round}: a peek of 1 leaves 9 of 10");
    }
}

#[tokio::test]
async fn with_redis_down_both_doors_follow_the_same_failure_mode() {
    let mut redis = tollgate_testkit::RedisServer::start();
    let store = common::redis_store(&redis.url()).await;
    let state = state(store);
    let (mut client, stop) = grpc(&state).await;
    let (status, _, body) = check(&state, json!({"policy": "closed", "key": "k"})).await;
    assert_eq!((status, body["degraded"].clone()), (StatusCode::OK, json!(false)));
    redis.kill();

    let (status, _, body) = check(&state, json!({"policy": "open", "key": "k"})).await;
    assert_eq!(
        (status, body["degraded"].clone()),
        (StatusCode::OK, json!(true)),
        "{body}"
    );
    let response = ask(&mut client, "open", "k").await.expect("OK status");
    assert_eq!(Code::try_from(response.overall_code), Ok(Code::Ok));

    // fail_closed refuses at both doors alike: as unavailable when the store reports its failure
    // to the engine, as over the limit when the store applies the failure mode itself.
    let (status, _, body) = check(&state, json!({"policy": "closed", "key": "k"})).await;
    let answer = ask(&mut client, "closed", "k").await;
    match (status, &answer) {
        (StatusCode::SERVICE_UNAVAILABLE, Err(refused)) if refused.code() == tonic::Code::Unavailable => {}
        (StatusCode::TOO_MANY_REQUESTS, Ok(response))
            if response.overall_code == i32::from(Code::OverLimit) => {}
        _ => panic!("the doors disagree: HTTP {status} {body}, gRPC {answer:?}"),
    }

    let (status, _, body) = check(&state, json!({"policy": "local", "key": "k"})).await;
    assert_eq!(
        (status, body["degraded"].clone()),
        (StatusCode::OK, json!(true)),
        "{body}"
    );
    let response = ask(&mut client, "local", "k").await.expect("OK status");
    assert_eq!(Code::try_from(response.overall_code), Ok(Code::Ok));
    assert_eq!(response.statuses[0].limit_remaining, 4);
    let _ = stop.send(());
}

/// A store that is full: one key, and it is limited, so it cannot be evicted.
async fn full_store_state() -> SharedState {
    let store = AnyStore::Memory(Arc::new(
        MemoryStore::builder()
            .max_keys(1)
            .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
            .build(),
    ));
    let state = state(store);
    for expected in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
        let (status, _, _) = check(&state, json!({"policy": "filler", "key": "x"})).await;
        assert_eq!(status, expected);
    }
    let (status, _, body) = check(&state, json!({"policy": "tight", "key": "new"})).await;
    assert_eq!(
        (status, body["degraded"].clone()),
        (StatusCode::OK, json!(true)),
        "the store is full: `tight` fails over to the local limiter"
    );
    state
}

/// The gRPC service over `state` on a free port, with a client.
async fn grpc(
    state: &SharedState,
) -> (
    RateLimitServiceClient<tonic::transport::Channel>,
    oneshot::Sender<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("local addr");
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(tollgate_server::grpc::serve(listener, state.clone(), async {
        let _ = rx.await;
    }));
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    (client, tx)
}

async fn ask(
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
    key: &str,
    value: &str,
) -> Result<RateLimitResponse, tonic::Status> {
    let request = RateLimitRequest {
        domain: "modes".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    tokio::time::timeout(Duration::from_secs(10), client.should_rate_limit(request))
        .await
        .expect("answered within 10 s")
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn with_a_full_store_both_doors_follow_the_same_failure_mode() {
    let metrics = tollgate_server::metrics::install();
    let state = full_store_state().await;
    let (mut client, stop) = grpc(&state).await;

    // fail_open: allowed, marked degraded, nothing counted.
    for _ in 0..3 {
        let (status, _, body) = check(&state, json!({"policy": "open", "key": "k"})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(
            (body["degraded"].clone(), body["remaining"].clone()),
            (json!(true), json!(4))
        );
        let response = ask(&mut client, "open", "k").await.expect("OK status");
        assert_eq!(Code::try_from(response.overall_code), Ok(Code::Ok));
        assert_eq!(response.statuses[0].limit_remaining, 4);
    }

    // fail_closed: refused as unavailable, at both doors.
    let (status, headers, problem) = check(&state, json!({"policy": "closed", "key": "k"})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(problem["policy"], "closed");
    let detail = problem["detail"].as_str().expect("detail");
    assert!(
        detail.contains("memory store is full") && detail.contains("fails closed"),
        "{detail}"
    );
    let refused = ask(&mut client, "closed", "k")
        .await
        .expect_err("an error status");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("descriptors[0]: memory store is full"),
        "{refused:?}"
    );
    // In a list, one closed rule refuses the whole request.
    let (status, _, _) = check(&state, rules(&[("open", "l"), ("closed", "l")])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    // local: the engine's own limiter keeps the limit, at both doors alike.
    for left in (0..5).rev() {
        let (status, _, body) = check(&state, json!({"policy": "local", "key": "k"})).await;
        assert_eq!((status, body["remaining"].clone()), (StatusCode::OK, json!(left)));
        assert_eq!(body["degraded"], true);
        let response = ask(&mut client, "local", "k").await.expect("OK status");
        assert_eq!(Code::try_from(response.overall_code), Ok(Code::Ok));
        assert_eq!(response.statuses[0].limit_remaining, left);
    }
    let (status, _, _) = check(&state, json!({"policy": "local", "key": "k"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let response = ask(&mut client, "local", "k").await.expect("OK status");
    assert_eq!(Code::try_from(response.overall_code), Ok(Code::OverLimit));

    // Both doors label their decisions with the engine's outcomes and the store's error class.
    let rendered = metrics.render();
    let has = |policy: &str, outcome: &str| {
        rendered.lines().any(|line| {
            line.starts_with("tollgate_decisions_total")
                && line.contains(&format!(r#"policy="{policy}""#))
                && line.contains(&format!(r#"outcome="{outcome}""#))
        })
    };
    for (policy, outcome) in [
        ("open", "degraded"),
        ("envoy:modes.open", "degraded"),
        ("closed", "error"),
        ("envoy:modes.closed", "error"),
        ("local", "denied"),
        ("envoy:modes.local", "denied"),
    ] {
        assert!(has(policy, outcome), "{policy} {outcome}:\n{rendered}");
    }
    assert!(
        rendered
            .lines()
            .any(|line| line.starts_with("tollgate_store_errors_total") && line.contains(r#"kind="full""#)),
        "{rendered}"
    );
    let _ = stop.send(());
}
