//! `tollgate test` as the real binary: the shipped scenarios pass on the memory store and on a
//! real Redis, a scenario that expects the wrong answer fails with a readable difference and exit
//! code 1, and an unusable config or scenario file is exit code 2 with the file and field named.

use std::path::PathBuf;
use std::process::{Command, Output};

use tollgate_testkit::RedisServer;

/// The repository's root, where the examples are.
fn repo(path: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    root.to_str().expect("a UTF-8 path").to_owned()
}

/// The shipped configs and their scenario files.
fn shipped() -> [(String, String); 3] {
    [
        (
            repo("examples/movies/limits"),
            repo("examples/movies/scenarios.yaml"),
        ),
        (
            repo("examples/login/limits"),
            repo("examples/login/scenarios.yaml"),
        ),
        (
            repo("crates/tollgate-config/src/demo.yaml"),
            repo("crates/tollgate-config/src/demo.scenarios.yaml"),
        ),
    ]
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run the tollgate binary")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The shipped scenarios, on `store` (memory when empty).
fn shipped_pass(store: &[&str]) {
    for (config, scenarios) in shipped() {
        let mut args = vec!["test", config.as_str(), scenarios.as_str()];
        args.extend_from_slice(store);
        let out = tollgate(&args);
        assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
        let report = stdout(&out);
        assert!(report.contains("scenarios passed"), "{report}");
        assert!(!report.contains("FAIL"), "{report}");
    }
}

#[test]
fn shipped_scenarios_pass_on_memory() {
    shipped_pass(&[]);
}

#[test]
fn shipped_scenarios_pass_on_redis_twice() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A second run on the same Redis starts from empty budgets too: each run has its own keys.
    // no store deadline: `tollgate test` gives its store one of its own
    shipped_pass(&["--store", &url]);
    // no store deadline: as above
    shipped_pass(&["--store", &url]);
}

/// The movie list's scenario with three wrong expectations, one per door.
const WRONG: &str = "\
scenarios:
  - name: passes
    steps:
      - {repeat: 2, check: {policy: movies, key: 198.51.100.4}, expect: {status: 200}}
  - name: expects the 21st request to pass
    steps:
      - {at: 0s, repeat: 20, every: 1s, check: {policy: movies, key: 198.51.100.4}, expect: {status: 200}}
      - {check: {policy: movies, key: 198.51.100.4}, expect: {status: 200, retry_after: 0s}}
  - name: expects Envoy's minute to end sooner
    steps:
      - {repeat: 20, every: 1s, envoy: {domain: movies, descriptors: [{remote_address: 198.51.100.4}]}, expect: {code: OK}}
      - {envoy: {domain: movies, descriptors: [{remote_address: 198.51.100.4}]}, expect: {code: OVER_LIMIT, retry_after: 30s}}
  - name: expects the proxy to let a 21st through
    steps:
      - {repeat: 21, request: {path: /v4/movies, from: 198.51.100.4}, expect: {status: 200}}
";

const WRONG_REPORT: &str = "\
ok    wrong.yaml: passes (2 requests)
FAIL  wrong.yaml: expects the 21st request to pass
      steps[1], request 1 of 1 at 19s: check movies 198.51.100.4
        status: expected 200, got 429
        retry_after: expected none, got 1m
FAIL  wrong.yaml: expects Envoy's minute to end sooner
      steps[1], request 1 of 1 at 19s: envoy movies [remote_address=198.51.100.4]
        retry_after: expected 30s, got 41s
FAIL  wrong.yaml: expects the proxy to let a 21st through
      steps[0], request 21 of 21 at 0s: GET /v4/movies from 198.51.100.4
        status: expected 200, got 429

3 of 4 scenarios failed
";

fn wrong_fails(store: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("wrong.yaml"), WRONG).expect("write");
    let config = repo("examples/movies/limits");
    let mut args = vec!["test", config.as_str(), "wrong.yaml"];
    args.extend_from_slice(store);
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(&args)
        .current_dir(dir.path())
        .output()
        .expect("run the tollgate binary");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), WRONG_REPORT);
}

#[test]
fn wrong_expectations_fail_with_each_difference_on_memory() {
    wrong_fails(&[]);
}

#[test]
fn wrong_expectations_fail_with_each_difference_on_redis() {
    let redis = RedisServer::start();
    // no store deadline: `tollgate test` gives its store one of its own
    wrong_fails(&["--store", &redis.url()]);
}

/// Runs `tollgate test` over a config and a scenario file written to a temp dir.
fn unusable(config: &str, scenarios: &str) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("limits.yaml"), config).expect("write");
    std::fs::write(dir.path().join("cases.yaml"), scenarios).expect("write");
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["test", "limits.yaml", "cases.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("run the tollgate binary")
}

const POLICIES: &str = "policies:\n  login: {algorithm: sliding_log, limit: 3, window: 1h}\n";

#[test]
fn unusable_files_are_named_with_the_field() {
    let step = |s: &str| format!("scenarios:\n  - name: s\n    steps:\n      - {s}\n");
    let cases = [
        (
            POLICIES.to_owned(),
            step("{check: {policy: logn, key: k}, expect: {status: 200}}"),
            "tollgate test: cases.yaml: scenarios[0].steps[0].check.policy: unknown policy \"logn\"\n",
        ),
        (
            POLICIES.to_owned(),
            step("{check: {policy: login, key: k}, expect: {status: 200, retry_after: soon}}"),
            "tollgate test: cases.yaml: scenarios[0].steps[0].expect.retry_after: expected a duration like \"1m\", got \"soon\"\n",
        ),
        (
            POLICIES.to_owned(),
            step("{envoy: {domain: edge, descriptors: [{ip: 192.0.2.1}]}, expect: {code: OK}}"),
            "tollgate test: cases.yaml: scenarios[0].steps[0].envoy.domain: unknown domain \"edge\"\n",
        ),
        (
            "policies:\n  login: {algorithm: sliding_log, limit: 3, window: fortnight}\n".to_owned(),
            step("{check: {policy: login, key: k}, expect: {status: 200}}"),
            "tollgate test: limits.yaml: policies.login.window: expected a duration like \"1m\", got \"fortnight\"\n",
        ),
    ];
    for (config, scenarios, expected) in cases {
        let out = unusable(&config, &scenarios);
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        assert_eq!(stderr(&out), expected);
        assert_eq!(stdout(&out), "");
    }
}

#[test]
fn an_unreachable_store_is_an_error_not_a_difference() {
    let (config, scenarios) = &shipped()[0];
    // Nothing listens on port 1.
    // no store deadline: `tollgate test` gives its store one of its own
    let out = tollgate(&["test", config, scenarios, "--store", "redis://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).starts_with("tollgate test: store `redis://127.0.0.1:1`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_config_against_the_served_config_lists_each_policy_that_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, yaml: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, yaml).expect("write config");
        path.to_str().expect("a UTF-8 path").to_owned()
    };
    let old = write(
        "old.yaml",
        "policies:\n  login: {algorithm: sliding_log, limit: 5, window: 15m}\n  api: {algorithm: fixed_window, limit: 100, window: 1m}\n",
    );
    let new = write(
        "new.yaml",
        "policies:\n  login: {algorithm: gcra, rate: 5/15m, burst: 5, on_change: reset}\n  api: {algorithm: fixed_window, limit: 200, window: 1m}\n",
    );
    let out = tollgate(&["check-config", &new, "--against", &old]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("2 policies change"), "{stdout}");
    assert!(
        stdout.contains("api: fixed_window limit: 100, window: 1m, anchor: epoch -> fixed_window limit: 200, window: 1m, anchor: epoch; on_change keep: its keys keep all they spent, past the new limit as debt"),
        "{stdout}"
    );
    assert!(
        stdout.contains("login: sliding_log limit: 5, window: 15m -> gcra rate: 5/15m, burst: 5; on_change reset: its keys start with a whole budget"),
        "{stdout}"
    );
    let same = tollgate(&["check-config", &new, "--against", &new]);
    assert!(
        String::from_utf8_lossy(&same.stdout).contains("no policy changes"),
        "{same:?}"
    );
    // A broken OLD is an error naming it.
    let broken = write("broken.yaml", "policies:\n  x: {algorithm: nope}\n");
    let out = tollgate(&["check-config", &new, "--against", &broken]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("broken.yaml"),
        "{out:?}"
    );
}

/// A deny-all limit's reset is the end of its unit in the scenario's virtual time, not the
/// wall clock's: the answer is dated by the engine, on the store's clock.
#[test]
fn a_deny_all_reset_follows_virtual_time() {
    let config =
        "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 0}\n";
    let scenarios = "\
scenarios:
  - name: the minute ends in virtual time
    steps:
      - {at: 15s, envoy: {domain: edge, descriptors: [{ip: 192.0.2.1}]}, expect: {code: OVER_LIMIT, retry_after: 45s}}
      - {at: 50s, envoy: {domain: edge, descriptors: [{ip: 192.0.2.1}]}, expect: {code: OVER_LIMIT, retry_after: 10s}}
";
    let out = unusable(config, scenarios);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
}
