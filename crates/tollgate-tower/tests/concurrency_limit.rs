//! The concurrency layer holds a lease for exactly as long as the response body: the inner
//! service streams its body from a channel the test controls, and the slot frees only when that
//! body ends, fails or is dropped; also when the inner service errors. On the memory store the
//! release is immediate; on a real Redis it runs on the runtime, and the test waits for it with
//! a bounded number of polls.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response, StatusCode};
use http_body::Frame;
use tokio::sync::mpsc;
use tollgate::MemoryStore;
use tollgate::concurrency::ConcurrencyPolicy;
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};
use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor, MissingKey};
use tower::util::BoxCloneService;
use tower::{Service, ServiceBuilder, ServiceExt};

/// A body fed by the test: each `Ok` is a chunk, an `Err` fails the body, closing the sender
/// ends it.
struct Fed(mpsc::UnboundedReceiver<Result<Bytes, std::io::Error>>);

impl HttpBody for Fed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|next| next.map(|item| item.map(Frame::data)))
    }
}

type Senders = Arc<Mutex<Vec<mpsc::UnboundedSender<Result<Bytes, std::io::Error>>>>>;
type App = BoxCloneService<Request<Body>, Response<Body>, std::io::Error>;

/// The layer over `store` (one lease per client address) on a service whose every response
/// streams from a new channel, whose sender goes into `senders`; a request with `x-fail`
/// makes the inner service fail instead.
fn app<S: tollgate::concurrency::ConcurrencyStore + 'static>(store: S, senders: Senders) -> App {
    let policy = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(60)).unwrap();
    let service = ServiceBuilder::new()
        .layer(
            ConcurrencyLimitLayer::new(store, policy, KeyExtractor::peer_ip())
                .on_missing_key(MissingKey::Reject),
        )
        .service_fn(move |request: Request<Body>| {
            let senders = senders.clone();
            async move {
                if request.headers().contains_key("x-fail") {
                    return Err(std::io::Error::other("the upstream failed"));
                }
                let (tx, rx) = mpsc::unbounded_channel();
                senders.lock().unwrap().push(tx);
                Ok::<_, std::io::Error>(Response::new(Fed(rx)))
            }
        });
    BoxCloneService::new(service)
}

fn request(fail: bool) -> Request<Body> {
    let mut builder = Request::builder().extension("192.0.2.7:4000".parse::<SocketAddr>().unwrap());
    if fail {
        builder = builder.header("x-fail", "1");
    }
    builder.body(Body::empty()).unwrap()
}

async fn status(app: &App) -> StatusCode {
    match app.clone().oneshot(request(false)).await {
        Ok(response) => response.status(),
        Err(err) => panic!("inner service failed: {err}"),
    }
}

/// The next frame of `body`, for a body that has one ready (or has ended).
async fn next_frame(body: &mut Body) -> Option<Result<Frame<Bytes>, axum::Error>> {
    std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
}

#[tokio::test]
async fn the_lease_is_held_until_the_streamed_body_ends_on_memory() {
    let senders = Senders::default();
    let app = app(MemoryStore::new(), senders.clone());

    let response = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    // Head sent, body not finished: the slot is taken.
    let denied = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["content-type"], "application/problem+json");
    assert!(denied.headers().contains_key("retry-after"));
    let problem: serde_json::Value =
        serde_json::from_slice(&axum::body::to_bytes(denied.into_body(), 1 << 16).await.unwrap()).unwrap();
    assert_eq!(problem["policy"], "exports");
    assert_eq!(
        (problem["in_flight"].as_u64(), problem["limit"].as_u64()),
        (Some(1), Some(1))
    );

    // A chunk goes out; still streaming, still held.
    senders.lock().unwrap()[0]
        .send(Ok(Bytes::from_static(b"part 1")))
        .unwrap();
    let frame = next_frame(&mut body).await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "part 1");
    assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);

    // The body ends: the slot is free at once.
    senders.lock().unwrap().clear();
    assert!(next_frame(&mut body).await.is_none());
    let second = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);

    // A body dropped unread (the client went away) frees its slot too.
    assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);
    drop(second);
    let third = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(third.status(), StatusCode::OK);

    // A body that fails frees its slot.
    let mut body = third.into_body();
    senders
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .send(Err(std::io::Error::other("broken stream")))
        .unwrap();
    assert!(next_frame(&mut body).await.unwrap().is_err());
    assert_eq!(status(&app).await, StatusCode::OK, "released on the body's error");
}

#[tokio::test]
async fn an_inner_error_or_a_dropped_call_releases_the_lease() {
    let senders = Senders::default();
    let app = app(MemoryStore::new(), senders.clone());
    let err = app.clone().oneshot(request(true)).await.unwrap_err();
    assert_eq!(err.to_string(), "the upstream failed");
    // The failed call took a lease and gave it back.
    let response = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    drop(response);

    // A call whose future is dropped before the inner service answers: the inner service here
    // never answers.
    let policy = ConcurrencyPolicy::new("stuck", 1, Duration::from_secs(60)).unwrap();
    let store = Arc::new(MemoryStore::new());
    let mut stuck = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(
            store.clone(),
            policy.clone(),
            KeyExtractor::peer_ip(),
        ))
        .service_fn(|_: Request<Body>| std::future::pending::<Result<Response<Body>, Infallible>>());
    let mut future = stuck.ready().await.unwrap().call(request(false));
    // Polled once: the lease is taken, the inner service is waiting.
    assert!(futures_poll_once(&mut future).is_pending());
    assert!(!store.acquire(&policy, "192.0.2.7").unwrap().is_granted());
    drop(future);
    assert!(store.acquire(&policy, "192.0.2.7").unwrap().is_granted());
}

fn futures_poll_once<F: std::future::Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[tokio::test]
async fn a_request_without_a_key_is_refused_or_passes_unlimited() {
    let policy = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(60)).unwrap();
    let inner = || service_fn_ok();
    let reject = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(
            MemoryStore::new(),
            policy.clone(),
            KeyExtractor::peer_ip(),
        ))
        .service(inner());
    let response = reject.oneshot(Request::new(Body::empty())).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let skip = ServiceBuilder::new()
        .layer(
            ConcurrencyLimitLayer::new(MemoryStore::new(), policy, KeyExtractor::peer_ip())
                .on_missing_key(MissingKey::Skip),
        )
        .service(inner());
    for _ in 0..3 {
        let response = skip.clone().oneshot(Request::new(Body::empty())).await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "not limited, and holds nothing"
        );
    }
}

fn service_fn_ok() -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    tower::service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_held_until_the_body_ends_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(Target::parse(&redis.url()).unwrap())
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let senders = Senders::default();
    let app = app(store.clone(), senders.clone());

    let response = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);
    senders.lock().unwrap().clear();
    assert!(next_frame(&mut body).await.is_none());
    // The release runs on the runtime: wait for it, a bounded number of times.
    let mut freed = false;
    for _ in 0..500 {
        if redis
            .cli(&["ZCARD", "tollgate:{exports:192.0.2.7}:leases"])
            .trim()
            == "0"
        {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(freed, "the lease was not released after the body ended");
    let again = app.clone().oneshot(request(false)).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    // And while that body lives, the slot is taken in Redis.
    assert_eq!(
        redis
            .cli(&["ZCARD", "tollgate:{exports:192.0.2.7}:leases"])
            .trim(),
        "1"
    );
}
