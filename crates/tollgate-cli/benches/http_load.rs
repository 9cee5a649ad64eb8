//! Requests per second and latency of `POST /v1/check` and of the Envoy rate limit service's
//! `ShouldRateLimit` against the real `tollgate` binary, with a load generator of our own on
//! loopback: 64 connections (HTTP/1.1 keep-alive, or one HTTP/2 channel each for gRPC), each
//! sending its next request as soon as the previous answer is in, a bounded number each.
//!
//! The generator speaks just enough HTTP/1.1 (one request, read the status line, headers and a
//! `Content-Length` body) to stay out of the way: the server and the generator share the
//! machine's 2 cores, so every cycle the generator saves is a cycle the server can use.
//!
//! Run with `cargo bench -p tollgate-cli --bench http_load` (the Redis run needs
//! `redis-server`).

use std::process::Command;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_testkit::ChildProcess;

const CONNECTIONS: usize = 64;
const REQUESTS_PER_CONNECTION: usize = 3_000;
const KEYS: usize = 100_000;

/// The binary (killed and reaped on drop), its HTTP address and its gRPC address.
struct Server {
    _child: ChildProcess,
    http: String,
    grpc: String,
}

impl Server {
    fn start(args: &[&str]) -> Self {
        let mut child = ChildProcess::start(
            Command::new(env!("CARGO_BIN_EXE_tollgate"))
                .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .args(args),
        );
        let http = child.wait_for_addr("tollgate: http listening on ").to_string();
        let grpc = child.wait_for_addr("tollgate: grpc listening on ").to_string();
        Server {
            _child: child,
            http,
            grpc,
        }
    }
}

/// One connection's share: returns the latency of every request.
async fn connection(addr: String, first_key: usize) -> Histogram<u64> {
    let stream = TcpStream::connect(&addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (read, mut write) = stream.into_split();
    let mut read = AsyncBufReader::new(read);
    let mut latencies = Histogram::<u64>::new(3).expect("histogram");
    let mut line = String::new();
    let mut body = vec![];
    for i in 0..REQUESTS_PER_CONNECTION {
        let key = (first_key + i * 7_919) % KEYS;
        let json = format!(r#"{{"policy":"api","key":"user-{key}"}}"#);
        let request = format!(
            "POST /v1/check HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{json}",
            json.len()
        );
        let started = Instant::now();
        write.write_all(request.as_bytes()).await.expect("write");
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
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().expect("content-length");
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

/// One gRPC channel's share: `ShouldRateLimit` for an envoy descriptor, one call at a time.
async fn channel(addr: String, first_key: usize) -> Histogram<u64> {
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let mut latencies = Histogram::<u64>::new(3).expect("histogram");
    for i in 0..REQUESTS_PER_CONNECTION {
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

async fn load(addr: &str, grpc: bool) -> (f64, u64, u64) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            if grpc {
                tokio::spawn(channel(addr.to_string(), c * 1_543))
            } else {
                tokio::spawn(connection(addr.to_string(), c * 1_543))
            }
        })
        .collect();
    let mut all = Histogram::<u64>::new(3).expect("histogram");
    for task in tasks {
        all.add(task.await.expect("task")).expect("merge");
    }
    let per_second = (CONNECTIONS * REQUESTS_PER_CONNECTION) as f64 / started.elapsed().as_secs_f64();
    (
        per_second,
        all.value_at_quantile(0.5),
        all.value_at_quantile(0.99),
    )
}

fn main() {
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
    println!("| api | store | connections | requests | requests/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|---|---|");
    let memory = Server::start(&["--config", dir]);
    let redis = tollgate_testkit::RedisServer::start();
    let on_redis = Server::start(&["--config", dir, "--store", &redis.url()]);
    for (name, server) in [("memory", &memory), ("redis", &on_redis)] {
        for (api, grpc, addr) in [
            ("POST /v1/check", false, &server.http),
            ("ShouldRateLimit", true, &server.grpc),
        ] {
            // A first run settles connections and fills the keys; the second is reported.
            runtime.block_on(load(addr, grpc));
            let (per_second, p50, p99) = runtime.block_on(load(addr, grpc));
            println!(
                "| {api} | {name} | {CONNECTIONS} | {} | {per_second:.0} | {p50} | {p99} |",
                CONNECTIONS * REQUESTS_PER_CONNECTION
            );
        }
    }
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_dir_all(&envoy);
}
