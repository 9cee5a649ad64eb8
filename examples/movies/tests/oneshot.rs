//! The movies app driven with `oneshot` on a manual clock: the limit, the block that outlasts
//! the window, separate budgets per client, the unlimited health check, trusted proxies.

mod common;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{Answer, T0_US, get, send};
use tollgate::{ManualClock, MemoryStore};
use tollgate_example_movies::{BLOCK_FOR, LIMIT, MOVIES, WINDOW, app};
use tollgate_tower::ClientIp;

fn app_on(clock: &ManualClock, client_ip: ClientIp) -> Router {
    app(MemoryStore::builder().clock(clock.clone()).build(), client_ip)
}

async fn movies_from(app: &Router, peer: &str) -> Answer {
    send(app, get("/v4/movies", peer, &[])).await
}

/// Spends `n` requests of `peer`, asserting each passes.
async fn spend(app: &Router, peer: &str, n: u64) {
    for i in 0..n {
        let answer = movies_from(app, peer).await;
        assert_eq!(answer.status, StatusCode::OK, "request {} of {peer}", i + 1);
    }
}

#[tokio::test]
async fn twenty_pass_and_the_21st_is_a_429_problem_with_retry_after_60() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock, ClientIp::peer());
    for i in 0..LIMIT {
        let answer = movies_from(&app, "192.0.2.1:4000").await;
        assert_eq!(answer.status, StatusCode::OK);
        let titles: Vec<String> = answer
            .json()
            .as_array()
            .expect("a list")
            .iter()
            .map(|m| m["title"].as_str().expect("title").to_owned())
            .collect();
        assert_eq!(titles.len(), MOVIES.len());
        assert_eq!(titles[0], MOVIES[0].title);
        assert_eq!(
            answer.header("ratelimit"),
            format!("\"movies\";r={};t=60", LIMIT - i - 1)
        );
    }
    let denied = movies_from(&app, "192.0.2.1:4000").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), "60");
    assert_eq!(denied.header("content-type"), "application/problem+json");
    let body = denied.json();
    assert_eq!(body["status"], 429);
    assert_eq!(body["policy"], "movies");
    assert_eq!(body["retry_after_ms"], 60_000);
}

#[tokio::test]
async fn the_block_holds_after_the_window_frees_and_ends_on_time() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock, ClientIp::peer());
    spend(&app, "192.0.2.1:4000", LIMIT).await;

    // Half a window later the 21st is refused, and the block starts now.
    clock.advance(Duration::from_secs(30));
    let denied = movies_from(&app, "192.0.2.1:4000").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), "60");

    // At 61 s the window has let go of all 20 requests, but the block has 29 s to run.
    clock.advance(WINDOW - Duration::from_secs(30) + Duration::from_secs(1));
    let blocked = movies_from(&app, "192.0.2.1:4000").await;
    assert_eq!(blocked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(blocked.header("retry-after"), "29");

    // The block ends BLOCK_FOR after the refused request (at 90 s). A millisecond before:
    // still refused; at its end: a whole new budget.
    clock.advance(
        Duration::from_secs(30) + BLOCK_FOR - WINDOW - Duration::from_secs(1) - Duration::from_millis(1),
    );
    let last = movies_from(&app, "192.0.2.1:4000").await;
    assert_eq!(last.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(last.header("retry-after"), "1");
    clock.advance(Duration::from_millis(1));
    spend(&app, "192.0.2.1:4000", LIMIT).await;
    assert_eq!(
        movies_from(&app, "192.0.2.1:4000").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn two_clients_have_separate_budgets() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock, ClientIp::peer());
    spend(&app, "192.0.2.1:4000", LIMIT).await;
    assert_eq!(
        movies_from(&app, "192.0.2.1:4001").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another address still has all of its 20, and the first stays refused.
    spend(&app, "198.51.100.7:4000", LIMIT).await;
    assert_eq!(
        movies_from(&app, "198.51.100.7:4000").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        movies_from(&app, "192.0.2.1:4000").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn the_health_check_is_neither_limited_nor_counted() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock, ClientIp::peer());
    for _ in 0..2 * LIMIT {
        let answer = send(&app, get("/healthz", "192.0.2.1:4000", &[])).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit"), "");
    }
    spend(&app, "192.0.2.1:4000", LIMIT).await;
    assert_eq!(
        movies_from(&app, "192.0.2.1:4000").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let health = send(&app, get("/healthz", "192.0.2.1:4000", &[])).await;
    assert_eq!(
        (health.status, health.body.as_slice()),
        (StatusCode::OK, b"ok".as_slice())
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget() {
    let clock = ManualClock::new(T0_US);
    let client_ip = ClientIp::peer().trust_proxies(["10.0.0.0/8".parse().expect("cidr")]);
    let app = app_on(&clock, client_ip);
    let via_proxy = |client: &'static str| get("/v4/movies", "10.0.0.5:80", &[("x-forwarded-for", client)]);
    for _ in 0..LIMIT {
        assert_eq!(send(&app, via_proxy("203.0.113.1")).await.status, StatusCode::OK);
    }
    assert_eq!(
        send(&app, via_proxy("203.0.113.1")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(send(&app, via_proxy("203.0.113.2")).await.status, StatusCode::OK);

    // A peer outside the trusted block is the client itself, whatever header it sends.
    let spoofed = |claim: &'static str| get("/v4/movies", "192.0.2.9:80", &[("x-forwarded-for", claim)]);
    for i in 0..LIMIT {
        let claim = if i % 2 == 0 {
            "203.0.113.50"
        } else {
            "203.0.113.51"
        };
        assert_eq!(send(&app, spoofed(claim)).await.status, StatusCode::OK);
    }
    assert_eq!(
        send(&app, spoofed("203.0.113.52")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}
