//! The layer on real sockets: axum served with connection info, and a bare hyper server. Every
//! request uses a new TCP connection, so the limit is shown to hold across connections.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use common::{fresh_client, policy, routes};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tollgate::MemoryStore;
use tollgate_testkit::AppServer;
use tollgate_tower::{ClientIp, KeyExtractor, KeyedPolicy, RateLimitLayer};
use tower::ServiceBuilder;

const MINUTE: Duration = Duration::from_secs(60);

/// Sends `n` GETs of `url` at once, each on its own connection; the statuses.
async fn burst(url: &str, n: usize, headers: &[(&'static str, String)]) -> Vec<StatusCode> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (url, headers) = (url.to_owned(), headers.to_vec());
            tokio::spawn(async move {
                let mut request = fresh_client().get(&url);
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                request.send().await.expect("send").status()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("task"));
    }
    statuses
}

fn count(statuses: &[StatusCode], status: StatusCode) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_the_limit_passes_across_many_connections() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 10, MINUTE), KeyExtractor::peer_ip()),
    );
    let stats = layer.stats();
    let server = AppServer::start(routes().layer(layer)).await;
    let addr = server.addr();
    let statuses = burst(&format!("http://{addr}/"), 40, &[]).await;
    assert_eq!(count(&statuses, StatusCode::OK), 10, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::TOO_MANY_REQUESTS), 30);
    let snapshot = stats.snapshot();
    assert_eq!((snapshot.allowed, snapshot.denied), (10, 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_429_carries_problem_json_and_headers() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 1, MINUTE), KeyExtractor::peer_ip()),
    );
    let server = AppServer::start(routes().layer(layer)).await;
    let addr = server.addr();
    let client = fresh_client();
    let ok = client.get(format!("http://{addr}/")).send().await.expect("send");
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.headers()["ratelimit"], r#""api";r=0;t=60"#);
    let denied = client.get(format!("http://{addr}/")).send().await.expect("send");
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    let retry_after: u64 = denied.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((59..=60).contains(&retry_after), "{retry_after}");
    let body: serde_json::Value = denied.json().await.expect("json");
    assert_eq!(body["policy"], "api");
    assert_eq!(body["status"], 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_clients_behind_a_trusted_loopback_proxy_each_get_their_own_budget() {
    let trusting = ClientIp::peer().trust_proxies(["127.0.0.0/8".parse().expect("block")]);
    let rule = KeyedPolicy::new(policy("api", 2, MINUTE), KeyExtractor::client_ip(trusting));
    let server = AppServer::start(routes().layer(RateLimitLayer::new(MemoryStore::new(), rule))).await;
    let addr = server.addr();
    let url = format!("http://{addr}/");
    for client in ["198.51.100.1", "198.51.100.2"] {
        let statuses = burst(&url, 5, &[("x-forwarded-for", client.to_owned())]).await;
        assert_eq!(count(&statuses, StatusCode::OK), 2, "{client}: {statuses:?}");
    }

    // The same headers sent to a server that trusts no proxy are ignored: one budget for all.
    let rule = KeyedPolicy::new(policy("api", 2, MINUTE), KeyExtractor::peer_ip());
    let server = AppServer::start(routes().layer(RateLimitLayer::new(MemoryStore::new(), rule))).await;
    let addr = server.addr();
    let url = format!("http://{addr}/");
    let mut admitted = 0;
    for client in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        admitted += count(
            &burst(&url, 2, &[("x-forwarded-for", client.to_owned())]).await,
            StatusCode::OK,
        );
    }
    assert_eq!(admitted, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_hyper_server_can_serve_the_layer_with_a_socket_addr_extension() {
    let layer = RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy("api", 3, MINUTE), KeyExtractor::peer_ip()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let service = ServiceBuilder::new()
                .map_request(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert::<SocketAddr>(peer);
                    request
                })
                .layer(layer.clone())
                .service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Body::from("hyper")))
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    let statuses = burst(&format!("http://{addr}/"), 8, &[]).await;
    assert_eq!(count(&statuses, StatusCode::OK), 3, "{statuses:?}");
    assert_eq!(count(&statuses, StatusCode::TOO_MANY_REQUESTS), 5);
}
