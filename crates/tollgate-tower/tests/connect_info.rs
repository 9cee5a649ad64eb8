//! An app served without connect info: the address extractors have no peer address to read. That
//! is the app's mistake, not the client's, so the layer answers 500 with the fix in the detail
//! and logs it once, instead of a 400 blamed on every client; header keys keep their
//! `MissingKey` semantics.

mod common;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, Request, StatusCode};
use common::{policy, routes, send};
use tollgate::MemoryStore;
use tollgate_tower::{ClientIp, KeyExtractor, KeyedPolicy, MissingKey, RateLimitLayer};

const MINUTE: Duration = Duration::from_secs(60);

/// A request as an app served with plain `axum::serve(listener, app)` sees it: no
/// `ConnectInfo`, no `SocketAddr`.
fn bare(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).expect("test request")
}

/// Log lines written while the returned guard lives (on this thread).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn start() -> (Self, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        (captured, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

#[tokio::test]
async fn a_missing_peer_address_is_a_500_naming_the_fix_logged_once() {
    let (log, _guard) = Captured::start();
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .policy(KeyedPolicy::new(
            policy("per-ip", 5, MINUTE),
            KeyExtractor::peer_ip(),
        ))
        .problem_type_base("https://api.example/problems/")
        .build()
        .expect("valid layer");
    let stats = layer.stats();
    let app = routes().layer(layer);

    for _ in 0..3 {
        let answer = send(&app, bare("/")).await;
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.header("content-type"), "application/problem+json");
        let body = answer.json();
        assert_eq!(body["type"], "https://api.example/problems/no-peer-address");
        assert_eq!(body["status"], 500);
        assert_eq!(body["policy"], "per-ip");
        let detail = body["detail"].as_str().expect("detail");
        assert!(
            detail.contains("into_make_service_with_connect_info::<SocketAddr>()"),
            "{detail}"
        );
        assert!(detail.contains("`per-ip`"), "{detail}");
    }
    let snapshot = stats.snapshot();
    assert_eq!(snapshot.no_peer_address, 3);
    assert_eq!((snapshot.rejected_keys, snapshot.allowed), (0, 0));

    let text = log.text();
    assert_eq!(
        text.matches("into_make_service_with_connect_info").count(),
        1,
        "logged once per layer: {text}"
    );
    assert!(text.contains("ERROR"), "{text}");
    assert!(text.contains("per-ip"), "{text}");
}

/// `Skip` is for requests that may lack a key; a missing peer address would skip every request
/// and silently turn the limit off, so it is a 500 as well.
#[tokio::test]
async fn skip_does_not_hide_a_missing_peer_address() {
    let rule = KeyedPolicy::new(
        policy("route", 5, MINUTE),
        KeyExtractor::route_and_ip(ClientIp::peer()),
    )
    .on_missing_key(MissingKey::Skip);
    let app = routes().layer(RateLimitLayer::new(MemoryStore::new(), rule));
    let answer = send(&app, bare("/users/1")).await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.json()["type"], "about:blank");
    assert_eq!(answer.json()["title"], "Internal Server Error");
}

/// Each layer logs its own first occurrence: two apps, two lines.
#[tokio::test]
async fn each_layer_logs_its_first_missing_peer_address() {
    let (log, _guard) = Captured::start();
    let one = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("one", 5, MINUTE), KeyExtractor::peer_ip()),
    ));
    let two = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("two", 5, MINUTE), KeyExtractor::peer_ip()),
    ));
    for _ in 0..2 {
        send(&one, bare("/")).await;
        send(&two, bare("/")).await;
    }
    let text = log.text();
    assert_eq!(
        text.matches("into_make_service_with_connect_info").count(),
        2,
        "{text}"
    );
}

/// A header key keeps its meaning: a request without the header is the client's, a 400 (or
/// skipped), even on an app without connect info.
#[tokio::test]
async fn a_missing_header_is_still_the_clients_400() {
    let api_key = KeyExtractor::header(HeaderName::from_static("x-api-key"));
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("keys", 5, MINUTE), api_key),
    );
    let stats = layer.stats();
    let app = routes().layer(layer);
    let answer = send(&app, bare("/")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert!(answer.json()["detail"].as_str().unwrap().contains("x-api-key"));
    let with_key = Request::get("/")
        .header("x-api-key", "k-1")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, with_key).await.status, StatusCode::OK);
    assert_eq!(stats.snapshot().no_peer_address, 0);
}

/// A hyper server loop that inserts the connection's `SocketAddr` is served: the peer address
/// is there.
#[tokio::test]
async fn a_plain_socket_address_extension_is_enough() {
    let app = routes().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("per-ip", 1, MINUTE), KeyExtractor::peer_ip()),
    ));
    let request = || {
        Request::get("/")
            .extension("192.0.2.7:4000".parse::<SocketAddr>().unwrap())
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(send(&app, request()).await.status, StatusCode::OK);
    assert_eq!(send(&app, request()).await.status, StatusCode::TOO_MANY_REQUESTS);
}
