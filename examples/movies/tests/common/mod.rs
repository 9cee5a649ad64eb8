//! Shared helpers: requests with a peer address, answers read whole, and the example binary as a
//! child process.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tollgate_testkit::ChildProcess;
use tower::ServiceExt;

/// A start time for manual clocks: 2023-11-14, in µs since the Unix epoch.
pub(crate) const T0_US: u64 = 1_700_000_000_000_000;

/// A GET of `path` from `peer` (`ip:port`), with `headers`.
pub(crate) fn get(path: &str, peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let peer: SocketAddr = peer.parse().expect("test peer address");
    let mut builder = Request::get(path).extension(ConnectInfo(peer));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::empty()).expect("test request")
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

/// A client whose requests leave from `local` (any 127.x.y.z works on Linux loopback).
pub(crate) fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().expect("local address"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// A reqwest response read whole.
pub(crate) async fn fetch(client: &reqwest::Client, url: &str) -> Answer {
    let response = client.get(url).send().await.expect("send");
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
    child: ChildProcess,
    /// Where it listens, as it printed.
    pub(crate) addr: SocketAddr,
}

impl Running {
    /// Starts the binary with `args` and `envs` (and no inherited `TOLLGATE_STORE`), and waits
    /// for its `listening on ADDR` line.
    pub(crate) fn start(args: &[&str], envs: &[(&str, &str)]) -> Running {
        let mut child = ChildProcess::start(
            Command::new(env!("CARGO_BIN_EXE_tollgate-example-movies"))
                .args(args)
                .env_remove("TOLLGATE_STORE")
                .envs(envs.iter().copied()),
        );
        let addr = child.wait_for_addr("listening on ");
        Running { child, addr }
    }

    /// `http://ADDR`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM to this child (by its PID) and waits for it to exit.
    pub(crate) fn terminate(mut self) -> ExitStatus {
        self.child.signal("TERM");
        self.child.wait_exit()
    }
}
