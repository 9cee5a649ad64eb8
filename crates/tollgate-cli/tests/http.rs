//! The real binary over a real socket: the HTTP/JSON API on the memory store and on Redis,
//! errors, admin auth, attempts, shadow mode, reload and shutdown, and the `Host` rule.

mod binary;

use std::time::Duration;

use binary::{Server, check_config};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// GET `url` and parse the JSON answer.
async fn get_json(url: &str) -> Value {
    client()
        .get(url)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json body")
}

/// DELETE a limit with an optional bearer token; the status.
async fn reset_status(server: &Server, token: Option<&str>) -> StatusCode {
    let mut request = client().delete(server.url("/v1/limits/demo/k"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("reset").status()
}

async fn check(server: &Server, body: Value) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let response = client()
        .post(server.url("/v1/check"))
        .json(&body)
        .send()
        .await
        .expect("send");
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.json().await.expect("json body"))
}

#[tokio::test]
async fn check_admits_up_to_the_limit_then_answers_429_with_headers() {
    let server = Server::start(&[]);
    for remaining in (0..5).rev() {
        let (status, headers, body) = check(&server, json!({"policy": "demo", "key": "alice"})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["remaining"], remaining);
        assert_eq!(headers["ratelimit-policy"], r#""demo";q=5;w=60"#);
        assert_eq!(
            headers["ratelimit"],
            format!(r#""demo";r={remaining};t=60"#).as_str()
        );
    }
    let (status, headers, body) = check(&server, json!({"policy": "demo", "key": "alice"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["allowed"], false);
    let retry_ms = body["retry_after_ms"].as_u64().expect("retry_after_ms");
    assert!(retry_ms > 59_000 && retry_ms <= 60_000, "{retry_ms}");
    assert_eq!(headers["retry-after"], "60");
    // Another key has its own budget.
    let (status, _, _) = check(&server, json!({"policy": "demo", "key": "bob", "cost": 5})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn bad_requests_get_a_4xx_problem_naming_it() {
    let server = Server::start(&["--max-key-len", "16"]);
    let post = |body: String| {
        client()
            .post(server.url("/v1/check"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: Vec<(String, StatusCode, &str)> = vec![
        (
            "{\"policy\": \"demo\"".into(),
            StatusCode::BAD_REQUEST,
            "invalid JSON body",
        ),
        (
            r#"{"policy": "demo"}"#.into(),
            StatusCode::BAD_REQUEST,
            "missing field `key`",
        ),
        (
            r#"{"policy": "demo", "key": "k", "extra": 1}"#.into(),
            StatusCode::BAD_REQUEST,
            "unknown field `extra`",
        ),
        (
            r#"{"policy": "nope", "key": "k"}"#.into(),
            StatusCode::NOT_FOUND,
            "unknown policy `nope`",
        ),
        (
            r#"{"policy": "demo", "key": "k", "cost": 0}"#.into(),
            StatusCode::BAD_REQUEST,
            "cost must be at least 1",
        ),
        (
            r#"{"policy": "demo", "key": "k", "cost": 6}"#.into(),
            StatusCode::BAD_REQUEST,
            "cost 6 is above 5",
        ),
        (
            r#"{"policy": "demo", "key": "k", "cost": -1}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid JSON body",
        ),
        (
            r#"{"policy": "demo", "key": ""}"#.into(),
            StatusCode::BAD_REQUEST,
            "key must not be empty",
        ),
        (
            format!(r#"{{"policy": "demo", "key": "{}"}}"#, "k".repeat(17)),
            StatusCode::BAD_REQUEST,
            "key is 17 bytes, above the maximum of 16",
        ),
        (
            format!(r#"{{"policy": "demo", "key": "{}"}}"#, "k".repeat(70_000)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "larger than 65536 bytes",
        ),
    ];
    for (body, status, message) in cases {
        let response = post(body.clone()).await.expect("send");
        assert_eq!(response.status(), status, "{body:.80}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{body:.80}"
        );
        let problem: Value = response.json().await.expect("json problem");
        assert_eq!(problem["status"], status.as_u16(), "{body:.80}");
        assert_eq!(problem["type"], "about:blank", "{body:.80}");
        let text = problem["detail"].as_str().expect("detail member");
        assert!(text.contains(message), "{body:.80}: {text}");
    }
}

#[tokio::test]
async fn peek_changes_nothing_and_reset_needs_the_admin_token() {
    let server = Server::start(&["--admin-token", "s3cret"]);
    for _ in 0..5 {
        check(&server, json!({"policy": "demo", "key": "k"})).await;
    }
    let peek = client()
        .get(server.url("/v1/limits/demo/k"))
        .send()
        .await
        .expect("peek");
    assert_eq!(peek.status(), StatusCode::OK);
    let body: Value = peek.json().await.expect("json");
    assert_eq!(body["allowed"], false);
    assert_eq!(reset_status(&server, None).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        reset_status(&server, Some("wrong")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        reset_status(&server, Some("s3cret")).await,
        StatusCode::NO_CONTENT
    );
    let (status, _, body) = check(&server, json!({"policy": "demo", "key": "k"})).await;
    assert_eq!((status, body["remaining"].clone()), (StatusCode::OK, json!(4)));
}

#[tokio::test]
async fn attempts_count_check_and_clear() {
    let server = Server::start(&[]);
    let url = server.url("/v1/attempts/login/alice");
    for expected in 1..=3 {
        let response = client()
            .post(&url)
            .json(&json!({"ttl_seconds": 3600}))
            .send()
            .await
            .expect("post");
        let body: Value = response.json().await.expect("json");
        assert_eq!(body["attempts"], expected);
    }
    let body: Value = get_json(&url).await;
    assert_eq!(body["attempts"], 3);
    assert_eq!(body["ttl_seconds"], 3600);
    let body: Value = get_json(&format!("{url}/check?max=3")).await;
    assert_eq!(
        (body["allowed"].clone(), body["remaining"].clone()),
        (json!(false), json!(0))
    );
    // Another purpose is another counter.
    let other: Value = get_json(&server.url("/v1/attempts/reset-password/alice")).await;
    assert_eq!(
        (other["attempts"].clone(), other["ttl_seconds"].clone()),
        (json!(0), Value::Null)
    );
    let missing_max = client().get(format!("{url}/check")).send().await.expect("check");
    assert_eq!(missing_max.status(), StatusCode::BAD_REQUEST);
    let cleared = client().delete(&url).send().await.expect("delete");
    assert_eq!(cleared.status(), StatusCode::NO_CONTENT);
    let body: Value = get_json(&url).await;
    assert_eq!(body["attempts"], 0);
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let server = Server::start(&[]);
    check(&server, json!({"policy": "demo", "key": "k"})).await;
    for (path, status) in [("/healthz", StatusCode::OK), ("/readyz", StatusCode::OK)] {
        assert_eq!(
            client().get(server.url(path)).send().await.expect(path).status(),
            status
        );
    }
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"tollgate_decisions_total{policy="demo",outcome="allowed"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_store_latency_seconds_bucket"),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_http11_request_needs_exactly_one_host_and_h2c_needs_none() {
    let server = Server::start(&[]);
    binary::assert_exactly_one_host(binary::addr_of(&server.http), "/healthz", 200).await;
}

#[tokio::test]
async fn a_reload_that_changes_a_policy_migrates_its_keys_as_declared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.yaml");
    let write = |text: &str| std::fs::write(&path, text).expect("write config");
    write("policies:\n  api:\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n");
    let mut server = Server::start(&["--config", path.to_str().expect("utf-8 path")]);
    let remaining = |body: serde_json::Value| body["remaining"].as_u64();
    for _ in 0..2 {
        let (status, _, _) = check(&server, json!({"policy": "api", "key": "k"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    // Another algorithm, declared to scale: 2 of 5 spent is 4 of 10.
    write(
        "policies:\n  api:\n    algorithm: token_bucket\n    capacity: 10\n    refill: 10/h\n    on_change: scale\n",
    );
    server.signal("HUP");
    let line = server.wait_for("policy changed");
    assert!(line.contains("on_change scale"), "{line}");
    server.wait_for("reloaded");
    let (_, _, body) = check(&server, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(remaining(body), Some(5), "4 carried over, 1 spent now");
    // Reset: a warning, and every key starts afresh.
    write(
        "policies:\n  api:\n    algorithm: token_bucket\n    capacity: 20\n    refill: 10/h\n    on_change: reset\n",
    );
    server.signal("HUP");
    let line = server.wait_for("policy changed");
    assert!(
        line.contains("WARN") && line.contains("on_change reset"),
        "{line}"
    );
    server.wait_for("reloaded");
    let (_, _, body) = check(&server, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(remaining(body), Some(19));
}

/// Two servers share a store and reload at different moments: the first to reload migrates a
/// key once, the one still on the old config decides it under the new numbers without migrating
/// it back, and once both have reloaded they agree on every key.
async fn two_servers_reloading_at_different_moments_agree(store: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = "policies:\n  api:\n    algorithm: fixed_window\n    limit: 5\n    window: 1h\n";
    let after = "policies:\n  api:\n    algorithm: token_bucket\n    capacity: 10\n    refill: 10/h\n    on_change: scale\n";
    let (a_path, b_path) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
    for path in [&a_path, &b_path] {
        std::fs::write(path, before).expect("write config");
    }
    let timeout = tollgate_testkit::store_timeout_arg();
    let start = |path: &std::path::Path| {
        Server::start(&[
            "--config",
            path.to_str().expect("utf-8 path"),
            "--store",
            store,
            "--store-timeout",
            &timeout,
        ])
    };
    let (mut a, mut b) = (start(&a_path), start(&b_path));
    let remaining = |body: serde_json::Value| body["remaining"].as_u64();
    for _ in 0..2 {
        let (status, _, _) = check(&a, json!({"policy": "api", "key": "k"})).await;
        assert_eq!(status, StatusCode::OK);
    }
    std::fs::write(&b_path, after).expect("write config");
    b.signal("HUP");
    b.wait_for("reloaded");
    // B migrates: 2 of 5 is 4 of 10; its check spends one more.
    let (_, _, body) = check(&b, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(remaining(body), Some(5));
    // A, still on the window, decides under the bucket and does not scale it back.
    let (status, _, body) = check(&a, json!({"policy": "api", "key": "k"})).await;
    assert_eq!((status, remaining(body)), (StatusCode::OK, Some(4)));
    std::fs::write(&a_path, after).expect("write config");
    a.signal("HUP");
    a.wait_for("reloaded");
    // Same numbers on both now: no second migration, and one answer.
    let (_, _, body) = check(&a, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(remaining(body), Some(3));
    let (_, _, body) = check(&b, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(remaining(body), Some(2));
}

#[tokio::test]
async fn two_servers_reloading_at_different_moments_agree_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    two_servers_reloading_at_different_moments_agree(&redis.url()).await;
}

#[tokio::test]
async fn two_servers_reloading_at_different_moments_agree_on_a_cluster() {
    let cluster = tollgate_testkit::RedisCluster::start();
    two_servers_reloading_at_different_moments_agree(&cluster.store_url()).await;
}

#[tokio::test]
async fn shadow_mode_counts_but_never_denies_and_reload_keeps_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.yaml");
    let write = |text: &str| std::fs::write(&path, text).expect("write config");
    write(
        "policies:\n  watch:\n    algorithm: fixed_window\n    limit: 2\n    window: 1h\n    shadow: true\n",
    );
    let mut server = Server::start(&["--config", path.to_str().expect("utf-8 path")]);
    for _ in 0..4 {
        let (status, _, body) = check(&server, json!({"policy": "watch", "key": "k"})).await;
        assert_eq!((status, body["allowed"].clone()), (StatusCode::OK, json!(true)));
    }
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"tollgate_decisions_total{policy="watch",outcome="shadow_denied"} 2"#),
        "{metrics}"
    );

    // Enforce it: the counter survives the reload, so the next check is denied.
    write("policies:\n  watch:\n    algorithm: fixed_window\n    limit: 2\n    window: 1h\n");
    server.signal("HUP");
    server.wait_for("reloaded");
    let (status, _, _) = check(&server, json!({"policy": "watch", "key": "k"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    // A broken config is rejected and the old one keeps serving.
    write("policies:\n  watch:\n    algorithm: fixed_window\n    limit: 0\n    window: 1h\n");
    server.signal("HUP");
    let line = server.wait_for("reload rejected");
    assert!(line.contains("tollgate.yaml: policies.watch.limit"), "{line}");
    let (status, _, _) = check(&server, json!({"policy": "watch", "key": "other"})).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = client()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(r#"tollgate_config_reloads_total{outcome="failed"} 1"#),
        "{metrics}"
    );

    // SIGTERM: a clean exit.
    server.signal("TERM");
    assert!(server.wait_exit().success());
}

#[tokio::test]
async fn the_redis_store_serves_and_readiness_follows_redis() {
    let mut redis = tollgate_testkit::RedisServer::start();
    let timeout = tollgate_testkit::store_timeout_arg();
    let server = Server::start(&["--store", &redis.url(), "--store-timeout", &timeout]);
    server_checks_five_then_denies(&server).await;
    assert_eq!(
        client()
            .get(server.url("/readyz"))
            .send()
            .await
            .expect("readyz")
            .status(),
        StatusCode::OK
    );
    redis.kill();
    assert_eq!(
        client()
            .get(server.url("/readyz?strict=true"))
            .send()
            .await
            .expect("readyz")
            .status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The demo policies fail over to a local limiter: decisions go on, marked degraded.
    let (status, _, body) = check(&server, json!({"policy": "demo", "key": "new"})).await;
    assert_eq!((status, body["degraded"].clone()), (StatusCode::OK, json!(true)));
}

async fn server_checks_five_then_denies(server: &Server) {
    for _ in 0..5 {
        let (status, _, body) = check(server, json!({"policy": "demo", "key": "redis-key"})).await;
        assert_eq!((status, body["degraded"].clone()), (StatusCode::OK, json!(false)));
    }
    let (status, _, _) = check(server, json!({"policy": "demo", "key": "redis-key"})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[test]
fn check_config_names_the_file_and_field_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "policies:\n  p:\n    algorithm: sliding_log\n    limit: 3\n    window: 1m\n",
    )
    .expect("write");
    let (ok, text) = check_config(&good);
    assert!(ok, "{text}");
    assert!(text.contains("ok (1 policies, 0 envoy domains)"), "{text}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "policies:\n  p:\n    algorithm: sliding_log\n    limit: 3\n    window: fortnight\n",
    )
    .expect("write");
    let (ok, text) = check_config(&bad);
    assert!(!ok);
    assert!(text.contains("bad.yaml: policies.p.window:"), "{text}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_broken_link_in_the_config_directory_is_named_by_check_config_start_and_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("api.yaml"),
        "policies:\n  api:\n    algorithm: sliding_log\n    limit: 3\n    window: 1m\n",
    )
    .expect("write");
    let link = dir.path().join("edge.yaml");
    std::os::unix::fs::symlink("missing/edge.yaml", &link).expect("link");
    let named = format!("{}: broken link to \"missing/edge.yaml\"", link.display());
    let (ok, text) = check_config(dir.path());
    assert!(!ok, "{text}");
    assert!(text.contains(&named), "{text}");
    let config = dir.path().to_str().expect("utf-8 path");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
            config,
        ])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&named), "{stderr}");
    // Started without it, a reload that meets it is refused naming it, and the old config serves.
    std::fs::remove_file(&link).expect("unlink");
    let mut server = Server::start(&["--config", config]);
    std::os::unix::fs::symlink("a.yaml", dir.path().join("a.yaml")).expect("a link loop");
    server.signal("HUP");
    let line = server.wait_for("reload rejected");
    assert!(
        line.contains(&dir.path().join("a.yaml").display().to_string()),
        "{line}"
    );
    assert!(line.contains("broken link"), "{line}");
    let (status, _, _) = check(&server, json!({"policy": "api", "key": "k"})).await;
    assert_eq!(status, StatusCode::OK, "the previous config still serves");
}

#[tokio::test]
async fn editing_the_config_file_reloads_it_without_a_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("limits.yaml");
    std::fs::write(
        &path,
        "policies:\n  first:\n    algorithm: sliding_log\n    limit: 1\n    window: 1m\n",
    )
    .expect("write config");
    let mut server = Server::start(&["--config", path.to_str().expect("utf-8 path")]);
    let (status, _, _) = check(&server, json!({"policy": "later", "key": "k"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    std::fs::write(
        &path,
        "policies:\n  first:\n    algorithm: sliding_log\n    limit: 1\n    window: 1m\n  later:\n    algorithm: sliding_log\n    limit: 1\n    window: 1m\n",
    )
    .expect("rewrite config");
    server.wait_for("reloaded");
    let (status, _, _) = check(&server, json!({"policy": "later", "key": "k"})).await;
    assert_eq!(status, StatusCode::OK);
    std::fs::write(&path, "policies: [").expect("break config");
    let line = server.wait_for("reload rejected");
    assert!(line.contains("limits.yaml"), "{line}");
    let (status, _, _) = check(&server, json!({"policy": "later", "key": "k"})).await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the previous config still serves"
    );
}

/// SIGTERM while a request is half sent: the server waits for the rest, answers it, then exits.
#[test]
fn a_request_in_flight_at_shutdown_is_answered_before_exit() {
    use std::io::{Read, Write};

    let mut server = Server::start(&[]);
    let address = server.http.trim_start_matches("http://").to_owned();
    let body = br#"{"policy": "demo", "key": "in-flight", "cost": 1}"#;
    let (first, rest) = body.split_at(10);
    let mut stream = std::net::TcpStream::connect(&address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    write!(
        stream,
        "POST /v1/check HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("send head");
    stream.write_all(first).expect("send part of the body");
    stream.flush().expect("flush");
    // Give the server time to read the head, so the request is in progress when the signal lands.
    std::thread::sleep(Duration::from_millis(300));

    server.signal("TERM");
    server.wait_for("shutting down");
    std::thread::sleep(Duration::from_millis(300));
    stream.write_all(rest).expect("send the rest after the signal");

    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the answer");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains(r#""allowed":true"#), "{response}");
    assert!(response.contains(r#""remaining":4"#), "{response}");
    assert!(server.wait_exit().success());
}

/// A store that cannot be reached is answered by the failure mode, and an operator reading the
/// logs sees why, with the class of failure; `RUST_LOG` cannot be needed for that.
#[tokio::test]
async fn a_failing_store_is_logged_at_warn_with_its_class() {
    // Nothing listens on port 1: every store call is refused.
    let timeout = tollgate_testkit::store_timeout_arg();
    let mut server = Server::start(&["--store", "redis://127.0.0.1:1", "--store-timeout", &timeout]);
    let (status, _, body) = check(&server, json!({"policy": "demo", "key": "me"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["degraded"], json!(true), "{body}");
    let line = server.wait_for("rate limit store failed");
    assert!(
        line.contains("WARN") && line.contains("class=\"connection\""),
        "{line}"
    );
}
