//! The doors of the charge table (`charges`): one step of a scenario as each door takes it, and
//! what the door said of it, read back into one shape ([`Said`]).
//!
//! How each door reports what the table compares:
//!
//! - the HTTP API (`POST /v1/check`, `/v1/charge`, `/v1/refund`) in its JSON answer: the budget
//!   left, the debt, `recorded` and `degraded`;
//! - gRPC and `POST /json` (`ShouldRateLimit`, in `charge_envoy`): the budget left in
//!   `limit_remaining`, a charge past the limit as `OVER_LIMIT`; `recorded` and `degraded`
//!   from the server's counters around the call;
//! - the tower layers: the budget left in the `RateLimit` header of `RateLimitLayer`'s answers;
//!   `recorded`, `degraded` and the refunds from the layers' [`Stats`];
//! - the proxy: its checks like the tower layer's; it takes no charge nor refund itself, so
//!   the app behind it makes them through the HTTP API over the proxy's store.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tollgate::Engine;
use tollgate_config::Limits;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::{RlsService, json as json_door};
use tollgate_server::proxy::{self, Forward};
use tollgate_server::{AnyStore, AppState, Settings, SharedState};
use tollgate_testkit::AppServer;
use tollgate_tower::{ChargeAfterLayer, KeyExtractor, KeyedPolicy, RateLimitLayer, Stats};
use tonic::transport::Channel;
use tower::ServiceExt;

use crate::charge_envoy::{grpc, json};
use crate::{ANSWER_TIMEOUT, KEY_HEADER, UPSTREAM_BODY};

/// The header the tower's charged handler reads the cost of its answer from, and answers with.
const COST_HEADER: &str = "x-cost";

/// One step of a scenario, under one limit, for one key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Step {
    /// A request of cost 1, checked.
    Check(&'static str, &'static str),
    /// A request whose cost is known after it: charged that cost, whatever is left.
    Charge(&'static str, &'static str, u64),
    /// A request of cost 1 admitted, whose work then failed on the server's side: given back.
    Fail(&'static str, &'static str),
}

/// What a door said of one step; `None` where the door does not show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Said {
    /// `allowed`, `denied`, `unavailable`, `charged`, `refunded`, `refund failed`, or what the
    /// door said instead.
    pub kind: String,
    /// The budget left after the step.
    pub left: Option<u64>,
    /// A charge's units owed past the limit.
    pub debt: Option<u64>,
    /// A charge took the key past its limit.
    pub past: Option<bool>,
    /// A charge was recorded somewhere (the store, or the `local` failure mode's limiter).
    pub recorded: Option<bool>,
    /// The store failed and a failure mode answered.
    pub degraded: Option<bool>,
}

impl Said {
    pub(crate) fn kind(kind: impl Into<String>) -> Self {
        Said {
            kind: kind.into(),
            ..Said::default()
        }
    }

    pub(crate) fn shown(&self) -> String {
        let mut parts = Vec::new();
        if let Some(left) = self.left {
            parts.push(format!("left {left}"));
        }
        if let Some(debt) = self.debt {
            parts.push(format!("debt {debt}"));
        }
        if self.past == Some(true) {
            parts.push("past".to_owned());
        }
        match self.recorded {
            Some(true) => parts.push("recorded".to_owned()),
            Some(false) => parts.push("unrecorded".to_owned()),
            None => {}
        }
        if self.degraded == Some(true) {
            parts.push("degraded".to_owned());
        }
        match parts.is_empty() {
            true => self.kind.clone(),
            false => format!("{}({})", self.kind, parts.join(", ")),
        }
    }
}

/// The doors of one scenario, each over its own store (the proxy's shared with the HTTP API
/// its app reports to).
pub(crate) struct Doors {
    http: SharedState,
    grpc: RateLimitServiceClient<Channel>,
    grpc_stop: oneshot::Sender<()>,
    grpc_server: tokio::task::JoinHandle<std::io::Result<()>>,
    json: Router,
    tower: Router,
    /// The tower layers' counters.
    tower_stats: Vec<Stats>,
    /// The proxy, and the HTTP API over its store.
    proxy: Option<(Router, SharedState)>,
}

/// What each door is built over.
pub(crate) struct Opening<'a> {
    /// The scenario's limits, by name.
    pub names: &'a [&'static str],
    /// The scenario's config, loaded afresh.
    pub limits: &'a dyn Fn() -> Limits,
    /// The store of each door, by number: 0 HTTP, 1 gRPC, 2 `/json`, 3 tower, 4 the proxy.
    pub stores: &'a [AnyStore; 5],
    pub fallback_max_keys: usize,
    /// The upstream behind the proxy, when it takes part.
    pub upstream: Option<&'a AppServer>,
}

impl Doors {
    pub(crate) async fn open(opening: Opening<'_>) -> Doors {
        let settings = || Settings {
            fallback_max_keys: opening.fallback_max_keys,
            ..Settings::default()
        };
        let state = |door: usize| AppState::new((opening.limits)(), opening.stores[door].clone(), settings());
        let http = state(0);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (grpc_stop, stopped) = oneshot::channel::<()>();
        let grpc_server = tokio::spawn(tollgate_server::grpc::serve(listener, state(1), async {
            let _ = stopped.await;
        }));
        let grpc = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");

        let json = json_door::router(RlsService::new(state(2)));

        let engine = Engine::builder(opening.stores[3].clone())
            .fallback_max_keys(opening.fallback_max_keys)
            .build();
        let (tower, tower_stats) = tower_app(&(opening.limits)(), opening.names, std::sync::Arc::new(engine));

        let proxy = opening.upstream.map(|upstream| {
            let app = proxy::app(
                &(opening.limits)(),
                opening.stores[4].clone(),
                Forward::new(&upstream.url("")).expect("upstream url"),
                &[],
            )
            .expect("proxy app");
            let reported = state(4);
            (app, reported)
        });
        Doors {
            http,
            grpc,
            grpc_stop,
            grpc_server,
            json,
            tower,
            tower_stats,
            proxy,
        }
    }

    /// Stops the gRPC server and waits for it to end.
    pub(crate) async fn close(self) {
        let _ = self.grpc_stop.send(());
        answered(self.grpc_server)
            .await
            .expect("gRPC server task")
            .expect("gRPC server");
    }

    /// Each door's answer to `step`, by door name.
    pub(crate) async fn ask(&mut self, step: Step) -> Vec<(&'static str, Said)> {
        let mut said = vec![
            ("http", http(&self.http, step).await),
            ("grpc", grpc(&mut self.grpc, step).await),
            ("json", json(&self.json, step).await),
            ("tower", tower(&self.tower, &self.tower_stats, step).await),
        ];
        if let Some((app, reported)) = &self.proxy {
            said.push(("proxy", proxied(app, reported, step).await));
        }
        said
    }
}

/// The app a Rust service would write: per limit, a checked route (`/check/NAME`), a route
/// charged after its answer (`/charge/NAME`, the cost in the answer's `x-cost`), and a route
/// that fails and gives back its request's cost (`/fail/NAME`). Every layer over one engine.
fn tower_app(
    limits: &Limits,
    names: &[&str],
    engine: std::sync::Arc<Engine<AnyStore>>,
) -> (Router, Vec<Stats>) {
    let key = || KeyExtractor::header(HeaderName::from_static(KEY_HEADER));
    let checks = Stats::default();
    let mut stats = vec![checks.clone()];
    let mut app = Router::new();
    for name in names {
        let policy = limits.policy(name).expect("a configured policy").policy().clone();
        let checked = |refund| {
            RateLimitLayer::builder_engine(engine.clone())
                .policy(KeyedPolicy::new(policy.clone(), key()))
                .refund_on_server_error(refund)
                .stats(checks.clone())
                .build()
                .expect("layer")
        };
        let charged = ChargeAfterLayer::with_engine(engine.clone(), policy.clone(), key(), |answer| {
            (answer.headers.get(COST_HEADER))
                .and_then(|cost| cost.to_str().ok()?.parse().ok())
                .unwrap_or(0)
        });
        stats.push(charged.stats());
        app = app
            .route(
                &format!("/check/{name}"),
                get(|| async { "ok" }).layer(checked(false)),
            )
            .route(
                &format!("/charge/{name}"),
                get(|asked: HeaderMap| async move {
                    let cost = asked.get(COST_HEADER).cloned().unwrap_or(HeaderValue::from(0));
                    ([(HeaderName::from_static(COST_HEADER), cost)], "done")
                })
                .layer(charged),
            )
            .route(
                &format!("/fail/{name}"),
                get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "failed") }).layer(checked(true)),
            );
    }
    (app, stats)
}

/// The upstream behind the proxy: a path ending in `/fail` fails, every other answers.
pub(crate) fn upstream_app() -> Router {
    Router::new().fallback(|uri: axum::http::Uri| async move {
        match uri.path().ends_with("/fail") {
            true => (StatusCode::INTERNAL_SERVER_ERROR, "failed"),
            false => (StatusCode::OK, UPSTREAM_BODY),
        }
    })
}

pub(crate) async fn answered<F: std::future::Future>(call: F) -> F::Output {
    tokio::time::timeout(ANSWER_TIMEOUT, call)
        .await
        .expect("answered in time")
}

async fn post(state: &SharedState, path: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = answered(tollgate_server::api_router(state.clone()).oneshot(request))
        .await
        .expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

/// A budget as a check of cost 1 sees it (the answers of charges and refunds): what is left is
/// one more than that check would leave, when it would pass.
fn left_of_peek(answer: &Value) -> Option<u64> {
    let remaining = answer["remaining"].as_u64()?;
    Some(match answer["allowed"].as_bool()? {
        true => remaining + 1,
        false => 0,
    })
}

async fn http(state: &SharedState, step: Step) -> Said {
    match step {
        Step::Check(name, key) => http_check(state, name, key).await,
        Step::Charge(name, key, cost) => {
            let (status, answer) = post(
                state,
                "/v1/charge",
                json!({"policy": name, "key": key, "cost": cost}),
            )
            .await;
            if status != StatusCode::OK {
                return Said::kind(format!("HTTP {status}: {answer}"));
            }
            let debt = answer["debt"].as_u64();
            Said {
                kind: "charged".into(),
                left: left_of_peek(&answer),
                debt,
                past: debt.map(|debt| debt > 0),
                recorded: answer["recorded"].as_bool(),
                degraded: answer["degraded"].as_bool(),
            }
        }
        Step::Fail(name, key) => {
            let checked = http_check(state, name, key).await;
            if checked.kind != "allowed" {
                return checked;
            }
            let (status, answer) = post(
                state,
                "/v1/refund",
                json!({"policy": name, "key": key, "cost": 1}),
            )
            .await;
            let degraded = checked.degraded.unwrap_or(false) || answer["degraded"].as_bool() == Some(true);
            match status {
                StatusCode::OK => Said {
                    left: left_of_peek(&answer),
                    degraded: Some(degraded),
                    ..Said::kind("refunded")
                },
                StatusCode::SERVICE_UNAVAILABLE => Said {
                    degraded: Some(degraded),
                    ..Said::kind("refund failed")
                },
                other => Said::kind(format!("HTTP {other}: {answer}")),
            }
        }
    }
}

async fn http_check(state: &SharedState, name: &str, key: &str) -> Said {
    let (status, answer) = post(state, "/v1/check", json!({"policy": name, "key": key})).await;
    let kind = match status {
        StatusCode::OK => "allowed",
        StatusCode::TOO_MANY_REQUESTS => "denied",
        StatusCode::SERVICE_UNAVAILABLE => return Said::kind("unavailable"),
        other => return Said::kind(format!("HTTP {other}: {answer}")),
    };
    Said {
        left: answer["remaining"].as_u64(),
        degraded: answer["degraded"].as_bool(),
        ..Said::kind(kind)
    }
}

/// The counters of the tower layers that a step moves.
#[derive(Clone, Copy, Default)]
struct Tally {
    degraded: u64,
    charges: u64,
    unrecorded: u64,
    refunds: u64,
    refund_failures: u64,
}

impl Tally {
    fn of(stats: &[Stats]) -> Tally {
        stats
            .iter()
            .map(Stats::snapshot)
            .fold(Tally::default(), |t, s| Tally {
                degraded: t.degraded + s.degraded,
                charges: t.charges + s.charges,
                unrecorded: t.unrecorded + s.unrecorded_charges,
                refunds: t.refunds + s.refunds,
                refund_failures: t.refund_failures + s.refund_failures,
            })
    }
}

/// A `GET` of `path` on `app` for `key`, with `headers`.
async fn get_for(
    app: &Router,
    path: &str,
    key: &str,
    headers: &[(&str, String)],
) -> axum::response::Response {
    let mut request = Request::get(path)
        .header("host", "localhost")
        .header(KEY_HEADER, key);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    answered(app.clone().oneshot(request.body(Body::empty()).expect("request")))
        .await
        .expect("infallible")
}

/// The budget left in a `RateLimit` header (`"policy";r=2;t=60`).
fn left_in_header(response: &axum::response::Response) -> Option<u64> {
    let field = response.headers().get("ratelimit")?.to_str().ok()?;
    let (_, rest) = field.split_once(";r=")?;
    rest.split(';').next()?.parse().ok()
}

/// A check's answer at a door of layers, `body` being what the app behind it answers.
async fn layered_check(response: axum::response::Response, body: &str) -> Said {
    let status = response.status();
    let left = left_in_header(&response);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    match status {
        StatusCode::OK if bytes == body.as_bytes() => Said {
            left,
            ..Said::kind("allowed")
        },
        StatusCode::TOO_MANY_REQUESTS => Said {
            left,
            ..Said::kind("denied")
        },
        StatusCode::SERVICE_UNAVAILABLE => Said::kind("unavailable"),
        other => Said::kind(format!("HTTP {other}: {}", String::from_utf8_lossy(&bytes))),
    }
}

async fn tower(app: &Router, stats: &[Stats], step: Step) -> Said {
    let before = Tally::of(stats);
    let said = match step {
        Step::Check(name, key) => {
            layered_check(get_for(app, &format!("/check/{name}"), key, &[]).await, "ok").await
        }
        Step::Charge(name, key, cost) => {
            let response = get_for(
                app,
                &format!("/charge/{name}"),
                key,
                &[(COST_HEADER, cost.to_string())],
            )
            .await;
            match response.status() {
                StatusCode::OK => Said::kind("charged"),
                _ => layered_check(response, "").await,
            }
        }
        Step::Fail(name, key) => {
            let response = get_for(app, &format!("/fail/{name}"), key, &[]).await;
            match response.status() {
                StatusCode::INTERNAL_SERVER_ERROR => Said::kind("failed"),
                _ => layered_check(response, "").await,
            }
        }
    };
    let after = Tally::of(stats);
    let kind = match said.kind.as_str() {
        "failed" => match (
            after.refunds - before.refunds,
            after.refund_failures - before.refund_failures,
        ) {
            (1, 0) => "refunded".to_owned(),
            (0, 1) => "refund failed".to_owned(),
            (0, 0) => "failed, nothing given back".to_owned(),
            counted => format!("failed, refunds and failures {counted:?}"),
        },
        kind => kind.to_owned(),
    };
    let recorded = match (kind.as_str(), after.charges - before.charges) {
        ("charged", 1) => Some(after.unrecorded == before.unrecorded),
        _ => None,
    };
    Said {
        kind,
        recorded,
        degraded: Some(after.degraded > before.degraded),
        ..said
    }
}

/// The proxy's checks; its charges and refunds made by the app behind it, through the HTTP API
/// over the proxy's store.
async fn proxied(app: &Router, reported: &SharedState, step: Step) -> Said {
    match step {
        Step::Check(name, key) => {
            layered_check(get_for(app, &format!("/{name}"), key, &[]).await, UPSTREAM_BODY).await
        }
        Step::Charge(..) => http(reported, step).await,
        Step::Fail(name, key) => {
            let response = get_for(app, &format!("/{name}/fail"), key, &[]).await;
            if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
                return layered_check(response, UPSTREAM_BODY).await;
            }
            let (status, answer) = post(
                reported,
                "/v1/refund",
                json!({"policy": name, "key": key, "cost": 1}),
            )
            .await;
            match status {
                StatusCode::OK => Said {
                    left: left_of_peek(&answer),
                    degraded: answer["degraded"].as_bool(),
                    ..Said::kind("refunded")
                },
                StatusCode::SERVICE_UNAVAILABLE => Said::kind("refund failed"),
                other => Said::kind(format!("HTTP {other}: {answer}")),
            }
        }
    }
}
