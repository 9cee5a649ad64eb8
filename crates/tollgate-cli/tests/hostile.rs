//! The `tollgate` binary against hostile clients and unlucky operators: signals during load and
//! with a half-sent request connected, path tricks through the proxy, an upstream that never
//! answers, and config paths and admin tokens that must be refused at start.
//!
//! Every wait is bounded (the child helpers give up after 30 s); the assertions are about
//! outcomes, never about how fast something happened.

mod binary;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use binary::{Server, addr_of, get, raw};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tollgate_testkit::{AppServer, ChildProcess};

const HANG_GUARD: Duration = Duration::from_secs(30);

fn client() -> Client {
    Client::builder().timeout(HANG_GUARD).build().expect("client")
}

fn temp_config(text: &str) -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(file.path(), text).expect("write config");
    file
}

async fn check(server: &Server, policy: &str, key: &str) -> (StatusCode, Value) {
    let response = client()
        .post(server.url("/v1/check"))
        .json(&json!({"policy": policy, "key": key}))
        .send()
        .await
        .expect("check");
    let status = response.status();
    (status, response.json().await.expect("json body"))
}

#[test]
fn sigterm_with_a_half_sent_request_connected_completes() {
    let mut server = Server::start(&[
        "--drain-timeout",
        "500ms",
        "--header-read-timeout",
        "10m",
        "--idle-timeout",
        "10m",
    ]);
    let mut half = TcpStream::connect(addr_of(&server.http)).expect("connect");
    half.write_all(b"POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-le")
        .expect("send");
    let mut grpc = TcpStream::connect(addr_of(&server.grpc)).expect("connect");
    grpc.write_all(b"PRI * HTTP/2.0\r\n").expect("send");
    server.signal("TERM");
    // Bounded by the helper (30 s); without the drain timeout it would wait ten minutes.
    let status = server.wait_exit();
    assert!(status.success(), "{status}");
}

/// Load from four tasks while SIGHUP arrives again and again: every check is answered, none is
/// lost or counted twice, and the process keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_during_load_keeps_counts_with_a_config() {
    let config = temp_config("policies:\n  api: {algorithm: fixed_window, limit: 1000, window: 1h}\n");
    let mut server = Server::start(&["--config", config.path().to_str().expect("utf-8")]);
    let mut load = Vec::new();
    for _ in 0..4 {
        let url = server.url("/v1/check");
        load.push(tokio::spawn(async move {
            let client = client();
            for _ in 0..50 {
                let status = client
                    .post(&url)
                    .json(&json!({"policy": "api", "key": "k"}))
                    .send()
                    .await
                    .expect("check during reloads")
                    .status();
                assert_eq!(status, StatusCode::OK);
            }
        }));
    }
    for _ in 0..5 {
        server.signal("HUP");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for task in load {
        task.await.expect("load task");
    }
    server.wait_for("config reloaded");
    let (status, body) = check(&server, "api", "k").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["remaining"], 1000 - 201, "{body}");
}

#[tokio::test]
async fn sighup_without_a_config_is_logged_and_changes_nothing() {
    let mut server = Server::start(&[]);
    let (_, before) = check(&server, "demo", "me").await;
    server.signal("HUP");
    server.wait_for("no config to reload");
    let (status, after) = check(&server, "demo", "me").await;
    assert_eq!(status, StatusCode::OK, "{after}");
    assert_eq!(
        after["remaining"].as_u64().expect("remaining") + 1,
        before["remaining"].as_u64().expect("remaining"),
        "{before} {after}"
    );
}

/// An upstream that records every path it is asked for and echoes it.
async fn recording_upstream() -> (AppServer, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let app = Router::new().fallback(move |request: Request| {
        let record = Arc::clone(&record);
        async move {
            let path = request.uri().path().to_owned();
            record.lock().expect("lock").push(path.clone());
            axum::Json(json!({ "path": path }))
        }
    });
    (AppServer::start(app).await, seen)
}

const PROXY_CONFIG: &str = "\
policies:
  movies: {algorithm: fixed_window, limit: 3, window: 1h}
routes:
  - prefix: /v4/movies
    policies: [movies]
";

// The upstream runs in this runtime while the test blocks on raw sockets: keep workers free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_tricks_through_the_proxy_never_get_past_the_limit() {
    let (upstream, seen) = recording_upstream().await;
    let config = temp_config(PROXY_CONFIG);
    let proxy = Server::start_proxy(&[
        "--upstream",
        &upstream.url(""),
        "--config",
        config.path().to_str().expect("utf-8"),
    ]);
    let addr = addr_of(&proxy.http);
    for _ in 0..3 {
        assert_eq!(get(addr, "/v4/movies").0, 200);
    }
    // Every other spelling of the same path is counted against the same limit...
    for trick in [
        "/v4//movies",
        "/v4/./movies",
        "/v4/x/../movies",
        "/v4/%6Dovies",
        "/v4/%6dovies?page=2",
        "//v4/movies",
        "/v4/movies/",
        "/v4/movies/.",
        "/v4/%2E/movies",
        "/v4/x/%2E%2E/movies",
        "/%76%34/movies",
        // Routes match in any case unless `case_sensitive: true`.
        "/V4/MOVIES",
        "/v4/Movies",
        "/V4/%4Dovies/42",
        "/%76%34/MOVIES?page=2",
    ] {
        let (status, body, answer) = get(addr, trick);
        assert_eq!(status, 429, "{trick}: {answer}");
        assert_eq!(body["status"], 429, "{trick}: {answer}");
    }
    // ...the ones servers read differently are refused as problems...
    for refused in [
        "/v4/movies;x=1",
        "/v4%2Fmovies",
        "/v4/movies%3Bx=1",
        "/../v4/movies",
        "/v4/%zzmovies",
        "/v4%2fmovies",
        "/v4%5Cmovies",
        "/v4/movies%",
        // Servers that end a name at NUL, or trim whitespace, would read these as /v4/movies.
        "/v4/movies%00",
        "/v4/movies%00.json",
        "/v4/movies%09",
        "/v4/movies%0A",
        "/v4/movies%0d",
        "/v4/movies%1F",
        "/v4/movies%7F",
        "/v4/movies%C2%85",
        "/v4/movies%20",
        "/v4/movies%20/42",
        "/v4/%20movies",
        "/v4/movies%C2%A0",
        "/V4/MOVIES%20",
    ] {
        let (status, body, answer) = get(addr, refused);
        assert_eq!(status, 400, "{refused}: {answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert_eq!(body["status"], 400, "{refused}: {answer}");
    }
    // Raw whitespace and control characters in the request line never reach a route either:
    // the HTTP parser refuses the line.
    for line in [
        "/v4/movies  HTTP/1.1",
        "/v4/movies\t HTTP/1.1",
        "/v4/movies\0 HTTP/1.1",
    ] {
        let (status, _, answer) = raw(
            addr,
            &format!("GET {line}\r\nhost: x\r\nconnection: close\r\n\r\n"),
        );
        assert_eq!(status, 400, "{line:?}: {answer}");
    }
    // ...as are oversized heads, before anything reaches the upstream...
    let (status, body, _) = get(addr, &format!("/v4/movies?{}", "q".repeat(9000)));
    assert_eq!((status, body["status"].clone()), (414, json!(414)));
    let (status, body, _) = raw(
        addr,
        &format!(
            "GET /v4/movies HTTP/1.1\r\nhost: x\r\nx-big: {}\r\nconnection: close\r\n\r\n",
            "b".repeat(20_000)
        ),
    );
    assert_eq!((status, body["status"].clone()), (431, json!(431)));

    let seen = seen.lock().expect("lock").clone();
    let movies = seen.iter().filter(|path| path.as_str() == "/v4/movies").count();
    assert_eq!(
        movies, 3,
        "the upstream served /v4/movies more often than the limit: {seen:?}"
    );
    assert!(seen.iter().all(|path| path == "/v4/movies"), "{seen:?}");
}

// The upstream runs in this runtime while the test blocks on raw sockets: keep workers free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_is_a_504_counted_and_the_admin_listener_answers() {
    let app = Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        "never"
    });
    let upstream = AppServer::start(app).await;
    let mut proxy = {
        let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--upstream",
            &upstream.url(""),
            "--upstream-timeout",
            "300ms",
        ]));
        let listen = child.wait_for_addr("proxy listening on ");
        let admin = child.wait_for_addr("admin listening on ");
        (child, listen, admin)
    };
    let (status, body, answer) = get(proxy.1, "/anything");
    assert_eq!(status, 504, "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert_eq!(body["status"], 504);
    proxy.0.wait_for("upstream request failed");

    let admin = proxy.2;
    assert_eq!(get(admin, "/healthz").0, 200);
    assert_eq!(get(admin, "/readyz").0, 200);
    let (status, _, metrics) = get(admin, "/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("tollgate_upstream_errors_total{kind=\"response_timeout\"} 1"),
        "{metrics}"
    );
    // The route's layer let the request through (the upstream then timed out).
    assert!(
        metrics.contains("tollgate_proxy_requests_total{outcome=\"allowed\"} 1"),
        "{metrics}"
    );
    // The scrape's own connection is open while it is answered.
    assert!(
        metrics.contains("tollgate_open_connections{listener=\"admin\"}"),
        "{metrics}"
    );
    let (status, body, _) = get(admin, "/nowhere");
    assert_eq!((status, body["status"].clone()), (404, json!(404)));
}

// The upstream runs in this runtime while the test blocks on raw sockets: keep workers free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_reloads_on_sighup_and_keeps_counts() {
    let (upstream, _seen) = recording_upstream().await;
    let config = temp_config(PROXY_CONFIG);
    let mut proxy = Server::start_proxy(&[
        "--upstream",
        &upstream.url(""),
        "--config",
        config.path().to_str().expect("utf-8"),
    ]);
    let addr = addr_of(&proxy.http);
    assert_eq!(get(addr, "/v4/movies").0, 200);
    assert_eq!(get(addr, "/v5/shows").0, 200);
    std::fs::write(
        config.path(),
        format!("{PROXY_CONFIG}  - prefix: /v5/shows\n    policies: [movies]\n"),
    )
    .expect("rewrite config");
    proxy.signal("HUP");
    proxy.wait_for("proxy config reloaded");
    // One budget, kept across the reload: two more are admitted, then denied.
    assert_eq!(get(addr, "/v5/shows").0, 200);
    assert_eq!(get(addr, "/v4/movies").0, 200);
    assert_eq!(get(addr, "/v4/movies").0, 429);
    assert_eq!(get(addr, "/v5/shows").0, 429);

    // A broken config is rejected; the running routes stay.
    std::fs::write(config.path(), "routes: [").expect("break config");
    proxy.signal("HUP");
    proxy.wait_for("reload rejected");
    assert_eq!(get(addr, "/v5/shows").0, 429);
}

#[test]
fn sighup_does_not_end_a_proxy_without_a_config() {
    let mut proxy = Server::start_proxy(&["--upstream", "http://127.0.0.1:9"]);
    proxy.signal("HUP");
    proxy.wait_for("no config to reload");
    let (status, _, _) = get(addr_of(&proxy.http), "/");
    assert_eq!(status, 502);
}

/// `tollgate` with `args`, run to its end (bounded): (success, everything it printed).
fn run_to_end(args: &[&str], expect: &str) -> (bool, String) {
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args));
    let line = child.wait_for(expect);
    let status = child.wait_exit();
    (status.success(), line)
}

#[test]
fn an_empty_admin_token_is_a_startup_error() {
    let (ok, line) = run_to_end(
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--admin-token",
            "",
        ],
        "admin token",
    );
    assert!(!ok);
    assert!(line.contains("must not be empty"), "{line}");
}

#[test]
fn zero_or_contradictory_limits_are_startup_errors() {
    let (ok, line) = run_to_end(
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--max-connections",
            "0",
        ],
        "max connections",
    );
    assert!(!ok && line.contains("must be at least 1"), "{line}");
    let (ok, line) = run_to_end(
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--idle-timeout",
            "10s",
            "--upstream-timeout",
            "30s",
        ],
        "idle timeout",
    );
    assert!(
        !ok && line.contains("must be longer than the upstream timeout"),
        "{line}"
    );
}

#[test]
fn open_admin_endpoints_on_a_public_address_are_warned_about() {
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
        "serve",
        "--http",
        "0.0.0.0:0",
        "--grpc",
        "127.0.0.1:0",
    ]));
    let line = child.wait_for("without a token on a non-loopback address");
    assert!(line.contains("WARN"), "{line}");
}

#[test]
fn a_fifo_or_a_device_as_config_is_a_clear_error_not_a_hang() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("tollgate.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(made.success());
    let fifo = fifo.to_str().expect("utf-8");
    let (ok, line) = run_to_end(&["check-config", fifo], "not a regular file");
    assert!(!ok && line.contains("tollgate.yaml"), "{line}");
    let (ok, line) = run_to_end(
        &[
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
            "/dev/zero",
        ],
        "not a regular file",
    );
    assert!(!ok, "{line}");
}

#[test]
fn part_of_an_http2_preface_is_closed_at_the_first_byte_timeout_not_the_idle_one() {
    // The idle timeout (two minutes) is far beyond the bound below: only the first-byte timeout,
    // which now covers the whole preface, can close these.
    let server = Server::start(&["--first-byte-timeout", "1s"]);
    for addr in [addr_of(&server.grpc), addr_of(&server.http)] {
        let mut socket = TcpStream::connect(addr).expect("connect");
        socket
            .write_all(b"PRI * HTTP/2.0\r\n")
            .expect("part of the preface");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a read bound");
        let mut rest = Vec::new();
        let read = std::io::Read::read_to_end(&mut socket, &mut rest);
        assert!(read.is_ok(), "{addr}: still open after 30 s: {read:?}");
    }
}

#[test]
fn a_config_nested_200_000_deep_is_refused_at_once_by_check_config_test_and_serve() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = 200_000;
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    metadata: {}{}\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
    )
    .expect("write");
    let scenarios = dir.path().join("deep.test.yaml");
    std::fs::write(
        &scenarios,
        format!("scenarios: {}{}\n", "[".repeat(n), "]".repeat(n)),
    )
    .expect("write");
    let plain = dir.path().join("plain.yaml");
    std::fs::write(
        &plain,
        "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1m}\n",
    )
    .expect("write");
    let deep_path = deep.to_str().expect("utf-8");
    let scenarios_path = scenarios.to_str().expect("utf-8");
    let plain_path = plain.to_str().expect("utf-8");
    for args in [
        vec!["check-config", deep_path],
        vec!["test", plain_path, scenarios_path],
        vec![
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
            deep_path,
        ],
    ] {
        let mut child = ChildProcess::start(Command::new(binary::TOLLGATE).args(&args));
        let line = child.wait_for("nested deeper than 64 levels");
        assert!(line.contains("at line"), "{args:?}: {line}");
        assert!(!child.wait_exit().success(), "{args:?}");
    }
}

#[tokio::test]
async fn an_access_list_entry_of_8_kib_pages_and_is_deleted_like_any_other() {
    let server = Server::start(&["--admin-token", "admin-s3cret", "--max-key-len", "8192"]);
    let http = client();
    let access = server.url("/v1/admin/access");
    let long = "k".repeat(8 * 1024);
    for value in ["a-short-one", long.as_str(), "z-after-it"] {
        let added = http
            .post(&access)
            .bearer_auth("admin-s3cret")
            .json(&json!({"list": "deny", "kind": "key", "value": value}))
            .send()
            .await
            .expect("add");
        assert_eq!(
            added.status(),
            StatusCode::CREATED,
            "{}",
            added.text().await.unwrap_or_default()
        );
    }
    // A page at a time, one entry a page: every cursor fits in a URL, the long entry's too.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let mut request = http
            .get(&access)
            .bearer_auth("admin-s3cret")
            .query(&[("limit", "1")]);
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor.as_str())]);
        }
        let answer = request.send().await.expect("page");
        assert_eq!(answer.status(), StatusCode::OK);
        let page: Value = answer.json().await.expect("json");
        for entry in page["entries"].as_array().expect("entries") {
            seen.push(entry["value"].as_str().expect("value").len());
        }
        match page["next_cursor"].as_str() {
            Some(next) => {
                assert!(next.len() < 300, "a cursor of {} bytes", next.len());
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen, ["a-short-one".len(), 8 * 1024, "z-after-it".len()]);
    // Deleted by a JSON body (the query could not carry it), not by both at once.
    let entry = json!({"list": "deny", "kind": "key", "value": long});
    let both = http
        .delete(&access)
        .bearer_auth("admin-s3cret")
        .query(&[("list", "deny"), ("kind", "key"), ("value", "z-after-it")])
        .json(&entry)
        .send()
        .await
        .expect("delete");
    assert_eq!(both.status(), StatusCode::BAD_REQUEST);
    let deleted = http
        .delete(&access)
        .bearer_auth("admin-s3cret")
        .json(&entry)
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let gone = http
        .delete(&access)
        .bearer_auth("admin-s3cret")
        .json(&entry)
        .send()
        .await
        .expect("delete");
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn wrong_fields_are_named_and_acquire_refuses_a_body_it_does_not_read() {
    let config = temp_config(
        "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1m}\n  exports: {algorithm: concurrency, max_in_flight: 2, lease_timeout: 30s}\n",
    );
    let server = Server::start(&["--config", config.path().to_str().expect("utf-8")]);
    let http = client();
    let post = |path: &str, body: &'static str| {
        http.post(server.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: [(&str, &str, &str); 7] = [
        (
            "/v1/charge",
            r#"{"policy": "api", "key": "a", "cost": "x"}"#,
            "cost: invalid type",
        ),
        (
            "/v1/check",
            r#"{"rules": [{"policy": "api", "key": "a", "cost": -1}]}"#,
            "rules[0].cost: invalid value",
        ),
        (
            "/v1/check",
            r#"{"policy": "api", "key": "\ud800"}"#,
            "key: unexpected end of hex escape",
        ),
        (
            "/v1/attempts/login/bob/try",
            r#"{"max": 0, "ttl_seconds": 60}"#,
            "max is 0: from 1 to",
        ),
        (
            "/v1/attempts/login/bob/try",
            r#"{"max": 3, "ttl_seconds": 0}"#,
            "ttl_seconds is 0: from 1 to",
        ),
        (
            "/v1/attempts/login/bob",
            r#"{"ttl_seconds": 0}"#,
            "ttl_seconds is 0: from 1 to",
        ),
        (
            "/v1/concurrency/exports/alice/acquire",
            "garbage",
            "invalid JSON body",
        ),
    ];
    for (path, body, expected) in cases {
        let answer = post(path, body).await.expect("post");
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{path} {body}");
        let problem: Value = answer.json().await.expect("problem");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains(expected), "{path} {body}: {detail}");
    }
    let unknown = post("/v1/concurrency/exports/alice/acquire", r#"{"cost": 2}"#)
        .await
        .expect("post");
    assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
    for (key, body) in [("bob", ""), ("carol", "{}"), ("dave", " \n")] {
        let granted = post(&format!("/v1/concurrency/exports/{key}/acquire"), body)
            .await
            .expect("post");
        assert_eq!(granted.status(), StatusCode::OK, "{body:?}");
    }
}

#[tokio::test]
async fn on_redis_a_denial_cached_before_a_reload_that_raises_the_limit_is_not_answered() {
    let redis = tollgate_testkit::RedisServer::start();
    let config = temp_config("policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1h}\n");
    let path = config.path().to_str().expect("utf-8").to_owned();
    let store = redis.url();
    let deadline = tollgate_testkit::store_timeout_arg();
    let mut a = Server::start(&["--config", &path, "--store", &store, "--store-timeout", &deadline]);
    for _ in 0..5 {
        assert_eq!(check(&a, "api", "k").await.0, StatusCode::OK);
    }
    // Denied twice: the second answered from A's deny cache.
    assert_eq!(check(&a, "api", "k").await.0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(check(&a, "api", "k").await.0, StatusCode::TOO_MANY_REQUESTS);
    std::fs::write(
        config.path(),
        "policies:\n  api: {algorithm: fixed_window, limit: 20, window: 1h}\n",
    )
    .expect("raise the limit");
    a.signal("HUP");
    a.wait_for("config reloaded");
    let (status, body) = check(&a, "api", "k").await;
    assert_eq!(status, StatusCode::OK, "A after the reload: {body}");
    assert_eq!(body["remaining"], 14, "{body}");
}

/// Rewrites `config` with `text` and waits until the server serves it: the reload's line for
/// the changed policy (its text holds `change`, say `-> fixed_window limit: 5,`), then the
/// reload itself. A file event that reloads the same text again logs no change, so a second
/// reload of one write is never taken for the next one.
fn reload_to(server: &mut Server, config: &tempfile::NamedTempFile, text: &str, change: &str) {
    std::fs::write(config.path(), text).expect("rewrite config");
    server.wait_for(change);
    server.wait_for("config reloaded");
}

/// `tollgate serve` with `config`, on `store` (a Redis address, with the test deadline) or on
/// memory.
fn serve_with(config: &tempfile::NamedTempFile, store: Option<&str>) -> Server {
    let path = config.path().to_str().expect("utf-8").to_owned();
    let deadline = tollgate_testkit::store_timeout_arg();
    let mut args = vec!["--config", path.as_str()];
    if let Some(store) = store {
        args.extend(["--store", store, "--store-timeout", deadline.as_str()]);
    }
    Server::start(&args)
}

/// A peek (`GET /v1/limits/...`) of `key` under `policy`.
async fn peek(server: &Server, policy: &str, key: &str) -> Value {
    client()
        .get(server.url(&format!("/v1/limits/{policy}/{key}")))
        .send()
        .await
        .expect("peek")
        .json()
        .await
        .expect("json")
}

/// `GET /v1/explain` of `key` under `policy`: its one rule's state and decision.
async fn explain(server: &Server, policy: &str, key: &str) -> Value {
    let answer = client()
        .get(server.url(&format!("/v1/explain?policy={policy}&key={key}")))
        .send()
        .await
        .expect("explain");
    assert_eq!(answer.status(), StatusCode::OK);
    answer.json().await.expect("json")
}

/// Every Redis key of `key` under `policy` (its state, a log, an override) with its bytes and
/// its expiry: `PEXPIRETIME` is absolute, so equal however much time passes between two reads.
fn redis_bytes(redis: &tollgate_testkit::RedisServer, policy: &str, key: &str) -> Vec<String> {
    let state = format!("tollgate:{{{policy}:{key}}}");
    [state.clone(), format!("{state}:log"), format!("{state}:ovr")]
        .iter()
        .map(|name| {
            format!(
                "{name} {} {}",
                redis.cli(&["DUMP", name]),
                redis.cli(&["PEXPIRETIME", name])
            )
        })
        .collect()
}

/// (status, remaining) of a check: what the flip-flop transcripts compare.
async fn checked(server: &Server, key: &str) -> (u16, u64) {
    let (status, body) = check(server, "api", key).await;
    (status.as_u16(), body["remaining"].as_u64().unwrap_or(u64::MAX))
}

/// Four rounds of a limit lowered and raised again (10 an hour, 5, 10), with a peek, an explain
/// and a denied check of `k` between the reloads, and `quiet` only checked: the window admits
/// 10 in all, both keys answer alike (what reads a key between reloads changes nothing), and
/// every answer is the same on Redis as on memory. Returns the checks' answers.
async fn flip_flops_admit_one_window(redis: Option<&tollgate_testkit::RedisServer>) -> Vec<[(u16, u64); 2]> {
    let ten = "policies:\n  api: {algorithm: fixed_window, limit: 10, window: 1h, anchor: first_hit, on_change: keep}\n";
    let five = "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1h, anchor: first_hit, on_change: keep}\n";
    let config = temp_config(ten);
    let mut server = serve_with(&config, redis.map(|r| r.url()).as_deref());
    let mut transcript = vec![];
    for _ in 0..12 {
        transcript.push([checked(&server, "k").await, checked(&server, "quiet").await]);
    }
    for round in 0..4 {
        reload_to(&mut server, &config, five, "-> fixed_window limit: 5,");
        let before = redis.map(|r| redis_bytes(r, "api", "k"));
        let peeked = peek(&server, "api", "k").await;
        assert_eq!(peeked["allowed"], false, "round {round}: {peeked}");
        let explained = explain(&server, "api", "k").await;
        assert_eq!(
            explained["rules"][0]["decision"], "denied",
            "round {round}: {explained}"
        );
        assert_eq!(
            redis.map(|r| redis_bytes(r, "api", "k")),
            before,
            "round {round}: a peek and an explain wrote to Redis"
        );
        transcript.push([checked(&server, "k").await, checked(&server, "quiet").await]);
        reload_to(&mut server, &config, ten, "-> fixed_window limit: 10,");
        for _ in 0..3 {
            transcript.push([checked(&server, "k").await, checked(&server, "quiet").await]);
        }
    }
    for (i, [looked, quiet]) in transcript.iter().enumerate() {
        assert_eq!(
            looked, quiet,
            "check {i}: the key read between reloads answers otherwise"
        );
    }
    let admitted = transcript.iter().filter(|[k, _]| k.0 == 200).count();
    assert_eq!(admitted, 10, "one window's limit across every flip-flop");
    transcript
}

#[tokio::test]
async fn a_limit_lowered_and_raised_again_gives_no_key_more_than_its_window_on_memory_and_redis() {
    let on_memory = flip_flops_admit_one_window(None).await;
    let redis = tollgate_testkit::RedisServer::start();
    let on_redis = flip_flops_admit_one_window(Some(&redis)).await;
    assert_eq!(on_redis, on_memory, "the same answers on Redis as on memory");
}

/// A limit of 10 (8 spent), then 5 with `on_change: reset`, then 10 again with `keep`: a peek
/// and an explain under the second version answer what a check sees then (a fresh budget), and
/// store nothing, so the third version finds the 8 spent, as for a key nobody looked at. (When
/// a peek migrated the key, the reset it stored gave the key a whole new budget of 10.) On Redis
/// the key's bytes and expiry are the same after the peek and the explain.
async fn a_peek_between_two_reloads_changes_nothing(redis: Option<&tollgate_testkit::RedisServer>) {
    let version = |limit: u64, on_change: &str| {
        format!(
            "policies:\n  api: {{algorithm: fixed_window, limit: {limit}, window: 1h, anchor: first_hit, on_change: {on_change}}}\n"
        )
    };
    let config = temp_config(&version(10, "keep"));
    let mut server = serve_with(&config, redis.map(|r| r.url()).as_deref());
    for key in ["looked", "twin", "quiet"] {
        for _ in 0..8 {
            assert_eq!(check(&server, "api", key).await.0, StatusCode::OK);
        }
    }
    reload_to(
        &mut server,
        &config,
        &version(5, "reset"),
        "-> fixed_window limit: 5,",
    );
    let before = redis.map(|r| redis_bytes(r, "api", "looked"));
    let peeked = peek(&server, "api", "looked").await;
    let explained = explain(&server, "api", "looked").await;
    assert_eq!(
        redis.map(|r| redis_bytes(r, "api", "looked")),
        before,
        "a peek and an explain wrote to Redis"
    );
    let (status, twin) = check(&server, "api", "twin").await;
    assert_eq!(status, StatusCode::OK, "{twin}");
    assert_eq!(
        (&peeked["allowed"], &peeked["remaining"], &peeked["limit"]),
        (&twin["allowed"], &twin["remaining"], &twin["limit"]),
        "the peek answers what a check sees: {peeked} {twin}"
    );
    assert_eq!(twin["remaining"], 4, "{twin}");
    assert_eq!(explained["rules"][0]["state"]["remaining"], 5, "{explained}");
    assert_eq!(explained["rules"][0]["decision"], "allowed", "{explained}");
    reload_to(
        &mut server,
        &config,
        &version(10, "keep"),
        "-> fixed_window limit: 10,",
    );
    let (status, looked) = check(&server, "api", "looked").await;
    let (_, quiet) = check(&server, "api", "quiet").await;
    assert_eq!(status, StatusCode::OK, "{looked}");
    assert_eq!(
        looked["remaining"], 1,
        "8 spent under the first version, and this one: {looked}"
    );
    assert_eq!(looked["remaining"], quiet["remaining"], "{looked} {quiet}");
}

#[tokio::test]
async fn a_peek_between_two_reloads_changes_nothing_on_memory() {
    a_peek_between_two_reloads_changes_nothing(None).await;
}

#[tokio::test]
async fn a_peek_between_two_reloads_changes_nothing_on_redis() {
    let redis = tollgate_testkit::RedisServer::start();
    a_peek_between_two_reloads_changes_nothing(Some(&redis)).await;
}
