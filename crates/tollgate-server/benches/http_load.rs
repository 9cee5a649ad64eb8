//! Requests per second and latency of `POST /v1/check` against the real `tollgate` binary, with a
//! load generator of our own on loopback: 64 keep-alive connections, each sending its next
//! request as soon as the previous answer is in, a bounded number of requests each.
//!
//! The generator speaks just enough HTTP/1.1 (one request, read the status line, headers and a
//! `Content-Length` body) to stay out of the way: the server and the generator share the
//! machine's 2 cores, so every cycle the generator saves is a cycle the server can use.
//!
//! Run with `cargo bench -p tollgate-server --bench http_load` (the Redis run needs
//! `redis-server`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpStream;

const CONNECTIONS: usize = 64;
const REQUESTS_PER_CONNECTION: usize = 3_000;
const KEYS: usize = 100_000;

struct Server(Child, String);

impl Server {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start tollgate");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines.next().expect("tollgate printed its address").expect("line");
            if let Some(addr) = line.strip_prefix("tollgate: http listening on ") {
                break addr.to_string();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server(child, addr)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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

async fn load(addr: &str) -> (f64, u64, u64) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|c| tokio::spawn(connection(addr.to_string(), c * 1_543)))
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
    println!("| store | connections | requests | requests/s | p50 µs | p99 µs |");
    println!("|---|---|---|---|---|---|");
    let memory = Server::start(&[]);
    let redis = tollgate_testkit::RedisServer::start();
    let on_redis = Server::start(&["--store", &redis.url()]);
    for (name, server) in [("memory", &memory), ("redis", &on_redis)] {
        // Warm up: every key once is not needed; a short run settles the connections.
        runtime.block_on(load(&server.1));
        let (per_second, p50, p99) = runtime.block_on(load(&server.1));
        println!(
            "| {name} | {CONNECTIONS} | {} | {per_second:.0} | {p50} | {p99} |",
            CONNECTIONS * REQUESTS_PER_CONNECTION
        );
    }
}
