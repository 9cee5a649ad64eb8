//! The built example binary: started on a free port, asked over TCP, stopped with SIGTERM; with
//! the memory store and with Redis named by `--store`.

mod common;

use axum::http::StatusCode;
use common::{Running, client, login_at};
use tollgate_example_login::MAX_FAILURES;
use tollgate_testkit::RedisServer;

/// Locks alice at `running` and checks that bob still logs in.
async fn lock_alice(running: &Running) {
    let client = client();
    let base = running.url();
    for _ in 0..MAX_FAILURES {
        let answer = login_at(&client, &base, "alice", "wrong").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    }
    let locked = login_at(&client, &base, "alice", "wonderland").await;
    assert_eq!(locked.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!locked.header("retry-after").is_empty());
    assert_eq!(
        login_at(&client, &base, "bob", "builder").await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_the_memory_store_locks_and_stops_on_sigterm() {
    let running = Running::start(&["--listen", "127.0.0.1:0"], &[]);
    assert_ne!(running.addr.port(), 0);
    lock_alice(&running).await;
    let status = running.terminate();
    assert!(status.success(), "exit after SIGTERM: {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_on_redis_keeps_the_lock_across_restarts() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--listen", "127.0.0.1:0", "--store", url.as_str()];
    let first = Running::start(&args, &[]);
    lock_alice(&first).await;
    assert!(first.terminate().success());

    let second = Running::start(&args, &[]);
    let answer = login_at(&client(), &second.url(), "alice", "wonderland").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(second.terminate().success());
}
