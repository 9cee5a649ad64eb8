//! The login app on a real socket, served as `main.rs` serves it: the memory store, Redis (two
//! instances sharing the counts, the hour on a manual clock), and a stopped Redis (503).

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{T0_US, client, login_at};
use tollgate::{ManualClock, MemoryStore};
use tollgate_example_login::{LOCKOUT, MAX_FAILURES, Users, app};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{AppServer, RedisServer};

/// A Redis store on `redis` whose scripts read `clock`, with a deadline that a busy test
/// machine meets.
async fn redis_store(redis: &RedisServer, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .clock(clock.clone())
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect to redis")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_locks_an_account_over_tcp() {
    let server = AppServer::start(app(MemoryStore::new(), Users::demo())).await;
    let base = server.url("");
    let client = client();
    for remaining in (0..MAX_FAILURES).rev() {
        let answer = login_at(&client, &base, "alice", "wrong").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        assert_eq!(answer.json()["attempts_remaining"], remaining);
    }
    let locked = login_at(&client, &base, "alice", "wonderland").await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(locked.header("content-type"), "application/problem+json");
    // On the real clock the counter has lived a moment, so only bounds can be asserted.
    let seconds: u64 = locked.header("retry-after").parse().expect("whole seconds");
    assert!(
        (1..=LOCKOUT.as_secs()).contains(&seconds),
        "Retry-After {seconds}"
    );
    let ms = locked.json()["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(
        ms <= seconds * 1_000 && ms > (seconds - 1) * 1_000,
        "{ms} ms vs {seconds} s"
    );

    assert_eq!(
        login_at(&client, &base, "bob", "builder").await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_the_count_for_the_hour() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let one_server = AppServer::start(app(redis_store(&redis, &clock).await, Users::demo())).await;
    let two_server = AppServer::start(app(redis_store(&redis, &clock).await, Users::demo())).await;
    let (one, two) = (one_server.url(""), two_server.url(""));
    let client = client();
    // Failures alternate between the instances and count as one sequence.
    for (i, remaining) in (0..MAX_FAILURES).rev().enumerate() {
        let base = if i % 2 == 0 { &one } else { &two };
        let answer = login_at(&client, base, "Alice", "wrong").await;
        assert_eq!(answer.json()["attempts_remaining"], remaining);
    }
    for base in [&one, &two] {
        let locked = login_at(&client, base, "alice", "wonderland").await;
        assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(locked.header("retry-after"), "3600");
        assert_eq!(locked.json()["retry_after_ms"], 3_600_000);
    }
    clock.advance(Duration::from_secs(1_800));
    assert_eq!(
        login_at(&client, &one, "alice", "wonderland")
            .await
            .header("retry-after"),
        "1800"
    );
    clock.advance(Duration::from_secs(1_800));
    assert_eq!(
        login_at(&client, &two, "alice", "wonderland").await.status,
        StatusCode::OK
    );
    // The success cleared the counter in Redis for both instances.
    let answer = login_at(&client, &one, "alice", "wrong").await;
    assert_eq!(answer.json()["attempts_remaining"], MAX_FAILURES - 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_fails_closed_with_503() {
    let mut redis = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let store = RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .clock(clock.clone())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect to redis");
    let server = AppServer::start(app(store, Users::demo())).await;
    let base = server.url("");
    let client = client();
    assert_eq!(
        login_at(&client, &base, "alice", "wrong").await.status,
        StatusCode::UNAUTHORIZED
    );

    redis.kill();
    // Neither a right nor a wrong password gets through without the count.
    for password in ["wonderland", "wrong"] {
        let answer = login_at(&client, &base, "alice", password).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "password {password}"
        );
        assert_eq!(answer.header("content-type"), "application/problem+json");
        let body = answer.json();
        assert_eq!(body["status"], 503);
        assert!(
            body["detail"]
                .as_str()
                .expect("detail")
                .starts_with("login is unavailable")
        );
    }
}
