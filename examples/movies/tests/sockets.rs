//! The movies app on a real socket, served as `main.rs` serves it, with the memory store and
//! with Redis (one app and two instances sharing the limit).

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::{T0_US, client_from, fetch};
use tollgate::{ManualClock, MemoryStore};
use tollgate_example_movies::{LIMIT, MOVIES, app};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{AppServer, RedisServer};
use tollgate_tower::ClientIp;

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
async fn memory_store_limits_each_client_address_over_tcp() {
    let server = AppServer::start(app(MemoryStore::new(), ClientIp::peer())).await;
    let addr = server.addr();
    let url = format!("http://{addr}/v4/movies");
    let first = client_from("127.0.0.1");
    for _ in 0..LIMIT {
        let answer = fetch(&first, &url).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.json().as_array().map(Vec::len), Some(MOVIES.len()));
    }
    let denied = fetch(&first, &url).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("content-type"), "application/problem+json");
    assert_eq!(denied.header("retry-after"), "60");

    // Another loopback address is another client with its own 20.
    let second = client_from("127.0.0.2");
    for _ in 0..LIMIT {
        assert_eq!(fetch(&second, &url).await.status, StatusCode::OK);
    }
    assert_eq!(fetch(&second, &url).await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        fetch(&first, &format!("http://{addr}/healthz")).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_limits_and_blocks_over_tcp() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let server = AppServer::start(app(redis_store(&redis, &clock).await, ClientIp::peer())).await;
    let addr = server.addr();
    let url = format!("http://{addr}/v4/movies");
    let client = client_from("127.0.0.1");
    for _ in 0..LIMIT {
        assert_eq!(fetch(&client, &url).await.status, StatusCode::OK);
    }
    clock.advance(Duration::from_secs(30));
    let denied = fetch(&client, &url).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), "60");
    assert_eq!(denied.json()["policy"], "movies");

    // The window has freed at 61 s, the block (until 90 s) has not.
    clock.advance(Duration::from_secs(31));
    let blocked = fetch(&client, &url).await;
    assert_eq!(blocked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(blocked.header("retry-after"), "29");
    clock.advance(Duration::from_secs(29));
    assert_eq!(fetch(&client, &url).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_each_clients_limit() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(T0_US);
    let one = AppServer::start(app(redis_store(&redis, &clock).await, ClientIp::peer())).await;
    let two = AppServer::start(app(redis_store(&redis, &clock).await, ClientIp::peer())).await;
    let (one, two) = (one.addr(), two.addr());
    let client = client_from("127.0.0.1");
    for i in 0..LIMIT {
        let instance = if i % 2 == 0 { one } else { two };
        assert_eq!(
            fetch(&client, &format!("http://{instance}/v4/movies"))
                .await
                .status,
            StatusCode::OK
        );
    }
    for instance in [one, two] {
        let answer = fetch(&client, &format!("http://{instance}/v4/movies")).await;
        assert_eq!(
            answer.status,
            StatusCode::TOO_MANY_REQUESTS,
            "instance {instance}"
        );
    }
}
