//! The login app driven with `oneshot` on a manual clock: the lock after five failures, the
//! counting-down `Retry-After`, the hour's end, reset on success, unknown users, bad bodies.

mod common;

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{Answer, T0_US, credentials, login, post, send};
use tollgate::{ManualClock, MemoryStore};
use tollgate_example_login::{LOCKOUT, MAX_FAILURES, MAX_USERNAME_LEN, Users, app};

fn app_on(clock: &ManualClock) -> Router {
    app(MemoryStore::builder().clock(clock.clone()).build(), Users::demo())
}

/// Fails `n` logins of `username`, asserting each is a 401 counting down.
async fn fail(app: &Router, username: &str, n: u64) {
    for i in 0..n {
        let answer = login(app, username, "not the password").await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "failure {} of {username}",
            i + 1
        );
        assert_eq!(answer.header("content-type"), "application/problem+json");
        assert_eq!(answer.json()["attempts_remaining"], MAX_FAILURES - i - 1);
    }
}

fn assert_locked(answer: &Answer, retry_after_s: u64, retry_after_ms: u64) {
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.header("content-type"), "application/problem+json");
    assert_eq!(answer.header("retry-after"), retry_after_s.to_string());
    let body = answer.json();
    assert_eq!(body["status"], 429);
    assert_eq!(body["retry_after_ms"], retry_after_ms);
    assert!(body.get("session_token").is_none());
}

#[tokio::test]
async fn five_failures_lock_the_account_even_against_the_right_password() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    fail(&app, "alice", MAX_FAILURES).await;
    let answer = login(&app, "alice", "wonderland").await;
    assert_locked(&answer, 3_600, 3_600_000);
    // Another account is untouched.
    assert_eq!(login(&app, "bob", "builder").await.status, StatusCode::OK);
}

#[tokio::test]
async fn retry_after_counts_down_from_the_first_failure() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    fail(&app, "alice", 1).await;
    // Later failures do not extend the hour that the first one started.
    clock.advance(Duration::from_secs(600));
    fail_more(&app, "alice").await;
    assert_locked(&login(&app, "alice", "wonderland").await, 3_000, 3_000_000);
    clock.advance(Duration::from_millis(1_500));
    assert_locked(&login(&app, "alice", "wonderland").await, 2_999, 2_998_500);
    clock.advance(Duration::from_millis(2_998_500 - 1));
    assert_locked(&login(&app, "alice", "wonderland").await, 1, 1);
}

/// Failures 2 to 5 of `username`, after the first.
async fn fail_more(app: &Router, username: &str) {
    for remaining in (0..MAX_FAILURES - 1).rev() {
        let answer = login(app, username, "still wrong").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        assert_eq!(answer.json()["attempts_remaining"], remaining);
    }
}

#[tokio::test]
async fn after_the_hour_the_right_password_works() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    fail(&app, "alice", MAX_FAILURES).await;
    clock.advance(LOCKOUT - Duration::from_millis(1));
    assert_locked(&login(&app, "alice", "wonderland").await, 1, 1);
    clock.advance(Duration::from_millis(1));
    let answer = login(&app, "alice", "wonderland").await;
    assert_eq!(answer.status, StatusCode::OK);
    let body = answer.json();
    assert_eq!(body["username"], "alice");
    assert!(
        body["session_token"]
            .as_str()
            .expect("token")
            .starts_with("fake-")
    );
}

#[tokio::test]
async fn a_success_resets_the_count() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    fail(&app, "alice", MAX_FAILURES - 1).await;
    assert_eq!(login(&app, "alice", "wonderland").await.status, StatusCode::OK);
    // All five failures are available again, then the lock.
    fail(&app, "alice", MAX_FAILURES).await;
    assert_locked(&login(&app, "alice", "wonderland").await, 3_600, 3_600_000);
}

#[tokio::test]
async fn an_unknown_user_is_answered_and_counted_like_a_wrong_password() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    for _ in 0..MAX_FAILURES {
        let known = login(&app, "alice", "guess").await;
        let unknown = login(&app, "mallory", "guess").await;
        assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
        assert_eq!((unknown.status, &unknown.headers), (known.status, &known.headers));
        assert_eq!(unknown.body, known.body);
    }
    let known = login(&app, "alice", "guess").await;
    let unknown = login(&app, "mallory", "guess").await;
    assert_locked(&unknown, 3_600, 3_600_000);
    assert_eq!((unknown.status, unknown.body), (known.status, known.body));
}

#[tokio::test]
async fn usernames_share_one_counter_whatever_their_case() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    for name in ["alice", "Alice", "ALICE", "aLiCe", "alicE"] {
        assert_eq!(login(&app, name, "nope").await.status, StatusCode::UNAUTHORIZED);
    }
    assert_locked(&login(&app, "alice", "wonderland").await, 3_600, 3_600_000);
}

#[tokio::test]
async fn malformed_bodies_are_400_problems_and_are_not_counted() {
    let clock = ManualClock::new(T0_US);
    let app = app_on(&clock);
    let too_long = "a".repeat(MAX_USERNAME_LEN + 1);
    let cases = [
        ("{\"username\": \"alice\", \"password\": ", "EOF"),
        ("not json", "expected"),
        ("{\"username\": \"alice\"}", "missing field `password`"),
        ("{\"password\": \"wonderland\"}", "missing field `username`"),
        ("{\"username\": 7, \"password\": \"wonderland\"}", "invalid type"),
        (
            "{\"username\": null, \"password\": \"wonderland\"}",
            "invalid type: null",
        ),
    ];
    for (body, expected) in cases {
        let answer = send(&app, post(body, Some("application/json"))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer.header("content-type"), "application/problem+json");
        let detail = answer.json()["detail"].as_str().expect("detail").to_owned();
        assert!(detail.contains(expected), "{body}: {detail}");
    }
    for username in ["", too_long.as_str()] {
        let answer = send(&app, post(&credentials(username, "x"), Some("application/json"))).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            answer.json()["detail"],
            format!("username must be 1 to {MAX_USERNAME_LEN} bytes")
        );
    }
    let untyped = send(&app, post(&credentials("alice", "wonderland"), None)).await;
    assert_eq!(untyped.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(untyped.header("content-type"), "application/problem+json");

    // None of those was a login attempt: alice still has all of hers.
    fail(&app, "alice", MAX_FAILURES).await;
}
