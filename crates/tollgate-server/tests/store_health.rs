//! A sick Redis is visible to operators: while Redis is stalled, every failed check is counted in
//! `tollgate_store_errors_total` by class (the timeout that opened the breaker and the refusals
//! of the open breaker alike), the breaker shows in `tollgate_store_breaker_open`, and `/readyz`
//! names the class (answering 503 with `strict=true`; the fail-open policy keeps the default
//! check ready); once Redis is back, all of it clears. State Redis lost shows in
//! `tollgate_store_state_lost_total`, and admissions of a policy with `replicas` that no replica
//! acknowledged as the `unreplicated` class.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::{AnyStore, StoreOptions};
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::RedisServer;
use tower::ServiceExt;

const POLICIES: &str = "
policies:
  open:
    algorithm: gcra
    rate: 1000/s
    burst: 1000
    on_store_failure: fail_open
";

async fn call(state: &SharedState, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, String) {
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
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// The value of the sample `name` (with its labels) in a Prometheus text rendering, or 0.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_redis_shows_in_metrics_and_readiness_by_class() {
    tollgate_server::metrics::install();
    let server = RedisServer::start();
    // A deadline of its own, not the test kit's: the frozen server's calls must meet it.
    let options = StoreOptions {
        timeout: Duration::from_millis(200),
        ..StoreOptions::default()
    };
    let store = AnyStore::open(Some(&server.url()), &options)
        .await
        .expect("store");
    let limits = tollgate_config::parse("policies.yaml", POLICIES).expect("config");
    let state = AppState::new(limits, store, Settings::default());
    let node = format!("127.0.0.1:{}", server.port());
    let breaker = format!("tollgate_store_breaker_open{{node=\"{node}\"}}");
    let check = json!({"policy": "open", "key": "k"});

    let (status, body) = call(&state, "POST", "/v1/check", Some(check.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = call(&state, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    server.freeze();
    // The first check times out and opens the breaker; the next are refused by it, or probe
    // and fail, doubling the wait, so a refusal comes within a few checks however busy the
    // machine is.
    let mut metrics = String::new();
    for _ in 0..30 {
        let (status, body) = call(&state, "POST", "/v1/check", Some(check.clone())).await;
        let body: Value = serde_json::from_str(&body).expect("json");
        assert_eq!((status, body["degraded"].clone()), (StatusCode::OK, json!(true)));
        metrics = call(&state, "GET", "/metrics", None).await.1;
        if sample(&metrics, "tollgate_store_errors_total{kind=\"connection\"}") >= 1.0 {
            break;
        }
    }
    assert!(
        sample(&metrics, "tollgate_store_errors_total{kind=\"timeout\"}") >= 1.0,
        "{metrics}"
    );
    assert!(
        sample(&metrics, "tollgate_store_errors_total{kind=\"connection\"}") >= 1.0,
        "the breaker's refusals are counted too: {metrics}"
    );
    assert_eq!(sample(&metrics, &breaker), 1.0, "{metrics}");
    // The strict check follows the store; the default one stays ready, since the policy's
    // failure mode (fail_open) answers without it.
    let (status, body) = call(&state, "GET", "/readyz?strict=true", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        (
            body["ready"].clone(),
            body["store_ready"].clone(),
            body["class"].clone()
        ),
        (json!(false), json!(false), json!("timeout"))
    );
    assert_eq!(body["breakers"], json!([{"node": node, "open": true}]));
    let (status, body) = call(&state, "GET", "/readyz", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        (
            body["ready"].clone(),
            body["store_ready"].clone(),
            body["class"].clone()
        ),
        (json!(true), json!(false), json!("timeout"))
    );
    server.thaw();

    // Back: ready again, and the breaker closes with the first check after its probe is due.
    let (status, body) = call(&state, "GET", "/readyz?strict=true", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut closed = false;
    for _ in 0..200 {
        let (_, body) = call(&state, "POST", "/v1/check", Some(check.clone())).await;
        let body: Value = serde_json::from_str(&body).expect("json");
        if body["degraded"] == json!(false) {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "the store never recovered");
    let (_, metrics) = call(&state, "GET", "/metrics", None).await;
    assert_eq!(sample(&metrics, &breaker), 0.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_state_and_unacknowledged_admissions_show_in_metrics() {
    tollgate_server::metrics::install();
    // A master without a replica: a policy that waits for one admits nothing.
    let server = RedisServer::start();
    let store = AnyStore::open(Some(&server.url()), &StoreOptions::default())
        .await
        .expect("store");
    let policies = format!(
        "{POLICIES}  login:\n    algorithm: fixed_window\n    limit: 5\n    window: 15m\n    on_store_failure: fail_closed\n    replicas: 1\n"
    );
    let limits = tollgate_config::parse("policies.yaml", &policies).expect("config");
    let state = AppState::new(limits, store, Settings::default());

    // Refused (fail_closed) each time: not acknowledged, or, when the first calls' WAIT answer
    // does not come back within their deadline (the store's 50 ms plus the policy's 250 ms wait)
    // on a busy machine, timed out; then the store stops waiting for replicas that fell short,
    // and the refusals come at once.
    let mut metrics = String::new();
    for i in 0..20 {
        let check = json!({"policy": "login", "key": format!("user-{i}")});
        let (status, body) = call(&state, "POST", "/v1/check", Some(check)).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        metrics = call(&state, "GET", "/metrics", None).await.1;
        if sample(&metrics, "tollgate_store_errors_total{kind=\"unreplicated\"}") >= 1.0 {
            break;
        }
    }
    assert!(
        sample(&metrics, "tollgate_store_errors_total{kind=\"unreplicated\"}") >= 1.0,
        "{metrics}"
    );
    // Policies that wait for none are not held up.
    let (status, body) = call(
        &state,
        "POST",
        "/v1/check",
        Some(json!({"policy": "open", "key": "k"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        sample(&metrics, "tollgate_store_state_lost_total"),
        0.0,
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_store_refund_failures_total 0"),
        "refund failures are exposed from the start: {metrics}"
    );

    // Redis forgets everything (as a restart without persistence would): the next decision
    // notices.
    server.cli(&["FLUSHALL"]);
    let (status, body) = call(
        &state,
        "POST",
        "/v1/check",
        Some(json!({"policy": "open", "key": "k"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, metrics) = call(&state, "GET", "/metrics", None).await;
    assert_eq!(
        sample(&metrics, "tollgate_store_state_lost_total"),
        1.0,
        "{metrics}"
    );
}
