//! deploy/grafana/tollgate.json against a real Prometheus scraping a real `tollgate serve`: every
//! query of every panel (and of every dashboard variable) returns data, so no panel names a
//! metric, a label or a label value that does not exist. The same Prometheus loads
//! deploy/prometheus/alerts.yaml and evaluates every rule without an error.
//!
//! The server runs on Redis with the dashboard's every subject exercised: allowed and denied
//! checks, top offenders (scraped with the admin token), a charge and a refund, a decision log
//! line too long to write, connections refused past both connection limits, and Redis frozen
//! for a moment (store failures, open breakers, degraded answers, fail-closed refusals, a charge
//! not recorded). Traffic goes on, in bounded rounds, until every query has answered.
//!
//! Prometheus is Debian's `prometheus` package: `./scripts/test.sh` installs it and sets
//! `TOLLGATE_PROMETHEUS`; without it this test fails, saying so.

mod binary;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_testkit::{ChildProcess, RedisServer, store_timeout_arg};

const ADMIN_TOKEN: &str = "dashboard-admin-token";
/// Rounds of traffic before the test gives up on a query that never answers, one a second.
const MAX_ROUNDS: usize = 120;

const CONFIG: &str = "
policies:
  api: {algorithm: gcra, rate: 1000/s, burst: 1000}
  login: {algorithm: sliding_log, limit: 2, window: 1m}
  open: {algorithm: gcra, rate: 1000/s, burst: 1000, on_store_failure: fail_open}
  closed: {algorithm: gcra, rate: 1000/s, burst: 1000, on_store_failure: fail_closed}
  tokens: {algorithm: token_bucket, capacity: 100000, refill: 1000/s, on_store_failure: fail_open}
";

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(name)
}

/// Debian's prometheus: `TOLLGATE_PROMETHEUS`, else `prometheus` on the PATH.
fn prometheus_program() -> PathBuf {
    if let Some(path) = std::env::var_os("TOLLGATE_PROMETHEUS") {
        return PathBuf::from(path);
    }
    let on_path = Command::new("prometheus").arg("--version").output();
    if on_path.is_ok_and(|output| output.status.success()) {
        return PathBuf::from("prometheus");
    }
    panic!(
        "prometheus not found: run ./scripts/test.sh (it installs Debian's prometheus package), \
         or `apt-get install prometheus`, or set TOLLGATE_PROMETHEUS to a prometheus executable"
    );
}

/// Every PromQL query of the dashboard, with Grafana's variables replaced as "All" and a range
/// of minutes would: (where, query).
fn dashboard_queries(dashboard: &Value) -> Vec<(String, String)> {
    let grafana = |query: &str| {
        query
            .replace("$__rate_interval", "1m")
            .replace("$__interval", "15s")
            .replace("$__range", "5m")
            .replace("$job", ".*")
            .replace("$instance", ".*")
            .replace("$policy", ".*")
    };
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().expect("panels").iter().collect();
    // Bounded: a row holds panels, a panel holds none.
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("a panel title");
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {title:?} must use the datasource variable"
        );
        let targets = panel["targets"].as_array().filter(|t| !t.is_empty());
        for target in targets.unwrap_or_else(|| panic!("panel {title:?} has no query")) {
            let expr = target["expr"].as_str().expect("a target expr");
            let ref_id = target["refId"].as_str().unwrap_or("?");
            queries.push((format!("panel {title:?} query {ref_id}"), grafana(expr)));
        }
    }
    // `label_values(METRIC{...}, LABEL)`, asked as the series it lists.
    for variable in dashboard["templating"]["list"].as_array().expect("variables") {
        let Some(query) = variable["query"]["query"].as_str() else {
            continue;
        };
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query:?}: expected label_values(...)"));
        let (selector, label) = inner.rsplit_once(',').expect("label_values(selector, label)");
        let name = variable["name"].as_str().unwrap_or("?");
        queries.push((
            format!("variable {name}"),
            grafana(&format!("count by ({}) ({selector})", label.trim())),
        ));
    }
    queries
}

/// A free loopback port for Prometheus, which cannot report a port it picked itself.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

struct Prometheus {
    _child: ChildProcess,
    url: String,
    client: reqwest::Client,
}

impl Prometheus {
    /// Prometheus scraping `target` every second with the admin token, with the alert rules.
    async fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        let config = dir.join("prometheus.yml");
        let rules = repo_file("deploy/prometheus/alerts.yaml");
        std::fs::write(
            &config,
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n\
                 \x20 - job_name: tollgate\n\
                 \x20   scrape_timeout: 1s\n\
                 \x20   authorization: {{type: Bearer, credentials: {ADMIN_TOKEN}}}\n\
                 \x20   static_configs: [{{targets: [\"{target}\"]}}]\n",
            ),
        )
        .expect("write prometheus.yml");
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        // The port is free when picked, not necessarily when Prometheus binds it: try again.
        for _ in 0..3 {
            let port = free_port();
            let mut child = ChildProcess::start(
                Command::new(prometheus_program())
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}")),
            );
            let line = child.wait_for("msg=\"Server is ready to receive web requests.\"");
            let url = format!("http://127.0.0.1:{port}");
            let ready = client.get(format!("{url}/-/ready")).send().await;
            if ready.is_ok_and(|r| r.status().is_success()) {
                return Prometheus {
                    _child: child,
                    url,
                    client,
                };
            }
            eprintln!("prometheus on port {port} did not answer after {line:?}; trying another port");
        }
        panic!("prometheus did not start on a free port in three tries");
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let response = self
            .client
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await
            .unwrap_or_else(|err| panic!("prometheus {path}: {err}"));
        response.json().await.expect("prometheus answers JSON")
    }

    /// The result of an instant query; panics when Prometheus refuses the query itself.
    async fn query(&self, where_: &str, query: &str) -> Vec<Value> {
        let answer = self.api("/api/v1/query", &[("query", query)]).await;
        assert_eq!(
            answer["status"], "success",
            "{where_}: Prometheus refused {query}: {answer}"
        );
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }
}

/// The test's client of the tollgate API.
struct Api {
    client: reqwest::Client,
    http: String,
}

impl Api {
    async fn post(&self, path: &str, body: Value) -> u16 {
        self.client
            .post(format!("{}{path}", self.http))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|err| panic!("POST {path}: {err}"))
            .status()
            .as_u16()
    }

    /// Checks of every policy, denials of `login`, a charge and a refund.
    async fn traffic(&self) {
        for policy in ["api", "open", "closed", "tokens"] {
            self.post("/v1/check", json!({"policy": policy, "key": "198.51.100.7"}))
                .await;
        }
        for _ in 0..4 {
            self.post("/v1/check", json!({"policy": "login", "key": "mallory"}))
                .await;
        }
        self.post(
            "/v1/charge",
            json!({"policy": "tokens", "key": "u1", "cost": 120}),
        )
        .await;
        self.post("/v1/refund", json!({"policy": "api", "key": "198.51.100.7"}))
            .await;
    }
}

/// A connection to `to` from the loopback address `from` (127.0.0.0/8 is all this host's), left
/// open: the listener's limits count it from the accept.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    socket.connect(to).await.expect("connect")
}

/// What a connection got before it was closed (empty: closed without an answer).
async fn answer_of(mut stream: tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "a refused connection is closed at once");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Past `--max-connections-per-address 4`, a fifth connection from one address is closed
/// without an answer; past `--max-connections 8`, one more is answered 503.
async fn hit_both_connection_limits(http: SocketAddr) {
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(connect_from([127, 0, 0, 2], http).await);
    }
    let fifth = connect_from([127, 0, 0, 2], http).await;
    assert_eq!(answer_of(fifth).await, "", "closed at accept, without an answer");
    let mut refused = None;
    for last in 3..=6 {
        for _ in 0..4 {
            let mut stream = connect_from([127, 0, 0, last], http).await;
            // A connection over the limit is answered at once; one held stays silent.
            let mut first = [0u8; 12];
            match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {
                    refused = Some(String::from_utf8_lossy(&first[..n]).into_owned());
                    break;
                }
                _ => held.push(stream),
            }
        }
        if refused.is_some() {
            break;
        }
    }
    let refused = refused.expect("a connection past --max-connections");
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    for mut stream in held {
        let _ = stream.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_a_real_prometheus() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("deploy/grafana/tollgate.json")).expect("read the dashboard"),
    )
    .expect("deploy/grafana/tollgate.json is JSON");
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 20, "{} queries", queries.len());

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("tollgate.yaml");
    std::fs::write(&config, CONFIG).expect("write the config");
    let log = dir.path().join("decisions.jsonl");
    let timeout = store_timeout_arg();
    let mut server = ChildProcess::start(Command::new(binary::TOLLGATE).args([
        "serve",
        "--http",
        "127.0.0.1:0",
        "--grpc",
        "127.0.0.1:0",
        "--debug-addr",
        "127.0.0.1:0",
        "--config",
        config.to_str().expect("utf-8"),
        "--store",
        &redis.url(),
        "--store-timeout",
        &timeout,
        "--admin-token",
        ADMIN_TOKEN,
        "--decision-log",
        log.to_str().expect("utf-8"),
        "--decision-log-max-bytes",
        "1024",
        "--max-key-len",
        "4096",
        "--max-connections",
        "8",
        "--max-connections-per-address",
        "4",
    ]));
    let http = server.wait_for_addr("http listening on ");
    let debug = server.wait_for_addr("debug listening on ");
    let prometheus = Prometheus::start(dir.path(), debug).await;
    let api = Api {
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(1)
            .build()
            .expect("client"),
        http: format!("http://{http}"),
    };

    // The rare events, once: a line too long for the decision log, both connection limits, a
    // reload, and Redis frozen under traffic.
    api.post("/v1/check", json!({"policy": "api", "key": "k".repeat(2000)}))
        .await;
    hit_both_connection_limits(http).await;
    server.signal("HUP");
    redis.freeze();
    for _ in 0..3 {
        api.traffic().await;
    }
    let status = api
        .post("/v1/check", json!({"policy": "closed", "key": "frozen"}))
        .await;
    assert_eq!(status, 503, "a fail-closed policy refuses while Redis is frozen");
    redis.thaw();

    let mut missing = queries.clone();
    let started = Instant::now();
    for _ in 0..MAX_ROUNDS {
        api.traffic().await;
        let mut still = Vec::new();
        for (where_, query) in missing {
            if prometheus.query(&where_, &query).await.is_empty() {
                still.push((where_, query));
            }
        }
        missing = still;
        if missing.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        missing.is_empty(),
        "after {:?} of traffic and scrapes, these dashboard queries still return no data \
         (a metric or label that does not exist?): {missing:#?}",
        started.elapsed()
    );

    // The check can fail: a misspelt metric returns nothing from this very Prometheus.
    assert!(
        prometheus
            .query("a misspelt metric", "sum(rate(tollgate_decision_total[1m]))")
            .await
            .is_empty()
    );
    // Every alert rule evaluates against the real series without an error.
    let rules = prometheus.api("/api/v1/rules", &[]).await;
    let rules: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .expect("rule groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .collect();
    assert!(rules.len() >= 12, "{} rules loaded", rules.len());
    for rule in rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }

    server.signal("TERM");
    assert!(server.wait_exit().success());
}
