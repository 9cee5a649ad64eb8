//! Requests per second of `POST /v1/check` and of the Envoy rate limit service's
//! `ShouldRateLimit` against the real `tollgate` binary, and of a bare axum JSON handler as the
//! framework's ceiling, with a load generator of our own on loopback.
//!
//! # What runs
//!
//! - **`POST /v1/check`**: 64 HTTP/1.1 keep-alive connections, each sending its next request
//!   as soon as the previous answer is in (64 requests in flight).
//! - **`ShouldRateLimit`**: one envoy descriptor per call over raw HTTP/2 (the `h2` crate, the
//!   same HTTP/2 implementation tonic and Envoy's peers use), 64 requests in flight as well,
//!   either as 64 connections with one call at a time each (`64x1`), or as Envoy sends them,
//!   multiplexed: 8 connections with 8 concurrent streams each (`8x8`), or 2 with 32 each
//!   (`2x32`, an Envoy with 2 worker threads keeps about one connection per worker to the
//!   rate limit service).
//! - **`ShouldRateLimit`, tonic client** (memory only): 64 tonic channels, one call at a time:
//!   how the bench drove gRPC before; it shows what a general-purpose client costs the shared
//!   machine.
//! - **bare axum**: a minimal axum app in a child process (this bench run with
//!   `TOLLGATE_BENCH_BARE_AXUM=1`, on the same multi-threaded runtime as `tollgate serve`, with
//!   `TCP_NODELAY`), `POST /v1/check` parsing the same JSON body into a struct and answering a
//!   small JSON object, driven by the same HTTP/1.1 generator: the most any axum server can do
//!   here, so `tollgate serve / bare axum` is how close the server comes to its framework.
//!
//! Both generators speak just enough of their protocol to stay out of the way (HTTP/1.1: write
//! the request, read the status line, headers and `Content-Length` body; gRPC: one HTTP/2
//! request with the length-prefixed protobuf, read the answer and check `grpc-status`, decode
//! the protobuf): the server and the generator share the machine's 2 cores, so every cycle the
//! generator saves is one the server can use. The generator runs on one tokio worker thread.
//!
//! # Paired rounds
//!
//! The machine is shared and its speed drifts by more than the differences measured, so the
//! targets run in alternating rounds (the order reversed every other round) and each ratio is
//! taken within a round, then the median over rounds is reported with the middle half of the
//! per-round ratios. Every target gets one unmeasured warm-up load first (connections settled,
//! keys filled). CPU time per request of the server process and of the generator (from
//! `/proc`) is reported beside: it shows which side a target's rate is bound by.
//!
//! Run with `cargo bench -p tollgate-cli --bench http_load` (the Redis half needs
//! `redis-server`). `TOLLGATE_BENCH_ROUNDS` sets the number of rounds (default 9) and
//! `TOLLGATE_BENCH_REQUESTS` the requests per target and round (default 64 000);
//! `TOLLGATE_BENCH_ONLY=<part of a label>` (such as `memory | h2, 8x8`) drives one target over
//! and over, for a profiler, and prints the server's process id.

use std::process::Command;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_testkit::ChildProcess;

mod rls_client;

/// Requests in flight, for every target.
const IN_FLIGHT: usize = 64;
const KEYS: usize = 100_000;
const BARE_AXUM_ENV: &str = "TOLLGATE_BENCH_BARE_AXUM";

/// A server process (killed and reaped on drop) and its addresses.
struct Server {
    child: ChildProcess,
    http: String,
    grpc: String,
}

impl Server {
    fn tollgate(args: &[&str]) -> Self {
        let mut child = ChildProcess::start(
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .args(args),
        );
        let http = child.wait_for_addr("tollgate: http listening on ").to_string();
        let grpc = child.wait_for_addr("tollgate: grpc listening on ").to_string();
        Server { child, http, grpc }
    }

    fn bare_axum() -> Self {
        let exe = std::env::current_exe().expect("bench executable");
        let mut child = ChildProcess::start(Command::new(exe).env(BARE_AXUM_ENV, "1"));
        let http = child.wait_for_addr("bare axum listening on ").to_string();
        Server {
            child,
            http,
            grpc: String::new(),
        }
    }

    /// CPU seconds (user + system) the process has used so far.
    fn cpu_seconds(&self) -> f64 {
        cpu_seconds(&format!("/proc/{}/stat", self.child.pid()))
    }
}

/// User plus system CPU seconds of the process whose `stat` file is at `path`.
fn cpu_seconds(path: &str) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis
    // start with field 3, so utime and stime (fields 14 and 15) are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, after)| after);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields
        .get(11..13)
        .map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    ticks as f64 / clock_ticks()
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// How a target is driven.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Driver {
    /// HTTP/1.1, one connection per request in flight.
    Http,
    /// HTTP/2 gRPC over `h2`: this many connections, `IN_FLIGHT / connections` streams each.
    Grpc { connections: usize },
    /// The tonic client, one channel per request in flight.
    Tonic,
}

/// One HTTP/1.1 connection's share: `requests` checks, one at a time.
async fn http_connection(addr: String, first_key: usize, requests: usize) -> Histogram<u64> {
    let stream = TcpStream::connect(&addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (read, mut write) = stream.into_split();
    let mut read = AsyncBufReader::new(read);
    let mut latencies = Histogram::<u64>::new(3).expect("histogram");
    let mut line = String::new();
    let mut body = vec![];
    let mut request = Vec::with_capacity(256);
    for i in 0..requests {
        let key = (first_key + i * 7_919) % KEYS;
        let json = format!(r#"{{"policy":"api","key":"user-{key}"}}"#);
        request.clear();
        request.extend_from_slice(
            format!(
                "POST /v1/check HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                json.len()
            )
            .as_bytes(),
        );
        request.extend_from_slice(json.as_bytes());
        let started = Instant::now();
        write.write_all(&request).await.expect("write");
        let mut length = 0;
        let mut status_line = true;
        loop {
            line.clear();
            read.read_line(&mut line).await.expect("read");
            if status_line {
                assert!(
                    line.starts_with("HTTP/1.1 200") || line.starts_with("HTTP/1.1 429"),
                    "{line}"
                );
                status_line = false;
            }
            if line.len() > 15 && line[..15].eq_ignore_ascii_case("content-length:") {
                length = line[15..].trim().parse().expect("content-length");
            }
            if line == "\r\n" {
                break;
            }
        }
        body.resize(length, 0);
        read.read_exact(&mut body).await.expect("body");
        latencies
            .record(started.elapsed().as_micros() as u64)
            .expect("record");
    }
    latencies
}

/// One HTTP/2 connection's share: `streams` streams, each making `requests` calls one at a time
/// over the keys, as Envoy sends them (see `rls_client`).
async fn grpc_connection(addr: String, first_key: usize, streams: usize, requests: usize) -> Histogram<u64> {
    let body = move |stream: usize, i: usize| {
        let key = (first_key + stream * 613 + i * 7_919) % KEYS;
        rls_client::message("bench", "user", format!("user-{key}"))
    };
    rls_client::connection(&addr, streams, requests, body).await.0
}

/// One tonic channel's share: `requests` calls, one at a time.
async fn tonic_channel(addr: String, first_key: usize, requests: usize) -> Histogram<u64> {
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let mut latencies = Histogram::<u64>::new(3).expect("histogram");
    for i in 0..requests {
        let key = (first_key + i * 7_919) % KEYS;
        let request = RateLimitRequest {
            domain: "bench".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".to_owned(),
                    value: format!("user-{key}"),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        };
        let started = Instant::now();
        client.should_rate_limit(request).await.expect("call");
        latencies
            .record(started.elapsed().as_micros() as u64)
            .expect("record");
    }
    latencies
}

/// What one load measured.
#[derive(Debug, Clone, Copy)]
struct Measured {
    per_second: f64,
    p50_us: u64,
    p99_us: u64,
    /// Server CPU microseconds per request.
    server_cpu_us: f64,
    /// Generator CPU microseconds per request.
    client_cpu_us: f64,
}

/// `total` requests against `addr`, `IN_FLIGHT` at a time.
async fn load(addr: &str, driver: Driver, total: usize, server: &Server) -> Measured {
    let each = total / IN_FLIGHT;
    let cpu_before = (server.cpu_seconds(), cpu_seconds("/proc/self/stat"));
    let started = Instant::now();
    let tasks: Vec<_> = match driver {
        Driver::Http => (0..IN_FLIGHT)
            .map(|c| tokio::spawn(http_connection(addr.to_owned(), c * 1_543, each)))
            .collect(),
        Driver::Tonic => (0..IN_FLIGHT)
            .map(|c| tokio::spawn(tonic_channel(addr.to_owned(), c * 1_543, each)))
            .collect(),
        Driver::Grpc { connections } => (0..connections)
            .map(|c| {
                let streams = IN_FLIGHT / connections;
                tokio::spawn(grpc_connection(addr.to_owned(), c * 1_543, streams, each))
            })
            .collect(),
    };
    let mut all = Histogram::<u64>::new(3).expect("histogram");
    for task in tasks {
        all.add(task.await.expect("task")).expect("merge");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let requests = (each * IN_FLIGHT) as f64;
    let server_cpu = server.cpu_seconds() - cpu_before.0;
    let client_cpu = cpu_seconds("/proc/self/stat") - cpu_before.1;
    Measured {
        per_second: requests / elapsed,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
        server_cpu_us: server_cpu * 1e6 / requests,
        client_cpu_us: client_cpu * 1e6 / requests,
    }
}

/// One thing measured in every round.
struct Target<'a> {
    api: &'static str,
    store: &'static str,
    driver: Driver,
    server: &'a Server,
    runs: Vec<Measured>,
}

impl Target<'_> {
    fn addr(&self) -> &str {
        match self.driver {
            Driver::Http => &self.server.http,
            _ => &self.server.grpc,
        }
    }

    fn label(&self) -> String {
        let how = match self.driver {
            Driver::Http => "HTTP/1.1, 64 connections".to_owned(),
            Driver::Grpc { connections } => {
                format!("h2, {connections}x{}", IN_FLIGHT / connections)
            }
            Driver::Tonic => "tonic client, 64x1".to_owned(),
        };
        format!("{} | {} | {how}", self.api, self.store)
    }
}

fn median(values: &mut [f64]) -> f64 {
    quantile(values, 0.5)
}

fn quantile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return f64::NAN;
    }
    let at = ((values.len() - 1) as f64 * q).round() as usize;
    values[at]
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The ceiling: a minimal axum app answering `POST /v1/check` with a small JSON object.
fn bare_axum() {
    use axum::Json;
    use axum::routing::post;
    use axum::serve::ListenerExt;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Check {
        policy: String,
        key: String,
        cost: Option<u64>,
    }

    async fn check(Json(body): Json<Check>) -> Json<serde_json::Value> {
        Json(serde_json::json!({
            "allowed": true,
            "limit": 50,
            "remaining": 49,
            "reset_after_ms": 1,
            "retry_after_ms": null,
            "degraded": body.cost.is_some_and(|c| c == 0) && body.key.is_empty(),
        }))
    }

    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("bare axum listening on {}", listener.local_addr().expect("addr"));
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let app = axum::Router::new().route("/v1/check", post(check));
        axum::serve(listener, app).await.expect("serve");
    });
}

fn main() {
    if std::env::var_os(BARE_AXUM_ENV).is_some() {
        bare_axum();
        return;
    }
    let rounds = env_usize("TOLLGATE_BENCH_ROUNDS", 9).max(1);
    let total = env_usize("TOLLGATE_BENCH_REQUESTS", 64_000).max(IN_FLIGHT);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    // Both APIs decide with 1000 per second, bursts of 50, per user.
    let config = std::env::temp_dir().join(format!("tollgate-bench-{}.yaml", std::process::id()));
    std::fs::write(
        &config,
        "policies:\n  api:\n    algorithm: gcra\n    rate: 1000/s\n    burst: 50\n",
    )
    .expect("write config");
    let envoy = std::env::temp_dir().join(format!("tollgate-bench-{}-envoy", std::process::id()));
    std::fs::create_dir_all(&envoy).expect("config dir");
    std::fs::copy(&config, envoy.join("policies.yaml")).expect("copy");
    std::fs::write(
        envoy.join("envoy.yaml"),
        "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n",
    )
    .expect("write envoy config");
    let dir = envoy.to_str().expect("utf-8 path");
    let memory = Server::tollgate(&["--config", dir]);
    let bare = Server::bare_axum();
    let redis = tollgate_testkit::RedisServer::start();
    let on_redis = Server::tollgate(&["--config", dir, "--store", &redis.url()]);
    let mut targets = vec![];
    for (store, server) in [("memory", &memory), ("redis", &on_redis)] {
        for (api, driver) in [
            ("POST /v1/check", Driver::Http),
            ("ShouldRateLimit", Driver::Grpc { connections: 64 }),
            ("ShouldRateLimit", Driver::Grpc { connections: 8 }),
            ("ShouldRateLimit", Driver::Grpc { connections: 2 }),
        ] {
            targets.push(Target {
                api,
                store,
                driver,
                server,
                runs: vec![],
            });
        }
    }
    targets.push(Target {
        api: "ShouldRateLimit",
        store: "memory",
        driver: Driver::Tonic,
        server: &memory,
        runs: vec![],
    });
    targets.push(Target {
        api: "bare axum POST /v1/check",
        store: "-",
        driver: Driver::Http,
        server: &bare,
        runs: vec![],
    });
    if let Ok(only) = std::env::var("TOLLGATE_BENCH_ONLY") {
        // Profiling: one target, over and over, nothing reported.
        let target = targets
            .iter()
            .find(|t| t.label().contains(&only))
            .expect("no target label contains TOLLGATE_BENCH_ONLY");
        eprintln!("only {} ({})", target.label(), target.server.child.pid());
        for _ in 0..rounds {
            let m = runtime.block_on(load(target.addr(), target.driver, total, target.server));
            eprintln!("{m:?}");
        }
        return;
    }
    for target in &targets {
        runtime.block_on(load(target.addr(), target.driver, total, target.server));
    }
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        for i in order {
            let target = &targets[i];
            let measured = runtime.block_on(load(target.addr(), target.driver, total, target.server));
            targets[i].runs.push(measured);
            // A short pause so one target's leftover work (closing connections) does not
            // land in the next one's time.
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }

    println!("{rounds} rounds of {total} requests per target, {IN_FLIGHT} in flight; medians over rounds\n");
    println!(
        "| api | store | driven by | requests/s | p50 µs | p99 µs | server CPU µs/request | generator CPU µs/request |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for target in &targets {
        let pick = |f: fn(&Measured) -> f64| median(&mut target.runs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} |",
            target.label(),
            pick(|m| m.per_second),
            pick(|m| m.p50_us as f64),
            pick(|m| m.p99_us as f64),
            pick(|m| m.server_cpu_us),
            pick(|m| m.client_cpu_us),
        );
    }
    let find = |api: &str, store: &str, driver: Driver| {
        targets
            .iter()
            .position(|t| t.api == api && t.store == store && t.driver == driver)
            .expect("target")
    };
    let http_memory = find("POST /v1/check", "memory", Driver::Http);
    let http_redis = find("POST /v1/check", "redis", Driver::Http);
    let ratios = [
        (
            "ShouldRateLimit h2 64x1 / POST /v1/check, memory",
            find("ShouldRateLimit", "memory", Driver::Grpc { connections: 64 }),
            http_memory,
        ),
        (
            "ShouldRateLimit h2 8x8 / POST /v1/check, memory",
            find("ShouldRateLimit", "memory", Driver::Grpc { connections: 8 }),
            http_memory,
        ),
        (
            "ShouldRateLimit h2 2x32 / POST /v1/check, memory",
            find("ShouldRateLimit", "memory", Driver::Grpc { connections: 2 }),
            http_memory,
        ),
        (
            "ShouldRateLimit tonic 64x1 / POST /v1/check, memory",
            find("ShouldRateLimit", "memory", Driver::Tonic),
            http_memory,
        ),
        (
            "ShouldRateLimit h2 64x1 / POST /v1/check, redis",
            find("ShouldRateLimit", "redis", Driver::Grpc { connections: 64 }),
            http_redis,
        ),
        (
            "ShouldRateLimit h2 8x8 / POST /v1/check, redis",
            find("ShouldRateLimit", "redis", Driver::Grpc { connections: 8 }),
            http_redis,
        ),
        (
            "ShouldRateLimit h2 2x32 / POST /v1/check, redis",
            find("ShouldRateLimit", "redis", Driver::Grpc { connections: 2 }),
            http_redis,
        ),
        (
            "tollgate POST /v1/check memory / bare axum",
            http_memory,
            find("bare axum POST /v1/check", "-", Driver::Http),
        ),
    ];
    // The second ratio is of CPU time: (server + generator) µs per request of the second
    // target over those of the first. Both processes share 2 cores, so when the machine is
    // otherwise idle the rate ratio tends to it; it moves less with what else runs.
    println!(
        "\n| ratio of requests/s | median of {rounds} rounds | middle half | CPU µs per request, inverse ratio (median) |"
    );
    println!("|---|---:|---|---:|");
    for (name, a, b) in ratios {
        let mut per_round: Vec<f64> = targets[a]
            .runs
            .iter()
            .zip(&targets[b].runs)
            .map(|(x, y)| x.per_second / y.per_second)
            .collect();
        let mid = median(&mut per_round);
        let low = quantile(&mut per_round, 0.25);
        let high = quantile(&mut per_round, 0.75);
        let mut cpu: Vec<f64> = targets[a]
            .runs
            .iter()
            .zip(&targets[b].runs)
            .map(|(x, y)| (y.server_cpu_us + y.client_cpu_us) / (x.server_cpu_us + x.client_cpu_us))
            .collect();
        let cpu = median(&mut cpu);
        println!("| {name} | **{mid:.3}** | {low:.3} to {high:.3} | {cpu:.3} |");
    }
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_dir_all(&envoy);
}
