//! The envoyproxy/ratelimit operations surface of the real binary: configured the way upstream's
//! deployments are (its environment variables and a `RUNTIME_ROOT` tree, `tests/fixtures/runtime`),
//! driven over real gRPC and `POST /json`, with `/healthcheck`, the gRPC health service (against
//! a real redis-server that is stopped and started again), the debug port's `/rlconfig`, the
//! precedence of tollgate's flags over upstream's variables, and problem bodies on every error.
//!
//! Each case says what upstream answers; tollgate must answer the same.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_server::grpc::proto::RateLimitResponse;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_response::rate_limit::Unit;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_testkit::{ChildProcess, RedisCluster, RedisSentinel, RedisServer, store_timeout_arg};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Every variable of upstream's that tollgate reads, removed from the child's environment so the
/// machine running the tests cannot change them.
const UPSTREAM_VARS: [&str; 32] = [
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "LOG_LEVEL",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "REDIS_URL",
    "REDIS_TYPE",
    "REDIS_SOCKET_TYPE",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "HOST",
    "PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "SHADOW_MODE",
    "MERGE_DOMAIN_CONFIG",
    "NEAR_LIMIT_RATIO",
    "CONFIG_TYPE",
    "BACKEND_TYPE",
    "REDIS_PERSECOND",
    "GRPC_UDS",
    "GRPC_SERVER_USE_TLS",
];

/// How long a test waits for a health change before failing (a bound, not an expectation: the
/// probe runs every second).
const HEALTH_WAIT: Duration = Duration::from_secs(30);

fn runtime_root() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/runtime/current")
        .to_string_lossy()
        .into_owned()
}

/// The fixture tree, as upstream's manifests name it: `<root>/ratelimit/config/*.yaml`.
fn runtime_vars() -> Vec<(&'static str, String)> {
    vec![
        ("RUNTIME_ROOT", runtime_root()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
    ]
}

/// `tollgate serve` with `args` and exactly `vars` of upstream's variables.
fn command(args: &[&str], vars: &[(&str, String)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command.arg("serve").args(args);
    for var in UPSTREAM_VARS.iter().chain(&[
        "TOLLGATE_HTTP_ADDR",
        "TOLLGATE_GRPC_ADDR",
        "TOLLGATE_DEBUG_ADDR",
        "TOLLGATE_STORE",
    ]) {
        command.env_remove(var);
    }
    command.envs(vars.iter().map(|(k, v)| (*k, v.as_str())));
    command
}

struct Tollgate {
    child: ChildProcess,
    http: String,
    grpc: String,
    debug: Option<String>,
}

impl Tollgate {
    /// Starts it and reads where it listens; `debug` says whether a debug port is expected.
    fn start(args: &[&str], vars: &[(&str, String)], debug: bool) -> Self {
        let mut child = ChildProcess::start(&mut command(args, vars));
        let http = format!("http://{}", child.wait_for_addr("http listening on "));
        let grpc = format!("http://{}", child.wait_for_addr("grpc listening on "));
        let debug = debug.then(|| format!("http://{}", child.wait_for_addr("debug listening on ")));
        child.wait_for(" store, ");
        Tollgate {
            child,
            http,
            grpc,
            debug,
        }
    }

    async fn json(&self, body: &str) -> (u16, Value) {
        let answer = reqwest::Client::new()
            .post(format!("{}/json", self.http))
            .body(body.to_owned())
            .send()
            .await
            .expect("POST /json");
        let status = answer.status().as_u16();
        let text = answer.text().await.expect("body");
        let body = serde_json::from_str(&text).unwrap_or_else(|err| panic!("not json ({err}): {text}"));
        (status, body)
    }

    async fn get(&self, base: &str, path: &str) -> (u16, String) {
        let answer = reqwest::get(format!("{base}{path}")).await.expect("GET");
        (answer.status().as_u16(), answer.text().await.expect("body"))
    }

    async fn rls(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        RateLimitServiceClient::connect(self.grpc.clone())
            .await
            .expect("connect to the grpc listener")
    }

    async fn health(&self) -> HealthClient<tonic::transport::Channel> {
        let channel = tonic::transport::Channel::from_shared(self.grpc.clone())
            .expect("a grpc url")
            .connect()
            .await
            .expect("connect to the grpc listener");
        HealthClient::new(channel)
    }
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: (*key).to_owned(),
                        value: (*value).to_owned(),
                    })
                    .collect(),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// `durationUntilReset` is a whole number of seconds (`"3600s"`) at most `max` long.
fn assert_reset_within(status: &Value, max: u64) {
    let reset = status["durationUntilReset"]
        .as_str()
        .unwrap_or_else(|| panic!("no durationUntilReset in {status}"));
    let seconds: u64 = reset
        .strip_suffix('s')
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not whole seconds: {reset}"));
    assert!((1..=max).contains(&seconds), "{reset}");
}

#[tokio::test]
async fn grpc_and_json_are_one_service_configured_from_the_runtime_tree() {
    // Upstream's variables only: listeners from HOST/PORT and GRPC_HOST/GRPC_PORT, the limits
    // from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, the memory store (no REDIS_URL).
    let mut vars = runtime_vars();
    vars.extend([
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", "0".to_owned()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("GRPC_PORT", "0".to_owned()),
    ]);
    let server = Tollgate::start(&[], &vars, false);
    assert!(
        !server
            .child
            .seen()
            .iter()
            .any(|line| line.contains("debug listening")),
        "the debug port is off unless asked for: {:?}",
        server.child.seen()
    );
    one_service(&server, "memory").await;
}

#[tokio::test]
async fn grpc_and_json_are_one_service_on_redis_from_redis_url() {
    let timeout = store_timeout_arg();
    let redis = RedisServer::start();
    let mut vars = runtime_vars();
    vars.extend([
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        // Upstream's log level, used since RUST_LOG is not set: the info event shows.
        ("LOG_LEVEL", "INFO".to_owned()),
    ]);
    let mut server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--store-timeout",
            &timeout,
        ],
        &vars,
        false,
    );
    server.child.printed("store answers: health is serving");
    one_service(&server, "redis").await;
}

#[tokio::test]
async fn grpc_and_json_are_one_service_on_redis_cluster_from_redis_type() {
    let timeout = store_timeout_arg();
    let cluster = RedisCluster::start();
    let nodes: Vec<String> = cluster
        .ports()
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let mut vars = runtime_vars();
    vars.extend([
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_TYPE", "cluster".to_owned()),
        ("REDIS_URL", nodes.join(",")),
    ]);
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--store-timeout",
            &timeout,
        ],
        &vars,
        false,
    );
    one_service(&server, "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_from_redis_type_serves_and_follows_a_failover() {
    let timeout = store_timeout_arg();
    let setup = RedisSentinel::start();
    let mut vars = runtime_vars();
    vars.extend([
        ("REDIS_TYPE", "sentinel".to_owned()),
        // upstream's form: the master's name, then the sentinels.
        (
            "REDIS_URL",
            format!("{},{}", setup.master_name(), setup.sentinel_addrs()),
        ),
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_PORT", "0".to_owned()),
    ]);
    let mut server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--store-timeout",
            &timeout,
        ],
        &vars,
        true,
    );
    one_service(&server, "redis").await;
    let old_master = setup.master().port();

    // A bounded loop of checks runs while the master is killed (by its PID) and the sentinels
    // promote the replica; it stops once the failover is done.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (http, done) = (server.http.clone(), done.clone());
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut answered = 0u32;
            for n in 0..20_000 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let body = format!(
                    r#"{{"domain": "edge", "descriptors": [{{"entries": [{{"key": "five_per_day", "value": "load-{}"}}]}}]}}"#,
                    n % 50
                );
                if client
                    .post(format!("{http}/json"))
                    .body(body)
                    .send()
                    .await
                    .is_ok()
                {
                    answered += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            answered
        })
    };
    let (setup, failover) = tokio::task::spawn_blocking(move || {
        let mut setup = setup;
        let failover = setup.fail_over();
        (setup, failover)
    })
    .await
    .expect("failover");
    assert_eq!(failover.old_master, old_master);

    // Decisions go on on the new master: a fresh counter admits once and is then over its limit,
    // which only a store that decides answers (a failure mode would not deny). Bounded: until
    // the store has followed the sentinels.
    let debug = server.debug.clone().expect("the debug listener");
    let deadline = std::time::Instant::now() + HEALTH_WAIT;
    let mut attempt = 0;
    let metrics = loop {
        attempt += 1;
        let body = format!(
            r#"{{"domain": "edge", "descriptors": [{{"entries": [{{"key": "one_per_day", "value": "after-{attempt}"}}]}}]}}"#
        );
        let first = server.json(&body).await;
        let second = server.json(&body).await;
        let (_, metrics) = server.get(&debug, "/metrics").await;
        if first.0 == 200 && second.0 == 429 && metrics.contains("tollgate_store_failovers_total 1") {
            break metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no decision from the new master within {HEALTH_WAIT:?}: {first:?} {second:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(load.await.expect("load") > 0);
    // The failover is seen: a metric, and a warn line naming the old and the new master.
    assert!(metrics.contains("tollgate_store_state_lost_total"), "{metrics}");
    let line = server.child.printed("redis sentinel failover");
    assert!(
        line.contains(&format!("127.0.0.1:{}", failover.old_master))
            && line.contains(&format!("127.0.0.1:{}", failover.new_master)),
        "{line}"
    );
    assert!(setup.master().script_calls() > 0);
}

#[tokio::test]
async fn redis_auth_logs_in_and_a_changed_password_turns_health_off() {
    let timeout = store_timeout_arg();
    let redis = RedisServer::start();
    redis.require_password("s3cret@with%signs");
    let vars = |auth: &str| {
        let mut vars = runtime_vars();
        vars.extend([
            ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
            ("REDIS_AUTH", auth.to_owned()),
        ]);
        vars
    };
    // `password` alone, and `user:password` (the default user), as upstream reads REDIS_AUTH.
    let mut watches = Vec::new();
    for auth in ["s3cret@with%signs", "default:s3cret@with%signs"] {
        let server = Tollgate::start(
            &[
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
                "--store-timeout",
                &timeout,
            ],
            &vars(auth),
            false,
        );
        let mut watch = server
            .health()
            .await
            .watch(HealthCheckRequest {
                service: "ratelimit".to_owned(),
            })
            .await
            .expect("watch")
            .into_inner();
        wait_until(&mut watch, ServingStatus::Serving).await;
        one_service(&server, "redis").await;
        watches.push((server, watch));
    }
    // The password changes and the connections are dropped: the old one no longer logs in.
    let auth = ["--no-auth-warning", "-a", "s3cret@with%signs"];
    redis.cli(&[&auth[..], &["CONFIG", "SET", "requirepass", "changed"]].concat());
    redis.cli(&[
        "--no-auth-warning",
        "-a",
        "changed",
        "CLIENT",
        "KILL",
        "TYPE",
        "normal",
    ]);
    for (server, watch) in &mut watches {
        wait_until(watch, ServingStatus::NotServing).await;
        assert_eq!(server.get(&server.http, "/healthcheck").await.0, 500);
    }
}

/// The gRPC door and `/json` answer one descriptor the same way, from one counter, with
/// upstream's answers; `store` is the store the server said it uses.
async fn one_service(server: &Tollgate, store: &str) {
    assert!(
        server
            .child
            .seen()
            .iter()
            .any(|line| line.contains(&format!("{store} store"))),
        "expected the {store} store: {:?}",
        server.child.seen()
    );
    // A value of this server's own, so servers sharing one Redis do not share the counters.
    let value = server.grpc.rsplit(':').next().unwrap_or_default().to_owned();
    // Upstream: OK, one of one spent, so 0 left; the limit is 1 per DAY.
    let mut rls = server.rls().await;
    let answer = rls
        .should_rate_limit(request("edge", &[&[("one_per_day", &value)]]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let status = &answer.statuses[0];
    assert_eq!(status.limit_remaining, 0);
    let limit = status.current_limit.as_ref().expect("current_limit");
    assert_eq!((limit.requests_per_unit, limit.unit), (1, Unit::Day as i32));

    // The same counter over /json. Upstream: 429, OVER_LIMIT, remaining 0 (so left out).
    let (code, body) = server
        .json(&format!(
            r#"{{"domain": "edge", "descriptors": [{{"entries": [{{"key": "one_per_day", "value": "{value}"}}]}}]}}"#
        ))
        .await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(body["overallCode"], "OVER_LIMIT", "{body}");
    let status = &body["statuses"][0];
    assert_eq!(status["code"], "OVER_LIMIT");
    assert_eq!(
        status["currentLimit"],
        json!({"requestsPerUnit": 1, "unit": "DAY"})
    );
    assert!(status.get("limitRemaining").is_none(), "{status}");
    assert_reset_within(status, 86_400);

    // And back on gRPC: still over.
    let answer = rls
        .should_rate_limit(request("edge", &[&[("one_per_day", &value)]]))
        .await
        .expect("call")
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);

    // The second file of the directory is loaded too: nested descriptors, 2 a day per number.
    let marketing = format!(
        r#"{{"domain": "messaging", "descriptors": [{{"entries": [
            {{"key": "message_type", "value": "marketing"}}, {{"key": "to_number", "value": "{value}"}}]}}]}}"#
    );
    assert_eq!(server.json(&marketing).await.0, 200);
    assert_eq!(server.json(&marketing).await.0, 200);
    assert_eq!(server.json(&marketing).await.0, 429);
}

#[tokio::test]
async fn json_answers_every_kind_of_limit_as_upstream() {
    let server = Tollgate::start(
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
        &runtime_vars(),
        false,
    );

    // hits_addend in the JSON name (a string, as proto3 JSON allows) and the proto name.
    // Upstream: 5 - 3 = 2 left, with the limit's name.
    let five = |addend: &str| {
        format!(
            r#"{{"domain": "edge", {addend}, "descriptors": [{{"entries": [{{"key": "five_per_day", "value": "v"}}]}}]}}"#
        )
    };
    let (code, body) = server.json(&five(r#""hitsAddend": "3""#)).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["statuses"][0],
        json!({"code": "OK", "currentLimit": {"name": "five", "requestsPerUnit": 5, "unit": "DAY"}, "limitRemaining": 2,
               "durationUntilReset": body["statuses"][0]["durationUntilReset"]})
    );
    assert_reset_within(&body["statuses"][0], 86_400);
    // Upstream: exactly at the limit is still OK, with 0 left (left out of the JSON).
    let (code, body) = server.json(&five(r#""hits_addend": 2"#)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body["statuses"][0].get("limitRemaining").is_none(), "{body}");
    let (code, body) = server.json(&five(r#""hits_addend": 1"#)).await;
    assert_eq!((code, &body["overallCode"]), (429, &json!("OVER_LIMIT")));

    // unlimited: OK with upstream's u32::MAX remaining and no current_limit.
    let (code, body) = server
        .json(r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "unlimited", "value": "x"}]}]}"#)
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        json!({"overallCode": "OK", "statuses": [{"code": "OK", "limitRemaining": 4294967295_u32}]})
    );

    // requests_per_unit 0: over the limit at once, 0 per HOUR (the 0 left out), reset within the hour.
    let (code, body) = server
        .json(r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "blocked", "value": "x"}]}]}"#)
        .await;
    assert_eq!(code, 429);
    assert_eq!(body["statuses"][0]["currentLimit"], json!({"unit": "HOUR"}));
    assert_reset_within(&body["statuses"][0], 3_600);

    // shadow_mode: over the limit on the second call, but answered OK.
    for _ in 0..2 {
        let (code, body) = server
            .json(r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "observed", "value": "x"}]}]}"#)
            .await;
        assert_eq!(
            (code, &body["statuses"][0]["code"]),
            (200, &json!("OK")),
            "{body}"
        );
    }

    // An unknown domain or an unmatched descriptor: OK, with nothing more.
    let (code, body) = server
        .json(r#"{"domain": "nowhere", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#)
        .await;
    assert_eq!(
        (code, body),
        (200, json!({"overallCode": "OK", "statuses": [{"code": "OK"}]}))
    );

    // One status per descriptor, in order; one over the limit makes the request over.
    let (code, body) = server
        .json(
            r#"{"domain": "edge", "descriptors": [
            {"entries": [{"key": "unlimited", "value": "x"}]},
            {"entries": [{"key": "blocked", "value": "x"}]}]}"#,
        )
        .await;
    assert_eq!(code, 429);
    let codes: Vec<&Value> = body["statuses"]
        .as_array()
        .expect("statuses")
        .iter()
        .map(|s| &s["code"])
        .collect();
    assert_eq!(codes, [&json!("OK"), &json!("OVER_LIMIT")]);
}

#[tokio::test]
async fn bad_json_requests_are_400_with_the_reason() {
    let server = Tollgate::start(
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
        &runtime_vars(),
        false,
    );
    // Upstream answers 400 to each; tollgate says why, as a problem document.
    let cases = [
        ("{not json", "invalid json"),
        (
            r#"{"domain": "edge", "descriptors": [], "colour": "red"}"#,
            "unknown field `colour`",
        ),
        (
            r#"{"domain": "edge", "hitsAddend": -1}"#,
            "hits_addend: expected a non-negative integer",
        ),
        (
            r#"{"domain": "", "descriptors": [{"entries": [{"key": "k"}]}]}"#,
            "rate limit domain must not be empty",
        ),
        (
            r#"{"domain": "edge", "descriptors": []}"#,
            "rate limit descriptor list must not be empty",
        ),
        (
            r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "k"}], "isNegativeHits": true, "hitsAddend": 0}]}"#,
            "is_negative_hits gives back its hits_addend, which must be at least 1",
        ),
    ];
    for (body, reason) in cases {
        let (code, problem) = server.json(body).await;
        assert_eq!(code, 400, "{body}: {problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(reason), "{body}: {detail}");
    }
    // The gRPC door refuses the same request with upstream's status.
    let refused = server
        .rls()
        .await
        .should_rate_limit(request("", &[&[("k", "v")]]))
        .await
        .expect_err("an empty domain is refused");
    assert_eq!(refused.code(), tonic::Code::Unknown);
    assert_eq!(refused.message(), "rate limit domain must not be empty");
    // Only POST.
    let (code, _) = server.get(&server.http, "/json").await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn debug_port_dumps_the_loaded_config_and_serves_metrics() {
    let mut vars = runtime_vars();
    vars.extend([
        ("DEBUG_HOST", "127.0.0.1".to_owned()),
        ("DEBUG_PORT", "0".to_owned()),
    ]);
    let server = Tollgate::start(&["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"], &vars, true);
    let debug = server.debug.clone().expect("debug port");
    // Upstream prints the same lines (in its maps' random order; sorted here).
    let (code, dump) = server.get(&debug, "/rlconfig").await;
    assert_eq!(code, 200);
    assert_eq!(
        dump,
        "edge.blocked: unit=HOUR requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
         edge.five_per_day: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
         edge.observed: unit=DAY requests_per_unit=1, shadow_mode: true, quota_mode: false\n\
         edge.one_per_day: unit=DAY requests_per_unit=1, shadow_mode: false, quota_mode: false\n\
         edge.unlimited: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
         messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
    );
    let (code, index) = server.get(&debug, "/").await;
    assert_eq!(code, 200);
    assert!(
        index.contains("/rlconfig: ") && index.contains("/metrics: "),
        "{index}"
    );
    // A decision shows in the debug port's metrics.
    server
        .json(r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "one_per_day", "value": "m"}]}]}"#)
        .await;
    let (code, metrics) = server.get(&debug, "/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("tollgate_decisions_total"), "{metrics}");
}

#[tokio::test]
async fn every_error_of_the_http_and_debug_listeners_is_a_problem() {
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
        ],
        &runtime_vars(),
        true,
    );
    let debug = server.debug.clone().expect("debug port");
    let client = reqwest::Client::new();
    for (base, method, path, status) in [
        (&debug, "GET", "/nope", 404),
        (&debug, "GET", "/rlconfig/x", 404),
        (&debug, "POST", "/rlconfig", 405),
        (&debug, "DELETE", "/metrics", 405),
        (&debug, "POST", "/", 405),
        (&server.http, "GET", "/json", 405),
        (&server.http, "PUT", "/json", 405),
        (&server.http, "POST", "/healthcheck", 405),
        (&server.http, "GET", "/nope", 404),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let answer = client
            .request(method.clone(), format!("{base}{path}"))
            .send()
            .await
            .expect("request");
        let what = format!("{method} {base}{path}");
        assert_eq!(answer.status().as_u16(), status, "{what}");
        assert_eq!(
            answer.headers().get("content-type").map(|v| v.as_bytes()),
            Some(&b"application/problem+json"[..]),
            "{what}"
        );
        if status == 405 {
            assert!(answer.headers().contains_key("allow"), "{what}");
        }
        let body: Value = answer.json().await.expect("a JSON body");
        assert_eq!(body["status"], status, "{what}: {body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: {body}"
        );
    }
}

#[tokio::test]
async fn rlconfig_shows_a_reload_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("edge.yaml");
    let limit = |n: u32| {
        format!(
            "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {{unit: hour, requests_per_unit: {n}}}\n"
        )
    };
    std::fs::write(&file, limit(10)).expect("write");
    let config = dir.path().to_str().expect("utf-8 path");
    let mut server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
            "--config",
            config,
        ],
        &[],
        true,
    );
    let debug = server.debug.clone().expect("debug port");
    let line =
        |n: u32| format!("edge.k: unit=HOUR requests_per_unit={n}, shadow_mode: false, quota_mode: false\n");
    assert_eq!(server.get(&debug, "/rlconfig").await, (200, line(10)));
    std::fs::write(&file, limit(20)).expect("write");
    server.child.signal("HUP");
    server.child.wait_for("reloaded");
    assert_eq!(server.get(&debug, "/rlconfig").await, (200, line(20)));
}

#[tokio::test]
async fn tollgate_flags_and_variables_win_over_upstreams() {
    // Ports another process holds: if upstream's PORT or GRPC_PORT were used, the start fails.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port().to_string();
    let flag_config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(
        flag_config.path(),
        "domain: flag\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
    )
    .expect("write");
    let mut vars = runtime_vars();
    vars.extend([
        ("HOST", "127.0.0.1".to_owned()),
        ("PORT", taken_port.clone()),
        ("GRPC_HOST", "127.0.0.1".to_owned()),
        ("GRPC_PORT", taken_port.clone()),
        ("DEBUG_PORT", taken_port.clone()),
        // tollgate's own variable wins over upstream's too.
        ("TOLLGATE_GRPC_ADDR", "127.0.0.1:0".to_owned()),
    ]);
    let config = flag_config.path().to_str().expect("utf-8 path");
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
            "--config",
            config,
        ],
        &vars,
        true,
    );
    for url in [&server.http, &server.grpc, server.debug.as_ref().expect("debug")] {
        assert!(!url.ends_with(&format!(":{taken_port}")), "{url}");
    }
    // --config wins over RUNTIME_ROOT.
    let (_, dump) = server
        .get(server.debug.as_ref().expect("debug"), "/rlconfig")
        .await;
    assert_eq!(
        dump,
        "flag.k: unit=DAY requests_per_unit=3, shadow_mode: false, quota_mode: false\n"
    );
    drop(taken);
}

#[test]
fn unusable_upstream_settings_stop_the_start_naming_the_variable() {
    let cases = [
        (
            "PORT",
            "eighty",
            "PORT=eighty: expected a port number (0 to 65535)",
        ),
        (
            "REDIS_TYPE",
            "sentinel",
            "REDIS_URL=127.0.0.1:1: expected <master-name>,host:port",
        ),
        (
            "NEAR_LIMIT_RATIO",
            "2",
            "NEAR_LIMIT_RATIO=2: expected a number above 0 and at most 1",
        ),
        ("LOG_LEVEL", "loud", "LOG_LEVEL=loud: expected trace, debug"),
        (
            "LIMIT_RESPONSE_HEADERS_ENABLED",
            "maybe",
            "LIMIT_RESPONSE_HEADERS_ENABLED=maybe",
        ),
    ];
    for (var, value, message) in cases {
        let mut vars = vec![(var, value.to_owned())];
        if var == "REDIS_TYPE" {
            vars.push(("REDIS_URL", "127.0.0.1:1".to_owned()));
        }
        let output = command(&["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"], &vars)
            .output()
            .expect("run tollgate");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{var}={value} started");
        assert!(stderr.contains(message), "{var}={value}: {stderr}");
    }
}

#[tokio::test]
async fn upstream_switches_shadow_mode_and_response_headers_take_effect() {
    let mut vars = runtime_vars();
    vars.push(("SHADOW_MODE", "true".to_owned()));
    vars.push(("LIMIT_RESPONSE_HEADERS_ENABLED", "true".to_owned()));
    vars.push(("LIMIT_REMAINING_HEADER", "X-RateLimit-Remaining".to_owned()));
    let server = Tollgate::start(&["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"], &vars, false);
    let once =
        r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "one_per_day", "value": "switches"}]}]}"#;
    let (code, body) = server.json(once).await;
    assert_eq!((code, &body["overallCode"]), (200, &json!("OK")), "{body}");
    // Upstream: global shadow mode answers OK overall while the descriptor says OVER_LIMIT.
    let (code, body) = server.json(once).await;
    assert_eq!((code, &body["overallCode"]), (200, &json!("OK")), "{body}");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT", "{body}");
    // The rate limit headers, under the configured name for the remaining budget.
    let mut rls = server.rls().await;
    let answer = rls
        .should_rate_limit(request("edge", &[&[("five_per_day", "switches")]]))
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let headers: Vec<(String, String)> = answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert!(
        headers.contains(&("RateLimit-Limit".to_owned(), "5".to_owned())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("X-RateLimit-Remaining".to_owned(), "4".to_owned())),
        "{headers:?}"
    );
}

#[tokio::test]
async fn retry_after_and_the_draft_fields_ride_on_the_answer_when_asked_for() {
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--envoy-retry-after",
            "--envoy-ratelimit-fields",
        ],
        &runtime_vars(),
        false,
    );
    let mut rls = server.rls().await;
    let ask = || request("edge", &[&[("one_per_day", "retry-after")]]);
    let allowed = rls
        .should_rate_limit(ask())
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let fields = |answer: &RateLimitResponse| -> Vec<(String, String)> {
        answer
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    let headers = fields(&allowed);
    assert!(
        headers.iter().all(|(k, _)| k != "Retry-After"),
        "an OK answer has none: {headers:?}"
    );
    let policy = headers
        .iter()
        .find(|(k, _)| k == "RateLimit-Policy")
        .expect("RateLimit-Policy");
    assert!(policy.1.ends_with(";q=1;w=86400"), "{policy:?}");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "RateLimit" && v.contains(";r=0;t=")),
        "{headers:?}"
    );
    let denied = rls
        .should_rate_limit(ask())
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    assert_eq!(denied.overall_code, Code::OverLimit as i32);
    let headers = fields(&denied);
    let retry: u64 = headers
        .iter()
        .find(|(k, _)| k == "Retry-After")
        .map(|(_, v)| v.parse().expect("seconds"))
        .expect("Retry-After on OVER_LIMIT");
    let reset = denied.statuses[0]
        .duration_until_reset
        .as_ref()
        .expect("reset")
        .seconds as u64;
    assert!(
        (1..=reset).contains(&retry),
        "Retry-After {retry} within the reset {reset}"
    );
}

#[tokio::test]
async fn every_envoy_setting_is_a_flag_of_serve() {
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
            "--shadow-mode",
            "--count-every-descriptor",
            "--max-stats-keys",
            "1",
            "--limit-response-headers",
            "--limit-remaining-header",
            "X-RateLimit-Remaining",
        ],
        &runtime_vars(),
        true,
    );
    let mut rls = server.rls().await;
    let both = request(
        "edge",
        &[&[("one_per_day", "flags")], &[("five_per_day", "flags")]],
    );
    let first = rls
        .should_rate_limit(both.clone())
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    assert_eq!(first.statuses[1].limit_remaining, 4);
    // --shadow-mode: OK overall though a descriptor is over.
    let second = rls
        .should_rate_limit(both)
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    assert_eq!(
        (second.overall_code(), second.statuses[0].code()),
        (Code::Ok, Code::OverLimit)
    );
    // --count-every-descriptor: the descriptor within its limit spent although the other is over.
    assert_eq!(second.statuses[1].limit_remaining, 3);
    // --limit-response-headers with a name of its own.
    let headers: Vec<(String, String)> = second
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert!(
        headers.contains(&("X-RateLimit-Remaining".to_owned(), "0".to_owned())),
        "{headers:?}"
    );
    // --max-stats-keys 1: the second stats key is counted under `_other`.
    let debug = server.debug.clone().expect("debug port");
    let (_, metrics) = server.get(&debug, "/metrics").await;
    let keys: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("tollgate_envoy_total_hits_total{"))
        .filter_map(|line| line.split("key=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(keys.len(), 2, "{metrics}");
    assert!(keys.contains("_other"), "{keys:?}");
}

/// `tollgate check-config` with `args`, with exactly `vars` of upstream's variables.
fn check_config(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command.arg("check-config").args(args);
    for var in UPSTREAM_VARS.iter().chain(&["TOLLGATE_MERGE_DOMAIN_CONFIG"]) {
        command.env_remove(var);
    }
    command.envs(vars.iter().copied());
    command.output().expect("run tollgate check-config")
}

#[test]
fn check_config_reads_merge_domain_config_as_serve_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (file, key) in [("a.yaml", "user"), ("b.yaml", "path")] {
        let yaml = format!(
            "domain: shared\ndescriptors:\n  - key: {key}\n    rate_limit: {{unit: minute, requests_per_unit: 1}}\n"
        );
        std::fs::write(dir.path().join(file), yaml).expect("write config");
    }
    let path = dir.path().to_str().expect("utf-8 path");
    let refused = check_config(&[path], &[]);
    assert!(
        !refused.status.success(),
        "one domain in two files loaded without merging"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("b.yaml"),
        "{refused:?}"
    );
    for (args, vars) in [
        (vec![path], vec![("MERGE_DOMAIN_CONFIG", "true")]),
        (vec![path, "--merge-domain-config"], vec![]),
        (vec![path], vec![("TOLLGATE_MERGE_DOMAIN_CONFIG", "true")]),
    ] {
        let merged = check_config(&args, &vars);
        let stdout = String::from_utf8_lossy(&merged.stdout);
        assert!(merged.status.success(), "{args:?} {vars:?}: {merged:?}");
        assert!(stdout.contains("1 envoy domains"), "{stdout}");
    }
}

/// The next status a `Watch` stream reports; `None` when the stream ended.
async fn next_status(stream: &mut tonic::Streaming<HealthCheckResponse>) -> Option<ServingStatus> {
    let message = tokio::time::timeout(HEALTH_WAIT, stream.message())
        .await
        .expect("a health change within the wait");
    match message {
        Ok(Some(response)) => Some(ServingStatus::try_from(response.status).expect("a known status")),
        Ok(None) | Err(_) => None,
    }
}

/// Reads the stream until it reports `wanted`.
async fn wait_until(stream: &mut tonic::Streaming<HealthCheckResponse>, wanted: ServingStatus) {
    // Bounded: each read waits at most HEALTH_WAIT, and the status alternates at most a few times.
    for _ in 0..10 {
        match next_status(stream).await {
            Some(status) if status == wanted => return,
            Some(_) => continue,
            None => panic!("the watch ended before {wanted:?}"),
        }
    }
    panic!("no {wanted:?} after 10 changes");
}

#[tokio::test]
async fn health_follows_redis_and_turns_not_serving_on_shutdown() {
    let timeout = store_timeout_arg();
    let mut redis = RedisServer::start();
    let mut vars = runtime_vars();
    vars.extend([
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
    ]);
    let server = Tollgate::start(
        &[
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--store-timeout",
            &timeout,
        ],
        &vars,
        false,
    );
    assert!(
        server
            .child
            .seen()
            .iter()
            .any(|line| line.contains("redis store")),
        "REDIS_URL picks the Redis store: {:?}",
        server.child.seen()
    );
    let mut health = server.health().await;
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("watch")
        .into_inner();
    wait_until(&mut watch, ServingStatus::Serving).await;
    for service in ["", "ratelimit", "envoy.service.ratelimit.v3.RateLimitService"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .expect("check")
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    assert_eq!(
        server.get(&server.http, "/healthcheck").await,
        (200, "OK".to_owned())
    );

    // Redis gone: NOT_SERVING, and upstream's /healthcheck answers 500.
    redis.kill();
    wait_until(&mut watch, ServingStatus::NotServing).await;
    assert_eq!(server.get(&server.http, "/healthcheck").await.0, 500);

    // Redis back: SERVING again.
    redis.restart();
    wait_until(&mut watch, ServingStatus::Serving).await;
    assert_eq!(server.get(&server.http, "/healthcheck").await.0, 200);

    // SIGTERM: NOT_SERVING first, then the watch ends and the process exits cleanly.
    server.child.signal("TERM");
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::NotServing));
    assert_eq!(
        next_status(&mut watch).await,
        None,
        "the watch ends so the drain can finish"
    );
    // The wait blocks, so it runs off the runtime: the client's connection must stay able to
    // answer the server's GOAWAY and close, or the drain would wait for it.
    drop((watch, health));
    let exited = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.child.wait_exit()
    })
    .await
    .expect("the wait");
    assert!(exited.success());
}

#[tokio::test]
async fn memory_store_is_healthy_from_the_start() {
    let server = Tollgate::start(
        &["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"],
        &runtime_vars(),
        false,
    );
    let mut health = server.health().await;
    let status = health
        .check(HealthCheckRequest {
            service: "ratelimit".to_owned(),
        })
        .await
        .expect("check")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    assert_eq!(
        server.get(&server.http, "/healthcheck").await,
        (200, "OK".to_owned())
    );
    let unknown = health
        .check(HealthCheckRequest {
            service: "something.Else".to_owned(),
        })
        .await
        .expect_err("an unknown service");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

#[test]
fn called_as_ratelimit_it_serves_as_upstreams_image_runs_it() {
    // envoyproxy/ratelimit's image runs `/bin/ratelimit` with no arguments (Envoy Gateway's
    // Deployment too): a link of that name to tollgate serves, from upstream's variables.
    let dir = tempfile::tempdir().expect("temp dir");
    let link = dir.path().join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tollgate"), &link).expect("link");
    let mut command = Command::new(&link);
    for var in UPSTREAM_VARS {
        command.env_remove(var);
    }
    command.envs([
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
    ]);
    let mut child = ChildProcess::start(&mut command);
    child.wait_for_addr("http listening on ");
    child.wait_for_addr("grpc listening on ");
}
