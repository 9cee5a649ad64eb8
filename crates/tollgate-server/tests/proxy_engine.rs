//! The proxy decides every route with one engine: a policy named by two routes keeps one budget,
//! in the store and, while the store fails, in the `local` failure mode's limiter. Routes match
//! in any case unless they are case-sensitive.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use tollgate::{Algorithm, MemoryStore, Policy};
use tollgate_server::AnyStore;
use tollgate_server::proxy::{self, Forward};
use tollgate_testkit::AppServer;
use tower::ServiceExt;

const CONFIG: &str = r#"
policies:
  shared: {algorithm: sliding_log, limit: 2, window: 1h, on_store_failure: local}
routes:
  - {prefix: /a, policies: [shared], key: "header:x-key"}
  - {prefix: /b, policies: [shared], key: "header:x-key"}
"#;

async fn statuses(app: &Router, paths: &[&str]) -> Vec<StatusCode> {
    let mut out = Vec::new();
    for path in paths {
        let mut request = Request::get(*path)
            .header("host", "localhost")
            .header("x-key", "client")
            .body(Body::empty())
            .expect("request");
        request
            .extensions_mut()
            .insert(ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 40_000))));
        out.push(app.clone().oneshot(request).await.expect("answer").status());
    }
    out
}

fn full_store() -> AnyStore {
    let memory = Arc::new(
        MemoryStore::builder()
            .max_keys(1)
            .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
            .build(),
    );
    let filler = Policy::new(
        "filler",
        Algorithm::sliding_log(1, Duration::from_secs(3600)).expect("algorithm"),
    )
    .expect("policy");
    assert!(memory.check(&filler, b"x", 1).expect("fits").allowed);
    AnyStore::Memory(memory)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_routes_with_one_policy_share_its_budget_in_the_store_and_in_the_fallback() {
    let upstream = AppServer::start(Router::new().fallback(|| async { "upstream" })).await;
    let limits = tollgate_config::parse("proxy.yaml", CONFIG).expect("config");
    let ok = StatusCode::OK;
    let denied = StatusCode::TOO_MANY_REQUESTS;
    for store in [AnyStore::memory(), full_store()] {
        let forward = Forward::new(&upstream.url("")).expect("upstream url");
        let app = proxy::app(&limits, store, forward, &[]).expect("proxy");
        assert_eq!(
            statuses(&app, &["/a", "/b", "/a", "/b"]).await,
            [ok, ok, denied, denied]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_applies_the_configs_allow_and_deny_lists() {
    let upstream = AppServer::start(Router::new().fallback(|| async { "upstream" })).await;
    let config =
        format!("{CONFIG}access:\n  deny:\n    keys: [client]\n  allow:\n    prefixes: [\"office-\"]\n");
    let limits = tollgate_config::parse("proxy.yaml", &config).expect("config");
    let forward = Forward::new(&upstream.url("")).expect("upstream url");
    let app = proxy::app(&limits, AnyStore::memory(), forward, &[]).expect("proxy");
    assert_eq!(statuses(&app, &["/a", "/b"]).await, [StatusCode::FORBIDDEN; 2]);
    for _ in 0..4 {
        let mut request = Request::get("/a")
            .header("host", "localhost")
            .header("x-key", "office-7")
            .body(Body::empty())
            .expect("request");
        request
            .extensions_mut()
            .insert(ConnectInfo(std::net::SocketAddr::from(([127, 0, 0, 1], 40_000))));
        assert_eq!(
            app.clone().oneshot(request).await.expect("answer").status(),
            StatusCode::OK
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_match_in_any_case_unless_case_sensitive() {
    let upstream = AppServer::start(Router::new().fallback(|| async { "upstream" })).await;
    let config = r#"
policies:
  once: {algorithm: fixed_window, limit: 1, window: 1h}
  files: {algorithm: fixed_window, limit: 1, window: 1h}
routes:
  - {prefix: /v4/movies, policies: [once], key: "header:x-key"}
  - {prefix: /Files/, policies: [files], key: "header:x-key", case_sensitive: true}
"#;
    let limits = tollgate_config::parse("proxy.yaml", config).expect("config");
    let forward = Forward::new(&upstream.url("")).expect("upstream url");
    let app = proxy::app(&limits, AnyStore::memory(), forward, &[]).expect("proxy");
    let (ok, denied) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
    // One budget for every spelling of the case-insensitive route.
    assert_eq!(
        statuses(&app, &["/V4/MOVIES", "/v4/movies", "/v4/Movies/42"]).await,
        [ok, denied, denied]
    );
    // The case-sensitive route limits only its own spelling; the others match no route.
    assert_eq!(
        statuses(
            &app,
            &["/files/a", "/FILES/a", "/files/b", "/Files/a", "/Files/b"]
        )
        .await,
        [ok, ok, ok, ok, denied]
    );
}
