//! The decision log and `tollgate replay`, end to end: the real binary serves a known sequence of
//! requests through `POST /v1/check`, gRPC and `POST /json` with the log on, is stopped, and its
//! log is replayed: under the same config nothing flips; under a stricter one exactly the
//! requests the test works out from the sequence flip; the same with charges and refunds, over
//! HTTP and gRPC, whose debts the checks after them meet. Also: bad flags name themselves, and
//! a log written before ops were logged replays.

mod binary;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use binary::Server;
use serde_json::{Value, json};
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};

/// A policy and an Envoy domain, each with a limit long enough that the test never crosses a
/// window, so what the server answers depends only on the order of the requests.
fn config(dir: &Path, policy_limit: u64, envoy_limit: u64) {
    std::fs::create_dir_all(dir).expect("config dir");
    std::fs::write(
        dir.join("movies.yaml"),
        format!(
            "policies:\n  movies:\n    algorithm: sliding_log\n    limit: {policy_limit}\n    window: 1h\n"
        ),
    )
    .expect("write the policy");
    std::fs::write(
        dir.join("envoy.yaml"),
        format!(
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: day, requests_per_unit: {envoy_limit}}}\n"
        ),
    )
    .expect("write the domain");
}

/// One request of the sequence: through which door, with which key.
#[derive(Clone, Copy, Debug)]
enum Ask {
    Check(&'static str),
    Grpc(&'static str),
    Json(&'static str),
}

impl Ask {
    /// The key as the replay report names it.
    fn key(self) -> String {
        match self {
            Ask::Check(key) => key.to_owned(),
            Ask::Grpc(ip) | Ask::Json(ip) => format!("remote_address={ip}"),
        }
    }
}

/// Interleaved across doors and keys.
const SEQUENCE: [Ask; 21] = [
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.4"),
    Ask::Check("bob"),
    Ask::Check("alice"),
    Ask::Json("198.51.100.6"),
    Ask::Grpc("198.51.100.4"),
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.5"),
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.4"),
    Ask::Json("198.51.100.6"),
    Ask::Check("bob"),
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.4"),
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.4"),
    Ask::Json("198.51.100.6"),
    Ask::Check("alice"),
    Ask::Grpc("198.51.100.5"),
    Ask::Check("bob"),
    Ask::Grpc("198.51.100.4"),
];

/// Whether each request of [`SEQUENCE`] is allowed under limits of `policy_limit` per key
/// (check) and `envoy_limit` per address (gRPC and `/json` share the domain): the n-th request
/// of a key passes while n is within the limit.
fn expected(policy_limit: usize, envoy_limit: usize) -> Vec<bool> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    SEQUENCE
        .iter()
        .map(|ask| {
            let n = seen.entry(ask.key()).or_default();
            *n += 1;
            let limit = match ask {
                Ask::Check(_) => policy_limit,
                Ask::Grpc(_) | Ask::Json(_) => envoy_limit,
            };
            *n <= limit
        })
        .collect()
}

fn envoy_request(ip: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".to_owned(),
                value: ip.to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// Serves [`SEQUENCE`] with the decision log on (`extra` flags added), checks every answer
/// against [`expected`] with the served limits (5, 4), stops the server and returns the log's
/// path.
async fn serve_sequence(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let limits = dir.join("limits");
    config(&limits, 5, 4);
    let log = dir.join("decisions.jsonl");
    let mut args = vec![
        "--config",
        limits.to_str().expect("utf-8"),
        "--decision-log",
        log.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let mut server = Server::start(&args);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut grpc = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect to the grpc listener");
    let expected = expected(5, 4);
    for (i, ask) in SEQUENCE.iter().enumerate() {
        let allowed = match *ask {
            Ask::Check(key) => {
                let status = http
                    .post(server.url("/v1/check"))
                    .json(&json!({"policy": "movies", "key": key}))
                    .send()
                    .await
                    .expect("check")
                    .status();
                assert!(status == 200 || status == 429, "request {i}: {status}");
                status == 200
            }
            Ask::Grpc(ip) => {
                let answer = grpc
                    .should_rate_limit(envoy_request(ip))
                    .await
                    .expect("call")
                    .into_inner();
                answer.overall_code == Code::Ok as i32
            }
            Ask::Json(ip) => {
                let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": ip}]}]});
                let status = http
                    .post(server.url("/json"))
                    .json(&body)
                    .send()
                    .await
                    .expect("json")
                    .status();
                assert!(status == 200 || status == 429, "request {i}: {status}");
                status == 200
            }
        };
        assert_eq!(allowed, expected[i], "request {i} ({ask:?}) as served");
    }
    // SIGTERM: the server stops, and writes what its log has queued before it exits.
    server.signal("TERM");
    assert!(server.wait_exit().success());
    log
}

/// `tollgate replay --json` with `args`: the report.
fn replay(args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .arg("replay")
        .arg("--json")
        .args(args)
        .output()
        .expect("run tollgate replay");
    assert!(
        output.status.success(),
        "tollgate replay {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}

/// The log's lines, in file order.
fn log_lines(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .expect("read the log")
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

async fn replay_flips_exactly_what_a_stricter_config_refuses(extra: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = serve_sequence(dir.path(), extra).await;
    let lines = log_lines(&log);
    assert_eq!(lines.len(), SEQUENCE.len(), "one line per request");
    let doors: std::collections::BTreeSet<&str> = lines.iter().filter_map(|l| l["door"].as_str()).collect();
    assert_eq!(doors, ["grpc", "http", "json"].into_iter().collect());
    // One request at a time, so the file is in request order: each line's outcome is the one served.
    for (i, (line, allowed)) in lines.iter().zip(expected(5, 4)).enumerate() {
        let outcome = if allowed { "allowed" } else { "denied" };
        assert_eq!(line["outcome"], outcome, "line {i}: {line}");
    }
    let log = log.to_str().expect("utf-8");
    let limits = dir.path().join("limits");
    let limits = limits.to_str().expect("utf-8");

    // The same config: against the logged outcomes, and against itself replayed.
    let same = replay(&["--config", limits, log]);
    assert_eq!(same["decisions"], SEQUENCE.len());
    assert_eq!(same["flipped"], 0, "{same}");
    let itself = replay(&["--config", limits, "--baseline", limits, log]);
    assert_eq!(itself["flipped"], 0, "{itself}");
    assert_eq!(
        itself["groups"]["movies"]["before"],
        json!({"allowed": 8, "denied": 2, "error": 0})
    );
    assert_eq!(
        itself["groups"]["domain edge"]["after"],
        json!({"allowed": 9, "denied": 2, "error": 0})
    );

    // Stricter: 3 per key, 2 per address. The flips are the requests allowed under (5, 4)
    // and denied under (3, 2), in order.
    let strict = dir.path().join("strict");
    config(&strict, 3, 2);
    let strict = strict.to_str().expect("utf-8");
    let flips: Vec<(usize, Ask)> = expected(5, 4)
        .into_iter()
        .zip(expected(3, 2))
        .enumerate()
        .filter(|(_, (before, after))| before != after)
        .map(|(i, _)| (i, SEQUENCE[i]))
        .collect();
    assert!(!flips.is_empty());
    for baseline in [None, Some(limits)] {
        let mut args = vec!["--config", strict];
        if let Some(baseline) = baseline {
            args.extend(["--baseline", baseline]);
        }
        args.push(log);
        let report = replay(&args);
        assert_eq!(report["flipped"], flips.len(), "{report}");
        let shown = report["flips"].as_array().expect("flips");
        assert_eq!(shown.len(), flips.len(), "{report}");
        for ((i, ask), flip) in flips.iter().zip(shown) {
            assert_eq!(flip["time_us"], lines[*i]["time_us"], "request {i}: {flip}");
            assert_eq!(
                (&flip["before"], &flip["after"]),
                (&json!("allowed"), &json!("denied"))
            );
            assert_eq!(flip["door"], lines[*i]["door"]);
            // In clear, the report names the key; hashed, the log's hash of it.
            let key = match ask {
                Ask::Check(_) => lines[*i]["ops"][0]["key"].as_str().expect("key").to_owned(),
                Ask::Grpc(_) | Ask::Json(_) => format!(
                    "remote_address={}",
                    lines[*i]["descriptors"][0]["entries"][0][1]
                        .as_str()
                        .expect("value")
                ),
            };
            if extra.is_empty() {
                assert_eq!(key, ask.key());
            } else {
                assert!(!key.contains("alice") && !key.contains("198.51.100"), "{key}");
            }
            assert_eq!(flip["key"], key);
        }
        assert_eq!(report["groups"]["movies"]["flipped"], 2, "{report}");
        assert_eq!(
            report["groups"]["domain edge"]["flipped"],
            flips.len() - 2,
            "{report}"
        );
    }
}

#[tokio::test]
async fn replay_of_the_served_log_flips_nothing_under_the_same_config_and_exactly_the_stricter_refusals() {
    replay_flips_exactly_what_a_stricter_config_refuses(&[]).await;
}

#[tokio::test]
async fn replay_of_hashed_keys_decides_as_the_clear_ones() {
    replay_flips_exactly_what_a_stricter_config_refuses(&["--decision-log-hash-keys"]).await;
}

/// `tollgate ARGS`: (success, stderr).
fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("run tollgate");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_decision_log_flags_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("d.jsonl");
    let log = log.to_str().expect("utf-8");
    let serve = |flags: &[&str]| {
        let mut args = vec!["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"];
        args.extend_from_slice(flags);
        run(&args)
    };
    for (flags, flag, says) in [
        (
            vec!["--decision-log", log, "--decision-log-sample", "0"],
            "--decision-log-sample",
            "above 0",
        ),
        (
            vec!["--decision-log", log, "--decision-log-sample", "1.5"],
            "--decision-log-sample",
            "at most 1",
        ),
        (
            vec!["--decision-log", log, "--decision-log-sample", "often"],
            "--decision-log-sample",
            "a number",
        ),
        (
            vec!["--decision-log", log, "--decision-log-max-bytes", "10"],
            "--decision-log-max-bytes",
            "1024",
        ),
        (
            vec!["--decision-log", log, "--decision-log-files", "5000"],
            "--decision-log-files",
            "at most 1000",
        ),
        (
            vec![
                "--decision-log",
                log,
                "--decision-log-hash-keys",
                "--decision-log-hash-secret",
                "short",
            ],
            "--decision-log-hash-secret",
            "at least 16 bytes",
        ),
        (vec!["--decision-log-sample", "0.5"], "--decision-log", "required"),
    ] {
        let (ok, stderr) = serve(&flags);
        assert!(!ok, "{flags:?} was accepted");
        assert!(
            stderr.contains(flag) && stderr.contains(says),
            "{flags:?}: {stderr}"
        );
    }
    // A log in a directory that does not exist: refused at start, naming the file.
    let missing = dir.path().join("no/such/dir/d.jsonl");
    let (ok, stderr) = serve(&["--decision-log", missing.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(
        stderr.contains("decision log") && stderr.contains("no/such/dir/d.jsonl"),
        "{stderr}"
    );
}

#[test]
fn replay_refuses_a_line_that_is_not_a_decision_naming_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    config(&dir.path().join("limits"), 5, 4);
    let log = dir.path().join("d.jsonl");
    std::fs::write(
        &log,
        "{\"time_us\":1,\"door\":\"http\",\"rules\":[{\"policy\":\"movies\",\"key\":\"a\",\"cost\":1}],\"outcome\":\"allowed\"}\nnot json\n",
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config"])
        .arg(dir.path().join("limits"))
        .arg(&log)
        .output()
        .expect("run tollgate replay");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("d.jsonl: line 2: not a decision log line"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_proxy_logs_its_routes_decisions_and_they_replay() {
    let upstream =
        tollgate_testkit::AppServer::start(axum::Router::new().fallback(|| async { "upstream" })).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, limit: u64| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "policies:\n  movies:\n    algorithm: sliding_log\n    limit: {limit}\n    window: 1h\nroutes:\n  - prefix: /v4/movies\n    policies: [movies]\n"
            ),
        )
        .expect("write the config");
        path.to_str().expect("utf-8").to_owned()
    };
    let served = write("served.yaml", 3);
    let strict = write("strict.yaml", 1);
    let log = dir.path().join("proxy.jsonl");
    let log = log.to_str().expect("utf-8");
    let upstream_url = format!("http://{}", upstream.addr());
    let mut proxy = Server::start_proxy(&[
        "--upstream",
        &upstream_url,
        "--config",
        &served,
        "--decision-log",
        log,
    ]);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let status = http
            .get(proxy.url("/v4/movies"))
            .send()
            .await
            .expect("get")
            .status();
        statuses.push(status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().success());
    let lines = log_lines(Path::new(log));
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["allowed", "allowed", "allowed", "denied"]);
    assert!(
        lines.iter().all(|l| l["door"] == "proxy"
            && l["ops"][0]["policy"] == "movies"
            && l["ops"][0]["op"] == "check")
    );
    assert_eq!(replay(&["--config", &served, log])["flipped"], 0);
    // Under 1 an hour, the second and third requests flip.
    let report = replay(&["--config", &strict, log]);
    let flipped: Vec<&Value> = report["flips"]
        .as_array()
        .expect("flips")
        .iter()
        .map(|f| &f["time_us"])
        .collect();
    assert_eq!(flipped, [&lines[1]["time_us"], &lines[2]["time_us"]], "{report}");
    upstream.stop().await;
}

#[test]
fn a_file_without_line_breaks_is_refused_at_the_line_bound_not_read_whole() {
    // `/dev/zero` never ends and has no line break: read whole, it would take all the memory.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("plain.yaml");
    std::fs::write(
        &config,
        "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1m}\n",
    )
    .expect("write");
    let mut child =
        tollgate_testkit::ChildProcess::start(Command::new(env!("CARGO_BIN_EXE_tollgate")).args([
            "replay",
            "--config",
            config.to_str().expect("utf-8"),
            "/dev/zero",
        ]));
    let line = child.wait_for("not a decision log line");
    assert!(
        line.contains("/dev/zero: line 1: longer than 1048576 bytes"),
        "{line}"
    );
    assert_eq!(child.wait_exit().code(), Some(2));
}

/// One request of [`SETTLING`]: a check, a charge or a refund of a cost, over HTTP (a key of
/// `movies`) or gRPC (an address of the `edge` domain).
#[derive(Clone, Copy, Debug)]
enum Settle {
    Check(&'static str),
    Charge(&'static str, u64),
    Refund(&'static str, u64),
    GrpcCheck(&'static str),
    GrpcCharge(&'static str, u64),
    GrpcRefund(&'static str, u64),
}

impl Settle {
    /// The door, the kind of op and the key as the log and the report name them.
    fn named(self) -> (&'static str, &'static str, String) {
        let envoy = |ip: &str| format!("remote_address={ip}");
        match self {
            Settle::Check(key) => ("http", "check", key.to_owned()),
            Settle::Charge(key, _) => ("http", "charge", key.to_owned()),
            Settle::Refund(key, _) => ("http", "refund", key.to_owned()),
            Settle::GrpcCheck(ip) => ("grpc", "check", envoy(ip)),
            Settle::GrpcCharge(ip, _) => ("grpc", "charge", envoy(ip)),
            Settle::GrpcRefund(ip, _) => ("grpc", "refund", envoy(ip)),
        }
    }
}

/// Checks meeting the debts that charges before them left, and the budget refunds gave back,
/// on two keys and two addresses. Refunds cost at most the stricter limits below, so they are
/// valid under both configs.
const SETTLING: [Settle; 20] = [
    Settle::Check("alice"),
    Settle::Charge("alice", 3),
    Settle::Check("alice"),
    Settle::GrpcCheck("198.51.100.4"),
    Settle::GrpcCharge("198.51.100.4", 3),
    Settle::GrpcCheck("198.51.100.4"),
    Settle::Refund("alice", 2),
    Settle::Check("alice"),
    Settle::Check("alice"),
    Settle::GrpcRefund("198.51.100.4", 2),
    Settle::GrpcCheck("198.51.100.4"),
    Settle::Charge("bob", 2),
    Settle::Check("bob"),
    Settle::Charge("alice", 1),
    Settle::Check("alice"),
    Settle::GrpcCheck("198.51.100.5"),
    Settle::GrpcCharge("198.51.100.5", 1),
    Settle::GrpcCheck("198.51.100.5"),
    Settle::Refund("bob", 1),
    Settle::Check("bob"),
];

/// What each request of [`SETTLING`] comes to under `policy_limit` per key and `envoy_limit`
/// per address, none of the windows ending: `(allowed, debt)`. Each key holds what it used: a
/// check of 1 passes and spends while it fits; a charge spends whatever is left, its debt
/// what it used past the limit, and it is over (`denied`, as the Envoy door answers a charge
/// past its limit) when it left one; a refund gives back up to its cost, and is allowed.
fn settled(policy_limit: u64, envoy_limit: u64) -> Vec<(bool, u64)> {
    let mut used = std::collections::HashMap::<String, u64>::new();
    SETTLING
        .iter()
        .map(|ask| {
            let limit = match ask {
                Settle::Check(_) | Settle::Charge(..) | Settle::Refund(..) => policy_limit,
                _ => envoy_limit,
            };
            let used = used.entry(ask.named().2).or_default();
            match *ask {
                Settle::Check(_) | Settle::GrpcCheck(_) => {
                    let fits = *used < limit;
                    if fits {
                        *used += 1;
                    }
                    (fits, 0)
                }
                Settle::Charge(_, cost) | Settle::GrpcCharge(_, cost) => {
                    *used += cost;
                    let debt = used.saturating_sub(limit);
                    (debt == 0, debt)
                }
                Settle::Refund(_, cost) | Settle::GrpcRefund(_, cost) => {
                    *used -= cost.min(*used);
                    (true, 0)
                }
            }
        })
        .collect()
}

/// An Envoy request of one descriptor for `ip`: a check, or with its own `hits_addend` a
/// charge (`refund`: given back).
fn envoy_settling(ip: &str, hits: Option<u64>, refund: bool) -> RateLimitRequest {
    let mut request = envoy_request(ip);
    request.descriptors[0].hits_addend =
        hits.map(|value| tollgate_server::grpc::proto::UInt64Value { value });
    request.descriptors[0].is_negative_hits = refund;
    request
}

/// Serves [`SETTLING`] under limits (5, 4) with the decision log on (`extra` flags added),
/// checking each answer against [`settled`]; stops the server and returns the log's path.
async fn serve_settling(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let limits = dir.join("limits");
    config(&limits, 5, 4);
    let log = dir.join("decisions.jsonl");
    let mut args = vec![
        "--config",
        limits.to_str().expect("utf-8"),
        "--decision-log",
        log.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let mut server = Server::start(&args);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut grpc = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect to the grpc listener");
    let post = |path: &str, key: &str, cost: u64| {
        http.post(server.url(path))
            .json(&json!({"policy": "movies", "key": key, "cost": cost}))
            .send()
    };
    for (i, (ask, (allowed, debt))) in SETTLING.iter().zip(settled(5, 4)).enumerate() {
        match *ask {
            Settle::Check(key) => {
                let status = post("/v1/check", key, 1).await.expect("check").status();
                assert_eq!(status == 200, allowed, "request {i} ({ask:?}): {status}");
            }
            Settle::Charge(key, cost) | Settle::Refund(key, cost) => {
                let path = match ask {
                    Settle::Charge(..) => "/v1/charge",
                    _ => "/v1/refund",
                };
                let answer = post(path, key, cost).await.expect("settle");
                assert_eq!(answer.status(), 200, "request {i} ({ask:?})");
                let body: Value = answer.json().await.expect("a JSON answer");
                if let Settle::Charge(..) = ask {
                    assert_eq!(body["debt"], debt, "request {i} ({ask:?}): {body}");
                    assert_eq!(body["recorded"], true, "request {i}: {body}");
                }
            }
            Settle::GrpcCheck(ip) | Settle::GrpcCharge(ip, _) | Settle::GrpcRefund(ip, _) => {
                let request = match *ask {
                    Settle::GrpcCharge(_, cost) => envoy_settling(ip, Some(cost), false),
                    Settle::GrpcRefund(_, cost) => envoy_settling(ip, Some(cost), true),
                    _ => envoy_request(ip),
                };
                let answer = grpc.should_rate_limit(request).await.expect("call").into_inner();
                assert_eq!(
                    answer.overall_code == Code::Ok as i32,
                    allowed,
                    "request {i} ({ask:?}): {answer:?}"
                );
            }
        }
    }
    server.signal("TERM");
    assert!(server.wait_exit().success());
    log
}

async fn charges_and_refunds_replay_with_their_debts(extra: &[&str]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = serve_settling(dir.path(), extra).await;
    let lines = log_lines(&log);
    assert_eq!(
        lines.len(),
        SETTLING.len(),
        "one line per request, charges and refunds included"
    );
    // One request at a time: the file is in request order, each line what was asked and answered.
    for (i, ((line, ask), (allowed, debt))) in lines.iter().zip(SETTLING).zip(settled(5, 4)).enumerate() {
        let (door, kind, _) = ask.named();
        assert_eq!(line["door"], door, "line {i}: {line}");
        assert_eq!(
            line["outcome"],
            if allowed { "allowed" } else { "denied" },
            "line {i}: {line}"
        );
        let ops = line["ops"].as_array().expect("ops");
        assert_eq!(ops.len(), 1, "line {i}: {line}");
        assert_eq!(ops[0]["op"], kind, "line {i}: {line}");
        match kind {
            "charge" => {
                assert_eq!(ops[0]["debt"].as_u64().unwrap_or(0), debt, "line {i}: {line}");
                assert_eq!(ops[0]["recorded"], true, "line {i}: {line}");
            }
            "refund" => assert_eq!(line["outcome"], "allowed", "line {i}: {line}"),
            _ => assert!(ops[0].get("recorded").is_none(), "line {i}: {line}"),
        }
        if door == "grpc" {
            assert_eq!(line["domain"], "edge", "line {i}: {line}");
            assert_eq!(
                line["descriptors"][0]["refund"].as_bool().unwrap_or(false),
                kind == "refund"
            );
        }
    }
    let log = log.to_str().expect("utf-8");
    let limits = dir.path().join("limits");
    let limits = limits.to_str().expect("utf-8");

    // Its own config, against the logged outcomes and against itself: the debts the charges
    // left deny the same checks again, and the refunds give the same budget back.
    for baseline in [None, Some(limits)] {
        let mut args = vec!["--config", limits];
        args.extend(baseline.iter().flat_map(|b| ["--baseline", *b]));
        args.push(log);
        let report = replay(&args);
        assert_eq!(report["decisions"], SETTLING.len(), "{report}");
        assert_eq!(report["flipped"], 0, "{report}");
    }

    // Stricter, 3 per key and 2 per address: the requests whose outcome the model changes flip,
    // charges that now leave a debt among them.
    let strict = dir.path().join("strict");
    config(&strict, 3, 2);
    let strict = strict.to_str().expect("utf-8");
    let flips: Vec<(usize, bool, bool)> = settled(5, 4)
        .into_iter()
        .zip(settled(3, 2))
        .enumerate()
        .filter(|(_, (before, after))| before.0 != after.0)
        .map(|(i, (before, after))| (i, before.0, after.0))
        .collect();
    let kinds: std::collections::BTreeSet<&str> =
        flips.iter().map(|(i, ..)| SETTLING[*i].named().1).collect();
    assert!(
        kinds.contains("charge") && kinds.contains("check"),
        "the sequence flips charges and checks: {flips:?}"
    );
    let outcome = |allowed: bool| if allowed { "allowed" } else { "denied" };
    for baseline in [None, Some(limits)] {
        let mut args = vec!["--config", strict];
        args.extend(baseline.iter().flat_map(|b| ["--baseline", *b]));
        args.push(log);
        let report = replay(&args);
        assert_eq!(report["flipped"], flips.len(), "{report}");
        let shown = report["flips"].as_array().expect("flips");
        assert_eq!(shown.len(), flips.len(), "{report}");
        for ((i, before, after), flip) in flips.iter().zip(shown) {
            let (door, kind, key) = SETTLING[*i].named();
            assert_eq!(flip["time_us"], lines[*i]["time_us"], "request {i}: {flip}");
            assert_eq!(
                (flip["door"].as_str(), flip["asked"].as_str()),
                (Some(door), Some(kind)),
                "{flip}"
            );
            assert_eq!(
                (&flip["before"], &flip["after"]),
                (&json!(outcome(*before)), &json!(outcome(*after))),
                "request {i}: {flip}"
            );
            if extra.is_empty() {
                assert_eq!(flip["key"], key, "request {i}: {flip}");
            } else {
                let shown = flip["key"].as_str().expect("key");
                assert!(
                    !shown.contains("alice") && !shown.contains("198.51.100"),
                    "{shown}"
                );
            }
        }
        let per_door = |door: &str| {
            flips
                .iter()
                .filter(|(i, ..)| SETTLING[*i].named().0 == door)
                .count()
        };
        assert_eq!(
            report["groups"]["movies"]["flipped"],
            per_door("http"),
            "{report}"
        );
        assert_eq!(
            report["groups"]["domain edge"]["flipped"],
            per_door("grpc"),
            "{report}"
        );
    }
}

#[tokio::test]
async fn charges_and_refunds_over_http_and_grpc_replay_with_no_flips_and_the_stricter_ones() {
    charges_and_refunds_replay_with_their_debts(&[]).await;
}

#[tokio::test]
async fn hashed_charges_and_refunds_replay_as_the_clear_ones() {
    charges_and_refunds_replay_with_their_debts(&["--decision-log-hash-keys"]).await;
}

#[test]
fn a_log_written_before_ops_were_logged_replays_its_rules_as_checks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let limits = dir.path().join("limits");
    config(&limits, 5, 4);
    let strict = dir.path().join("strict");
    config(&strict, 3, 2);
    // Six checks of one key a second apart, as an older server logged them: `rules`, no `ops`.
    let log = dir.path().join("old.jsonl");
    let lines: String = (0..6u64)
        .map(|n| {
            let outcome = if n < 5 { "allowed" } else { "denied" };
            format!(
                "{{\"time_us\":{},\"door\":\"http\",\"rules\":[{{\"policy\":\"movies\",\"key\":\"alice\",\"cost\":1}}],\"outcome\":\"{outcome}\"}}\n",
                1_800_000_000_000_000 + n * 1_000_000
            )
        })
        .collect();
    std::fs::write(&log, lines).expect("write");
    let log = log.to_str().expect("utf-8");
    let same = replay(&["--config", limits.to_str().expect("utf-8"), log]);
    assert_eq!(
        (&same["decisions"], &same["flipped"]),
        (&json!(6), &json!(0)),
        "{same}"
    );
    let stricter = replay(&["--config", strict.to_str().expect("utf-8"), log]);
    let flipped: Vec<&Value> = stricter["flips"]
        .as_array()
        .expect("flips")
        .iter()
        .map(|f| &f["time_us"])
        .collect();
    assert_eq!(
        flipped,
        [&json!(1_800_000_003_000_000u64), &json!(1_800_000_004_000_000u64)],
        "{stricter}"
    );
    assert!(stricter["flips"][0]["asked"] == "check", "{stricter}");
}
