//! `tollgate explain` as the real binary: the explanation as JSON on stdout, against a config
//! alone (an empty memory store) or a live Redis, and clear errors.

use std::process::{Command, Output};

use tollgate::{Algorithm, Policy};
use tollgate_testkit::RedisServer;

const CONFIG: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 5}
";

const POLICIES: &str = "policies:\n  login: {algorithm: sliding_log, limit: 3, window: 1h}\n";

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run the tollgate binary")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn explain_tells_how_each_descriptor_matched() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let out = tollgate(&[
        "explain",
        "--config",
        config.to_str().unwrap(),
        "--domain",
        "edge",
        "--descriptor",
        "remote_address=192.0.2.7",
        "--descriptor",
        "path=/api/orders",
        "--descriptor",
        "user=ann",
    ]);
    let answer = json(&out);
    assert_eq!(answer["allowed"], true);
    let matched: Vec<&str> = answer["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["matched"].as_str().unwrap())
        .collect();
    assert_eq!(matched, ["default", "wildcard", "no_match"]);
    assert_eq!(answer["rules"][1]["parameters"]["limit"], 5);
    assert_eq!(answer["rules"][1]["state"]["remaining"], 5);
    // The fingerprint of what decides, and another one once its limit changes.
    let fingerprint =
        |answer: &serde_json::Value| answer["rules"][1]["fingerprint"].as_str().map(str::to_owned);
    let before = fingerprint(&answer).expect("a fingerprint");
    assert!(
        before.len() == 16 && before.bytes().all(|b| b.is_ascii_hexdigit()),
        "{before}"
    );
    std::fs::write(
        &config,
        CONFIG.replace("requests_per_unit: 5", "requests_per_unit: 6"),
    )
    .unwrap();
    let raised = json(&tollgate(&[
        "explain",
        "--config",
        config.to_str().unwrap(),
        "--domain",
        "edge",
        "--descriptor",
        "remote_address=192.0.2.7",
        "--descriptor",
        "path=/api/orders",
    ]));
    assert_eq!(raised["rules"][1]["parameters"]["limit"], 6);
    assert_ne!(fingerprint(&raised), Some(before));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_a_live_store_and_spends_nothing() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).unwrap();
    let store = tollgate_redis::RedisStore::builder(tollgate_redis::Target::Standalone(server.url()))
        .timeout(tollgate_testkit::STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let login = Policy::new(
        "login",
        Algorithm::sliding_log(3, std::time::Duration::from_secs(3600)).unwrap(),
    )
    .unwrap();
    store.check(&login, b"ann", 1).await.unwrap();
    let timeout = tollgate_testkit::store_timeout_arg();
    let args = [
        "explain",
        "--config",
        config.to_str().unwrap(),
        "--store",
        &server.url(),
        "--store-timeout",
        &timeout,
        "--policy",
        "login",
        "--key",
        "ann",
    ];
    for _ in 0..2 {
        let answer = json(&tollgate(&args));
        assert_eq!(answer["rules"][0]["state"]["used"], 1);
        assert_eq!(answer["rules"][0]["state"]["remaining"], 2);
    }
}

#[test]
fn explain_without_a_rule_or_with_an_unknown_policy_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("policies.yaml");
    std::fs::write(&config, POLICIES).unwrap();
    let path = config.to_str().unwrap();
    let out = tollgate(&["explain", "--config", path]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("explain needs --policy and --key, or --domain and --descriptor")
    );
    let out = tollgate(&["explain", "--config", path, "--policy", "nope", "--key", "k"]);
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "tollgate: unknown policy `nope`"
    );
    let out = tollgate(&[
        "explain",
        "--config",
        path,
        "--domain",
        "edge",
        "--descriptor",
        "x",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "tollgate: --descriptor: expected `key=value`, got `x`"
    );
}

#[test]
fn a_reader_that_stops_early_ends_the_output_quietly() {
    // `tollgate explain ... | head -c 0` and the like: the reader is gone before the answer is
    // written. Writing to the closed pipe must end the command, not panic.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    for args in [
        vec![
            "explain",
            "--config",
            config.to_str().unwrap(),
            "--domain",
            "edge",
            "--descriptor",
            "user=ann",
        ],
        vec![
            "check-config",
            config.to_str().unwrap(),
            "--against",
            config.to_str().unwrap(),
        ],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start tollgate");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("tollgate ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
