//! The layer driven with `oneshot`, no socket: limits, headers, problem bodies, key extractors,
//! several rules, shadow mode and store errors.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, Request, Response, StatusCode};
use common::{Answer, policy, request, routes, send};
use tokio::sync::Barrier;
use tollgate::{Engine, FailureMode, ManualClock, MemoryStore};
use tollgate_tower::{ClientIp, KeyExtractor, KeyedPolicy, MissingKey, RateLimitLayer};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const MINUTE: Duration = Duration::from_secs(60);

fn api_key() -> KeyExtractor {
    KeyExtractor::header(HeaderName::from_static("x-api-key"))
}

fn count(answers: &[Answer], status: StatusCode) -> usize {
    answers.iter().filter(|a| a.status == status).count()
}

#[tokio::test]
async fn the_limit_holds_across_every_clone_of_layer_and_service() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 7, MINUTE), KeyExtractor::peer_ip()),
    );
    let handler =
        tower::service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) });
    let service = ServiceBuilder::new().layer(layer.clone()).service(handler);
    let mut admitted = 0;
    for i in 0..30 {
        // Alternate between clones of one service and services made by clones of the layer.
        let mut svc = if i % 2 == 0 {
            service.clone()
        } else {
            layer.clone().layer(handler)
        };
        let response = svc
            .ready()
            .await
            .expect("ready")
            .call(request("/", "192.0.2.1:1000", &[]))
            .await
            .expect("infallible");
        admitted += usize::from(response.status() == StatusCode::OK);
    }
    assert_eq!(admitted, 7);
    let stats = layer.stats().snapshot();
    assert_eq!((stats.allowed, stats.denied), (7, 23));
}

/// On worker threads of their own, released together: the checks really run side by side, so
/// a store or layer that lost an update between two of them would admit more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_through_an_axum_router_admit_exactly_the_limit() {
    let app = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 10, MINUTE), KeyExtractor::peer_ip()),
    ));
    let start = Arc::new(Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (app, start) = (app.clone(), start.clone());
            // Different source ports: what separate connections look like.
            tokio::spawn(async move {
                start.wait().await;
                send(&app, request("/", &format!("192.0.2.1:{}", 2000 + i), &[])).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("task"));
    }
    assert_eq!(count(&answers, StatusCode::OK), 10);
    assert_eq!(count(&answers, StatusCode::TOO_MANY_REQUESTS), 40);
}

#[tokio::test]
async fn allowed_responses_carry_the_ratelimit_headers() {
    let app = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 5, MINUTE), KeyExtractor::peer_ip()),
    ));
    for remaining in (0..5).rev() {
        let answer = send(&app, request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body, b"ok");
        assert_eq!(answer.header("ratelimit-policy"), r#""api";q=5;w=60"#);
        assert_eq!(answer.header("ratelimit"), format!(r#""api";r={remaining};t=60"#));
        assert_eq!(answer.header("retry-after"), "");
    }
    // Another address has its own budget.
    let other = send(&app, request("/", "192.0.2.2:1", &[])).await;
    assert_eq!(other.header("ratelimit"), r#""api";r=4;t=60"#);
}

#[tokio::test]
async fn a_denial_is_problem_json_with_retry_after_rounded_up_to_whole_seconds() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let app = routes().layer(RateLimitLayer::new(
        store,
        KeyedPolicy::new(
            policy("search", 1, Duration::from_millis(1_500)),
            KeyExtractor::peer_ip(),
        ),
    ));
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1", &[])).await.status,
        StatusCode::OK
    );

    let denied = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("content-type"), "application/problem+json");
    assert_eq!(denied.header("retry-after"), "2");
    assert_eq!(denied.header("ratelimit-policy"), r#""search";q=1;w=2"#);
    assert_eq!(denied.header("ratelimit"), r#""search";r=0;t=2"#);
    let body = denied.json();
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(body["detail"], "rate limit `search` exceeded; retry in 2 s");
    assert_eq!(body["policy"], "search");
    assert_eq!(body["limit"], 1);
    assert_eq!(body["remaining"], 0);
    assert_eq!(body["reset_after_ms"], 1_500);
    assert_eq!(body["retry_after_ms"], 1_500);

    // 1.1 s left: still 2 s; exactly 1 s left: 1 s.
    clock.advance(Duration::from_millis(400));
    let denied = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(
        (
            denied.header("retry-after"),
            denied.json()["retry_after_ms"].as_u64()
        ),
        ("2", Some(1_100))
    );
    clock.advance(Duration::from_millis(100));
    let denied = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(
        (
            denied.header("retry-after"),
            denied.json()["retry_after_ms"].as_u64()
        ),
        ("1", Some(1_000))
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1", &[])).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_problem_type_base_names_each_problem() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(policy("api", 1, MINUTE), api_key()))
        .problem_type_base("https://api.example/problems/")
        .build()
        .expect("valid layer");
    let app = routes().layer(layer);
    let missing = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(missing.json()["type"], "https://api.example/problems/missing-key");
    send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")])).await;
    let denied = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")])).await;
    assert_eq!(denied.json()["type"], "https://api.example/problems/rate-limited");
}

#[tokio::test]
async fn a_header_key_limits_each_value_and_a_missing_header_is_rejected_by_default() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("per-key", 2, MINUTE), api_key()),
    );
    let stats = layer.stats();
    let app = routes().layer(layer);
    for _ in 0..2 {
        assert_eq!(
            send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "alpha")]))
                .await
                .status,
            StatusCode::OK
        );
    }
    // The same key from another address is the same budget; another key is not.
    let same = send(&app, request("/", "198.51.100.1:1", &[("x-api-key", "alpha")])).await;
    assert_eq!(same.status, StatusCode::TOO_MANY_REQUESTS);
    let other = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "beta")])).await;
    assert_eq!(other.status, StatusCode::OK);

    for headers in [&[][..], &[("x-api-key", "")][..]] {
        let missing = send(&app, request("/", "192.0.2.1:1", headers)).await;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST);
        assert_eq!(missing.header("content-type"), "application/problem+json");
        let body = missing.json();
        assert_eq!(body["status"], 400);
        assert_eq!(body["policy"], "per-key");
        assert_eq!(
            body["detail"],
            "rate limit `per-key` needs the `x-api-key` header, and this request has none"
        );
    }
    assert_eq!(stats.snapshot().rejected_keys, 2);
}

#[tokio::test]
async fn a_missing_key_can_skip_the_rule() {
    let rule = KeyedPolicy::new(policy("per-key", 1, MINUTE), api_key()).on_missing_key(MissingKey::Skip);
    let app = routes().layer(RateLimitLayer::new(MemoryStore::new(), rule));
    for _ in 0..5 {
        let answer = send(&app, request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit"), "");
    }
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")]))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")]))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn without_connection_info_the_peer_key_is_the_apps_500_naming_the_fix() {
    let app = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 5, MINUTE), KeyExtractor::peer_ip()),
    ));
    let answer = send(&app, Request::get("/").body(Body::empty()).expect("request")).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        answer.json()["detail"],
        "rate limit `api` keys on the client address, but the request carries no peer address: \
         serve the app with `into_make_service_with_connect_info::<SocketAddr>()` (axum), or \
         insert the connection's `SocketAddr` into the request extensions (hyper)"
    );
}

#[tokio::test]
async fn a_key_longer_than_the_store_accepts_is_a_clear_400() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("per-key", 2, MINUTE), api_key()),
    );
    let stats = layer.stats();
    let app = routes().layer(layer);
    let max = tollgate::bounds::MAX_KEY_LEN;
    let at_max = "k".repeat(max);
    assert_eq!(
        send(&app, request("/", "192.0.2.1:1", &[("x-api-key", &at_max)]))
            .await
            .status,
        StatusCode::OK
    );
    let too_long = "k".repeat(max + 1);
    let answer = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", &too_long)])).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let body = answer.json();
    assert_eq!(body["key_len"], max + 1);
    assert_eq!(body["max_key_len"], max);
    assert_eq!(stats.snapshot().store_errors, 0, "the store never saw the key");
}

#[tokio::test]
async fn a_custom_key_function_decides_the_key() {
    // The tenant is the first path segment; requests to `/` have none and are not limited.
    let tenant = KeyExtractor::custom(|parts| {
        let segment = parts.uri.path().split('/').nth(1)?;
        Some(format!("tenant:{segment}"))
    });
    let rule = KeyedPolicy::new(policy("tenant", 1, MINUTE), tenant).on_missing_key(MissingKey::Skip);
    let app = routes().layer(RateLimitLayer::new(MemoryStore::new(), rule));
    assert_eq!(
        send(&app, request("/users/1", "192.0.2.1:1", &[])).await.status,
        StatusCode::OK
    );
    assert_eq!(
        send(&app, request("/users/2", "192.0.2.2:1", &[])).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send(&app, request("/other", "192.0.2.1:1", &[])).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn route_and_ip_keys_group_by_matched_route_inside_a_router() {
    let rule = || {
        KeyedPolicy::new(
            policy("route", 1, MINUTE),
            KeyExtractor::route_and_ip(ClientIp::peer()),
        )
    };
    for routed in [
        routes().route_layer(RateLimitLayer::new(MemoryStore::new(), rule())),
        routes().layer(RateLimitLayer::new(MemoryStore::new(), rule())),
    ] {
        assert_eq!(
            send(&routed, request("/users/1", "192.0.2.1:1", &[]))
                .await
                .status,
            StatusCode::OK
        );
        // Same route template, same address: one budget.
        assert_eq!(
            send(&routed, request("/users/2", "192.0.2.1:1", &[]))
                .await
                .status,
            StatusCode::TOO_MANY_REQUESTS
        );
        // Another route or another address: its own budget.
        assert_eq!(
            send(&routed, request("/other", "192.0.2.1:1", &[])).await.status,
            StatusCode::OK
        );
        assert_eq!(
            send(&routed, request("/users/3", "192.0.2.2:1", &[]))
                .await
                .status,
            StatusCode::OK
        );
    }

    // Around a whole router, routing has not happened yet: the raw path is the route.
    let outside = ServiceBuilder::new()
        .layer(RateLimitLayer::new(MemoryStore::new(), rule()))
        .service(routes());
    for path in ["/users/1", "/users/2"] {
        let response = outside
            .clone()
            .oneshot(request(path, "192.0.2.1:1", &[]))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let again = outside
        .oneshot(request("/users/1", "192.0.2.1:1", &[]))
        .await
        .expect("infallible");
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn every_rule_must_allow_and_a_denied_request_spends_no_other_budget() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(
            policy("per-ip", 3, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .policy(KeyedPolicy::new(policy("per-key", 10, MINUTE), api_key()))
        .build()
        .expect("valid layer");
    let app = routes().layer(layer);
    let from = |peer: &'static str| request("/", peer, &[("x-api-key", "k")]);
    for i in 0..3 {
        let answer = send(&app, from("192.0.2.1:1")).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.header("ratelimit-policy"),
            r#""per-ip";q=3;w=60, "per-key";q=10;w=60"#
        );
        assert_eq!(
            answer.header("ratelimit"),
            format!(r#""per-ip";r={};t=60, "per-key";r={};t=60"#, 2 - i, 9 - i)
        );
    }
    for _ in 0..4 {
        let denied = send(&app, from("192.0.2.1:1")).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(denied.json()["policy"], "per-ip");
        // Both rules are reported; per-key still has the 7 the denials did not spend.
        assert_eq!(
            denied.header("ratelimit"),
            r#""per-ip";r=0;t=60, "per-key";r=7;t=60"#
        );
    }
    let other_ip = send(&app, from("192.0.2.2:1")).await;
    assert_eq!(other_ip.status, StatusCode::OK);
    assert_eq!(
        other_ip.header("ratelimit"),
        r#""per-ip";r=2;t=60, "per-key";r=6;t=60"#
    );
}

#[tokio::test]
async fn a_denied_request_spends_nothing_on_any_rule() {
    let engine = Arc::new(Engine::new(MemoryStore::new()));
    let (per_ip, per_key, global) = (
        policy("per-ip", 10, MINUTE),
        policy("per-key", 2, MINUTE),
        policy("global", 100, MINUTE),
    );
    let everyone = KeyExtractor::custom(|_| Some("all"));
    let layer = RateLimitLayer::builder_engine(engine.clone())
        .policy(KeyedPolicy::new(per_ip.clone(), KeyExtractor::peer_ip()))
        .policy(KeyedPolicy::new(per_key.clone(), api_key()))
        .policy(KeyedPolicy::new(global.clone(), everyone))
        .build()
        .expect("valid layer");
    let app = routes().layer(layer);
    let from = |peer: &'static str| request("/", peer, &[("x-api-key", "k")]);
    assert_eq!(send(&app, from("192.0.2.1:1")).await.status, StatusCode::OK);
    assert_eq!(send(&app, from("192.0.2.2:1")).await.status, StatusCode::OK);
    // The key's budget is gone: every later request is denied by it alone.
    for peer in ["192.0.2.1:1", "192.0.2.3:1", "192.0.2.3:1"] {
        let denied = send(&app, from(peer)).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(denied.json()["policy"], "per-key");
    }
    let store = engine.store();
    let remaining =
        |policy: &tollgate::Policy, key: &str| store.peek(policy, key, 1).expect("peek").remaining;
    // A peek reports what would be left after one more request.
    assert_eq!(remaining(&per_ip, "192.0.2.1"), 8, "one admitted request");
    assert_eq!(remaining(&per_ip, "192.0.2.3"), 9, "denied twice, spent nothing");
    assert_eq!(remaining(&global, "all"), 97, "only the two admitted requests");
}

#[tokio::test]
async fn a_penalty_starts_on_every_rule_that_denied() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let engine = Arc::new(Engine::builder(store).clock(clock.clone()).build());
    let login = policy("login", 1, Duration::from_secs(1))
        .with_block_for(MINUTE)
        .expect("valid penalty");
    let account = policy("account", 1, Duration::from_secs(1))
        .with_block_for(Duration::from_secs(120))
        .expect("valid penalty");
    let global = policy("global", 1_000, MINUTE);
    let layer = RateLimitLayer::builder_engine(engine.clone())
        .policy(KeyedPolicy::new(login.clone(), KeyExtractor::peer_ip()))
        .policy(KeyedPolicy::new(account.clone(), api_key()))
        .policy(KeyedPolicy::new(global.clone(), api_key()))
        .build()
        .expect("valid layer");
    let app = routes().layer(layer);
    let attempt = || request("/", "192.0.2.1:1", &[("x-api-key", "k")]);
    assert_eq!(send(&app, attempt()).await.status, StatusCode::OK);
    let denied = send(&app, attempt()).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["policy"], "account", "the longer penalty speaks");
    assert_eq!(denied.header("retry-after"), "120");

    // The windows are clear after 2 s, but both penalties hold, each on its own key.
    clock.advance(Duration::from_secs(2));
    let store = engine.store();
    let login_now = store.peek(&login, "192.0.2.1", 1).expect("peek");
    let account_now = store.peek(&account, "k", 1).expect("peek");
    assert!(!login_now.allowed && !account_now.allowed);
    assert_eq!(login_now.retry_after, Some(Duration::from_secs(58)));
    assert_eq!(account_now.retry_after, Some(Duration::from_secs(118)));
    // The rule that allowed has no penalty and spent nothing on the denial.
    assert_eq!(store.peek(&global, "k", 1).expect("peek").remaining, 998);

    // Another address is still shut out by the account's penalty alone.
    let elsewhere = send(&app, request("/", "192.0.2.9:1", &[("x-api-key", "k")])).await;
    assert_eq!(elsewhere.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(elsewhere.header("retry-after"), "118");
    clock.advance(Duration::from_secs(59));
    assert!(
        store.peek(&login, "192.0.2.1", 1).expect("peek").allowed,
        "the login penalty is over"
    );
}

#[tokio::test]
async fn one_policy_and_key_in_two_rules_spend_the_sum_from_one_budget() {
    let engine = Arc::new(Engine::new(MemoryStore::new()));
    let api = policy("api", 5, MINUTE);
    let layer = RateLimitLayer::builder_engine(engine.clone())
        .policy(KeyedPolicy::new(api.clone(), KeyExtractor::peer_ip()))
        .policy(
            KeyedPolicy::new(api.clone(), KeyExtractor::peer_ip())
                .cost(2)
                .expect("cost"),
        )
        .build()
        .expect("the same policy twice is one budget");
    let app = routes().layer(layer);
    let first = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(first.status, StatusCode::OK);
    // One budget, reported once.
    assert_eq!(first.header("ratelimit"), r#""api";r=2;t=60"#);
    assert_eq!(first.header("ratelimit-policy"), r#""api";q=5;w=60"#);
    // 3 more do not fit in the 2 left, and nothing is spent.
    let denied = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        engine.store().peek(&api, "192.0.2.1", 2).expect("peek").remaining,
        0
    );
    assert!(engine.store().peek(&api, "192.0.2.1", 2).expect("peek").allowed);
    // Another key of the same policy is its own budget.
    assert_eq!(
        send(&app, request("/", "192.0.2.2:1", &[])).await.status,
        StatusCode::OK
    );
}

#[test]
fn one_name_for_two_different_policies_is_refused() {
    let built = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(
            policy("api", 5, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .policy(KeyedPolicy::new(policy("api", 6, MINUTE), api_key()))
        .build();
    assert_eq!(
        built.map(|_| ()).unwrap_err(),
        tollgate_tower::Error::DuplicatePolicy("api".into())
    );
}

#[tokio::test]
async fn the_rule_that_denies_longest_speaks_for_the_request() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(
            policy("short", 1, Duration::from_secs(10)),
            KeyExtractor::peer_ip(),
        ))
        .policy(KeyedPolicy::new(
            policy("long", 1, Duration::from_secs(300)),
            api_key(),
        ))
        .build()
        .expect("valid layer");
    let app = routes().layer(layer);
    let both = || request("/", "192.0.2.1:1", &[("x-api-key", "k")]);
    assert_eq!(send(&app, both()).await.status, StatusCode::OK);
    let denied = send(&app, both()).await;
    assert_eq!(denied.json()["policy"], "long");
    assert_eq!(denied.header("retry-after"), "300");
}

#[tokio::test]
async fn shadow_rules_count_would_be_denials_but_never_deny_or_show() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(
            policy("enforced", 100, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .policy(KeyedPolicy::new(policy("trial", 2, MINUTE), KeyExtractor::peer_ip()).shadow(true))
        .build()
        .expect("valid layer");
    let stats = layer.stats();
    let app = routes().layer(layer);
    for i in 0..6 {
        let answer = send(&app, request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(
            answer.header("ratelimit"),
            format!(r#""enforced";r={};t=60"#, 99 - i)
        );
        assert_eq!(answer.header("ratelimit-policy"), r#""enforced";q=100;w=60"#);
    }
    let snapshot = stats.snapshot();
    assert_eq!(
        (snapshot.allowed, snapshot.denied, snapshot.shadow_denied),
        (6, 0, 4)
    );
}

#[tokio::test]
async fn a_shadow_denial_is_counted_on_denied_requests_too_and_never_speaks_for_them() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(policy("trial", 1, MINUTE), KeyExtractor::peer_ip()).shadow(true))
        .policy(KeyedPolicy::new(
            policy("enforced", 2, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .build()
        .expect("valid layer");
    let stats = layer.stats();
    let app = routes().layer(layer);
    let statuses = [
        send(&app, request("/", "192.0.2.1:1", &[])).await.status,
        send(&app, request("/", "192.0.2.1:1", &[])).await.status,
    ];
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::OK],
        "the trial never denies"
    );
    let denied = send(&app, request("/", "192.0.2.1:1", &[])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["policy"], "enforced");
    assert_eq!(denied.header("ratelimit-policy"), r#""enforced";q=2;w=60"#);
    let snapshot = stats.snapshot();
    assert_eq!(
        (snapshot.allowed, snapshot.denied, snapshot.shadow_denied),
        (2, 1, 2)
    );
}

#[tokio::test]
async fn a_lone_shadow_rule_passes_everything_without_headers() {
    let rule = KeyedPolicy::new(policy("trial", 1, MINUTE), KeyExtractor::peer_ip()).shadow(true);
    let layer = RateLimitLayer::new(MemoryStore::new(), rule);
    let stats = layer.stats();
    let app = routes().layer(layer);
    for _ in 0..3 {
        let answer = send(&app, request("/", "192.0.2.1:1", &[])).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit"), "");
    }
    assert_eq!(stats.snapshot().shadow_denied, 2);
}

/// A memory store with room for one key: once key `a` is out of budget it cannot be evicted, so
/// a check of any other key fails with `Error::StoreFull`, which the engine answers by the
/// policy's failure mode, as it does for a stopped Redis.
async fn full_store_app(mode: FailureMode, shadow: bool) -> (axum::Router, tollgate_tower::Stats) {
    let store = MemoryStore::builder().max_keys(1).build();
    let rule = KeyedPolicy::new(policy("tiny", 1, MINUTE).with_failure_mode(mode), api_key()).shadow(shadow);
    let layer = RateLimitLayer::new(store, rule);
    let stats = layer.stats();
    let app = routes().layer(layer);
    let first = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "a")])).await;
    assert_eq!(first.status, StatusCode::OK);
    // Out of budget now (a shadow rule only counts it), so `a` cannot be evicted.
    let blocked = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "a")])).await;
    let expected = if shadow {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    assert_eq!(blocked.status, expected);
    (app, stats)
}

fn key(value: &str) -> Request<Body> {
    request("/", "192.0.2.1:1", &[("x-api-key", value)])
}

#[tokio::test]
async fn a_full_store_under_fail_open_passes_degraded_without_headers() {
    let (app, stats) = full_store_app(FailureMode::FailOpen, false).await;
    for _ in 0..3 {
        let answer = send(&app, key("b")).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body, b"ok");
        assert_eq!(answer.header("ratelimit"), "", "no budget to report");
    }
    let snapshot = stats.snapshot();
    assert_eq!(
        (
            snapshot.allowed,
            snapshot.denied,
            snapshot.store_errors,
            snapshot.degraded,
            snapshot.failed_closed
        ),
        (4, 1, 3, 3, 0)
    );
}

#[tokio::test]
async fn a_full_store_under_local_is_limited_by_the_engines_own_limiter() {
    let (app, stats) = full_store_app(FailureMode::default(), false).await;
    // The engine's limiter has the policy's whole limit (one instance): 1 per minute.
    let first = send(&app, key("b")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit"),
        r#""tiny";r=0;t=60"#,
        "the local budget"
    );
    let second = send(&app, key("b")).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.json()["policy"], "tiny");
    assert_eq!(second.header("retry-after"), "60");
    // Another key has its own local budget.
    assert_eq!(send(&app, key("c")).await.status, StatusCode::OK);
    let snapshot = stats.snapshot();
    assert_eq!(
        (
            snapshot.allowed,
            snapshot.denied,
            snapshot.store_errors,
            snapshot.degraded
        ),
        (3, 2, 3, 3)
    );
}

#[tokio::test]
async fn a_full_store_under_fail_closed_is_a_503_problem() {
    let (app, stats) = full_store_app(FailureMode::FailClosed, false).await;
    let answer = send(&app, key("b")).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.header("content-type"), "application/problem+json");
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.header("ratelimit"), "");
    let body = answer.json();
    assert_eq!(body["status"], 503);
    assert_eq!(body["title"], "Service Unavailable");
    assert_eq!(body["policy"], "tiny");
    let snapshot = stats.snapshot();
    assert_eq!((snapshot.store_errors, snapshot.failed_closed), (1, 1));
    // The key that fits is still decided normally.
    let denied = send(&app, key("a")).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_shadow_rule_never_denies_even_when_it_fails_closed() {
    let (app, stats) = full_store_app(FailureMode::FailClosed, true).await;
    // `a` was let through above although out of budget; `b` finds the store full.
    for _ in 0..3 {
        let answer = send(&app, key("b")).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit"), "");
    }
    let snapshot = stats.snapshot();
    assert_eq!(
        (
            snapshot.store_errors,
            snapshot.failed_closed,
            snapshot.shadow_denied
        ),
        (3, 0, 1)
    );
}

#[tokio::test]
async fn a_plain_socket_addr_extension_is_a_peer_address_too() {
    let app = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 1, MINUTE), KeyExtractor::peer_ip()),
    ));
    let plain = || {
        let socket: SocketAddr = "[::ffff:192.0.2.1]:1".parse().expect("address");
        Request::get("/")
            .extension(socket)
            .body(Body::empty())
            .expect("request")
    };
    assert_eq!(send(&app, plain()).await.status, StatusCode::OK);
    // The mapped address and the IPv4 address are one client.
    let via_connect_info = Request::get("/")
        .extension(ConnectInfo("192.0.2.1:2".parse::<SocketAddr>().expect("address")))
        .body(Body::empty())
        .expect("request");
    assert_eq!(
        send(&app, via_connect_info).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn when_the_store_fails_every_rule_follows_its_own_failure_mode() {
    // Room for one key: a request with two new keys cannot place both, so the store refuses the
    // whole request and every rule is decided by its own failure mode.
    let layer = RateLimitLayer::builder(MemoryStore::builder().max_keys(1).build())
        .policy(KeyedPolicy::new(
            policy("per-ip", 1, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .policy(KeyedPolicy::new(
            policy("per-key", 5, MINUTE).with_failure_mode(FailureMode::FailOpen),
            api_key(),
        ))
        .build()
        .expect("valid layer");
    let stats = layer.stats();
    let app = routes().layer(layer);
    let answer = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")])).await;
    assert_eq!(answer.status, StatusCode::OK);
    // `Local` reports its local budget; `FailOpen` has none to report.
    assert_eq!(answer.header("ratelimit"), r#""per-ip";r=0;t=60"#);
    assert_eq!(answer.header("ratelimit-policy"), r#""per-ip";q=1;w=60"#);
    let denied = send(&app, request("/", "192.0.2.1:1", &[("x-api-key", "k")])).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.json()["policy"], "per-ip");
    let snapshot = stats.snapshot();
    assert_eq!(
        (snapshot.store_errors, snapshot.degraded, snapshot.denied),
        (2, 2, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_racing_requests_that_only_one_budget_fits_exactly_one_passes() {
    for round in 0..200 {
        let engine = Arc::new(Engine::new(MemoryStore::new()));
        let (per_ip, per_key) = (policy("per-ip", 5, MINUTE), policy("per-key", 1, MINUTE));
        let layer = RateLimitLayer::builder_engine(engine.clone())
            .policy(KeyedPolicy::new(per_ip.clone(), KeyExtractor::peer_ip()))
            .policy(KeyedPolicy::new(per_key.clone(), api_key()))
            .build()
            .expect("valid layer");
        let app = routes().layer(layer);
        let start = Arc::new(tokio::sync::Barrier::new(2));
        let racers: Vec<_> = ["192.0.2.1:1", "192.0.2.2:1"]
            .into_iter()
            .map(|peer| {
                let (app, start) = (app.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    send(&app, request("/", peer, &[("x-api-key", "shared")]))
                        .await
                        .status
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for racer in racers {
            statuses.push(racer.await.expect("racer"));
        }
        let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        assert_eq!(passed, 1, "round {round}: {statuses:?}");
        // The loser spent nothing on its own address.
        let spent: Vec<u64> = ["192.0.2.1", "192.0.2.2"]
            .iter()
            .map(|ip| 5 - engine.store().peek(&per_ip, ip, 1).expect("peek").remaining - 1)
            .collect();
        let winner = statuses
            .iter()
            .position(|s| *s == StatusCode::OK)
            .expect("a winner");
        let mut expected = vec![0, 0];
        expected[winner] = 1;
        assert_eq!(spent, expected, "round {round}");
        assert!(!engine.store().peek(&per_key, "shared", 1).expect("peek").allowed);
    }
}

#[tokio::test]
async fn a_deny_listed_peer_gets_a_403_problem_and_an_allowed_one_is_never_limited() {
    use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
    let lists = AccessLists::new([
        AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "203.0.113.0/24").unwrap(),
        AccessEntry::new(Some("api"), Listed::Allow, EntryKind::Cidr, "192.0.2.0/24").unwrap(),
    ]);
    let engine = Engine::builder(MemoryStore::new()).access_lists(lists).build();
    let layer = RateLimitLayer::builder_engine(engine)
        .policy(KeyedPolicy::new(
            policy("api", 1, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .problem_type_base("https://example.com/problems/")
        .build()
        .unwrap();
    let app = routes().layer(layer.clone());
    let blocked = send(&app, request("/", "203.0.113.9:1000", &[])).await;
    assert_eq!(blocked.status, StatusCode::FORBIDDEN);
    let body: serde_json::Value = serde_json::from_slice(&blocked.body).unwrap();
    assert_eq!(body["type"], "https://example.com/problems/blocked");
    assert_eq!(body["reason"], "blocked");
    assert_eq!(body["policy"], "api");
    for _ in 0..3 {
        assert_eq!(
            send(&app, request("/", "192.0.2.9:1000", &[])).await.status,
            StatusCode::OK
        );
    }
    let stats = layer.stats().snapshot();
    assert_eq!((stats.blocked, stats.allowed, stats.denied), (1, 3, 0));
}
