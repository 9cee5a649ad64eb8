//! What operators run limits with, over HTTP and gRPC: allow and deny lists (from the config
//! and the admin API, shared by a fleet through Redis and a cluster), gradual enforcement, and
//! the top offenders (of rate and concurrency policies; their keys `/metrics` shows, on the HTTP
//! and debug ports, only with the admin token).

mod common;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::{Value, json};
use tollgate_server::AnyStore;
use tollgate_server::grpc::RlsService;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::{RedisCluster, RedisServer};
use tower::ServiceExt;

const TOKEN: &str = "s3cret";

const POLICIES: &str = "\
access:
  allow:
    cidrs: [192.0.2.0/24]
  deny:
    cidrs: [203.0.113.0/24]
policies:
  login:
    algorithm: fixed_window
    limit: 1
    window: 1h
    access:
      deny:
        prefixes: [\"bot-\"]
  api: {algorithm: fixed_window, limit: 1, window: 1h}
  rollout: {algorithm: fixed_window, limit: 1, window: 1h, enforce_percent: 50}
  floodtop: {algorithm: fixed_window, limit: 1, window: 1h}
  leasetop: {algorithm: concurrency, max_in_flight: 1, lease_timeout: 1h}
";

const DESCRIPTORS: &str = "\
domain: edge
descriptors:
  - key: remote_address
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 100}
";

fn state(store: AnyStore) -> SharedState {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), POLICIES).expect("write");
    std::fs::write(dir.path().join("edge.yaml"), DESCRIPTORS).expect("write");
    let limits = tollgate_config::load(dir.path()).expect("config loads");
    let settings = Settings {
        admin_token: Some(TOKEN.into()),
        ..Settings::default()
    };
    AppState::new(limits, store, settings)
}

async fn call(
    state: &SharedState,
    method: &str,
    uri: &str,
    body: Option<Value>,
    token: bool,
) -> (StatusCode, HeaderMap, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if token {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
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
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (parts.status, parts.headers, json)
}

async fn check(state: &SharedState, policy: &str, key: &str) -> (StatusCode, Value) {
    let (status, _, body) = call(
        state,
        "POST",
        "/v1/check",
        Some(json!({"policy": policy, "key": key})),
        false,
    )
    .await;
    (status, body)
}

#[tokio::test]
async fn a_deny_listed_key_gets_a_403_problem_with_its_own_type() {
    let state = state(AnyStore::memory());
    let (status, headers, body) = call(
        &state,
        "POST",
        "/v1/check",
        Some(json!({"policy": "api", "key": "203.0.113.50"})),
        false,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body["type"], "urn:tollgate:problem:blocked");
    assert_eq!(body["reason"], "blocked");
    assert_eq!(body["policy"], "api");
    // A policy's own list, in a list of rules: the whole request is refused, nothing spent.
    let rules = json!({"rules": [{"policy": "api", "key": "bot-9"}, {"policy": "login", "key": "bot-9"}]});
    let (status, _, body) = call(&state, "POST", "/v1/check", Some(rules), false).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["policy"], "login");
    assert_eq!(
        check(&state, "api", "bot-9").await.0,
        StatusCode::OK,
        "nothing was spent"
    );
    // A peek of a blocked key is refused the same way.
    let (status, _, _) = call(&state, "GET", "/v1/limits/api/203.0.113.7", None, false).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn an_allow_listed_key_is_never_limited() {
    let state = state(AnyStore::memory());
    for _ in 0..5 {
        let (status, body) = check(&state, "api", "192.0.2.44").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["listed"], "allow");
        assert_eq!(body["remaining"], 1, "counted as a question: nothing spent");
    }
}

#[tokio::test]
async fn admin_entries_need_the_token_are_validated_and_apply_at_once() {
    let state = state(AnyStore::memory());
    let entry = json!({"policy": "api", "list": "deny", "kind": "key", "value": "mallory"});
    let (status, _, _) = call(&state, "POST", "/v1/admin/access", Some(entry.clone()), false).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let bad = json!({"list": "deny", "kind": "cidr", "value": "203.0.113.7/24"});
    let (status, _, body) = call(&state, "POST", "/v1/admin/access", Some(bad), true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["detail"],
        "value: \"203.0.113.7/24\" has bits set after the /24; the range is 203.0.113.0/24"
    );
    let unknown = json!({"policy": "nope", "list": "deny", "kind": "key", "value": "x"});
    assert_eq!(
        call(&state, "POST", "/v1/admin/access", Some(unknown), true)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let wrong_list = json!({"list": "block", "kind": "key", "value": "x"});
    let (status, _, body) = call(&state, "POST", "/v1/admin/access", Some(wrong_list), true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["detail"],
        "list: unknown list `block`: expected `allow` or `deny`"
    );

    assert_eq!(check(&state, "api", "mallory").await.0, StatusCode::OK);
    let (status, _, body) = call(&state, "POST", "/v1/admin/access", Some(entry.clone()), true).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["source"], "admin");
    assert_eq!(
        call(&state, "POST", "/v1/admin/access", Some(entry), true)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(check(&state, "api", "mallory").await.0, StatusCode::FORBIDDEN);

    let (status, _, listed) = call(&state, "GET", "/v1/admin/access", None, true).await;
    assert_eq!(status, StatusCode::OK);
    let entries = listed["entries"].as_array().expect("entries");
    assert!(
        entries
            .iter()
            .any(|e| e["value"] == "203.0.113.0/24" && e["source"] == "config" && e["policy"].is_null())
    );
    assert!(
        entries
            .iter()
            .any(|e| e["value"] == "mallory" && e["source"] == "admin" && e["policy"] == "api")
    );

    let remove = "/v1/admin/access?policy=api&list=deny&kind=key&value=mallory";
    assert_eq!(
        call(&state, "DELETE", remove, None, true).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&state, "DELETE", remove, None, true).await.0,
        StatusCode::NOT_FOUND
    );
    let (status, _, body) = call(
        &state,
        "DELETE",
        "/v1/admin/access?list=deny&kind=cidr&value=203.0.113.0/24",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("remove it from the config file"),
        "{body}"
    );
    // Off the list, it is rate limited as usual: its one request of the hour was spent before.
    assert_eq!(
        check(&state, "api", "mallory").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// An entry added through one instance applies on another over the same store, at its next
/// refresh (called here directly rather than waited for).
async fn fleet_shares_entries(one: SharedState, two: SharedState) {
    let entry = json!({"list": "deny", "kind": "cidr", "value": "2001:db8:bad::/48"});
    let (status, _, body) = call(&one, "POST", "/v1/admin/access", Some(entry), true).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        check(&one, "api", "2001:db8:bad::1").await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        check(&two, "api", "2001:db8:bad::2").await.0,
        StatusCode::OK,
        "not read yet"
    );
    two.refresh_access().await;
    assert_eq!(
        check(&two, "api", "2001:db8:bad::3").await.0,
        StatusCode::FORBIDDEN
    );
    // Another entry, added on `one` and then again on `two` before `two` refreshed: it was
    // there already (200), and `two` applies it at once.
    let key = json!({"list": "deny", "kind": "key", "value": "scraper-42"});
    let (status, _, _) = call(&one, "POST", "/v1/admin/access", Some(key.clone()), true).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _, _) = call(&two, "POST", "/v1/admin/access", Some(key), true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(check(&two, "api", "scraper-42").await.0, StatusCode::FORBIDDEN);
    let (_, _, listed) = call(&two, "GET", "/v1/admin/access", None, true).await;
    assert!(
        listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["value"] == "2001:db8:bad::/48" && e["source"] == "admin")
    );
    let remove = "/v1/admin/access?list=deny&kind=cidr&value=2001:db8:bad::/48";
    assert_eq!(
        call(&two, "DELETE", remove, None, true).await.0,
        StatusCode::NO_CONTENT
    );
    one.refresh_access().await;
    assert_eq!(check(&one, "api", "2001:db8:bad::4").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_entries_apply_across_instances_on_redis() {
    let server = RedisServer::start();
    let store = || async { common::redis_store(&server.url()).await };
    fleet_shares_entries(state(store().await), state(store().await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_entries_apply_across_instances_on_a_cluster() {
    let cluster = RedisCluster::start();
    let url = format!(
        "redis+cluster://{}",
        cluster
            .urls()
            .iter()
            .map(|u| u.trim_start_matches("redis://"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let store = || async { common::redis_store(&url).await };
    fleet_shares_entries(state(store().await), state(store().await)).await;
}

#[tokio::test]
async fn gradual_enforcement_shows_shadow_and_counts_both_parts() {
    tollgate_server::metrics::install();
    let state = state(AnyStore::memory());
    let share = tollgate::Enforcement::percent(50).unwrap();
    let (mut enforced, mut shadowed) = (0, 0);
    for i in 0..40 {
        let key = format!("user-{i}");
        let body = json!({"rules": [{"policy": "rollout", "key": key}]});
        call(&state, "POST", "/v1/check", Some(body.clone()), false).await;
        let (status, _, answer) = call(&state, "POST", "/v1/check", Some(body), false).await;
        if share.enforces("rollout", key.as_bytes()) {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{key}: {answer}");
            assert_eq!(answer["rules"][0]["shadow"], false);
            enforced += 1;
        } else {
            assert_eq!(status, StatusCode::OK, "{key}: {answer}");
            assert_eq!(answer["rules"][0]["outcome"], "shadow_denied");
            assert_eq!(answer["rules"][0]["shadow"], true);
            shadowed += 1;
        }
    }
    assert!(enforced > 0 && shadowed > 0);
    let (_, _, metrics) = call(&state, "GET", "/metrics", None, false).await;
    let text = metrics.as_str().unwrap_or_default();
    for part in ["enforced", "shadow"] {
        assert!(
            text.contains(&format!(
                "tollgate_gradual_would_deny_total{{policy=\"rollout\",part=\"{part}\"}}"
            )),
            "{part} in {text}"
        );
    }
}

#[tokio::test]
async fn top_offenders_find_the_heavy_hitters_of_a_key_flood_in_fixed_room() {
    tollgate_server::metrics::install();
    let state = state(AnyStore::memory());
    let mut round = 0;
    for i in 0..3_000 {
        // Every one-off key is denied once (its second check); the two bots are denied on
        // every round they appear.
        check(&state, "floodtop", &format!("visitor-{i}")).await;
        check(&state, "floodtop", &format!("visitor-{i}")).await;
        if i % 10 == 0 {
            check(&state, "floodtop", "bot-a").await;
            round += 1;
        }
        if i % 20 == 0 {
            check(&state, "floodtop", "bot-b").await;
        }
    }
    let (status, _, body) = call(
        &state,
        "GET",
        "/v1/admin/top-offenders?policy=floodtop&n=2",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let top = &body["policies"][0];
    assert_eq!(top["policy"], "floodtop");
    assert_eq!(top["denied_total"], 3_000 + (round - 1) + 149);
    assert_eq!(top["capacity"], 64);
    assert!(top["tracked"].as_u64().unwrap() <= 64, "{top}");
    let keys: Vec<&str> = top["offenders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["bot-a", "bot-b"]);
    let bot = &top["offenders"][0];
    let (denied, over) = (
        bot["denied"].as_u64().unwrap(),
        bot["overestimate"].as_u64().unwrap(),
    );
    assert!(denied - over <= 299 && 299 <= denied, "{bot}");

    let (status, _, _) = call(
        &state,
        "GET",
        "/v1/admin/top-offenders?policy=floodtop",
        None,
        false,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        call(&state, "GET", "/v1/admin/top-offenders?n=0", None, true)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&state, "GET", "/v1/admin/top-offenders?policy=zzz", None, true)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    // The keys are in `/metrics` only for a scrape with the admin token.
    let (_, _, public) = call(&state, "GET", "/metrics", None, false).await;
    let public = public.as_str().unwrap_or_default();
    assert!(public.contains("tollgate_decisions_total"), "{public}");
    assert!(!public.contains("tollgate_top_offender_denials"), "{public}");
    let (_, _, metrics) = call(&state, "GET", "/metrics", None, true).await;
    let text = metrics.as_str().unwrap_or_default();
    assert!(
        text.contains("tollgate_top_offender_denials{policy=\"floodtop\",rank=\"1\",key=\"bot-a\"}"),
        "{text}"
    );
    let series = text
        .lines()
        .filter(|l| l.starts_with("tollgate_top_offender_denials{policy=\"floodtop\""))
        .count();
    assert_eq!(series, tollgate_server::metrics::TOP_OFFENDERS_SHOWN);
}

/// `GET path` on `addr` with the admin token or without: the status and the body.
async fn get_text(addr: std::net::SocketAddr, path: &str, token: bool) -> (u16, String) {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("client");
    let mut request = client.get(format!("http://{addr}{path}"));
    if token {
        request = request.bearer_auth(TOKEN);
    }
    let answer = request.send().await.expect("answer");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("body"))
}

#[tokio::test]
async fn the_debug_port_serves_the_offenders_keys_only_with_the_admin_token() {
    let limits = tollgate_config::parse(
        "debug.yaml",
        "policies:\n  debugtop: {algorithm: fixed_window, limit: 1, window: 1h}\n",
    )
    .expect("config");
    let settings = Settings {
        admin_token: Some(TOKEN.into()),
        ..Settings::default()
    };
    let state = AppState::new(limits, AnyStore::memory(), settings);
    for _ in 0..3 {
        check(&state, "debugtop", "198.51.100.23").await;
    }
    let any = "127.0.0.1:0".parse().expect("address");
    let listeners = tollgate_server::Listeners::bind(any, any)
        .await
        .expect("bind")
        .with_debug(any)
        .await
        .expect("bind debug");
    let http = listeners.http.local_addr().expect("addr");
    let debug = listeners
        .debug
        .as_ref()
        .expect("debug")
        .local_addr()
        .expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(tollgate_server::run(state, listeners, async {
        let _ = stopped.await;
    }));
    let series = "tollgate_top_offender_denials{policy=\"debugtop\",rank=\"1\",key=\"198.51.100.23\"} 2";
    for port in [http, debug] {
        let (status, public) = get_text(port, "/metrics", false).await;
        assert_eq!(status, 200, "{port}: {public}");
        assert!(public.contains("tollgate_decisions_total"), "{port}: {public}");
        assert!(!public.contains("debugtop\",rank"), "{port}: {public}");
        let (status, admin) = get_text(port, "/metrics", true).await;
        assert_eq!(status, 200, "{port}: {admin}");
        assert!(admin.contains(series), "{port}: {admin}");
    }
    let _ = stop.send(());
    tokio::time::timeout(std::time::Duration::from_secs(30), server)
        .await
        .expect("the server stops")
        .expect("server task")
        .expect("server");
}

#[tokio::test]
async fn top_offenders_know_concurrency_policies_and_count_refused_leases() {
    let state = state(AnyStore::memory());
    // Nothing refused yet: a known policy with no offenders, not an unknown one.
    let (status, _, body) = call(
        &state,
        "GET",
        "/v1/admin/top-offenders?policy=leasetop",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["policies"][0]["denied_total"], 0, "{body}");
    for (key, tries) in [("hog", 4), ("other", 2)] {
        for _ in 0..tries {
            let uri = format!("/v1/concurrency/leasetop/{key}/acquire");
            call(&state, "POST", &uri, None, false).await;
        }
    }
    let (status, _, body) = call(
        &state,
        "GET",
        "/v1/admin/top-offenders?policy=leasetop",
        None,
        true,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let top = &body["policies"][0];
    assert_eq!(top["denied_total"], 4, "{body}");
    assert_eq!(
        top["offenders"][0],
        json!({"key": "hog", "denied": 3, "overestimate": 0}),
        "{body}"
    );
    assert_eq!(
        top["offenders"][1],
        json!({"key": "other", "denied": 1, "overestimate": 0}),
        "{body}"
    );
    // Allow and deny lists are for rate policies: naming a concurrency policy says so.
    let entry = json!({"policy": "leasetop", "list": "deny", "kind": "key", "value": "hog"});
    let (status, _, body) = call(&state, "POST", "/v1/admin/access", Some(entry), true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("concurrency policy")),
        "{body}"
    );
}

#[tokio::test]
async fn grpc_answers_over_limit_with_a_reason_for_a_deny_listed_address_even_in_shadow_mode() {
    let state = state(AnyStore::memory());
    let rls = RlsService::new(state);
    let ask = |address: &str| RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: address.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let blocked = rls.answer(ask("203.0.113.80")).await.expect("an answer");
    assert_eq!(blocked.overall_code, i32::from(Code::OverLimit));
    assert_eq!(blocked.statuses[0].code, i32::from(Code::OverLimit));
    assert!(
        blocked
            .response_headers_to_add
            .iter()
            .any(|h| h.key == tollgate_server::grpc::BLOCKED_HEADER && h.value == "blocked"),
        "{blocked:?}"
    );
    let fine = rls.answer(ask("198.51.100.80")).await.expect("an answer");
    assert_eq!(fine.overall_code, i32::from(Code::Ok));
}
