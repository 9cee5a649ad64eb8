//! Admin access list entries are bounded and cheap to add, over the router (`oneshot`, no
//! socket): 20 000 adds one after the other finish in a normal test run (each is O(log n), the
//! lists are never compiled again whole), large values meet a byte bound (409) on memory and on a
//! real Redis, and an entry both in the config and added by an admin stays in force when the
//! admin one is removed.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::{AnyStore, AppState, Settings};
use tollgate_testkit::RedisServer;
use tower::ServiceExt;

const LIMITS: &str = "\
access:
  deny:
    keys: [mallory]
policies:
  api:
    algorithm: sliding_log
    limit: 1
    window: 1h
";

fn router(store: AnyStore) -> Router {
    let limits = tollgate_config::parse("limits.yaml", LIMITS).expect("limits parse");
    tollgate_server::api_router(AppState::new(limits, store, Settings::default()))
}

async fn call(router: &Router, method: &str, uri: &str, body: Option<Value>) -> (StatusCode, Value) {
    let request = Request::builder().method(method).uri(uri);
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn add(router: &Router, value: &str) -> (StatusCode, Value) {
    let entry = json!({"policy": "api", "list": "deny", "kind": "key", "value": value});
    call(router, "POST", "/v1/admin/access", Some(entry)).await
}

async fn check(router: &Router, key: &str) -> StatusCode {
    call(
        router,
        "POST",
        "/v1/check",
        Some(json!({"policy": "api", "key": key})),
    )
    .await
    .0
}

#[tokio::test]
async fn twenty_thousand_adds_apply_one_at_a_time() {
    let router = router(AnyStore::memory());
    for i in 0..20_000 {
        let (status, body) = add(&router, &format!("scraper-{i}")).await;
        assert_eq!(status, StatusCode::CREATED, "add {i}: {body}");
        assert!(body["added_at_ms"].as_u64().is_some(), "{body}");
    }
    assert_eq!(check(&router, "scraper-0").await, StatusCode::FORBIDDEN);
    assert_eq!(check(&router, "scraper-19999").await, StatusCode::FORBIDDEN);
    assert_eq!(check(&router, "scraper-20000").await, StatusCode::OK);
    let (status, again) = add(&router, "scraper-7").await;
    assert_eq!(status, StatusCode::OK, "{again}");
}

async fn large_values_meet_the_byte_bound(store: AnyStore) {
    let router = router(store);
    let value = |i: usize| format!("{i:08}{}", "k".repeat(8 * 1024 - 8));
    // `deny:key:3:api` then the value: what the bound counts of one entry.
    let size = "deny:key:3:api".len() + 8 * 1024;
    let fit = tollgate_redis::MAX_ACCESS_BYTES / size;
    for i in 0..fit {
        let (status, body) = add(&router, &value(i)).await;
        assert_eq!(status, StatusCode::CREATED, "add {i}: {body}");
    }
    let (status, full) = add(&router, &value(fit)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{full}");
    assert_eq!(
        full["detail"],
        format!(
            "the store's access list entries take {} bytes, and this one would take them past the most it keeps, {}",
            fit * size,
            tollgate_redis::MAX_ACCESS_BYTES
        )
    );
    let remove = format!(
        "/v1/admin/access?policy=api&list=deny&kind=key&value={}",
        value(0)
    );
    assert_eq!(
        call(&router, "DELETE", &remove, None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(add(&router, &value(fit)).await.0, StatusCode::CREATED);
}

#[tokio::test]
async fn large_values_meet_the_byte_bound_on_memory() {
    large_values_meet_the_byte_bound(AnyStore::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_meet_the_byte_bound_on_redis() {
    let redis = RedisServer::start();
    // Two thousand calls in a row: on a busy machine one may take longer than the default
    // deadline of 50 ms.
    let store = tollgate_redis::RedisStore::builder(tollgate_redis::Target::Standalone(redis.url()))
        .timeout(std::time::Duration::from_secs(1))
        .connect()
        .await
        .expect("redis store");
    large_values_meet_the_byte_bound(AnyStore::Redis(store)).await;
}

#[tokio::test]
async fn an_entry_of_the_config_stays_when_its_admin_twin_goes() {
    let router = router(AnyStore::memory());
    assert_eq!(check(&router, "mallory").await, StatusCode::FORBIDDEN);
    let global = json!({"list": "deny", "kind": "key", "value": "mallory"});
    let (status, body) = call(&router, "POST", "/v1/admin/access", Some(global)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let remove = "/v1/admin/access?list=deny&kind=key&value=mallory";
    assert_eq!(
        call(&router, "DELETE", remove, None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        check(&router, "mallory").await,
        StatusCode::FORBIDDEN,
        "the config still lists it"
    );
    assert_eq!(add(&router, "trudy").await.0, StatusCode::CREATED);
    let remove = "/v1/admin/access?policy=api&list=deny&kind=key&value=trudy";
    assert_eq!(
        call(&router, "DELETE", remove, None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(check(&router, "trudy").await, StatusCode::OK);
}

/// The entries in force are listed a page at a time: every one once (an entry both in the config
/// and added by an admin twice, the config's first), in a fixed order, at most `limit` a page.
#[tokio::test]
async fn entries_are_listed_a_page_at_a_time() {
    let router = router(AnyStore::memory());
    for i in 0..23 {
        assert_eq!(
            add(&router, &format!("scraper-{i:02}")).await.0,
            StatusCode::CREATED
        );
    }
    let twin = json!({"list": "deny", "kind": "key", "value": "mallory"});
    assert_eq!(
        call(&router, "POST", "/v1/admin/access", Some(twin)).await.0,
        StatusCode::CREATED
    );
    let mut seen: Vec<String> = Vec::new();
    let mut uri = "/v1/admin/access?limit=5".to_owned();
    for page in 0.. {
        assert!(page < 10, "the listing never ended");
        let (status, listed) = call(&router, "GET", &uri, None).await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        let entries = listed["entries"].as_array().unwrap();
        assert!(entries.len() <= 5);
        seen.extend(entries.iter().map(|e| {
            format!(
                "{}={}",
                e["source"].as_str().unwrap(),
                e["value"].as_str().unwrap()
            )
        }));
        match listed["next_cursor"].as_str() {
            Some(cursor) => {
                let cursor: String = form_urlencoded::byte_serialize(cursor.as_bytes()).collect();
                uri = format!("/v1/admin/access?limit=5&cursor={cursor}");
            }
            None => break,
        }
    }
    let expected: Vec<String> = ["config=mallory", "admin=mallory"]
        .map(String::from)
        .into_iter()
        .chain((0..23).map(|i| format!("admin=scraper-{i:02}")))
        .collect();
    assert_eq!(seen, expected, "global entries first, then the policy's");
    let (_, all) = call(&router, "GET", "/v1/admin/access", None).await;
    assert_eq!(
        all["entries"].as_array().map(Vec::len),
        Some(25),
        "100 by default"
    );
    for query in [
        "limit=0",
        "limit=1001",
        "cursor=bogus",
        "cursor=admin%3Anot-an-entry",
        "n=2",
    ] {
        let (status, problem) = call(&router, "GET", &format!("/v1/admin/access?{query}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {problem}");
    }
}
