//! The charge-after layer: a handler reports what its answer cost in a response header, and the
//! layer charges that cost once the response is there; a tenant past its budget is refused
//! before the handler runs, until its debt is paid back. Or the layer counts a streamed body's
//! bytes and charges them once it ends or is dropped. On the memory store and a real Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::{get, post};
use tollgate::{Algorithm, Anchor, Engine, FailureMode, MemoryStore, Policy, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{RedisServer, STORE_TIMEOUT};
use tollgate_tower::{ChargeAfterLayer, KeyExtractor, Stats};
use tower::ServiceExt;

/// An LLM-like route whose answers cost 600 tokens, counting how often it ran, behind a budget
/// of 1000 tokens an hour per tenant.
fn app(store: impl Store + 'static, served: Arc<AtomicU64>) -> (Router, Stats) {
    app_under(Engine::new(store), tokens(), served)
}

fn tokens() -> Policy {
    Policy::new(
        "tokens",
        Algorithm::sliding_log(1_000, Duration::from_secs(3_600)).expect("algorithm"),
    )
    .expect("policy")
}

/// [`app`] over `engine`, with `tokens` for its policy.
fn app_under<S: Store + 'static>(
    engine: Engine<S>,
    tokens: Policy,
    served: Arc<AtomicU64>,
) -> (Router, Stats) {
    let tenant = KeyExtractor::header(HeaderName::from_static("x-tenant"));
    let layer = ChargeAfterLayer::with_engine(Arc::new(engine), tokens, tenant, |response| {
        response
            .headers
            .get("x-tokens-used")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    let stats = layer.stats();
    let app = Router::new()
        .route(
            "/chat",
            post(move || {
                let served = served.clone();
                async move {
                    served.fetch_add(1, Ordering::Relaxed);
                    ([("x-tokens-used", "600")], "an answer")
                }
            }),
        )
        .layer(layer);
    (app, stats)
}

async fn ask(app: &Router, tenant: Option<&str>) -> (StatusCode, Option<String>) {
    let mut request = Request::post("/chat");
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("answer");
    let retry = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (response.status(), retry)
}

async fn a_handler_reporting_its_cost_is_charged_it(store: impl Store + 'static) {
    let served = Arc::new(AtomicU64::new(0));
    let (app, stats) = app(store, served.clone());
    let mut statuses = vec![];
    for _ in 0..5 {
        statuses.push(ask(&app, Some("acme")).await.0);
    }
    // 600, then 1200 of 1000: the second answer crossed the budget and nothing passes after it.
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(served.load(Ordering::Relaxed), 2, "refused before the handler");
    let (_, retry) = ask(&app, Some("acme")).await;
    assert!(retry.is_some_and(|secs| secs.parse::<u64>().is_ok_and(|s| s > 0 && s <= 3_600)));
    // Another tenant has its own budget; a request without a tenant is refused.
    assert_eq!(ask(&app, Some("globex")).await.0, StatusCode::OK);
    assert_eq!(ask(&app, None).await.0, StatusCode::BAD_REQUEST);
    let counted = stats.snapshot();
    assert_eq!(
        (counted.allowed, counted.denied, counted.rejected_keys),
        (3, 4, 1),
        "{counted:?}"
    );
    assert_eq!(
        (counted.charges, counted.unrecorded_charges),
        (3, 0),
        "{counted:?}"
    );
    assert_eq!((counted.degraded, counted.store_errors), (0, 0), "{counted:?}");
}

/// A memory store of one key, taken by a spent key it must keep: every other key fails.
fn full_store() -> MemoryStore {
    let store = MemoryStore::builder().max_keys(1).build();
    let filler = Policy::new(
        "filler",
        Algorithm::sliding_log(1, Duration::from_secs(3_600)).expect("algorithm"),
    )
    .expect("policy");
    assert!(store.check(&filler, "x", 1).expect("room for one").allowed);
    store
}

#[tokio::test]
async fn a_charge_the_failing_store_loses_is_counted() {
    for (mode, fallback_max_keys, recorded) in [
        (FailureMode::FailOpen, 100, false),
        (
            FailureMode::Local {
                instances: std::num::NonZeroU32::MIN,
            },
            100,
            true,
        ),
        // The local limiter is full of a key it must keep, so it records nothing new.
        (
            FailureMode::Local {
                instances: std::num::NonZeroU32::MIN,
            },
            1,
            false,
        ),
    ] {
        let engine = Engine::builder(full_store())
            .fallback_max_keys(fallback_max_keys)
            .build();
        if fallback_max_keys == 1 {
            let policy = tokens().with_failure_mode(mode);
            let filled = engine.check(&policy, "other", 1_000).await.expect("a check");
            assert!(
                filled.allowed() && filled.rules()[0].decision.remaining == 0,
                "{filled:?}"
            );
        }
        let (app, stats) = app_under(engine, tokens().with_failure_mode(mode), Arc::default());
        let before = stats.snapshot();
        assert_eq!(ask(&app, Some("acme")).await.0, StatusCode::OK, "{mode:?}");
        let after = stats.snapshot();
        let moved = |of: fn(&tollgate_tower::StatsSnapshot) -> u64| of(&after) - of(&before);
        assert_eq!(moved(|s| s.charges), 1, "{mode:?}, {fallback_max_keys} keys");
        assert_eq!(
            moved(|s| s.unrecorded_charges),
            u64::from(!recorded),
            "{mode:?}, {fallback_max_keys} keys"
        );
        // The question and the charge both met the failing store: one degraded request.
        assert_eq!(
            (moved(|s| s.degraded), moved(|s| s.store_errors)),
            (1, 1),
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn charged_on_the_memory_store() {
    a_handler_reporting_its_cost_is_charged_it(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charged_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    a_handler_reporting_its_cost_is_charged_it(store).await;
}

/// A route streaming `CHUNKS` chunks of `CHUNK` bytes, behind a budget of bytes per client
/// charged by the body's length.
const CHUNK: usize = 1_000;
const CHUNKS: usize = 5;

fn egress() -> Policy {
    Policy::new(
        "egress",
        Algorithm::fixed_window(8_000, Duration::from_secs(3_600), Anchor::Epoch).expect("algorithm"),
    )
    .expect("policy")
}

fn streaming_app<S: Store + 'static>(engine: Arc<Engine<S>>) -> Router {
    let client = KeyExtractor::header(HeaderName::from_static("x-client"));
    let layer = ChargeAfterLayer::body_bytes_with_engine(engine, egress(), client);
    Router::new()
        .route(
            "/export",
            get(|| async {
                let chunks = (0..CHUNKS).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; CHUNK])));
                Body::from_stream(futures_util::stream::iter(chunks))
            }),
        )
        .layer(layer)
}

async fn export(app: &Router) -> axum::response::Response {
    app.clone()
        .oneshot(
            Request::get("/export")
                .header("x-client", "c1")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("answer")
}

/// How much of the budget a peek of cost 1 finds used, waiting (bounded) for a charge made on
/// a task of its own.
async fn used<S: Store>(engine: &Engine<S>, expected: u64) -> u64 {
    let mut used = 0;
    for _ in 0..200 {
        let decision = engine.store().peek(&egress(), b"c1", 1).await.expect("peek");
        used = 8_000 - decision.remaining - u64::from(decision.allowed);
        if used == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    used
}

async fn a_streamed_body_is_charged_its_bytes<S: Store + 'static>(store: S) {
    let engine = Arc::new(Engine::new(store));
    let app = streaming_app(engine.clone());
    // Read to the end: charged before the end reaches the reader.
    let body = axum::body::to_bytes(export(&app).await.into_body(), usize::MAX)
        .await
        .expect("body");
    assert_eq!(body.len(), CHUNK * CHUNKS);
    let decision = engine.store().peek(&egress(), b"c1", 1).await.expect("peek");
    assert_eq!(
        decision.remaining,
        8_000 - 5_000 - 1,
        "charged once the body ended"
    );

    // Read two chunks, then go away: charged what was sent.
    let mut body = export(&app).await.into_body();
    for _ in 0..2 {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        assert!(frame.is_some_and(|f| f.is_ok()));
    }
    drop(body);
    assert_eq!(
        used(&engine, 7_000).await,
        7_000,
        "2,000 more bytes charged at the drop"
    );

    // 7,000 of 8,000: served whole, into debt; then refused before the handler.
    let body = axum::body::to_bytes(export(&app).await.into_body(), usize::MAX)
        .await
        .expect("body");
    assert_eq!(body.len(), CHUNK * CHUNKS);
    assert_eq!(export(&app).await.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_streamed_body_is_charged_its_bytes_on_the_memory_store() {
    a_streamed_body_is_charged_its_bytes(MemoryStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_is_charged_its_bytes_on_redis() {
    let redis = RedisServer::start();
    let store = RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect");
    a_streamed_body_is_charged_its_bytes(store).await;
}

/// Over a real connection: a client that reads a whole export and asks again at once is
/// refused, because the end of the body reached it only once the bytes were charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reading_to_the_end_finds_its_bytes_charged() {
    let engine = Arc::new(Engine::new(MemoryStore::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        axum::serve(listener, streaming_app(engine)).await.expect("serve");
    });
    let client = reqwest::Client::new();
    let url = format!("http://{address}/export");
    let get = || client.get(&url).header("x-client", "c1").send();
    let first = get().await.expect("first");
    assert_eq!(first.status(), 200);
    assert_eq!(first.bytes().await.expect("body").len(), 5_000);
    let second = get().await.expect("second");
    assert_eq!(second.status(), 200, "5,000 of 8,000 used: not past the limit");
    assert_eq!(second.bytes().await.expect("body").len(), 5_000);
    assert_eq!(
        get().await.expect("third").status(),
        429,
        "10,000 of 8,000: in debt"
    );
    server.abort();
}
