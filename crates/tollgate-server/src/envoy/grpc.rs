//! The Envoy rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! answered as envoyproxy/ratelimit answers it for the same configuration, so Envoy (or any other
//! client of that API) can point at tollgate instead.
//!
//! The messages are the `envoy-types` crate's, generated from Envoy's own API definitions, so what
//! goes over the wire is exactly what Envoy sends and expects. [`proto`] re-exports them, with the
//! generated client.
//!
//! This door only translates. What a request means (matching, `replaces`, `unlimited`,
//! deny-all limits, limit overrides, shadow and quota modes, all or nothing, questions) is
//! [`tollgate_config::envoy_plan`]'s, the same planner `POST /json` ([`json`]) and explain use;
//! the engine decides the plan's rules; this module reads the wire into the plan's input and
//! writes its answer back: statuses, the overall code, upstream's rate limit headers and dynamic
//! metadata, and the per-stats-key counters ([`Hit`](tollgate_config::envoy_plan::Hit), see
//! `stats`). [`RlsService::answer`] is the one function both HTTP and gRPC call.
//!
//! # Errors
//!
//! - An empty `domain` or an empty descriptor list: status `UNKNOWN` with upstream's message
//!   (`rate limit domain must not be empty`, `rate limit descriptor list must not be empty`);
//!   upstream returns a plain error, which its gRPC library sends as `UNKNOWN`.
//! - A descriptor with `is_negative_hits` and a `hits_addend` of 0: `INVALID_ARGUMENT` (a
//!   refund says how much it gives back). A refund the failing store could not make:
//!   `UNAVAILABLE`.
//! - A refund or a charge without the app or admin token (metadata `authorization: Bearer
//!   <token>`) on a server with tokens: `UNAUTHENTICATED`, unless the gRPC port is declared
//!   trusted ([`EnvoySettings::trusted_grpc`]).
//! - A limit override with an unknown unit, or a `requests_per_unit` above the core's maximum:
//!   `INVALID_ARGUMENT`.
//! - A key the store refuses (a request value past the core's 8 KiB key limit):
//!   `INVALID_ARGUMENT`.
//! - The store failed and a limited descriptor's failure mode is `fail_closed`: `UNAVAILABLE`,
//!   naming the descriptor. Other failure modes answer as usual (`fail_open` lets the
//!   descriptor pass, `local` decides on this server's fallback limiter), counted with outcome
//!   `degraded` or `denied` in `tollgate_decisions_total`, exactly as the HTTP API does.
//!
//! # Other differences from upstream
//!
//! `docs/envoy.md` lists them all. In this module:
//!
//! - `current_limit` for a window or rate that is not one of upstream's units (tollgate's
//!   `window: 90s`, or a bucket or GCRA `rate`) is its rate in the shortest unit that admits the
//!   most a key can hold ([`reported_limit`](tollgate_config::reported_limit)), so
//!   `limit_remaining` is never above it: `100` per `90s` is reported as 4,000 per hour.
//! - `duration_until_reset` is rounded up to whole seconds, as upstream reports it.
//! - The local over-limit cache is not offered; the store answers every request.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as WireUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_config::Unit;
use tollgate_config::envoy_plan::{Answer, Asked, Hits, LimitOverride, OverrideError, PlanError};
use tonic::{Request, Response, Status};

use crate::ops::count::{self, Through};
use crate::ops::decision_log::{self, Door, EnvoyAsked, LoggedOutcome};
use crate::ops::statsd::{self, CallEnd};
use crate::runtime::listener::ListenerOptions;
use crate::runtime::tokens::{self, Act, Caller};
use crate::runtime::{ServerTls, SharedState};

/// The generated messages, server and client of the Envoy rate limit service (from
/// `envoy-types`), for callers and tests.
///
/// ```
/// use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor::Entry};
///
/// let request = RateLimitRequest {
///     domain: "edge".into(),
///     descriptors: vec![RateLimitDescriptor {
///         entries: vec![Entry { key: "remote_address".into(), value: "192.0.2.7".into() }],
///         ..Default::default()
///     }],
///     hits_addend: 1,
/// };
/// assert_eq!(request.descriptors.len(), 1);
/// ```
pub mod proto {
    pub use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor,
    };
    pub use envoy_types::pb::envoy::service::ratelimit::v3::*;
    pub use envoy_types::pb::google::protobuf::{Duration, UInt64Value};
}

mod answer;
pub mod json;
mod stats;

pub use crate::runtime::envoy_settings::{EnvoySettings, ResponseHeaders};
pub use stats::OVERFLOW_KEY;
use stats::StatsKeys;

/// The `ShouldRateLimit` handler over the server's shared state. Build the tonic service with
/// [`service`].
#[derive(Clone)]
pub struct RlsService {
    state: SharedState,
    /// The stats keys that have per-stats-key counters of their own.
    stats: Arc<StatsKeys>,
}

impl std::fmt::Debug for RlsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RlsService")
            .field("store", &self.state.store.kind())
            .finish_non_exhaustive()
    }
}

/// The Envoy rate limit service over `state`, to add to a tonic server (or use [`serve`]).
///
/// ```
/// use tollgate_server::{AppState, Settings};
/// use tollgate_server::AnyStore;
///
/// let limits = tollgate_config::parse("edge.yaml", "domain: edge\ndescriptors: []\n")?;
/// let state = AppState::new(limits, AnyStore::memory(), Settings::default());
/// let router = tonic::transport::Server::builder().add_service(tollgate_server::grpc::service(state));
/// # drop(router);
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
pub fn service(state: SharedState) -> RateLimitServiceServer<RlsService> {
    RateLimitServiceServer::new(RlsService::new(state))
}

impl RlsService {
    /// The handler over `state`, for a door other than gRPC (an HTTP endpoint taking the same
    /// request as JSON) to answer exactly as the gRPC service does. Clones share the
    /// per-stats-key counters.
    ///
    /// ```
    /// use tollgate_server::grpc::RlsService;
    /// use tollgate_server::grpc::proto::{RateLimitDescriptor, RateLimitRequest, rate_limit_descriptor::Entry};
    /// use tollgate_server::{AppState, Settings};
    /// use tollgate_server::AnyStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limits = tollgate_config::parse(
    ///     "edge.yaml",
    ///     "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    /// )?;
    /// let rls = RlsService::new(AppState::new(limits, AnyStore::memory(), Settings::default()));
    /// let request = RateLimitRequest {
    ///     domain: "edge".into(),
    ///     descriptors: vec![RateLimitDescriptor {
    ///         entries: vec![Entry { key: "ip".into(), value: "192.0.2.7".into() }],
    ///         ..Default::default()
    ///     }],
    ///     hits_addend: 0,
    /// };
    /// let response = rls.answer(request).await?;
    /// assert_eq!(response.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(state: SharedState) -> Self {
        let stats = Arc::new(StatsKeys::new(state.settings.envoy.max_stats_keys));
        RlsService { state, stats }
    }

    /// Answers one `ShouldRateLimit` request; the error is the gRPC status the service sends.
    /// The library's caller is trusted: refunds and charges need no token here.
    pub async fn answer(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        should_rate_limit(self, request, Caller::Trusted, None).await
    }

    /// [`answer`](Self::answer) for a request that came through `door`: what it asked and
    /// the overall answer go to the decision log when one is on (an `UNAVAILABLE` status is
    /// an `error`; other errors are refused input, not decisions, and are not logged). Refunds
    /// and charges are `caller`'s to make only with the app or admin token, once one is set.
    pub(crate) async fn answer_through(
        &self,
        door: Door,
        request: RateLimitRequest,
        caller: Caller<'_>,
    ) -> Result<RateLimitResponse, Status> {
        should_rate_limit(self, request, caller, Some(door)).await
    }
}

/// Serves the Envoy rate limit service on `listener` until `shutdown` completes; then stops
/// accepting connections and returns once the calls in flight have been answered.
///
/// Accepted connections get `TCP_NODELAY`: answers are small and latency-bound.
///
/// ```no_run
/// use tollgate_server::{AppState, Settings};
/// use tollgate_server::AnyStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = tollgate_config::parse("edge.yaml", "domain: edge\ndescriptors: []\n")?;
/// let state = AppState::new(limits, AnyStore::memory(), Settings::default());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// tollgate_server::grpc::serve(listener, state, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: SharedState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(
        listener,
        RlsService::new(state),
        None,
        None,
        ListenerOptions::default(),
        shutdown,
    )
    .await
}

/// [`serve`] with a given handler (shared with the `/json` endpoint), the standard gRPC health
/// service (`grpc.health.v1.Health`, see `envoy::health`) when `health` is given, as
/// envoyproxy/ratelimit serves it, and the listener's timeouts and limits: the connection limit,
/// the idle timeout, HTTP/2 keep-alive pings, concurrent streams and header size per connection,
/// and the drain timeout after `shutdown`, past which open connections are closed. With `tls`,
/// both services are served over TLS only, as upstream's `GRPC_SERVER_USE_TLS` serves them.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    rls: RlsService,
    health: Option<&crate::envoy::health::Health>,
    tls: Option<ServerTls>,
    options: ListenerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut routes = tonic::service::Routes::new(RateLimitServiceServer::new(rls));
    if let Some(health) = health {
        routes = routes.add_service(health.grpc_service());
    }
    crate::runtime::listener::serve_grpc("grpc", listener, routes.prepare(), tls, &options, shutdown).await
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let (metadata, _, request) = request.into_parts();
        let caller = match self.state.settings.envoy.trusted_grpc {
            true => Caller::Trusted,
            false => Caller::Bearer(tokens::bearer(
                metadata.get("authorization").and_then(|v| v.to_str().ok()),
            )),
        };
        let started = Instant::now();
        let answer = self.answer_through(Door::Grpc, request, caller).await;
        let end = match &answer {
            Ok(_) => CallEnd::Answered,
            Err(status) if status.code() == tonic::Code::Unavailable => CallEnd::StoreError,
            Err(_) => CallEnd::ServiceError,
        };
        statsd::should_rate_limit(end, started.elapsed());
        answer.map(Response::new)
    }
}

/// The header added to the answer of a request with a deny-listed key, with the value
/// `blocked`: the reason, since Envoy's answer has no field for one.
pub const BLOCKED_HEADER: &str = "x-tollgate-reason";

/// Answers `request`; with a `door`, what it asked and was answered goes to the decision log.
async fn should_rate_limit(
    service: &RlsService,
    request: RateLimitRequest,
    caller: Caller<'_>,
    door: Option<Door>,
) -> Result<RateLimitResponse, Status> {
    let (state, settings) = (&service.state, &service.state.settings.envoy);
    let mut read = Read::of(state, request, caller, door)?;
    let limits = state.limits.load_full(); // owned, not a guard: held across store round trips
    let asked = std::mem::take(&mut read.asked);
    let plan = (state.planner.plan(&limits, settings.modes(), &read.domain, asked)).map_err(plan_status)?;
    let ops = plan.request();
    let settled = state.engine.run(&ops).await.map_err(bad_input)?;
    let answer = plan.answer(&settled);
    count::settled(read.through(&answer), &ops, &settled);
    count_descriptors(service, &answer);
    match answer.unavailable {
        Some(message) => Err(Status::unavailable(message)),
        None => Ok(respond(settings, &read, &answer)),
    }
}

/// A request as the door read it.
struct Read {
    domain: String,
    /// The request's own `hits_addend`.
    hits_addend: u32,
    /// The descriptors as they came, kept for the dynamic metadata and the decision log when
    /// either is on.
    wire: Option<Vec<RateLimitDescriptor>>,
    /// The door whose decision log line this request is, when a log is on.
    logged: Option<Door>,
    /// The descriptors as the planner reads them.
    asked: Vec<Asked>,
}

impl Read {
    /// Reads `request` through `door`, refusing its refunds and charges when `caller` may not
    /// make them.
    fn of(
        state: &SharedState,
        request: RateLimitRequest,
        caller: Caller<'_>,
        door: Option<Door>,
    ) -> Result<Self, Status> {
        let logged = door.filter(|_| decision_log::installed());
        let kept = state.settings.envoy.response_dynamic_metadata || logged.is_some();
        let wire = kept.then(|| request.descriptors.clone());
        let asked = read_descriptors(request.descriptors, request.hits_addend)?;
        authorize_settlement(state, caller, &asked)?;
        Ok(Read {
            domain: request.domain,
            hits_addend: request.hits_addend,
            wire,
            logged,
            asked,
        })
    }

    /// Where the request is logged, with its overall answer: `error` for `UNAVAILABLE`,
    /// `denied` for `OVER_LIMIT`.
    fn through(&self, answer: &Answer<'_>) -> Through<'_> {
        let (Some(door), Some(descriptors)) = (self.logged, &self.wire) else {
            return Through::Unlogged;
        };
        let outcome = match (&answer.unavailable, answer.over) {
            (Some(_), _) => LoggedOutcome::Error,
            (None, true) => LoggedOutcome::Denied,
            (None, false) => LoggedOutcome::Allowed,
        };
        Through::Envoy(
            door,
            EnvoyAsked {
                domain: &self.domain,
                descriptors,
                hits_addend: self.hits_addend,
                outcome,
            },
        )
    }
}

/// The request's descriptors as the planner reads them.
fn read_descriptors(descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> Result<Vec<Asked>, Status> {
    let request_cost = u64::from(hits_addend.max(1));
    descriptors
        .into_iter()
        .enumerate()
        .map(|(i, descriptor)| {
            let limit = descriptor
                .limit
                .map(|limit| limit_override(&limit))
                .transpose()
                .map_err(|err| Status::invalid_argument(format!("descriptors[{i}]: {err}")))?;
            let own = descriptor.hits_addend.map(|addend| addend.value);
            let hits = match (descriptor.is_negative_hits, own) {
                (true, _) => Hits::Refunded,
                (false, Some(cost)) if cost > 0 => Hits::Charged,
                (false, _) => Hits::Checked,
            };
            let cost = own.unwrap_or(request_cost);
            if hits == Hits::Refunded && cost == 0 {
                return Err(Status::invalid_argument(format!(
                    "descriptors[{i}]: is_negative_hits gives back its hits_addend, which must be at least 1"
                )));
            }
            Ok(Asked {
                entries: descriptor
                    .entries
                    .into_iter()
                    .map(|entry| (entry.key, entry.value))
                    .collect(),
                cost,
                limit,
                hits,
            })
        })
        .collect()
}

/// Refunds and charges give a caller budget back or put debt on a key: app acts, as
/// `POST /v1/refund` and `POST /v1/charge` are.
fn authorize_settlement(state: &SharedState, caller: Caller<'_>, asked: &[Asked]) -> Result<(), Status> {
    if asked.iter().all(|asked| asked.hits == Hits::Checked) {
        return Ok(());
    }
    state
        .settings
        .tokens()
        .admit(Act::App, caller)
        .map_err(|refusal| {
            Status::unauthenticated(format!(
                "refunds (is_negative_hits) and charges (a descriptor's hits_addend) need the app \
             token: {} (over gRPC, metadata `authorization: Bearer <token>`)",
                refusal.message(Act::App)
            ))
        })
}

/// A descriptor's own limit, its unit read off the wire.
fn limit_override(limit: &RateLimitOverride) -> Result<LimitOverride, OverrideError> {
    let unit = WireUnit::try_from(limit.unit)
        .ok()
        .and_then(|unit| Unit::from_name(unit.as_str_name()))
        .ok_or_else(|| OverrideError::Unit(limit.unit.to_string()))?;
    Ok(LimitOverride {
        requests_per_unit: limit.requests_per_unit,
        unit,
    })
}

/// The status of a request the engine refused: bad input.
fn bad_input(err: tollgate::Error) -> Status {
    Status::invalid_argument(err.to_string())
}

/// The status of a request the planner refused.
fn plan_status(err: PlanError) -> Status {
    match err {
        PlanError::NoDomain | PlanError::NoDescriptors => Status::unknown(err.to_string()),
        err => Status::invalid_argument(err.to_string()),
    }
}

/// Counts what the engine did not: refusals without the store, each descriptor's hit under its
/// stats key, and a request global shadow mode let through.
fn count_descriptors(service: &RlsService, answer: &Answer<'_>) {
    let ratio = service.state.settings.envoy.near_limit_ratio;
    for descriptor in &answer.descriptors {
        if let (Some(outcome), Some(policy)) = (descriptor.refusal, descriptor.policy_name) {
            count::decision(policy, outcome);
        }
        if let Some((key, hit)) = descriptor.stats {
            service.stats.record(key, hit, ratio);
        }
    }
    if answer.shadowed {
        stats::global_shadow_mode();
    }
}

/// The answer on the wire.
fn respond(settings: &EnvoySettings, read: &Read, answer: &Answer<'_>) -> RateLimitResponse {
    let now = answer.now;
    let statuses = answer.descriptors.iter().map(answer::status).collect();
    let mut response_headers_to_add = match &settings.response_headers {
        Some(names) => answer::headers(names, answer.headline(), now),
        None => Vec::new(),
    };
    if settings.ratelimit_fields {
        response_headers_to_add.extend(answer::ratelimit_fields(answer.headline()));
    }
    if settings.retry_after {
        response_headers_to_add.extend(answer::retry_after(answer));
    }
    // A deny-listed key is refused whatever the shadow settings, and says why in a header
    // (Envoy's answer has no reason field; it adds these headers to the client's answer).
    if answer.blocked {
        response_headers_to_add.push(HeaderValue {
            key: BLOCKED_HEADER.to_owned(),
            value: "blocked".to_owned(),
            raw_value: Vec::new(),
        });
    }
    let wire = read.wire.as_ref().filter(|_| settings.response_dynamic_metadata);
    let dynamic_metadata = wire.map(|descriptors| {
        let passed = answer
            .descriptors
            .iter()
            .filter(|d| !d.over)
            .filter_map(|d| d.metadata);
        answer::dynamic_metadata(&read.domain, descriptors, read.hits_addend, passed)
    });
    let overall_code = if answer.over { Code::OverLimit } else { Code::Ok };
    RateLimitResponse {
        overall_code: overall_code.into(),
        statuses,
        response_headers_to_add,
        dynamic_metadata,
        ..Default::default()
    }
}
