//! Statistics where envoyproxy/ratelimit's deployments read them, through the real binary
//! started with upstream's variables: a statsd listener in this test (UDP and TCP, upstream's
//! default) receives upstream's names and types for the requests made, and `USE_PROMETHEUS`
//! serves the metrics on `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`.

mod binary;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use binary::{Server, TOLLGATE};
use tokio::io::AsyncReadExt;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};

/// Three a minute per address, and a shadow limit of one on paths.
const EDGE: &str = "\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
";

fn ask(address: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: address.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

/// The sum of each counter and the number of each timer in `text` (statsd lines), checking
/// each line's shape.
fn tally(text: &str, into: &mut BTreeMap<String, u64>) {
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (name, rest) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("not a statsd line: {line:?}"));
        let (value, kind) = rest
            .split_once('|')
            .unwrap_or_else(|| panic!("no type: {line:?}"));
        let value: u64 = value
            .parse()
            .unwrap_or_else(|_| panic!("not an integer: {line:?}"));
        match kind {
            "c" => *into.entry(name.to_owned()).or_default() += value,
            "ms" => *into.entry(format!("{name}|ms")).or_default() += 1,
            other => panic!("unexpected type {other:?} in {line:?}"),
        }
    }
}

/// Starts tollgate with `env` and the config, makes five calls for one address (three within
/// the limit, two over) and one for another.
async fn serve_and_call(env: &[(&str, &str)]) -> (Server, tempfile::NamedTempFile) {
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), EDGE).expect("write");
    let mut command = Command::new(TOLLGATE);
    command.envs(env.iter().copied());
    let path = config.path().to_str().expect("utf-8").to_owned();
    let server = tokio::task::block_in_place(|| Server::start_command(&mut command, &["--config", &path]));
    let mut rls = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect");
    for i in 0..5 {
        let answer = rls
            .should_rate_limit(ask("192.0.2.1"))
            .await
            .expect("call")
            .into_inner();
        let expected = if i < 3 { Code::Ok } else { Code::OverLimit };
        assert_eq!(answer.overall_code, expected as i32);
    }
    rls.should_rate_limit(ask("192.0.2.2")).await.expect("call");
    (server, config)
}

/// What a run must have sent: upstream's names, summed.
fn assert_upstream_counts(seen: &BTreeMap<String, u64>) {
    let stat = |name: &str| seen.get(name).copied().unwrap_or(0);
    assert_eq!(
        stat("ratelimit.service.rate_limit.edge.remote_address.total_hits"),
        6,
        "{seen:#?}"
    );
    assert_eq!(
        stat("ratelimit.service.rate_limit.edge.remote_address.over_limit"),
        2,
        "{seen:#?}"
    );
    assert_eq!(
        stat("ratelimit.service.rate_limit.edge.remote_address.within_limit"),
        4,
        "{seen:#?}"
    );
    // The third hit of three took the count past 80% of the limit: near.
    assert_eq!(
        stat("ratelimit.service.rate_limit.edge.remote_address.near_limit"),
        1,
        "{seen:#?}"
    );
    assert_eq!(
        stat("ratelimit_server.ShouldRateLimit.total_requests"),
        6,
        "{seen:#?}"
    );
    assert_eq!(
        stat("ratelimit_server.ShouldRateLimit.response_time|ms"),
        6,
        "{seen:#?}"
    );
}

/// Reads until `done` says the tally is complete, for at most 20 s.
fn complete(seen: &BTreeMap<String, u64>) -> bool {
    seen.get("ratelimit_server.ShouldRateLimit.response_time|ms")
        .copied()
        == Some(6)
        && seen
            .get("ratelimit.service.rate_limit.edge.remote_address.total_hits")
            .copied()
            == Some(6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statsd_listener_over_udp_receives_upstreams_names_for_the_requests_made() {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("bind");
    let port = socket.local_addr().expect("addr").port().to_string();
    let env = [
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", port.as_str()),
        ("STATSD_PROTOCOL", "udp"),
        ("STATS_FLUSH_INTERVAL", "200ms"),
    ];
    let (_server, _config) = serve_and_call(&env).await;
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buffer = vec![0u8; 65_536];
    while !complete(&seen) && Instant::now() < deadline {
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buffer)).await {
            assert!(n <= 1_432, "a datagram of {n} bytes");
            tally(std::str::from_utf8(&buffer[..n]).expect("utf-8"), &mut seen);
        }
    }
    assert_upstream_counts(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_upstreams_default_the_same_names_arrive_on_one_connection() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let env = [
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", port.as_str()),
        ("STATS_FLUSH_INTERVAL", "200ms"),
    ];
    let (_server, _config) = serve_and_call(&env).await;
    let (mut connection, _) = tokio::time::timeout(Duration::from_secs(20), listener.accept())
        .await
        .expect("a connection within 20 s")
        .expect("accept");
    let mut seen = BTreeMap::new();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buffer = vec![0u8; 65_536];
    while !complete(&seen) && Instant::now() < deadline {
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), connection.read(&mut buffer)).await {
            text.push_str(std::str::from_utf8(&buffer[..n]).expect("utf-8"));
            // Whole lines only; a partial one waits for the rest.
            if let Some(end) = text.rfind('\n') {
                let whole: String = text.drain(..=end).collect();
                tally(&whole, &mut seen);
            }
        }
    }
    assert_upstream_counts(&seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_prometheus_serves_the_metrics_on_prometheus_addr_and_path() {
    let env = [
        ("USE_STATSD", "false"),
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("PROMETHEUS_PATH", "/stats/prometheus"),
    ];
    let config = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(config.path(), EDGE).expect("write");
    let mut command = Command::new(TOLLGATE);
    command.envs(env);
    let path = config.path().to_str().expect("utf-8").to_owned();
    let mut server =
        tokio::task::block_in_place(|| Server::start_command(&mut command, &["--config", &path]));
    let line = tokio::task::block_in_place(|| server.wait_for("prometheus listening on "));
    let addr = line.rsplit(' ').next().expect("an address").trim().to_owned();
    let mut rls = RateLimitServiceClient::connect(server.grpc.clone())
        .await
        .expect("connect");
    rls.should_rate_limit(ask("192.0.2.9")).await.expect("call");
    let text = reqwest::get(format!("http://{addr}/stats/prometheus"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    assert!(
        text.contains("tollgate_envoy_total_hits_total{key=\"edge.remote_address\"} 1"),
        "{text}"
    );
    let elsewhere = reqwest::get(format!("http://{addr}/metrics")).await.expect("get");
    assert_eq!(elsewhere.status(), reqwest::StatusCode::NOT_FOUND);
}
