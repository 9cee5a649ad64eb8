//! `/readyz` when Redis is down, as docs/http-api.md and docs/deploy.md describe it: the
//! instance stays ready while every limit's failure mode answers without the store (a shared
//! store fails for every instance alike, so pulling them all out of the load balancer would only
//! turn answers into refused connections), and is not ready once a limit fails closed or with
//! `strict=true`. The body names the store's failure either way.

mod binary;

use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use binary::{Server, addr_of, get};
use serde_json::Value;
use tollgate_testkit::{RedisServer, store_timeout_arg};

/// `GET path` until `done` holds for the answer; panics after 30 s with the last answer.
fn readyz_until(addr: SocketAddr, path: &str, done: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body, _) = get(addr, path);
        if done(status, &body) {
            return (status, body);
        }
        assert!(Instant::now() < deadline, "{path}: still {status} {body}");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn redis_down_leaves_the_instance_ready_while_every_failure_mode_answers() {
    let mut redis = RedisServer::start();
    let timeout = store_timeout_arg();
    let server = Server::start(&["--store", &redis.url(), "--store-timeout", &timeout]);
    let addr = addr_of(&server.http);
    readyz_until(addr, "/readyz?strict=true", |status, _| status == 200);

    redis.kill();
    // The demo policies fail over to a local limiter: ready, and the body says why it is not the
    // store that decides.
    let (status, body) = readyz_until(addr, "/readyz", |_, body| body["store_ready"] == false);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(body["class"], "connection", "{body}");
    assert_eq!(body["fail_closed"], serde_json::json!([]), "{body}");
    let (status, body, _) = get(addr, "/readyz?strict=true");
    assert_eq!(
        (status, body["ready"].clone()),
        (503, Value::Bool(false)),
        "{body}"
    );
    let (status, body, _) = get(addr, "/readyz?strict=maybe");
    assert_eq!(status, 400, "{body}");
    // And the requests are answered, as readiness promised.
    let check = r#"{"policy": "demo", "key": "k1"}"#;
    let (status, body, _) = binary::raw(
        addr,
        &format!(
            "POST /v1/check HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{check}",
            check.len()
        ),
    );
    assert_eq!(
        (status, body["degraded"].clone()),
        (200, Value::Bool(true)),
        "{body}"
    );
}

#[test]
fn a_fail_closed_limit_makes_a_store_failure_unready_until_the_config_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    let closed = "policies:\n  login: {algorithm: gcra, rate: 5/1m, burst: 5, on_store_failure: fail_closed}\n  \
                  search: {algorithm: gcra, rate: 10/s, burst: 20}\n";
    std::fs::write(&config, closed).expect("write the config");
    // Nothing listens on port 1: the store fails from the start.
    let timeout = store_timeout_arg();
    let server = Server::start(&[
        "--config",
        config.to_str().expect("utf-8 path"),
        "--store",
        "redis://127.0.0.1:1",
        "--store-timeout",
        &timeout,
    ]);
    let addr = addr_of(&server.http);
    let (status, body) = readyz_until(addr, "/readyz", |_, body| body["store_ready"] == false);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["fail_closed"], serde_json::json!(["login"]), "{body}");
    assert_eq!(body["stopping"], false, "{body}");

    // Without the fail-closed limit, every limit answers without the store again.
    std::fs::write(
        &config,
        "policies:\n  search: {algorithm: gcra, rate: 10/s, burst: 20}\n",
    )
    .expect("rewrite the config");
    server.signal("HUP");
    let (_, body) = readyz_until(addr, "/readyz", |status, _| status == 200);
    assert_eq!(
        (body["ready"].clone(), body["store_ready"].clone()),
        (Value::Bool(true), Value::Bool(false)),
        "{body}"
    );
}
