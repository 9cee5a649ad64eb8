//! Four doors onto one engine: the HTTP API (`POST /v1/check`), the Envoy rate limit service
//! (`ShouldRateLimit`), the tower layer on an axum app, and the proxy in front of an upstream.
//! Each door only translates, so the same limits asked the same questions must give the same
//! answers at every door. This test runs one table of scenarios through all four and compares.
//!
//! Each scenario's limits are written once, as a small table, and turned into one config
//! directory: a tollgate-format file (`policies:` and `routes:`, read by the HTTP API, the
//! tower layer and the proxy) and an envoyproxy/ratelimit-format file (a `domain:` whose
//! descriptors use tollgate's extensions, read by the gRPC service). Every door gets a fresh
//! store, so the counts of one door never leak into another's.
//!
//! The limits are sliding logs, not fixed windows: a window aligned to the clock could roll over
//! in the middle of a scenario and hand out a fresh budget, which would make the test flaky.
//!
//! The Envoy doors (gRPC, `POST /json` and explain) are compared on Envoy's own semantics in
//! `envoy_doors`; charges and refunds at every door in `charges` (the doors' side in
//! `charge_doors` and `charge_envoy`).

mod common;

#[path = "four_doors/charge_doors.rs"]
mod charge_doors;
#[path = "four_doors/charge_envoy.rs"]
mod charge_envoy;
#[path = "four_doors/charges.rs"]
mod charges;
#[path = "four_doors/envoy_doors.rs"]
mod envoy_doors;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, StatusCode};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tollgate::{Algorithm, Engine, MemoryStore, Policy};
use tollgate_config::{Limits, RouteKey};
use tollgate_server::AnyStore;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_server::proxy::{self, Forward};
use tollgate_server::{AppState, Settings, SharedState};
use tollgate_testkit::{AppServer, RedisServer};
use tollgate_tower::{KeyExtractor, KeyedPolicy, RateLimitLayer};
use tonic::transport::Channel;
use tower::ServiceExt;

/// The one key every request is counted by (each door has its own store).
const KEY: &str = "k";
/// The header the tower layer and the proxy read the key from.
const KEY_HEADER: &str = "x-key";
/// The Envoy domain of every scenario.
const DOMAIN: &str = "fourdoors";
/// What the upstream behind the proxy answers, so a forwarded request can be told apart.
const UPSTREAM_BODY: &str = "from upstream";
/// How long any one answer may take before the test gives up on it.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait a denial of a one-minute sliding log asks for, without a penalty.
const WINDOW_RETRY: RangeInclusive<u64> = 1..=60;

/// Held by the tests whose stores fail, so that a test reading the process's store error
/// counter (`charges`) counts only its own.
static PROCESS_COUNTERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One limit of a scenario: a sliding log of `limit` per minute.
struct Limit {
    name: &'static str,
    limit: u64,
    block_for: Option<&'static str>,
    on_store_failure: Option<&'static str>,
    shadow: bool,
}

impl Limit {
    const fn new(name: &'static str, limit: u64) -> Self {
        Limit {
            name,
            limit,
            block_for: None,
            on_store_failure: None,
            shadow: false,
        }
    }

    const fn block_for(mut self, penalty: &'static str) -> Self {
        self.block_for = Some(penalty);
        self
    }

    const fn on_store_failure(mut self, mode: &'static str) -> Self {
        self.on_store_failure = Some(mode);
        self
    }

    const fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// The extensions both formats share, as flow-map entries (`, block_for: 10m`).
    fn extras(&self) -> String {
        let mut extras = String::new();
        if let Some(penalty) = self.block_for {
            let _ = write!(extras, ", block_for: {penalty}");
        }
        if let Some(mode) = self.on_store_failure {
            let _ = write!(extras, ", on_store_failure: {mode}");
        }
        extras
    }
}

/// The store each door of a scenario decides with (a fresh one per door).
#[derive(Clone, Copy, Debug)]
enum StoreKind {
    /// An empty memory store.
    Memory,
    /// A memory store of one key, taken by a spent key that cannot be evicted.
    Full,
    /// A Redis store whose server is gone.
    RedisDown,
}

/// A door's answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    /// `allowed`, `denied`, `unavailable`, or what the door said instead.
    kind: String,
    /// For a denial: how long the door tells the client to wait, in whole seconds.
    retry_secs: Option<u64>,
}

impl Answer {
    fn new(kind: impl Into<String>, retry_secs: Option<u64>) -> Self {
        Answer {
            kind: kind.into(),
            retry_secs,
        }
    }

    fn shown(&self) -> String {
        match self.retry_secs {
            Some(secs) if self.kind == "denied" => format!("denied({secs}s)"),
            _ => self.kind.clone(),
        }
    }
}

struct Scenario {
    name: String,
    limits: Vec<Limit>,
    store: StoreKind,
    /// Each request names the limits it is subject to.
    requests: Vec<&'static [&'static str]>,
    /// The answer every door must give to each request.
    expected: Vec<&'static str>,
    /// How long every denial must tell the client to wait, in whole seconds.
    retry_secs: RangeInclusive<u64>,
}

fn scenarios() -> Vec<Scenario> {
    let modes = [
        ("fail_open", vec!["allowed"; 4]),
        ("fail_closed", vec!["unavailable"; 4]),
        // The engine's own limiter over the policy's share (all of it: one instance).
        ("local", vec!["allowed", "allowed", "allowed", "denied"]),
    ];
    let mut scenarios = vec![
        Scenario {
            name: "limit".into(),
            limits: vec![Limit::new("basic", 3)],
            store: StoreKind::Memory,
            requests: vec![&["basic"][..]; 4],
            expected: vec!["allowed", "allowed", "allowed", "denied"],
            retry_secs: WINDOW_RETRY,
        },
        Scenario {
            name: "penalty".into(),
            limits: vec![Limit::new("strict", 1).block_for("10m")],
            store: StoreKind::Memory,
            requests: vec![&["strict"][..]; 3],
            expected: vec!["allowed", "denied", "denied"],
            // The window is a minute: a wait of nearly ten can only be the penalty.
            retry_secs: 590..=600,
        },
        Scenario {
            name: "two limits".into(),
            limits: vec![Limit::new("wide", 2), Limit::new("narrow", 1)],
            store: StoreKind::Memory,
            // The denied second request must spend nothing of `wide`: one unit is left for the
            // third, and only the fourth is denied.
            requests: vec![&["wide", "narrow"], &["wide", "narrow"], &["wide"], &["wide"]],
            expected: vec!["allowed", "denied", "allowed", "denied"],
            retry_secs: WINDOW_RETRY,
        },
        Scenario {
            name: "penalty of the denying limit only".into(),
            limits: vec![
                Limit::new("wide", 5).block_for("10m"),
                Limit::new("narrow", 1).block_for("10m"),
            ],
            store: StoreKind::Memory,
            // `narrow` denies the second request and is blocked; `wide` allowed it and is not.
            requests: vec![&["wide", "narrow"], &["wide", "narrow"], &["wide"], &["narrow"]],
            expected: vec!["allowed", "denied", "allowed", "denied"],
            retry_secs: 590..=600,
        },
        Scenario {
            name: "shadow beside enforced".into(),
            limits: vec![Limit::new("watch", 1).shadow(), Limit::new("basic", 2)],
            store: StoreKind::Memory,
            requests: vec![&["watch", "basic"][..]; 3],
            expected: vec!["allowed", "allowed", "denied"],
            retry_secs: WINDOW_RETRY,
        },
        Scenario {
            name: "shadow".into(),
            limits: vec![Limit::new("watch", 1).shadow()],
            store: StoreKind::Memory,
            requests: vec![&["watch"][..]; 3],
            expected: vec!["allowed"; 3],
            retry_secs: WINDOW_RETRY,
        },
    ];
    for (store, label) in [(StoreKind::Full, "full"), (StoreKind::RedisDown, "redis down")] {
        for (mode, expected) in &modes {
            scenarios.push(Scenario {
                name: format!("{label}, {mode}"),
                limits: vec![Limit::new("guarded", 3).on_store_failure(mode)],
                store,
                requests: vec![&["guarded"][..]; expected.len()],
                expected: expected.clone(),
                retry_secs: WINDOW_RETRY,
            });
        }
        // A shadow limit is never refused, not even when its store fails and it fails closed;
        // beside it, a request's other limits follow their own failure modes.
        scenarios.push(Scenario {
            name: format!("{label}, fail_closed in shadow"),
            limits: vec![Limit::new("guarded", 3).on_store_failure("fail_closed").shadow()],
            store,
            requests: vec![&["guarded"][..]; 2],
            expected: vec!["allowed"; 2],
            retry_secs: WINDOW_RETRY,
        });
        scenarios.push(Scenario {
            name: format!("{label}, fail_open beside fail_closed"),
            limits: vec![
                Limit::new("open", 3).on_store_failure("fail_open"),
                Limit::new("closed", 3).on_store_failure("fail_closed"),
            ],
            store,
            requests: vec![&["open", "closed"], &["open", "closed"], &["open"]],
            expected: vec!["unavailable", "unavailable", "allowed"],
            retry_secs: WINDOW_RETRY,
        });
    }
    scenarios
}

/// The path of the route that applies exactly `names`.
fn route_path(names: &[&str]) -> String {
    format!("/{}", names.join("_"))
}

/// The scenario's config: one tollgate-format file and one Envoy-format file, loaded together.
fn config(scenario: &Scenario) -> Limits {
    let mut ours = String::from("policies:\n");
    let mut envoy = format!("domain: {DOMAIN}\ndescriptors:\n");
    for limit in &scenario.limits {
        let extras = limit.extras();
        let _ = writeln!(
            ours,
            "  {}: {{algorithm: sliding_log, limit: {}, window: 1m{extras}, shadow: {}}}",
            limit.name, limit.limit, limit.shadow
        );
        let _ = writeln!(
            envoy,
            "  - key: {}\n    shadow_mode: {}\n    rate_limit: {{unit: minute, requests_per_unit: {}, algorithm: sliding_log{extras}}}",
            limit.name, limit.shadow, limit.limit
        );
    }
    ours.push_str("routes:\n");
    let routes: BTreeSet<&[&str]> = scenario.requests.iter().copied().collect();
    for names in routes {
        let _ = writeln!(
            ours,
            "  - {{prefix: {}, policies: [{}], key: \"header:{KEY_HEADER}\"}}",
            route_path(names),
            names.join(", ")
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("policies.yaml"), &ours).expect("write policies");
    std::fs::write(dir.path().join("envoy.yaml"), &envoy).expect("write descriptors");
    tollgate_config::load(dir.path()).unwrap_or_else(|e| panic!("{e}\n{ours}\n{envoy}"))
}

/// A fresh store of `kind`; `redis_url` is where a stopped Redis server listened.
async fn store(kind: StoreKind, redis_url: &str) -> AnyStore {
    match kind {
        StoreKind::Memory => AnyStore::memory(),
        StoreKind::Full => {
            let memory = Arc::new(
                MemoryStore::builder()
                    .max_keys(1)
                    .clock(tollgate_server::StoreClock::System(tollgate::SystemClock::new()))
                    .build(),
            );
            let filler = Policy::new(
                "filler",
                Algorithm::sliding_log(1, Duration::from_secs(3600)).expect("algorithm"),
            )
            .expect("policy");
            let spent = memory.check(&filler, b"x", 1).expect("filler fits");
            assert!(spent.allowed && spent.remaining == 0, "{spent:?}");
            AnyStore::Memory(memory)
        }
        StoreKind::RedisDown => common::redis_store(redis_url).await,
    }
}

/// The four doors of one scenario, each over its own store.
struct Doors {
    http: SharedState,
    grpc: RateLimitServiceClient<Channel>,
    grpc_stop: oneshot::Sender<()>,
    tower: Router,
    proxy: Router,
}

impl Doors {
    async fn open(scenario: &Scenario, redis_url: &str, upstream: &AppServer) -> Doors {
        let http = AppState::new(
            config(scenario),
            store(scenario.store, redis_url).await,
            Settings::default(),
        );

        let grpc_state = AppState::new(
            config(scenario),
            store(scenario.store, redis_url).await,
            Settings::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("local addr");
        let (grpc_stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(tollgate_server::grpc::serve(listener, grpc_state, async {
            let _ = stopped.await;
        }));
        let grpc = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");

        let tower = tower_app(&config(scenario), store(scenario.store, redis_url).await);

        let proxy = proxy::app(
            &config(scenario),
            store(scenario.store, redis_url).await,
            Forward::new(&upstream.url("")).expect("upstream url"),
            &[],
        )
        .expect("proxy app");

        Doors {
            http,
            grpc,
            grpc_stop,
            tower,
            proxy,
        }
    }

    fn close(self) {
        let _ = self.grpc_stop.send(());
    }
}

/// An axum app as a Rust service would write it: a route per set of limits, each behind the
/// tower layer with one rule per limit keyed by a header. The layers share one engine, as the
/// routes of one app share one store.
fn tower_app(limits: &Limits, store: AnyStore) -> Router {
    let engine = Arc::new(Engine::new(store));
    let mut app = Router::new();
    for route in limits.routes() {
        assert_eq!(route.key(), &RouteKey::Header(KEY_HEADER.to_owned()));
        let mut layer = RateLimitLayer::builder_engine(engine.clone());
        for name in route.policies() {
            let named = limits.policy(name).expect("a configured policy");
            let key = KeyExtractor::header(HeaderName::from_static(KEY_HEADER));
            layer = layer.policy(KeyedPolicy::new(named.policy().clone(), key).shadow(named.shadow()));
        }
        let layer = layer.build().expect("layer");
        app = app.merge(
            Router::new()
                .route(route.prefix(), get(|| async { "ok" }))
                .route_layer(layer),
        );
    }
    app
}

/// Whole seconds from a `Retry-After` header.
fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
}

/// An HTTP answer as one of the three; with `expected_body`, `allowed` only when the body is what
/// the app behind the door answers.
async fn http_answer(response: axum::response::Response, expected_body: Option<&str>) -> Answer {
    let status = response.status();
    let retry = retry_after(response.headers());
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    match status {
        StatusCode::OK => match expected_body {
            Some(expected) if body != expected.as_bytes() => {
                Answer::new(format!("200 with {:?}", String::from_utf8_lossy(&body)), None)
            }
            _ => Answer::new("allowed", None),
        },
        StatusCode::TOO_MANY_REQUESTS => Answer::new("denied", retry),
        StatusCode::SERVICE_UNAVAILABLE => Answer::new("unavailable", None),
        other => Answer::new(format!("HTTP {other}: {}", String::from_utf8_lossy(&body)), None),
    }
}

async fn ask_http(state: &SharedState, names: &[&str]) -> Answer {
    let body = match names {
        [name] => json!({"policy": name, "key": KEY}),
        _ => {
            let rules: Vec<Value> = names
                .iter()
                .map(|name| json!({"policy": name, "key": KEY}))
                .collect();
            json!({ "rules": rules })
        }
    };
    let request = Request::post("/v1/check")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = tollgate_server::api_router(state.clone())
        .oneshot(request)
        .await
        .expect("infallible");
    http_answer(response, None).await
}

async fn ask_grpc(client: &mut RateLimitServiceClient<Channel>, names: &[&str]) -> Answer {
    let descriptors = names
        .iter()
        .map(|name| RateLimitDescriptor {
            entries: vec![Entry {
                key: (*name).to_owned(),
                value: KEY.to_owned(),
            }],
            ..Default::default()
        })
        .collect();
    let request = RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors,
        hits_addend: 1,
    };
    let answer = tokio::time::timeout(ANSWER_TIMEOUT, client.should_rate_limit(request))
        .await
        .expect("answered in time");
    match answer {
        Ok(response) => {
            let response = response.into_inner();
            match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => Answer::new("allowed", None),
                Ok(Code::OverLimit) => {
                    let retry = response
                        .statuses
                        .iter()
                        .filter(|status| status.code == i32::from(Code::OverLimit))
                        .filter_map(|status| status.duration_until_reset.as_ref())
                        .filter_map(|reset| u64::try_from(reset.seconds).ok())
                        .max();
                    Answer::new("denied", retry)
                }
                other => Answer::new(format!("gRPC code {other:?}"), None),
            }
        }
        Err(status) if status.code() == tonic::Code::Unavailable => Answer::new("unavailable", None),
        Err(status) => Answer::new(format!("gRPC {:?}: {}", status.code(), status.message()), None),
    }
}

/// A request to `app` on the route of `names`, keyed by the header; `expected_body` is what the
/// app behind the door answers when the request gets through.
async fn ask_router(app: &Router, names: &[&str], expected_body: &str) -> Answer {
    let request = Request::get(route_path(names))
        .header("host", "localhost")
        .header(KEY_HEADER, KEY)
        .body(Body::empty())
        .expect("request");
    let response = tokio::time::timeout(ANSWER_TIMEOUT, app.clone().oneshot(request))
        .await
        .expect("answered in time")
        .expect("infallible");
    http_answer(response, Some(expected_body)).await
}

const DOOR_NAMES: [&str; 4] = ["http", "grpc", "tower", "proxy"];

/// Every door's answers to the scenario's requests, in `DOOR_NAMES` order.
async fn run(scenario: &Scenario, redis_url: &str, upstream: &AppServer) -> [Vec<Answer>; 4] {
    let mut doors = Doors::open(scenario, redis_url, upstream).await;
    let mut answers: [Vec<Answer>; 4] = Default::default();
    for names in &scenario.requests {
        answers[0].push(ask_http(&doors.http, names).await);
        answers[1].push(ask_grpc(&mut doors.grpc, names).await);
        answers[2].push(ask_router(&doors.tower, names, "ok").await);
        answers[3].push(ask_router(&doors.proxy, names, UPSTREAM_BODY).await);
    }
    doors.close();
    answers
}

/// Whether `answers` are what the scenario expects.
fn as_expected(scenario: &Scenario, answers: &[Answer]) -> bool {
    answers.len() == scenario.expected.len()
        && answers.iter().zip(&scenario.expected).all(|(answer, expected)| {
            answer.kind == *expected
                && (*expected != "denied"
                    || answer
                        .retry_secs
                        .is_some_and(|secs| scenario.retry_secs.contains(&secs)))
        })
}

#[tokio::test]
async fn every_door_gives_the_same_answers() {
    let _counters = PROCESS_COUNTERS.lock().await;
    let mut redis = RedisServer::start();
    let redis_url = redis.url();
    redis.kill();
    let upstream = AppServer::start(Router::new().fallback(|| async { UPSTREAM_BODY })).await;

    let mut table = String::new();
    let mut failed = Vec::new();
    for scenario in scenarios() {
        let answers = run(&scenario, &redis_url, &upstream).await;
        let mut expectation = scenario.expected.join(", ");
        if scenario.expected.contains(&"denied") {
            let (from, to) = (scenario.retry_secs.start(), scenario.retry_secs.end());
            let _ = write!(expectation, "; denials wait {from}..={to}s");
        }
        let _ = writeln!(table, "{}: expected {expectation}", scenario.name);
        for (door, answers) in DOOR_NAMES.iter().zip(&answers) {
            let ok = as_expected(&scenario, answers);
            let shown: Vec<String> = answers.iter().map(Answer::shown).collect();
            let mark = if ok { "  " } else { "!!" };
            let _ = writeln!(table, "  {mark} {door:<6} {}", shown.join(", "));
            if !ok {
                failed.push(format!("{} at {door}", scenario.name));
            }
        }
    }
    upstream.stop().await;
    assert!(
        failed.is_empty(),
        "the doors disagree with the expected answers ({}):\n{table}",
        failed.join("; ")
    );
    println!("{table}");
}
