//! Shared helpers: policies, a small app, requests with a peer address, and reading answers.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::routing::get;
use serde_json::Value;
use tollgate::{Algorithm, Policy};
use tower::ServiceExt;

/// An exact limit: `limit` per `window`.
pub(crate) fn policy(name: &str, limit: u64, window: Duration) -> Policy {
    Policy::new(
        name,
        Algorithm::sliding_log(limit, window).expect("valid algorithm"),
    )
    .expect("valid policy")
}

/// An app with `/`, `/users/{id}` and `/other`.
pub(crate) fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/users/{id}", get(|| async { "user" }))
        .route("/other", get(|| async { "other" }))
}

/// A GET of `path` from `peer`, with `headers`.
pub(crate) fn request(path: &str, peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::get(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let socket: SocketAddr = peer.parse().expect("test peer address");
    builder
        .extension(ConnectInfo(socket))
        .body(Body::empty())
        .expect("test request")
}

/// A sent request's answer.
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

/// Sends `request` to a clone of `app`, as axum does per request.
pub(crate) async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (head, body) = response.into_parts();
    Answer {
        status: head.status,
        headers: head.headers,
        body: to_bytes(body, 1 << 20).await.expect("body").to_vec(),
    }
}

/// A client that opens a new connection for every request.
pub(crate) fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}
