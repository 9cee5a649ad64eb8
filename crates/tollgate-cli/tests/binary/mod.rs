//! The real `tollgate` binary as a child process, for tests that talk to it over sockets.
//!
//! It is started with `--http 127.0.0.1:0` (and `--grpc`, `--listen`) and the ports are read from
//! the addresses it prints, so tests never race for ports. The process itself is a
//! [`ChildProcess`]: killed and reaped on drop, signalled by its PID.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde_json::Value;

use tollgate_testkit::ChildProcess;

pub struct Server {
    child: ChildProcess,
    /// `http://ADDR` of the HTTP API (or of the proxy).
    pub http: String,
    /// `http://ADDR` of the Envoy rate limit service; empty for the proxy.
    pub grpc: String,
}

/// The path of the `tollgate` binary under test.
pub const TOLLGATE: &str = env!("CARGO_BIN_EXE_tollgate");

fn tollgate() -> Command {
    Command::new(TOLLGATE)
}

impl Server {
    /// `tollgate serve` with `args` added, once it listens.
    pub fn start(args: &[&str]) -> Self {
        Self::start_command(&mut tollgate(), args)
    }

    /// `tollgate serve` with `args` added, run by `command` (the binary itself, or a program
    /// that executes it, such as `taskset`), once it listens.
    pub fn start_command(command: &mut Command, args: &[&str]) -> Self {
        let mut child = ChildProcess::start(
            command
                .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
                .args(args),
        );
        let http = format!("http://{}", child.wait_for_addr("http listening on "));
        let grpc = format!("http://{}", child.wait_for_addr("grpc listening on "));
        Server { child, http, grpc }
    }

    /// `tollgate proxy` with `args` added, once it listens; its address is in `http`.
    pub fn start_proxy(args: &[&str]) -> Self {
        let mut child = ChildProcess::start(tollgate().args(["proxy", "--listen", "127.0.0.1:0"]).args(args));
        let http = format!("http://{}", child.wait_for_addr("proxy listening on "));
        Server {
            child,
            http,
            grpc: String::new(),
        }
    }

    /// The next output line containing `text` (panics, showing what was printed, if none comes).
    pub fn wait_for(&mut self, text: &str) -> String {
        self.child.wait_for(text)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.http)
    }

    /// Sends a signal (`HUP`, `TERM`) to this child, by its PID.
    pub fn signal(&self, name: &str) {
        self.child.signal(name);
    }

    /// The process ID of the child.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Waits for the child to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        self.child.wait_exit()
    }
}

/// `tollgate check-config path`: (success, stdout + stderr).
pub fn check_config(path: &Path) -> (bool, String) {
    let output = tollgate()
        .arg("check-config")
        .arg(path)
        .output()
        .expect("run tollgate check-config");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// `ADDR` of an `http://ADDR` URL.
pub fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().expect("address")
}

/// Sends `request` as is (no client-side path cleaning, no headers added) and reads the answer
/// to the end (30 s at most): (status, the body as JSON or `Null`, the whole answer).
pub fn raw(addr: SocketAddr, request: &str) -> (u16, Value, String) {
    let mut socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    socket.write_all(request.as_bytes()).expect("send");
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    (status, body, answer)
}

/// `GET target` over HTTP/1.1 with one `Host` and `Connection: close`, through [`raw`].
pub fn get(addr: SocketAddr, target: &str) -> (u16, Value, String) {
    raw(
        addr,
        &format!("GET {target} HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n"),
    )
}

/// `GET path` over HTTP/2 with prior knowledge (h2c), `:authority` set and `headers` added:
/// (status, body).
pub async fn h2c_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let exchange = async {
        let socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (client, connection) = h2::client::handshake(socket).await.expect("h2 handshake");
        let driver = tokio::spawn(connection);
        let mut client = client.ready().await.expect("h2 ready");
        let mut request = http::Request::get(format!("http://{addr}{path}"));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (answer, _) = client
            .send_request(request.body(()).expect("request"), true)
            .expect("send");
        let answer = answer.await.expect("answer");
        let status = answer.status().as_u16();
        let mut body = answer.into_body();
        let mut text = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("body");
            let _ = body.flow_control().release_capacity(chunk.len());
            text.extend_from_slice(&chunk);
        }
        drop(client);
        driver.abort();
        (status, String::from_utf8_lossy(&text).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the h2c exchange ends")
}

/// Checks that the listener at `addr` refuses HTTP/1.1 requests for `path` without `Host` or with
/// two, as 400 problems, and answers one `Host`, HTTP/1.0 without one, and h2c with
/// `:authority` alone with `ok`.
pub async fn assert_exactly_one_host(addr: SocketAddr, path: &str, ok: u16) {
    for (what, head) in [
        ("no Host", String::new()),
        ("two Hosts", "host: a.example\r\nhost: b.example\r\n".to_owned()),
        ("two Hosts, one empty", "host: a.example\r\nhost:\r\n".to_owned()),
    ] {
        let request = format!("GET {path} HTTP/1.1\r\n{head}connection: close\r\n\r\n");
        let (status, body, answer) = raw(addr, &request);
        assert_eq!(status, 400, "{what}: {answer}");
        assert!(
            answer
                .to_ascii_lowercase()
                .contains("content-type: application/problem+json"),
            "{what}: {answer}"
        );
        assert_eq!(body["status"], 400, "{what}: {answer}");
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("Host")),
            "{what}: {answer}"
        );
    }
    let one = format!("GET {path} HTTP/1.1\r\nhost: a.example\r\nconnection: close\r\n\r\n");
    assert_eq!(raw(addr, &one).0, ok, "one Host");
    let old = format!("GET {path} HTTP/1.0\r\n\r\n");
    assert_eq!(raw(addr, &old).0, ok, "HTTP/1.0 without Host");
    assert_eq!(h2c_get(addr, path, &[]).await.0, ok, "h2c with :authority");
    let (status, body) = h2c_get(addr, path, &[("host", "a.example"), ("host", "b.example")]).await;
    assert_eq!(status, 400, "h2c with two Host headers: {body}");
}
