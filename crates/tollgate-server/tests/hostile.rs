//! Hostile clients against `run` on loopback: slow heads and bodies are cut off while others
//! are served, a flood of connections past the limit is refused and the server answers after it,
//! oversized and malformed requests get problem answers, connections that never speak are
//! closed after the first-byte timeout, a flood of them from one address leaves other addresses
//! served, and shutdown completes with a half-sent request connected.
//!
//! Timeouts here are short so the tests are quick; the assertions are about outcomes (closed,
//! refused, answered), and every wait has a generous upper bound that only guards against a hang.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_server::AnyStore;
use tollgate_server::ListenerOptions;
use tollgate_server::{AppState, Settings};
use tollgate_server::{Listeners, run};

/// Upper bound of any wait: only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(30);

const CONFIG: &str = "\
policies:
  api: {algorithm: fixed_window, limit: 1000, window: 1h}
";

struct Running {
    http: SocketAddr,
    grpc: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(options: ListenerOptions) -> Running {
    let limits = tollgate_config::parse("api.yaml", CONFIG).expect("config");
    let settings = Settings {
        listeners: options,
        admin_token: Some("secret".to_owned()),
        ..Settings::default()
    };
    let state = AppState::new(limits, AnyStore::memory(), settings);
    let any = "127.0.0.1:0".parse().expect("address");
    let listeners = Listeners::bind(any, any).await.expect("bind");
    let http = listeners.http.local_addr().expect("http addr");
    let grpc = listeners.grpc.local_addr().expect("grpc addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run(Arc::clone(&state), listeners, async {
        let _ = stopped.await;
    }));
    Running {
        http,
        grpc,
        stop: Some(stop),
        task,
    }
}

impl Running {
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(HANG_GUARD, &mut self.task)
            .await
            .expect("the server stops")
            .expect("server task")
            .expect("server");
    }
}

/// Everything the server sends until it closes the connection (or resets it).
async fn read_all(socket: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(HANG_GUARD, async {
        let mut buf = [0u8; 4096];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server neither answered nor closed the connection"
    );
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `request` on a fresh connection and reads the answer to the end.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket.write_all(request).await.expect("send");
    read_all(&mut socket).await
}

/// The status and the JSON body of a raw HTTP/1.1 answer.
fn parse(answer: &str) -> (u16, String, Value) {
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let content_type = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default();
    (
        status,
        content_type,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn assert_problem(answer: &str, status: u16) {
    let (got, content_type, body) = parse(answer);
    assert_eq!(got, status, "{answer}");
    assert_eq!(content_type, "application/problem+json", "{answer}");
    assert_eq!(body["status"], status, "{answer}");
    assert!(
        body["title"].is_string() && body["detail"].is_string(),
        "{answer}"
    );
    assert_eq!(body["type"], "about:blank");
}

async fn healthy(addr: SocketAddr) -> bool {
    let answer = exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    answer.starts_with("HTTP/1.1 200")
}

#[tokio::test]
async fn a_slow_head_is_cut_off_while_others_are_served() {
    let server = start(ListenerOptions {
        header_read_timeout: Duration::from_secs(1),
        ..ListenerOptions::default()
    })
    .await;
    let mut slow = TcpStream::connect(server.http).await.expect("connect");
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: ")
        .await
        .expect("send");
    // A normal client is served while the slow one hangs on.
    assert!(healthy(server.http).await);
    // The slow client never finishes its head; the server closes on it, with no answer.
    let answer = read_all(&mut slow).await;
    assert!(!answer.contains("200 OK"), "{answer}");
    assert!(healthy(server.http).await);
    server.stop().await;
}

#[tokio::test]
async fn a_slow_body_gets_408_while_others_are_served() {
    let server = start(ListenerOptions {
        body_read_timeout: Duration::from_secs(1),
        ..ListenerOptions::default()
    })
    .await;
    let mut slow = TcpStream::connect(server.http).await.expect("connect");
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"policy\":")
        .await
        .expect("send");
    assert!(healthy(server.http).await);
    let answer = read_all(&mut slow).await;
    assert_problem(&answer, 408);
    server.stop().await;
}

#[tokio::test]
async fn connections_past_the_limit_are_refused_and_the_server_recovers() {
    let server = start(ListenerOptions {
        max_connections: 20,
        header_read_timeout: Duration::from_secs(120),
        ..ListenerOptions::default()
    })
    .await;
    // Twenty half-sent requests take every slot...
    let mut holders = Vec::new();
    for _ in 0..20 {
        let mut socket = TcpStream::connect(server.http).await.expect("connect");
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .await
            .expect("send");
        holders.push(socket);
    }
    // ...so a flood of others is refused with a 503 problem, and the server stays up.
    for _ in 0..100 {
        let answer = exchange(server.http, b"").await;
        assert_problem(&answer, 503);
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
    drop(holders);
    // The slots come back once the server sees the holders go; bounded retries.
    let mut served = false;
    for _ in 0..200 {
        if healthy(server.http).await {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(served, "the server did not answer after the flood ended");
    server.stop().await;
}

#[tokio::test]
async fn oversized_and_malformed_requests_get_problem_answers() {
    let server = start(ListenerOptions::default()).await;
    let addr = server.http;

    let long_target = format!(
        "GET /healthz?{} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        "a".repeat(9000)
    );
    assert_problem(&exchange(addr, long_target.as_bytes()).await, 414);

    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {}\r\nconnection: close\r\n\r\n",
        "b".repeat(20_000)
    );
    assert_problem(&exchange(addr, big_header.as_bytes()).await, 431);

    let declared =
        "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\nconnection: close\r\n\r\n";
    assert_problem(&exchange(addr, declared.as_bytes()).await, 413);

    // Chunked, so no length is declared: cut off while it streams.
    let chunk = "x".repeat(70_000);
    let chunked = format!(
        "POST /v1/check HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    assert_problem(&exchange(addr, chunked.as_bytes()).await, 413);

    let bad_json = "POST /v1/check HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 9\r\nconnection: close\r\n\r\n{\"policy\"";
    assert_problem(&exchange(addr, bad_json.as_bytes()).await, 400);

    let unknown = "GET /nowhere HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    assert_problem(&exchange(addr, unknown.as_bytes()).await, 404);

    let wrong_method = "GET /v1/check HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    let answer = exchange(addr, wrong_method.as_bytes()).await;
    assert_problem(&answer, 405);
    assert!(answer.to_ascii_lowercase().contains("allow: post"), "{answer}");

    let bad_escape = "GET /v1/limits/api/%FF%FE HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    assert_problem(&exchange(addr, bad_escape.as_bytes()).await, 400);

    // Clearing a counter needs a token (here the admin one: the server has no app token).
    let reset = "DELETE /v1/attempts/login/alice HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    assert_problem(&exchange(addr, reset.as_bytes()).await, 401);
    let reset_ok = "DELETE /v1/attempts/login/alice HTTP/1.1\r\nhost: x\r\nauthorization: Bearer secret\r\nconnection: close\r\n\r\n";
    assert!(
        exchange(addr, reset_ok.as_bytes())
            .await
            .starts_with("HTTP/1.1 204")
    );

    assert!(healthy(addr).await);
    server.stop().await;
}

#[tokio::test]
async fn the_grpc_port_closes_silent_connections_and_refuses_past_the_limit() {
    let server = start(ListenerOptions {
        max_connections: 3,
        idle_timeout: Duration::from_secs(1),
        ..ListenerOptions::default()
    })
    .await;
    // Three connections that never send the HTTP/2 preface hold the slots...
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(TcpStream::connect(server.grpc).await.expect("connect"));
    }
    // ...so a fourth is closed at once (EOF; no bytes)...
    let mut extra = TcpStream::connect(server.grpc).await.expect("connect");
    assert_eq!(read_all(&mut extra).await, "");
    // ...and the silent ones are closed by the idle timeout (after the server's own HTTP/2
    // SETTINGS frame, which is all they ever get: `read_all` returns only once they are closed).
    for mut socket in silent {
        let seen = read_all(&mut socket).await;
        assert!(seen.len() < 64, "more than a SETTINGS frame: {seen:?}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_first_byte_timeout() {
    // The idle timeout is far beyond the hang guard: only the first-byte timeout can close them.
    let server = start(ListenerOptions {
        first_byte_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(600),
        header_read_timeout: Duration::from_secs(600),
        ..ListenerOptions::default()
    })
    .await;
    let mut http = TcpStream::connect(server.http).await.expect("connect");
    let mut grpc = TcpStream::connect(server.grpc).await.expect("connect");
    // A client that speaks at once is served meanwhile.
    assert!(healthy(server.http).await);
    assert_eq!(read_all(&mut http).await, "", "closed without an answer");
    let seen = read_all(&mut grpc).await;
    assert!(seen.len() < 64, "more than a SETTINGS frame: {seen:?}");
    let metrics = tollgate_server::metrics::install().render();
    assert!(
        metrics.contains("tollgate_timeouts_total{listener=\"http\",reason=\"first_byte\"}"),
        "{metrics}"
    );
    server.stop().await;
}

/// A socket connected to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

#[tokio::test]
async fn a_flood_of_silent_connections_from_one_address_leaves_others_served() {
    const FLOODER: [u8; 4] = [127, 0, 0, 2];
    const OTHER: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));
    // Silent connections would live for ten minutes, longer than the whole test.
    let server = start(ListenerOptions {
        max_connections: 20,
        max_connections_per_address: 5,
        first_byte_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        ..ListenerOptions::default()
    })
    .await;
    // More silent connections from one address than either listener has slots.
    let mut flood = Vec::new();
    for _ in 0..40 {
        flood.push(connect_from(FLOODER, server.http).await.expect("connect"));
        flood.push(connect_from(FLOODER, server.grpc).await.expect("connect"));
    }
    // Another address is served on both listeners (accepted after every flood connection).
    let http = reqwest::Client::builder()
        .local_address(OTHER)
        .timeout(HANG_GUARD)
        .build()
        .expect("client");
    let http_status = match http.get(format!("http://{}/healthz", server.http)).send().await {
        Ok(answer) => answer.status().as_u16().to_string(),
        Err(err) => format!("no answer: {err}"),
    };
    let grpc_status = async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .map_err(|err| err.to_string())?
            .local_address(Some(OTHER))
            .timeout(HANG_GUARD)
            .connect()
            .await
            .map_err(|err| format!("no connection: {err}"))?;
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .map_err(|status| format!("no answer: {status}"))?;
        Ok::<_, String>(answer.into_inner().status)
    }
    .await;
    assert_eq!(http_status, "200", "HTTP from another address");
    assert_eq!(grpc_status, Ok(1), "gRPC health from another address: SERVING");
    let metrics = tollgate_server::metrics::install().render();
    for listener in ["http", "grpc"] {
        let series = format!("tollgate_connections_refused_per_address_total{{listener=\"{listener}\"}}");
        assert!(metrics.contains(&series), "{series} in {metrics}");
    }
    drop(flood);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_completes_with_a_half_sent_request_connected() {
    let server = start(ListenerOptions {
        header_read_timeout: Duration::from_secs(600),
        idle_timeout: Duration::from_secs(600),
        drain_timeout: Duration::from_millis(500),
        ..ListenerOptions::default()
    })
    .await;
    let mut http = TcpStream::connect(server.http).await.expect("connect");
    http.write_all(b"POST /v1/check HTTP/1.1\r\nhost: x\r\n")
        .await
        .expect("send");
    let mut grpc = TcpStream::connect(server.grpc).await.expect("connect");
    grpc.write_all(b"PRI * HTTP/2.0\r\n").await.expect("send");
    assert!(healthy(server.http).await);
    // Without the drain timeout, this would wait for the clients for ten minutes.
    server.stop().await;
    read_all(&mut http).await;
    read_all(&mut grpc).await;
}
