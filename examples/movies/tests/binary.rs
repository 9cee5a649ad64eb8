//! The built example binary: started on a free port, asked over TCP, stopped with SIGTERM; with
//! the memory store, with Redis named by `TOLLGATE_STORE`, and with a bad `--store`.

mod common;

use std::process::Command;

use axum::http::StatusCode;
use common::{Running, client_from, fetch};
use tollgate_example_movies::LIMIT;
use tollgate_testkit::RedisServer;

/// Spends the limit of 127.0.0.1 at `running`, then expects a 429.
async fn spend_and_be_refused(running: &Running) {
    let client = client_from("127.0.0.1");
    let url = format!("{}/v4/movies", running.url());
    for _ in 0..LIMIT {
        assert_eq!(fetch(&client, &url).await.status, StatusCode::OK);
    }
    let denied = fetch(&client, &url).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), "60");
    let health = fetch(&client, &format!("{}/healthz", running.url())).await;
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_the_memory_store_limits_and_stops_on_sigterm() {
    let running = Running::start(&["--listen", "127.0.0.1:0"], &[]);
    assert_ne!(running.addr.port(), 0);
    spend_and_be_refused(&running).await;
    let status = running.terminate();
    assert!(status.success(), "exit after SIGTERM: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_redis_from_the_environment_keeps_the_limit_across_restarts() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TOLLGATE_STORE", url.as_str())];
    let first = Running::start(&["--listen", "127.0.0.1:0"], &env);
    spend_and_be_refused(&first).await;
    assert!(first.terminate().success());

    // A new process finds the client still blocked: the state lives in Redis.
    let second = Running::start(&["--listen", "127.0.0.1:0"], &env);
    let answer = fetch(&client_from("127.0.0.1"), &format!("{}/v4/movies", second.url())).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(second.terminate().success());
}

#[test]
fn binary_refuses_a_store_it_cannot_use() {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate-example-movies"))
        .args(["--listen", "127.0.0.1:0", "--store", "http://127.0.0.1:1"])
        .env_remove("TOLLGATE_STORE")
        .output()
        .expect("run the example binary");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bad redis address `http://127.0.0.1:1`"),
        "stderr: {stderr}"
    );
    assert!(output.stdout.is_empty(), "it must not claim to listen");
}
