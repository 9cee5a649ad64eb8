//! Shared helpers: requests with a peer address, answers read whole, the app on a socket, and
//! the example binary as a child process.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// A start time for manual clocks: 2023-11-14, in µs since the Unix epoch.
pub(crate) const T0_US: u64 = 1_700_000_000_000_000;

/// A `POST /login` with `body` declared as `content_type` (none when `None`), from a fixed peer.
pub(crate) fn post(body: &str, content_type: Option<&str>) -> Request<Body> {
    let peer: SocketAddr = "192.0.2.1:4000".parse().expect("test peer address");
    let mut builder = Request::post("/login").extension(ConnectInfo(peer));
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder.body(Body::from(body.to_owned())).expect("test request")
}

/// The JSON body of a login as `username` with `password`.
pub(crate) fn credentials(username: &str, password: &str) -> String {
    serde_json::json!({ "username": username, "password": password }).to_string()
}

/// Logs in to `app` as `username` with `password`.
pub(crate) async fn login(app: &Router, username: &str, password: &str) -> Answer {
    send(
        app,
        post(&credentials(username, password), Some("application/json")),
    )
    .await
}

/// A response read whole.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    /// A header as text, "" when absent.
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("ASCII header"))
            .unwrap_or("")
    }
}

/// Sends `request` to a clone of `app`, as axum does for each request.
pub(crate) async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (head, body) = response.into_parts();
    Answer {
        status: head.status,
        headers: head.headers,
        body: to_bytes(body, 1 << 20).await.expect("body").to_vec(),
    }
}

/// Serves `app` on a free loopback port with connection info, as `main.rs` does; the address.
pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .await
            .expect("serve");
    });
    addr
}

/// A client for the socket tests.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// Logs in at `base` (`http://ADDR`) over TCP; the response read whole.
pub(crate) async fn login_at(client: &reqwest::Client, base: &str, username: &str, password: &str) -> Answer {
    let response = client
        .post(format!("{base}/login"))
        .json(&serde_json::json!({ "username": username, "password": password }))
        .send()
        .await
        .expect("send");
    let status = StatusCode::from_u16(response.status().as_u16()).expect("status");
    let mut headers = HeaderMap::new();
    for (name, value) in response.headers() {
        let name = axum::http::HeaderName::from_bytes(name.as_str().as_bytes()).expect("name");
        let value = axum::http::HeaderValue::from_bytes(value.as_bytes()).expect("value");
        headers.append(name, value);
    }
    let body = response.bytes().await.expect("body").to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// The example binary, running; killed and reaped on drop if still running.
pub(crate) struct Running {
    child: Child,
    /// Where it listens, as it printed.
    pub(crate) addr: SocketAddr,
    // Held open so the server never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Running {
    /// Starts the binary with `args` and `envs` (and no inherited `TOLLGATE_STORE`), and waits
    /// for its `listening on ADDR` line.
    pub(crate) fn start(args: &[&str], envs: &[(&str, &str)]) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-example-login"))
            .args(args)
            .env_remove("TOLLGATE_STORE")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the example binary");
        let stdout = child.stdout.take().expect("piped stdout");
        // Read on a thread, so a binary that never prints fails the test instead of hanging it.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let read = reader.read_line(&mut line).map(|_| line);
            let _ = tx.send((read, reader));
        });
        let received = rx.recv_timeout(Duration::from_secs(60));
        let parsed = match &received {
            Ok((Ok(line), _)) => line
                .trim_end()
                .strip_prefix("listening on ")
                .and_then(|addr| addr.parse::<SocketAddr>().ok()),
            _ => None,
        };
        match (parsed, received) {
            (Some(addr), Ok((_, reader))) => Running {
                child,
                addr,
                _stdout: reader,
            },
            (_, received) => {
                let _ = child.kill();
                let _ = child.wait();
                let line = received.map(|(line, _)| line);
                panic!("expected `listening on ADDR` from the binary, got {line:?}");
            }
        }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM to this child (by its PID) and waits for it to exit.
    pub(crate) fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
        self.child.wait().expect("wait for the binary")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
