//! One policy test through the server's own doors: each step's request, sent to the door that takes
//! it, and the answer read back into what a test can expect ([`Got`]). Nothing here matches
//! a policy, a descriptor or a route: the doors do, as they do when serving.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use tollgate::ManualClock;
use tollgate_config::policy_tests::{Ask, PolicyTest};
use tollgate_config::{ConfigError, Limits};
use tower::ServiceExt;

use super::compare::{Got, compare};
use super::report::{Difference, TestResult};
use super::{START_US, TestError};
use crate::envoy::grpc::RlsService;
use crate::envoy::grpc::proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor::Entry};
use crate::proxy::{self, Forward};
use crate::runtime::store::AnyStore;
use crate::runtime::{AppState, Settings};

/// The most differing requests kept per test; the report counts the rest.
const KEPT_DIFFERENCES: usize = 20;

/// The port a proxied request comes from; only the address is the client's key.
const CLIENT_PORT: u16 = 40_000;

/// The doors of one test, over its store.
pub(super) struct Doors {
    api: Router,
    envoy: RlsService,
    proxy: Option<Router>,
}

impl Doors {
    /// Every door over `store`; the proxy's only with a stand-in upstream.
    pub(super) fn new(
        limits: impl Fn() -> Result<Limits, ConfigError>,
        store: AnyStore,
        stand_in: Option<&StandIn>,
    ) -> Result<Doors, TestError> {
        let proxy = match stand_in {
            Some(stand_in) => {
                let forward = Forward::new(&format!("http://{}", stand_in.addr))
                    .context("the stand-in upstream")
                    .map_err(TestError::Run)?;
                Some(proxy::app(&limits()?, store.clone(), forward, &[]).map_err(TestError::Run)?)
            }
            None => None,
        };
        let state = AppState::new(limits()?, store, Settings::default());
        Ok(Doors {
            api: crate::api::router(state.clone()),
            envoy: RlsService::new(state),
            proxy,
        })
    }

    /// Runs every step of `test`, moving `clock` to each sending's time.
    pub(super) async fn run(
        &self,
        file: &str,
        test: &PolicyTest,
        clock: &ManualClock,
    ) -> anyhow::Result<TestResult> {
        let mut result = TestResult {
            file: file.to_owned(),
            name: test.name.clone(),
            requests: 0,
            differences: Vec::new(),
            more_differences: 0,
        };
        for (index, step) in test.steps.iter().enumerate() {
            for n in 0..step.repeat {
                let at = step.time_of(n);
                clock.set_us(START_US.saturating_add(u64::try_from(at.as_micros()).unwrap_or(u64::MAX)));
                let got = self.ask(&step.ask).await?;
                result.requests += 1;
                let mismatches = compare(&step.expect, &got);
                if mismatches.is_empty() {
                    continue;
                }
                if result.differences.len() == KEPT_DIFFERENCES {
                    result.more_differences += 1;
                    continue;
                }
                result.differences.push(Difference {
                    step: index,
                    sending: n,
                    of: step.repeat,
                    at,
                    ask: step.ask.to_string(),
                    mismatches,
                    detail: got.detail,
                });
            }
        }
        Ok(result)
    }

    async fn ask(&self, ask: &Ask) -> anyhow::Result<Got> {
        match ask {
            Ask::Check { policy, key, cost } => {
                let body = serde_json::json!({"policy": policy, "key": key, "cost": cost});
                let request = Request::post("/v1/check")
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))?;
                let response = self.api.clone().oneshot(request).await?;
                http_answer(response, |body| body.get("remaining").and_then(|r| r.as_u64())).await
            }
            Ask::Envoy {
                domain,
                descriptors,
                hits_addend,
            } => Ok(self.envoy_answer(domain, descriptors, *hits_addend).await),
            Ask::Request {
                method,
                path,
                from,
                headers,
            } => {
                let Some(proxy) = &self.proxy else {
                    anyhow::bail!("no proxy for a request step");
                };
                let mut request = Request::builder().method(method.as_str()).uri(path.as_str());
                for (name, value) in headers {
                    request = request.header(name.as_str(), value.as_str());
                }
                // An HTTP/1.1 request names its host (the proxy refuses one that does not): a
                // step that gives none is sent as a client of the proxy itself would send it.
                if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
                    request = request.header("host", "localhost");
                }
                let mut request = request
                    .body(Body::empty())
                    .with_context(|| format!("{method} {path}"))?;
                request
                    .extensions_mut()
                    .insert(ConnectInfo(SocketAddr::new(*from, CLIENT_PORT)));
                let response = proxy.clone().oneshot(request).await?;
                let remaining = least_remaining(response.headers());
                let mut got = http_answer(response, |_| None).await?;
                got.remaining = remaining;
                Ok(got)
            }
        }
    }

    async fn envoy_answer(
        &self,
        domain: &str,
        descriptors: &[Vec<(String, String)>],
        hits_addend: u32,
    ) -> Got {
        let request = RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|(key, value)| Entry {
                            key: key.clone(),
                            value: value.clone(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend,
        };
        use crate::envoy::grpc::proto::rate_limit_response::Code;
        match self.envoy.answer(request).await {
            Ok(response) => {
                let over = |code: i32| code == Code::OverLimit as i32;
                let remaining = response
                    .statuses
                    .iter()
                    .filter(|status| status.current_limit.is_some())
                    .map(|status| u64::from(status.limit_remaining))
                    .min();
                let retry_after = response
                    .statuses
                    .iter()
                    .filter(|status| over(status.code))
                    .filter_map(|status| status.duration_until_reset)
                    .map(|d| {
                        Duration::from_secs(u64::try_from(d.seconds).unwrap_or(0))
                            + Duration::from_nanos(u64::try_from(d.nanos).unwrap_or(0))
                    })
                    .max();
                let code = Code::try_from(response.overall_code).unwrap_or(Code::Unknown);
                Got {
                    allowed: code == Code::Ok,
                    code: Some(code.as_str_name().to_owned()),
                    retry_after,
                    remaining,
                    ..Got::default()
                }
            }
            Err(status) => Got {
                detail: Some(format!("gRPC {:?}: {}", status.code(), status.message())),
                ..Got::default()
            },
        }
    }
}

/// An HTTP door's answer: its status, `Retry-After` in whole seconds, and from the JSON body
/// what `remaining` picks and a problem's `detail`.
async fn http_answer(
    response: axum::response::Response,
    remaining: impl Fn(&serde_json::Value) -> Option<u64>,
) -> anyhow::Result<Got> {
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let bytes = response.into_body().collect().await?.to_bytes();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let detail = (!status.is_success() && status != StatusCode::TOO_MANY_REQUESTS)
        .then(|| body.get("detail").and_then(|d| d.as_str()).map(str::to_owned))
        .flatten();
    Ok(Got {
        allowed: status.is_success(),
        status: Some(status.as_u16()),
        code: None,
        retry_after,
        remaining: remaining(&body),
        detail,
    })
}

/// The least `r=` of the `RateLimit` header (`"movies";r=3;t=60, "api";r=9;t=1`).
fn least_remaining(headers: &HeaderMap) -> Option<u64> {
    headers
        .get_all("ratelimit")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|part| part.trim().strip_prefix("r="))
        .filter_map(|r| r.parse::<u64>().ok())
        .min()
}

/// The upstream `request` steps are forwarded to: on loopback, answering 200 to everything, so
/// what a test sees is the proxy's own decision.
pub(super) struct StandIn {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl StandIn {
    pub(super) async fn start() -> anyhow::Result<StandIn> {
        let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .await
            .context("cannot bind the stand-in upstream on loopback")?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new().fallback(|| async { "admitted" });
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(StandIn { addr, stop, task })
    }

    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_remaining_reads_every_policy_of_the_header() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "ratelimit",
            "\"movies\";r=3;t=60, \"api\";r=9;t=1".parse().expect("header"),
        );
        assert_eq!(least_remaining(&headers), Some(3));
        assert_eq!(least_remaining(&HeaderMap::new()), None);
    }
}
