//! The Envoy doors: `ShouldRateLimit` over gRPC, `POST /json`, and explain of the same
//! descriptors. All three plan with one planner, so asked the same question they must give the
//! same answer, and that answer must be upstream's. Each case runs a short sequence of
//! requests; at every step explain is asked first (on the gRPC door's store: it spends nothing,
//! so it predicts what gRPC answers next), then gRPC; `/json` runs the same sequence on a store
//! of its own. The cases cover what used to differ between doors: allow and deny lists, global
//! shadow and quota modes, `replaces`, a request's own limit and `unlimited`; on the memory store
//! and on a real Redis.
//!
//! Configured limits are sliding logs, so no window rolls over mid-case; a request's own limit
//! is a fixed window of a year (upstream's semantics), which rolls over once a year.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
use tollgate_server::grpc::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_response::rate_limit::Unit;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest};
use tollgate_server::grpc::{EnvoySettings, RlsService};
use tollgate_server::{AnyStore, AppState, Settings, SharedState};
use tollgate_testkit::RedisServer;
use tower::ServiceExt;

const DOMAIN: &str = "doors";

/// One descriptor of a case's request: its entries and its own limit (per year), if any.
struct Descriptor {
    entries: &'static [(&'static str, &'static str)],
    per_year: Option<u32>,
}

const fn plain(entries: &'static [(&'static str, &'static str)]) -> Descriptor {
    Descriptor {
        entries,
        per_year: None,
    }
}

struct Case {
    name: &'static str,
    /// The descriptors of the domain, as YAML under `descriptors:`.
    config: &'static str,
    global_shadow: bool,
    global_quota: bool,
    /// Global allow and deny list ranges.
    lists: &'static [(Listed, &'static str)],
    request: Vec<Descriptor>,
    /// Upstream's overall code of each request in turn: `true` for `OVER_LIMIT`.
    over: &'static [bool],
}

fn cases() -> Vec<Case> {
    let ip_10 = "  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}\n";
    let ip_1 = "  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_log}\n";
    vec![
        Case {
            name: "a deny-listed remote_address is over",
            config: ip_10,
            global_shadow: false,
            global_quota: false,
            lists: &[(Listed::Deny, "203.0.113.0/24")],
            request: vec![plain(&[("remote_address", "203.0.113.9")])],
            over: &[true, true],
        },
        Case {
            name: "a deny-listed remote_address is over in global shadow mode too",
            config: ip_10,
            global_shadow: true,
            global_quota: false,
            lists: &[(Listed::Deny, "203.0.113.0/24")],
            request: vec![plain(&[("remote_address", "203.0.113.9")])],
            over: &[true],
        },
        Case {
            name: "a deny-listed remote_address is over where no limit matches it",
            config: "  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_log}\n",
            global_shadow: false,
            global_quota: false,
            lists: &[(Listed::Deny, "192.0.2.0/24")],
            request: vec![
                plain(&[("remote_address", "192.0.2.5"), ("user", "bob")]),
                plain(&[("user", "bob")]),
            ],
            over: &[true, true],
        },
        Case {
            name: "an allow-listed remote_address is never limited",
            config: ip_1,
            global_shadow: false,
            global_quota: false,
            lists: &[(Listed::Allow, "198.51.100.0/24")],
            request: vec![plain(&[("remote_address", "198.51.100.7")])],
            over: &[false, false, false],
        },
        Case {
            name: "global shadow mode answers OK over the limit",
            config: ip_1,
            global_shadow: true,
            global_quota: false,
            lists: &[],
            request: vec![plain(&[("remote_address", "192.0.2.1")])],
            over: &[false, false, false],
        },
        Case {
            name: "quota descriptors are over only all together",
            config: "  - key: a\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_log}\n  - key: b\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}\n",
            global_shadow: false,
            global_quota: false,
            lists: &[],
            request: vec![plain(&[("a", "x")]), plain(&[("b", "x")])],
            over: &[false, false, true],
        },
        Case {
            name: "global quota mode puts every descriptor in quota mode",
            config: ip_1,
            global_shadow: false,
            global_quota: true,
            lists: &[],
            request: vec![plain(&[("remote_address", "192.0.2.2")])],
            over: &[false, true],
        },
        Case {
            name: "a limit replaced by another one of the request is not counted",
            config: "  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_log, name: user}\n  - key: tier\n    value: gold\n    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log, replaces: [{name: user}]}\n",
            global_shadow: false,
            global_quota: false,
            lists: &[],
            request: vec![plain(&[("user", "ann")]), plain(&[("tier", "gold")])],
            over: &[false, false, false, true],
        },
        Case {
            name: "a request's own limit is a window of its own",
            config: ip_1,
            global_shadow: false,
            global_quota: false,
            lists: &[],
            request: vec![Descriptor {
                entries: &[("remote_address", "192.0.2.3")],
                per_year: Some(2),
            }],
            over: &[false, false, true],
        },
        Case {
            name: "a request's own limit of zero denies everything",
            config: ip_10,
            global_shadow: false,
            global_quota: false,
            lists: &[],
            request: vec![Descriptor {
                entries: &[("remote_address", "192.0.2.4")],
                per_year: Some(0),
            }],
            over: &[true, true],
        },
        Case {
            name: "an unlimited descriptor never counts, its neighbour does",
            config: "  - key: internal\n    rate_limit: {unlimited: true}\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_log}\n",
            global_shadow: false,
            global_quota: false,
            lists: &[],
            request: vec![plain(&[("internal", "x")]), plain(&[("ip", "y")])],
            over: &[false, true],
        },
    ]
}

/// What one door said of one request.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    over: bool,
    /// Each descriptor's code (`OK`, `OVER_LIMIT`), where the door gives one.
    codes: Option<Vec<String>>,
}

fn state(case: &Case, store: AnyStore) -> SharedState {
    let mut envoy = EnvoySettings::default();
    envoy.global_shadow_mode = case.global_shadow;
    envoy.global_quota_mode = case.global_quota;
    let yaml = format!("domain: {DOMAIN}\ndescriptors:\n{}", case.config);
    let limits = tollgate_config::parse("doors.yaml", &yaml).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let settings = Settings {
        envoy,
        ..Settings::default()
    };
    let state = AppState::new(limits, store, settings);
    let entries = case.lists.iter().map(|(list, cidr)| {
        AccessEntry::new(None, *list, EntryKind::Cidr, cidr).unwrap_or_else(|e| panic!("{cidr}: {e}"))
    });
    state.engine.set_access_lists(AccessLists::new(entries));
    state
}

fn grpc_request(case: &Case) -> RateLimitRequest {
    RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors: case
            .request
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: (*key).into(),
                        value: (*value).into(),
                    })
                    .collect(),
                limit: d.per_year.map(|requests_per_unit| RateLimitOverride {
                    requests_per_unit,
                    unit: Unit::Year.into(),
                }),
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

/// The request as `/json` and explain take it.
fn json_descriptors(case: &Case) -> Value {
    case.request
        .iter()
        .map(|d| {
            let entries: Vec<Value> = d
                .entries
                .iter()
                .map(|(key, value)| json!({"key": key, "value": value}))
                .collect();
            match d.per_year {
                Some(n) => json!({"entries": entries, "limit": {"requests_per_unit": n, "unit": "YEAR"}}),
                None => json!({"entries": entries}),
            }
        })
        .collect()
}

async fn post(app: Router, path: &str, body: &Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = app.oneshot(request).await.expect("answer");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}

async fn ask_explain(state: &SharedState, case: &Case) -> Said {
    let body = json!({"domain": DOMAIN, "descriptors": json_descriptors(case)});
    let (status, answer) = post(tollgate_server::api_router(state.clone()), "/v1/explain", &body).await;
    assert_eq!(status, StatusCode::OK, "{}: explain: {answer}", case.name);
    Said {
        over: !answer["allowed"].as_bool().expect("allowed"),
        codes: None,
    }
}

async fn ask_json(state: &SharedState, case: &Case) -> Said {
    let body = json!({"domain": DOMAIN, "descriptors": json_descriptors(case), "hits_addend": 1});
    let router = tollgate_server::grpc::json::router(RlsService::new(state.clone()));
    let (status, answer) = post(router, "/json", &body).await;
    let over = match status {
        StatusCode::OK => false,
        StatusCode::TOO_MANY_REQUESTS => true,
        other => panic!("{}: /json answered {other}: {answer}", case.name),
    };
    assert_eq!(
        answer["overallCode"].as_str(),
        Some(if over { "OVER_LIMIT" } else { "OK" }),
        "{}: {answer}",
        case.name
    );
    let codes = answer["statuses"]
        .as_array()
        .expect("statuses")
        .iter()
        .map(|s| s["code"].as_str().unwrap_or("UNKNOWN").to_owned())
        .collect();
    Said {
        over,
        codes: Some(codes),
    }
}

async fn ask_grpc(client: &mut RateLimitServiceClient<tonic::transport::Channel>, case: &Case) -> Said {
    let answer = client
        .should_rate_limit(grpc_request(case))
        .await
        .unwrap_or_else(|status| panic!("{}: gRPC: {status}", case.name))
        .into_inner();
    let codes = answer
        .statuses
        .iter()
        .map(|s| {
            Code::try_from(s.code)
                .map_or("UNKNOWN", |c| c.as_str_name())
                .to_owned()
        })
        .collect();
    Said {
        over: answer.overall_code == i32::from(Code::OverLimit),
        codes: Some(codes),
    }
}

/// Runs every case on stores made by `store`; `between` clears what the last door left.
async fn run_cases<F, Fut>(store_name: &str, store: F, between: impl Fn())
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = AnyStore>,
{
    for case in cases() {
        between();
        let grpc_state = state(&case, store().await);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(tollgate_server::grpc::serve(
            listener,
            grpc_state.clone(),
            async {
                let _ = stopped.await;
            },
        ));
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let mut grpc = Vec::new();
        for (step, &expected) in case.over.iter().enumerate() {
            let predicted = ask_explain(&grpc_state, &case).await;
            let said = ask_grpc(&mut client, &case).await;
            assert_eq!(
                said.over,
                expected,
                "{store_name}: {}: request {}: gRPC said {said:?}",
                case.name,
                step + 1
            );
            assert_eq!(
                predicted.over,
                said.over,
                "{store_name}: {}: request {}: explain predicted {predicted:?}, gRPC said {said:?}",
                case.name,
                step + 1
            );
            grpc.push(said);
        }
        let _ = stop.send(());
        server.await.expect("gRPC server task").expect("gRPC server");

        between();
        let json_state = state(&case, store().await);
        for (step, grpc) in grpc.iter().enumerate() {
            let said = ask_json(&json_state, &case).await;
            assert_eq!(
                &said,
                grpc,
                "{store_name}: {}: request {}: /json and gRPC differ",
                case.name,
                step + 1
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_json_and_explain_agree_on_the_memory_store() {
    run_cases("memory", || async { AnyStore::memory() }, || {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_json_and_explain_agree_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    run_cases(
        "redis",
        || {
            let url = url.clone();
            async move { crate::common::redis_store(&url).await }
        },
        || {
            redis.cli(&["FLUSHALL"]);
        },
    )
    .await;
}
