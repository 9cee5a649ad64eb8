//! The Envoy doors of the charge table: gRPC (`ShouldRateLimit`) and `POST /json`, one step
//! as each takes it. A check is a descriptor at the request's `hits_addend`, a charge a
//! descriptor's own `hits_addend`, a refund `is_negative_hits`. The budget left is each answer's
//! `limit_remaining`, a charge past the limit `OVER_LIMIT`; `recorded` and `degraded` are not
//! in Envoy's answer, so they are read from the server's counters around the call:
//! `tollgate_charges_total` and `tollgate_charges_unrecorded_total` of the policy, and
//! `tollgate_store_errors_total`.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tollgate_config::ENVOY_POLICY_PREFIX;
use tollgate_server::grpc::proto::rate_limit_descriptor::Entry;
use tollgate_server::grpc::proto::rate_limit_response::Code;
use tollgate_server::grpc::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, UInt64Value};
use tonic::transport::Channel;
use tower::ServiceExt;

use crate::DOMAIN;
use crate::charge_doors::{Said, Step, answered};

/// The server's counters a step moves, read from its metrics.
#[derive(Clone, Copy, Debug, Default)]
struct Counted {
    charges: u64,
    unrecorded: u64,
    store_errors: u64,
}

impl Counted {
    /// The counters now, of the charges of the limit `name` (in either config format).
    fn now(name: &str) -> Counted {
        let text = tollgate_server::metrics::install().render();
        let ours = format!("policy=\"{name}\"");
        let envoy = format!("policy=\"{ENVOY_POLICY_PREFIX}{DOMAIN}.{name}\"");
        let of_policy = |labels: &str| labels.contains(&ours) || labels.contains(&envoy);
        Counted {
            charges: sum(&text, "tollgate_charges_total", of_policy),
            unrecorded: sum(&text, "tollgate_charges_unrecorded_total", of_policy),
            store_errors: sum(&text, "tollgate_store_errors_total", |_| true),
        }
    }

    /// What moved since `before`: whether the store failed, and whether one charge was
    /// recorded (`None` unless exactly one charge was counted).
    fn since(before: Counted, name: &str) -> (bool, Option<bool>) {
        let after = Counted::now(name);
        let charges = after.charges - before.charges;
        let unrecorded = after.unrecorded - before.unrecorded;
        let recorded = (charges == 1).then_some(unrecorded == 0);
        (after.store_errors > before.store_errors, recorded)
    }
}

/// The sum of the samples of counter `metric` whose labels `pick` picks.
fn sum(text: &str, metric: &str, pick: impl Fn(&str) -> bool) -> u64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(rest) => rest.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            pick(labels).then(|| value.trim().parse::<f64>().ok()).flatten()
        })
        .map(|value| value as u64)
        .sum()
}

/// An Envoy door's answer to one request: its first descriptor's status, or why none.
enum Envoy {
    Answered { over: bool, left: u64 },
    Unavailable,
    Other(String),
}

/// A descriptor of the limit `name` for `key`: checked at the request's cost, or charged its
/// own `hits_addend`, or given back that many (`negative`).
fn descriptor(name: &str, key: &str, own: Option<u64>, negative: bool) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: name.to_owned(),
            value: key.to_owned(),
        }],
        hits_addend: own.map(|value| UInt64Value { value }),
        is_negative_hits: negative,
        ..Default::default()
    }
}

/// The descriptor and the request's `hits_addend` of one Envoy request: a check, a charge or
/// a refund.
fn envoy_request(name: &str, key: &str, ask: EnvoyAsk) -> (RateLimitDescriptor, u32) {
    match ask {
        EnvoyAsk::Check => (descriptor(name, key, None, false), 1),
        EnvoyAsk::Charge(cost) => (descriptor(name, key, Some(cost), false), 0),
        EnvoyAsk::Refund => (descriptor(name, key, Some(1), true), 0),
    }
}

#[derive(Clone, Copy)]
enum EnvoyAsk {
    Check,
    Charge(u64),
    Refund,
}

/// `step` at an Envoy door that answers each request with `call`.
async fn envoy<F, Fut>(step: Step, mut call: F) -> Said
where
    F: FnMut(&'static str, &'static str, EnvoyAsk) -> Fut,
    Fut: std::future::Future<Output = Envoy>,
{
    // What an answer says, as a check's (`None`), a charge's or a refund's.
    let said = |answer: Envoy, settled: Option<&str>| match (answer, settled) {
        (Envoy::Answered { over, left }, None) => Said {
            left: Some(left),
            ..Said::kind(if over { "denied" } else { "allowed" })
        },
        (Envoy::Answered { over, left }, Some("charged")) => Said {
            left: Some(left),
            past: Some(over),
            ..Said::kind("charged")
        },
        (Envoy::Answered { over: false, left }, Some(settled)) => Said {
            left: Some(left),
            ..Said::kind(settled)
        },
        (Envoy::Answered { over: true, .. }, Some(settled)) => Said::kind(format!("{settled}, over")),
        (Envoy::Unavailable, Some("refunded")) => Said::kind("refund failed"),
        (Envoy::Unavailable, _) => Said::kind("unavailable"),
        (Envoy::Other(other), _) => Said::kind(other),
    };
    let name = match step {
        Step::Check(name, _) | Step::Charge(name, _, _) | Step::Fail(name, _) => name,
    };
    let before = Counted::now(name);
    let answer = match step {
        Step::Check(name, key) => said(call(name, key, EnvoyAsk::Check).await, None),
        Step::Charge(name, key, cost) => said(call(name, key, EnvoyAsk::Charge(cost)).await, Some("charged")),
        Step::Fail(name, key) => match said(call(name, key, EnvoyAsk::Check).await, None) {
            checked if checked.kind == "allowed" => {
                said(call(name, key, EnvoyAsk::Refund).await, Some("refunded"))
            }
            refused => refused,
        },
    };
    let (degraded, recorded) = Counted::since(before, name);
    Said {
        degraded: Some(degraded),
        recorded: recorded.filter(|_| matches!(step, Step::Charge(..))),
        ..answer
    }
}

pub(crate) async fn grpc(client: &mut RateLimitServiceClient<Channel>, step: Step) -> Said {
    envoy(step, |name, key, ask| {
        let mut client = client.clone();
        async move {
            let (descriptor, hits_addend) = envoy_request(name, key, ask);
            let request = RateLimitRequest {
                domain: DOMAIN.into(),
                descriptors: vec![descriptor],
                hits_addend,
            };
            match answered(client.should_rate_limit(request)).await {
                Ok(response) => {
                    let response = response.into_inner();
                    match (Code::try_from(response.overall_code), response.statuses.first()) {
                        (Ok(code @ (Code::Ok | Code::OverLimit)), Some(status)) => Envoy::Answered {
                            over: code == Code::OverLimit,
                            left: u64::from(status.limit_remaining),
                        },
                        other => Envoy::Other(format!("gRPC answer {other:?}")),
                    }
                }
                Err(status) if status.code() == tonic::Code::Unavailable => Envoy::Unavailable,
                Err(status) => Envoy::Other(format!("gRPC {:?}: {}", status.code(), status.message())),
            }
        }
    })
    .await
}

pub(crate) async fn json(router: &Router, step: Step) -> Said {
    envoy(step, |name, key, ask| async move {
        let (descriptor, hits_addend) = envoy_request(name, key, ask);
        let mut asked = json!({"entries": [{"key": name, "value": key}]});
        if let Some(own) = descriptor.hits_addend {
            asked["hits_addend"] = json!(own.value);
        }
        if descriptor.is_negative_hits {
            asked["is_negative_hits"] = json!(true);
        }
        let body = json!({"domain": DOMAIN, "descriptors": [asked], "hits_addend": hits_addend});
        let request = Request::post("/json")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        let response = answered(router.clone().oneshot(request))
            .await
            .expect("infallible");
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        // Proto3's JSON leaves a field at its default out: no `limitRemaining` is 0.
        let left = answer["statuses"][0]["limitRemaining"].as_u64().unwrap_or(0);
        match (status, answer["overallCode"].as_str()) {
            (StatusCode::OK, Some("OK")) => Envoy::Answered { over: false, left },
            (StatusCode::TOO_MANY_REQUESTS, Some("OVER_LIMIT")) => Envoy::Answered { over: true, left },
            (StatusCode::SERVICE_UNAVAILABLE, _) => Envoy::Unavailable,
            (status, _) => Envoy::Other(format!("/json {status}: {}", String::from_utf8_lossy(&bytes))),
        }
    })
    .await
}
