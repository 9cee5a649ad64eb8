//! `tollgate proxy` as a real child process in front of a real upstream HTTP server: limits by
//! route, headers and bodies passed through, `X-Forwarded-For` appended and never trusted from an
//! untrusted peer, 502 when the upstream is away, counted once; a request without exactly one
//! `Host` refused before it is counted; every spelling of a limited path or of a host that some
//! upstream folds back refused or counted, never forwarded unchecked.

mod binary;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::HeaderMap;
use binary::Server;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tollgate_testkit::AppServer;

const CONFIG: &str = r#"
policies:
  movies: {algorithm: sliding_log, limit: 3, window: 1h}
  uploads: {algorithm: fixed_window, limit: 100, window: 1h}
  keyed: {algorithm: fixed_window, limit: 1, window: 1h}
  tenant: {algorithm: fixed_window, limit: 1, window: 1h}
routes:
  - prefix: /v4/movies
    policies: [movies]
  - prefix: /upload
    policies: [uploads]
  - prefix: /keyed
    policies: [keyed]
    key: "header:X-Api-Key"
  - prefix: /tenant
    policies: [tenant]
    key: "header:Host"
"#;

/// An upstream that answers every request with what it received, as JSON (`/upload` echoes the
/// body's length instead).
async fn start_upstream() -> AppServer {
    async fn echo(headers: HeaderMap, request: Request) -> axum::Json<Value> {
        let method = request.method().to_string();
        let uri = request.uri().to_string();
        let body: Bytes = axum::body::to_bytes(request.into_body(), usize::MAX)
            .await
            .expect("read the body");
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        axum::Json(json!({
            "method": method,
            "uri": uri,
            "host": header("host"),
            "x_forwarded_for": header("x-forwarded-for"),
            "x_custom": header("x-custom"),
            "connection_named": header("x-hop"),
            "body_len": body.len(),
            "body_sum": body.iter().map(|b| u64::from(*b)).sum::<u64>(),
        }))
    }
    AppServer::start(Router::new().fallback(echo)).await
}

fn config_file() -> tempfile::NamedTempFile {
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile()
        .expect("temp file");
    std::fs::write(file.path(), CONFIG).expect("write config");
    file
}

fn client() -> Client {
    Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

fn proxy(upstream: &str, config: &tempfile::NamedTempFile, extra: &[&str]) -> Server {
    let mut args = vec![
        "--upstream",
        upstream,
        "--config",
        config.path().to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    Server::start_proxy(&args)
}

#[tokio::test]
async fn limits_by_route_and_forwards_what_it_admits() {
    let upstream = start_upstream().await;
    let config = config_file();
    let proxy = proxy(&format!("http://{}", upstream.addr()), &config, &[]);
    let client = client();

    for left in [2, 1, 0] {
        let response = client
            .get(proxy.url("/v4/movies?page=2"))
            .header("x-custom", "kept")
            .header("connection", "x-hop")
            .header("x-hop", "dropped")
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["ratelimit-policy"], r#""movies";q=3;w=3600"#);
        assert_eq!(
            response.headers()["ratelimit"].to_str().unwrap(),
            format!(r#""movies";r={left};t=3600"#)
        );
        let seen: Value = response.json().await.expect("json");
        assert_eq!(seen["method"], "GET");
        assert_eq!(seen["uri"], "/v4/movies?page=2");
        assert_eq!(seen["x_custom"], "kept");
        assert_eq!(seen["connection_named"], Value::Null, "hop-by-hop header dropped");
        assert_eq!(seen["x_forwarded_for"], "127.0.0.1");
        assert_eq!(
            seen["host"],
            proxy.http.trim_start_matches("http://"),
            "Host preserved"
        );
    }
    let denied = client
        .get(proxy.url("/v4/movies/42"))
        .send()
        .await
        .expect("request");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    let retry_after: u64 = denied.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((3_500..=3_600).contains(&retry_after), "{retry_after}");
    let problem: Value = denied.json().await.expect("json");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["policy"], "movies");

    // A sibling path is not under the route, and no route means no limit.
    for _ in 0..5 {
        let response = client
            .get(proxy.url("/v4/moviesearch"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK);
        assert!(response.headers().get("ratelimit").is_none());
    }

    // Header keys: each API key its own budget; no key is a 400 naming it.
    for key in ["a", "b"] {
        let ok = client
            .get(proxy.url("/keyed"))
            .header("x-api-key", key)
            .send()
            .await
            .expect("request");
        assert_eq!(ok.status(), StatusCode::OK);
    }
    let again = client
        .get(proxy.url("/keyed"))
        .header("x-api-key", "a")
        .send()
        .await
        .expect("request");
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
    let missing = client.get(proxy.url("/keyed")).send().await.expect("request");
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    drop(proxy);
    upstream.stop().await;
}

#[tokio::test]
async fn bodies_pass_through_whole_both_ways() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let upstream = start_upstream().await;
    let config = config_file();
    let proxy = proxy(&format!("http://{}", upstream.addr()), &config, &[]);
    let body: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let sum: u64 = body.iter().map(|b| u64::from(*b)).sum();
    let response = client()
        .post(proxy.url("/upload"))
        .body(body.clone())
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    let seen: Value = response.json().await.expect("json");
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["body_len"], body.len());
    assert_eq!(seen["body_sum"], sum);

    // A chunked upload (no Content-Length), as from a pipe, sent a chunk at a time.
    let address = proxy.http.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let head = format!(
        "PUT /upload/chunked HTTP/1.1\r\nHost: {address}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    for chunk in body[..300_000].chunks(100_000) {
        stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .await
            .expect("chunk size");
        stream.write_all(chunk).await.expect("chunk");
        stream.write_all(b"\r\n").await.expect("chunk end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stream.write_all(b"0\r\n\r\n").await.expect("last chunk");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("answered")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let partial_sum: u64 = body[..300_000].iter().map(|b| u64::from(*b)).sum();
    assert!(answer.contains(r#""body_len":300000"#), "{answer}");
    assert!(
        answer.contains(&format!(r#""body_sum":{partial_sum}"#)),
        "{answer}"
    );
    assert!(answer.contains(r#""method":"PUT""#), "{answer}");
    drop(proxy);
    upstream.stop().await;
}

#[tokio::test]
async fn a_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let upstream = start_upstream().await;
    let config = config_file();
    let proxy = proxy(&format!("http://{}", upstream.addr()), &config, &[]);
    let client = client();
    // Every request claims another client; all are counted against the real peer.
    let mut statuses = vec![];
    for i in 0..4 {
        let response = client
            .get(proxy.url("/v4/movies"))
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .expect("request");
        statuses.push(response.status().as_u16());
        if response.status() == StatusCode::OK {
            let seen: Value = response.json().await.expect("json");
            assert_eq!(
                seen["x_forwarded_for"],
                format!("203.0.113.{i}, 127.0.0.1"),
                "appended"
            );
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    drop(proxy);

    // Behind a trusted proxy (loopback here), the forwarded client is the key.
    let proxy = self::proxy(
        &format!("http://{}", upstream.addr()),
        &config,
        &["--trusted-proxy", "127.0.0.0/8"],
    );
    for i in 0..4 {
        let response = client
            .get(proxy.url("/v4/movies"))
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK, "client {i} has its own budget");
    }
    drop(proxy);
    upstream.stop().await;
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_counted_once() {
    let upstream = start_upstream().await;
    let address = format!("http://{}", upstream.addr());
    upstream.stop().await;
    let config = config_file();
    let proxy = proxy(&address, &config, &[]);
    let client = client();
    for left in [2, 1, 0] {
        let response = client.get(proxy.url("/v4/movies")).send().await.expect("request");
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(response.headers()["content-type"], "application/problem+json");
        assert_eq!(
            response.headers()["ratelimit"].to_str().unwrap(),
            format!(r#""movies";r={left};t=3600"#),
            "one request, one unit"
        );
        let problem: Value = response.json().await.expect("json");
        assert_eq!(problem["status"], 502);
    }
    let denied = client.get(proxy.url("/v4/movies")).send().await.expect("request");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
}

// The upstream runs in this runtime while the test blocks on raw sockets: keep workers free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_one_host_is_refused_and_not_counted_on_both_listeners() {
    let upstream = start_upstream().await;
    let config = config_file();
    let mut proxy = proxy(
        &format!("http://{}", upstream.addr()),
        &config,
        &["--admin", "127.0.0.1:0"],
    );
    let admin = proxy.wait_for("admin listening on ");
    let admin = admin
        .rsplit(' ')
        .next()
        .expect("address")
        .parse()
        .expect("admin address");
    binary::assert_exactly_one_host(admin, "/healthz", 200).await;
    let addr = binary::addr_of(&proxy.http);
    // Three requests are admitted (one Host, HTTP/1.0, h2c): the limit of `movies`...
    binary::assert_exactly_one_host(addr, "/v4/movies", 200).await;
    // ...so the refused ones were never counted, and the next is denied.
    assert_eq!(binary::get(addr, "/v4/movies").0, 429);
    // An h2c client's `:authority` reaches the upstream as its `Host`, as HTTP/1.1's `Host` does.
    let (status, body) = binary::h2c_get(addr, "/elsewhere", &[]).await;
    assert_eq!(status, 200, "{body}");
    let seen: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(seen["host"], addr.to_string(), "{body}");
    drop(proxy);
    upstream.stop().await;
}

/// An upstream that records the target and `Host` of every request it serves, in order.
async fn recording_upstream() -> (AppServer, Arc<Mutex<Vec<(String, String)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let app = Router::new().fallback(move |request: Request| {
        let record = Arc::clone(&record);
        async move {
            let target = request
                .uri()
                .path_and_query()
                .map_or("", |p| p.as_str())
                .to_owned();
            let host = request
                .headers()
                .get("host")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            record.lock().expect("lock").push((target, host));
            "ok"
        }
    });
    (AppServer::start(app).await, seen)
}

/// What the proxy must do with a request once the route's limit is spent.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// 400 problem+json whose `detail` contains this.
    Refused(&'static str),
    /// Counted against the route: 429.
    Counted,
}

/// Sends `GET target` with `head` (header lines, each ending in CRLF) and checks the answer.
fn expect(addr: std::net::SocketAddr, target: &str, head: &str, expect: Expect) {
    let request = format!("GET {target} HTTP/1.1\r\n{head}connection: close\r\n\r\n");
    let (status, body, answer) = binary::raw(addr, &request);
    match expect {
        Expect::Counted => assert_eq!(status, 429, "{request:?}: {answer}"),
        Expect::Refused(why) => {
            assert_eq!(status, 400, "{request:?}: {answer}");
            assert!(
                answer
                    .to_ascii_lowercase()
                    .contains("content-type: application/problem+json"),
                "{request:?}: {answer}"
            );
            let detail = body["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains(why),
                "{request:?}: expected {why:?} in {detail:?}"
            );
        }
    }
}

// The upstream runs in this runtime while the test blocks on raw sockets: keep workers free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_a_server_folds_back_is_refused_or_counted() {
    use Expect::{Counted, Refused};

    let (upstream, seen) = recording_upstream().await;
    let config = config_file();
    let proxy = proxy(&format!("http://{}", upstream.addr()), &config, &[]);
    let addr = binary::addr_of(&proxy.http);
    let host = "host: a.example\r\n";
    for _ in 0..3 {
        expect_ok(addr, "/v4/movies", host);
    }

    // Paths that IIS, Java, Windows file servers or Unicode-normalizing frameworks read as
    // /v4/movies: each is refused, or normalized onto the route and denied with it.
    let fold_case = "normalize Unicode or fold case";
    let paths: &[(&str, Expect)] = &[
        ("/v4/x/%2E%2E/movies", Counted),
        ("/v4/%2e%2e/v4/movies", Counted),
        ("/v4/movies/%2E", Counted),
        ("/V4/MOVIES", Counted),
        // Windows drops trailing dots.
        ("/v4/movies.", Refused("ends with `.`")),
        ("/v4/movies..", Refused("ends with `.`")),
        ("/v4/movies%2e", Refused("ends with `.`")),
        ("/v4/movies%2E", Refused("ends with `.`")),
        ("/v4./movies", Refused("ends with `.`")),
        ("/v4/movies./42", Refused("ends with `.`")),
        // NTFS data streams.
        ("/v4/movies::$DATA", Refused("NTFS data stream")),
        ("/v4/movies:$DATA", Refused("NTFS data stream")),
        ("/v4/movies::$data", Refused("NTFS data stream")),
        ("/v4/movies%3A%3A%24DATA", Refused("NTFS data stream")),
        // Escapes that are not UTF-8, the overlong `/` first.
        ("/v4/%C0%AFmovies", Refused("not UTF-8")),
        ("/v4%C0%AFmovies", Refused("not UTF-8")),
        ("/v4/movies%C0%AE", Refused("not UTF-8")),
        ("/v4/movies%FF", Refused("not UTF-8")),
        // Unicode that folds to ASCII, raw UTF-8 or encoded.
        ("/v4/movie\u{17f}", Refused(fold_case)),
        ("/v4/movie%C5%BF", Refused(fold_case)),
        ("/V4/MOVIE%C5%BF", Refused(fold_case)),
        (
            "/v4/\u{ff4d}\u{ff4f}\u{ff56}\u{ff49}\u{ff45}\u{ff53}",
            Refused(fold_case),
        ),
        (
            "/v4/%EF%BD%8D%EF%BD%8F%EF%BD%96%EF%BD%89%EF%BD%85%EF%BD%93",
            Refused(fold_case),
        ),
        ("/\u{ff56}4/movies", Refused(fold_case)),
        ("/v4/movies\u{ff0f}42", Refused(fold_case)),
        ("/v4/movies%EF%BC%8F42", Refused(fold_case)),
        ("/v4/movies%EF%BC%8E", Refused(fold_case)),
        ("/v4/mov\u{131}es", Refused(fold_case)),
        ("/v4/mov%C4%B0es", Refused(fold_case)),
        // Invisible characters, raw UTF-8 or encoded.
        ("/v4/mo\u{200b}vies", Refused("invisible")),
        ("/v4/movies%E2%80%8B", Refused("invisible")),
        ("/v4/movies%E2%80%8C", Refused("invisible")),
        ("/v4/movies%E2%80%8D", Refused("invisible")),
        ("/v4/movies%E2%81%A0", Refused("invisible")),
        ("/v4/%EF%BB%BFmovies", Refused("invisible")),
        ("/v4/mo%C2%ADvies", Refused("invisible")),
    ];
    for (target, what) in paths {
        expect(addr, target, host, *what);
    }

    // Hosts that are not one host, or that disagree with the target, are refused; the spellings
    // of one host are the same request.
    let hosts: &[(&str, &str, Expect)] = &[
        ("/v4/movies", "host: a.example, b.example\r\n", Refused("list")),
        ("/v4/movies", "host: a b\r\n", Refused("whitespace")),
        ("/v4/movies", "host: user@evil.example\r\n", Refused("userinfo")),
        (
            "/v4/movies",
            "host: a.example\r\nhost: b.example\r\n",
            Refused("more than one"),
        ),
        ("/v4/movies", "host: a.example:99999\r\n", Refused("port")),
        ("/v4/movies", "host: a..example\r\n", Refused("empty label")),
        ("/v4/movies", "host: a%2eexample\r\n", Refused("character")),
        (
            "http://b.example/v4/movies",
            host,
            Refused("names the host `b.example`"),
        ),
        ("http://user@a.example/v4/movies", host, Refused("userinfo")),
        ("/v4/movies", "host: a.example.\r\n", Counted),
        ("/v4/movies", "host: A.EXAMPLE\r\n", Counted),
        ("/v4/movies", "host: a.example:8080\r\n", Counted),
        ("/v4/movies", "host: a.example:\r\n", Counted),
        ("http://A.Example./v4/movies", host, Counted),
    ];
    for (target, head, what) in hosts {
        expect(addr, target, head, *what);
    }

    // What no server folds onto an ASCII name keeps working, forwarded as sent.
    for target in [
        "/search/caf\u{e9}",
        "/search/caf%C3%A9",
        "/search/stra%C3%9Fe",
        "/search/%E6%9D%B1%E4%BA%AC%EF%BC%88%E9%A7%85%EF%BC%89",
        "/search/%E2%9D%A4%EF%B8%8F",
        "/v1/things:batchGet",
    ] {
        expect_ok(addr, target, host);
    }
    // The upstream sees each host in one spelling...
    for (target, head) in [
        ("/elsewhere", "host: A.Example.\r\n"),
        ("/elsewhere", "host: a.example:0080\r\n"),
        ("/elsewhere", "host: [0:0::1]:8080\r\n"),
        ("http://A.example./elsewhere", host),
    ] {
        expect_ok(addr, target, head);
    }
    // ...and so does a route keyed by `Host`.
    expect_ok(addr, "/tenant", "host: t.example\r\n");
    for head in ["host: T.EXAMPLE.\r\n", "host: t.example:\r\n"] {
        expect(addr, "/tenant", head, Counted);
    }
    expect_ok(addr, "/tenant", "host: u.example\r\n");

    let seen = seen.lock().expect("lock").clone();
    let forwarded: Vec<(String, String)> = [
        ("/v4/movies", "a.example"),
        ("/v4/movies", "a.example"),
        ("/v4/movies", "a.example"),
        ("/search/caf\u{e9}", "a.example"),
        ("/search/caf%C3%A9", "a.example"),
        ("/search/stra%C3%9Fe", "a.example"),
        (
            "/search/%E6%9D%B1%E4%BA%AC%EF%BC%88%E9%A7%85%EF%BC%89",
            "a.example",
        ),
        ("/search/%E2%9D%A4%EF%B8%8F", "a.example"),
        ("/v1/things:batchGet", "a.example"),
        ("/elsewhere", "a.example"),
        ("/elsewhere", "a.example:80"),
        ("/elsewhere", "[::1]:8080"),
        ("/elsewhere", "a.example"),
        ("/tenant", "t.example"),
        ("/tenant", "u.example"),
    ]
    .iter()
    .map(|(target, host)| (target.to_string(), host.to_string()))
    .collect();
    assert_eq!(seen, forwarded, "the upstream served only what was admitted");
    drop(proxy);
    upstream.stop().await;
}

/// Sends `GET target` with `head` and expects the upstream's 200.
fn expect_ok(addr: std::net::SocketAddr, target: &str, head: &str) {
    let request = format!("GET {target} HTTP/1.1\r\n{head}connection: close\r\n\r\n");
    let (status, _, answer) = binary::raw(addr, &request);
    assert_eq!(status, 200, "{request:?}: {answer}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    let config = config_file();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "proxy",
            "--upstream",
            "ftp://example.com",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("only http:// upstreams are supported"),
        "{stderr}"
    );

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--trusted-proxy",
            "10.0.0.0/33",
        ])
        .output()
        .expect("run");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--trusted-proxy"));

    std::fs::write(
        config.path(),
        "policies: {}\nroutes:\n  - {prefix: /, policies: [nope]}\n",
    )
    .expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(config.path())
        .output()
        .expect("run");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"routes[0].policies[0]: unknown policy "nope""#),
        "{stderr}"
    );
}
