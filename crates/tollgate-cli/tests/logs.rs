//! The binary's logs as an operator reads them: `--log-format json` gives one JSON object per
//! event on stderr, and shadow denials and failure-mode decisions are logged (sampled), as is the
//! Redis circuit breaker opening, so a dry-run limit and a sick store show up in the logs without
//! a line per request; and a debug listener open beyond loopback is warned about at start.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_testkit::ChildProcess;

fn start(config: &str, extra: &[&str]) -> (ChildProcess, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tollgate.yaml");
    std::fs::write(&path, config).expect("write config");
    let mut child = ChildProcess::start(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .env("RUST_LOG", "info")
            .args([
                "--log-format",
                "json",
                "serve",
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
            ])
            .arg("--config")
            .arg(&path)
            .args(extra),
    );
    let http = format!("http://{}", child.wait_for_addr("http listening on "));
    (child, http, dir)
}

async fn check(http: &str, policy: &str) -> u16 {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
        .post(format!("{http}/v1/check"))
        .json(&json!({"policy": policy, "key": "k"}))
        .send()
        .await
        .expect("check")
        .status()
        .as_u16()
}

/// The JSON object on a stderr line containing `text`: one already read, or the next one.
fn json_line(child: &mut ChildProcess, text: &str) -> Value {
    let line = child.printed(text);
    serde_json::from_str(&line).unwrap_or_else(|err| panic!("not a JSON log line ({err}): {line}"))
}

#[tokio::test]
async fn a_shadow_denial_is_logged_as_json_naming_the_policy() {
    let (mut child, http, _dir) = start(
        "policies:\n  watch:\n    algorithm: fixed_window\n    limit: 1\n    window: 1h\n    shadow: true\n",
        &[],
    );
    assert_eq!(check(&http, "watch").await, 200);
    assert_eq!(check(&http, "watch").await, 200, "shadow rules never deny");
    let event = json_line(&mut child, "shadow rule would have denied");
    assert_eq!(event["level"], "INFO", "{event}");
    assert_eq!(event["fields"]["policy"], "watch", "{event}");
}

#[tokio::test]
async fn a_reload_logs_each_changed_policy_and_warns_when_keys_start_fresh() {
    let (mut child, http, dir) = start(
        "policies:\n  login: {algorithm: sliding_log, limit: 1, window: 1h}\n  api: {algorithm: fixed_window, limit: 1, window: 1h}\n",
        &[],
    );
    assert_eq!(check(&http, "login").await, 200);
    assert_eq!(check(&http, "login").await, 429);
    std::fs::write(
        dir.path().join("tollgate.yaml"),
        "policies:\n  login: {algorithm: gcra, rate: 1/h, burst: 1, on_change: reset}\n  api: {algorithm: fixed_window, limit: 2, window: 1h}\n",
    )
    .expect("write the new config");
    child.signal("HUP");
    let fresh = json_line(&mut child, "policy changed: login");
    assert_eq!(fresh["level"], "WARN", "{fresh}");
    assert!(
        fresh["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("sliding_log")
                && m.contains("gcra")
                && m.contains("on_change reset")
                && m.contains("whole budget")),
        "{fresh}"
    );
    let (before, after) = (&fresh["fields"]["before"], &fresh["fields"]["after"]);
    assert!(
        before.as_str().is_some_and(|f| f.len() == 16) && before != after,
        "{fresh}"
    );
    let kept = json_line(&mut child, "policy changed: api");
    assert_eq!(kept["level"], "INFO", "{kept}");
    child.wait_for("config reloaded");
    // As logged (on_change: reset): the login key starts with a whole budget under the new
    // algorithm.
    assert_eq!(check(&http, "login").await, 200);
}

#[tokio::test]
async fn a_dead_store_logs_its_class_and_the_failure_mode_decision() {
    // A port nothing listens on: every call fails with a connection error.
    let free = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", free.local_addr().expect("addr"));
    drop(free);
    let timeout = tollgate_testkit::store_timeout_arg();
    let (mut child, http, _dir) = start(
        "policies:\n  open:\n    algorithm: fixed_window\n    limit: 5\n    window: 1m\n    on_store_failure: fail_open\n",
        &["--store", &url, "--store-timeout", &timeout],
    );
    assert_eq!(check(&http, "open").await, 200, "fail_open admits");
    let failed = json_line(&mut child, "rate limit store failed");
    assert_eq!(failed["level"], "WARN", "{failed}");
    assert_eq!(failed["fields"]["class"], "connection", "{failed}");
    let degraded = json_line(&mut child, "failure mode decided");
    assert_eq!(degraded["fields"]["policy"], "open", "{degraded}");
    assert_eq!(degraded["fields"]["outcome"], "degraded", "{degraded}");
    let breaker = json_line(&mut child, "circuit breaker opened");
    assert_eq!(breaker["level"], "WARN", "{breaker}");
    assert!(breaker["fields"]["node"].is_string(), "{breaker}");
}

/// A store failing in two ways at once, admissions its replicas do not acknowledge (a master
/// without a replica, under a policy with `replicas: 1`) and a key holding a value it did not
/// write: each class is logged, sampled on its own, so one failing on every request does not
/// hide the other; the replicas falling short is logged once, when it starts.
#[tokio::test]
async fn each_class_of_store_failure_is_logged_and_replicas_falling_short_once() {
    let redis = tollgate_testkit::RedisServer::start();
    redis.cli(&["SET", "tollgate:{open:k}", "not a hash"]);
    let timeout = tollgate_testkit::store_timeout_arg();
    let (mut child, http, _dir) = start(
        "policies:\n  login: {algorithm: fixed_window, limit: 5, window: 15m, on_store_failure: fail_closed, replicas: 1}\n  open: {algorithm: fixed_window, limit: 5, window: 1m, on_store_failure: fail_open}\n",
        &["--store", &redis.url(), "--store-timeout", &timeout],
    );
    assert_eq!(check(&http, "login").await, 503, "not acknowledged: refused");
    assert_eq!(check(&http, "login").await, 503, "not waited for: refused");
    assert_eq!(
        check(&http, "open").await,
        200,
        "a value it did not write: fail_open admits"
    );
    let unreplicated = json_line(&mut child, r#""class":"unreplicated""#);
    assert_eq!(unreplicated["level"], "WARN", "{unreplicated}");
    let corrupt = json_line(&mut child, r#""class":"corrupt""#);
    assert_eq!(corrupt["level"], "WARN", "{corrupt}");
    let short = json_line(&mut child, "redis replicas fell short");
    assert_eq!(short["level"], "WARN", "{short}");
}

#[test]
fn a_debug_port_beyond_loopback_is_warned_about() {
    // Upstream's DEBUG_PORT alone binds the debug listener on every interface (0.0.0.0).
    let mut child = ChildProcess::start(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .env("DEBUG_PORT", "0")
            .args([
                "--log-format",
                "json",
                "serve",
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
            ]),
    );
    let event = json_line(&mut child, "the debug listener");
    assert_eq!(event["level"], "WARN", "{event}");
    assert_eq!(event["fields"]["listener"], "debug", "{event}");
    assert!(
        event["fields"]["debug"]
            .as_str()
            .is_some_and(|addr| addr.starts_with("0.0.0.0:")),
        "{event}"
    );
}

#[test]
fn a_debug_port_on_loopback_is_not_warned_about() {
    // The admin warning (an open HTTP address without a token) is logged after the debug one
    // would be, on the same stream: once it is read, a debug warning would have been too.
    let mut child = ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
        "--log-format",
        "json",
        "serve",
        "--http",
        "0.0.0.0:0",
        "--grpc",
        "127.0.0.1:0",
        "--debug-addr",
        "127.0.0.1:0",
    ]));
    json_line(&mut child, "without a token on a non-loopback address");
    let debug_warnings = child
        .seen()
        .iter()
        .filter(|line| line.contains("the debug listener"))
        .count();
    assert_eq!(debug_warnings, 0, "{:#?}", child.seen());
}

#[test]
fn upstreams_log_format_json_gives_json_lines() {
    // envoyproxy/ratelimit's manifests set LOG_FORMAT=json (and LOG_LEVEL): the same JSON lines.
    let mut child = ChildProcess::start(
        Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .env("LOG_FORMAT", "json")
            .args(["serve", "--http", "0.0.0.0:0", "--grpc", "127.0.0.1:0"]),
    );
    let event = json_line(&mut child, "without a token on a non-loopback address");
    assert_eq!(event["level"], "WARN", "{event}");
    assert_eq!(event["fields"]["listener"], "http", "{event}");
}

#[test]
fn an_unknown_log_format_stops_the_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .env("LOG_FORMAT", "xml")
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .output()
        .expect("runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("LOG_FORMAT=xml: expected text or json"),
        "{stderr}"
    );
}
