//! The Envoy rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! answered as envoyproxy/ratelimit answers it for the same configuration, so Envoy (or any other
//! client of that API) can point at tollgate instead.
//!
//! The messages are the `envoy-types` crate's, generated from Envoy's own API definitions, so what
//! goes over the wire is exactly what Envoy sends and expects. [`proto`] re-exports them, with the
//! generated client.
//!
//! [`RlsService::answer`] decides a request; the gRPC service and upstream's HTTP
//! door `POST /json` ([`json`]) both call it, so they cannot answer differently.
//!
//! # One call
//!
//! A request names a `domain` and carries descriptors, each a list of `(key, value)` entries.
//! Each descriptor is matched on its own with [`Limits::resolve`](tollgate_config::Limits::resolve), then
//! [`apply_replaces`] drops the rate limits that another matched rate limit of the same request
//! `replaces`. The answer has one status per descriptor, in request order:
//!
//! - no rate limit applies (unknown domain, no descriptor matched, or the limit was replaced):
//!   `OK`, without `current_limit`;
//! - `unlimited: true`: `OK` with `limit_remaining` 4294967295 (`u32::MAX`), as upstream;
//! - `requests_per_unit: 0`: `OVER_LIMIT`, as upstream, with `requests_per_unit` 0 in
//!   `current_limit` and the time to the end of the current unit; no store is asked;
//! - otherwise the store decides for the cost: `OK` or `OVER_LIMIT`, with `current_limit` (and
//!   its `name`), `limit_remaining` (0 when over the limit, as upstream) and
//!   `duration_until_reset` (the decision's `reset_after`, rounded up to whole seconds as
//!   upstream reports it);
//! - a descriptor in `shadow_mode` is decided and counted the same way (as a shadow rule), but
//!   its code is `OK` whatever the decision; a would-be denial shows in the
//!   `tollgate_decisions_total` metric with outcome `shadow_denied`.
//!
//! The overall code is upstream's: `OVER_LIMIT` when a descriptor that is not in quota mode is
//! over its limit, or when the request has descriptors in quota mode (`quota_mode: true`, or
//! every descriptor under [`EnvoySettings::global_quota_mode`]) and all of them are over. With
//! [`EnvoySettings::global_shadow_mode`] it is always `OK` (the statuses keep their codes). The
//! answer carries upstream's rate limit headers when [`EnvoySettings::response_headers`] is set,
//! and its dynamic metadata (with the descriptors' `metadata`) when
//! [`EnvoySettings::response_dynamic_metadata`] is. Each descriptor with a limit is counted under
//! its upstream stats key ([`Resolved::stats_key`]) in per-stats-key counters; see `stats`.
//!
//! A descriptor that carries its own `limit` (Envoy sets it from route metadata) is not matched
//! against the config: as upstream, for any descriptor of a known domain, it is a fixed window of
//! `requests_per_unit` per `unit` aligned to the unit (0 denies everything), never in shadow
//! mode, counted per domain and entries. Unlike upstream, its counter is kept apart from the
//! configured limit of the same descriptor, so an override never eats into a configured budget.
//!
//! The cost of a descriptor is its own `hits_addend` when set (0 asks without spending, see
//! below), else the request's `hits_addend`, where 0 means 1. A cost above what the policy can
//! ever admit (more than a fixed window's limit, a bucket's capacity) is `OVER_LIMIT` for that
//! descriptor, not an error, and has no `duration_until_reset`: no wait makes it pass.
//!
//! # All or nothing
//!
//! Upstream counts every descriptor of a request even when another one is over the limit, so a
//! request that was denied still spends the budget of the descriptors it passed. Tollgate spends
//! nothing on a denied request: the limited descriptors become the rules of one request to the
//! [`Engine`](tollgate::Engine) (the same descriptor twice spends twice from one budget), and one
//! [`check_all`](tollgate::Engine::check_all) decides them atomically. If any enforced rule
//! denies, nothing is spent and only the `block_for` penalties of the descriptors that denied
//! start; the descriptors that would have passed report their budget as it stands.
//! [`EnvoySettings::count_every_descriptor`] restores upstream's counting: every descriptor is
//! then decided on its own (a shadow rule to the engine, whose code the door works out), and a
//! charge larger than the budget left spends what is left.
//!
//! Descriptors in shadow mode or quota mode, and every descriptor under global shadow mode, are
//! decided on their own in the same way, since their denial alone does not refuse the request.
//! When every quota-mode descriptor of a request is over, the request is refused, but the plain
//! descriptors that passed have spent (as upstream's do), unless the quota descriptors were over
//! at the door (deny-all limits), where nothing is spent.
//!
//! What the door decides alone, without the store, takes part in the same answer: an enforced
//! `requests_per_unit: 0` descriptor or a cost that can never be admitted refuses the request,
//! and then the limited descriptors are only looked at (a peek), so nothing is spent. A
//! descriptor asked with a cost of 0 is a question ([`Rule::question`](tollgate::Rule)): one
//! rule of the same `check_all`, answered as the budget stands before the request, never spent.
//!
//! # Errors
//!
//! - An empty `domain` or an empty descriptor list: status `UNKNOWN` with upstream's message
//!   (`rate limit domain must not be empty`, `rate limit descriptor list must not be empty`);
//!   upstream returns a plain error, which its gRPC library sends as `UNKNOWN`.
//! - A descriptor with `is_negative_hits`: `INVALID_ARGUMENT`; a refund is not an operation
//!   the stores offer.
//! - A limit override with an unknown unit, or a `requests_per_unit` above the core's maximum:
//!   `INVALID_ARGUMENT`. Any number of distinct overrides is accepted: a policy is only a name
//!   and parameters, so each override gets its own without a registry to fill.
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
//!   `window: 90s`, or a bucket or GCRA `rate`) is given in the longest unit not longer than the
//!   window (seconds for windows under a second), with `requests_per_unit` scaled to that unit
//!   and rounded down (at least 1): `100` per `90s` is reported as 66 per minute. Buckets and
//!   GCRA report their refill, leak or emission rate.
//! - A descriptor `hits_addend` of 0 asks whether one more request would pass and records
//!   nothing. With the budget exactly spent, upstream says `OK` with 0 left (its counter is not
//!   past the limit) where tollgate says `OVER_LIMIT`; tollgate's counters never go past the
//!   limit, so "nothing left" is where upstream's "over" begins.
//! - The local over-limit cache is not offered; the store answers every request.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate::{Outcome, Policy, Rule, RuleVerdict, Verdict};
use tonic::{Request, Response, Status};

use crate::ops::{count, metrics};
use crate::runtime::SharedState;
use crate::runtime::listener::ListenerOptions;
use tollgate_config::{Metadata, Resolved, apply_replaces, override_key};

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
mod overrides;
mod stats;

pub use crate::runtime::envoy_settings::{EnvoySettings, ResponseHeaders};
use answer::Role;
use overrides::{Override, OverrideError, OverridePolicies};
pub use stats::OVERFLOW_KEY;
use stats::{Hit, StatsKeys};

/// Upstream's units, longest first, with their length in seconds and their wire value.
const UNITS: [(u64, Unit); 7] = [
    (365 * 86_400, Unit::Year),
    (30 * 86_400, Unit::Month),
    (7 * 86_400, Unit::Week),
    (86_400, Unit::Day),
    (3_600, Unit::Hour),
    (60, Unit::Minute),
    (1, Unit::Second),
];

/// The `ShouldRateLimit` handler over the server's shared state. Build the tonic service with
/// [`service`].
#[derive(Clone)]
pub struct RlsService {
    state: SharedState,
    /// The policies of the limit overrides seen lately, so a repeated override does not build
    /// its policy again.
    overrides: Arc<OverridePolicies>,
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
    /// request as JSON) to answer exactly as the gRPC service does. Clones share the limit
    /// override cache and the per-stats-key counters.
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
        RlsService {
            state,
            overrides: Arc::new(OverridePolicies::default()),
            stats,
        }
    }

    /// Answers one `ShouldRateLimit` request; the error is the gRPC status the service sends.
    pub async fn answer(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        should_rate_limit(self, request).await
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
        ListenerOptions::default(),
        shutdown,
    )
    .await
}

/// [`serve`] with a given handler (shared with the `/json` endpoint), the standard gRPC health
/// service (`grpc.health.v1.Health`, see `envoy::health`) when `health` is given, as
/// envoyproxy/ratelimit serves it, and the listener's timeouts and limits: the connection limit,
/// the idle timeout, HTTP/2 keep-alive pings, concurrent streams and header size per connection,
/// and the drain timeout after `shutdown`, past which open connections are closed.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    rls: RlsService,
    health: Option<&crate::envoy::health::Health>,
    options: ListenerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut routes = tonic::service::Routes::new(RateLimitServiceServer::new(rls));
    if let Some(health) = health {
        routes = routes.add_service(health.grpc_service());
    }
    crate::runtime::listener::serve_grpc("grpc", listener, routes.prepare(), &options, shutdown).await
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.answer(request.into_inner()).await.map(Response::new)
    }
}

/// What applies to one request descriptor.
enum Slot<'a> {
    /// No rate limit: unknown domain, no match, or replaced. `quota` under global quota mode.
    None { quota: bool },
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`, stated per `period`, counted in metrics under `policy_name`.
    DenyAll {
        matched: Matched<'a>,
        period: Duration,
        policy_name: Cow<'a, str>,
    },
    /// A cost above what the policy can ever admit: over the limit, whatever the store holds.
    TooLarge {
        matched: Matched<'a>,
        policy: Cow<'a, Policy>,
    },
    /// Decided by the engine.
    Limited(Limited<'a>),
}

impl<'a> Slot<'a> {
    /// The rate limit matched, if any is counted.
    fn matched(&self) -> Option<&Matched<'a>> {
        match self {
            Slot::DenyAll { matched, .. } | Slot::TooLarge { matched, .. } => Some(matched),
            Slot::Limited(limited) => Some(&limited.matched),
            Slot::None { .. } | Slot::Unlimited => None,
        }
    }

    /// Over the limit at the door, without the store.
    fn over_at_door(&self) -> bool {
        matches!(self, Slot::DenyAll { .. } | Slot::TooLarge { .. })
    }

    fn role(&self) -> Role {
        match self {
            Slot::None { quota } => Role {
                unlimited: false,
                quota: *quota,
            },
            Slot::Unlimited => Role {
                unlimited: true,
                quota: false,
            },
            _ => Role {
                unlimited: false,
                quota: self.matched().is_some_and(|m| m.quota),
            },
        }
    }
}

/// How the request is decided, from the settings.
#[derive(Debug, Clone, Copy)]
struct Mode {
    global_shadow: bool,
    count_every: bool,
}

impl Mode {
    /// Whether a descriptor's denial leaves the rest of the request to be decided (and spent)
    /// on its own: its own shadow mode, quota mode (the door works out the answer), global
    /// shadow mode, or upstream's counting.
    fn apart(&self, matched: &Matched<'_>) -> bool {
        matched.shadow || matched.quota || self.global_shadow || self.count_every
    }
}

/// The rate limit a descriptor matched (or its override): where its counter lives and how its
/// status is reported.
struct Matched<'a> {
    /// The store key.
    key: String,
    /// What allow and deny lists match: the descriptor's `remote_address` value when it has
    /// one, else its last entry's value.
    list_key: Option<String>,
    /// The rate limit's `name`, for `current_limit`.
    name: Option<&'a str>,
    /// The descriptor's own `shadow_mode`.
    shadow: bool,
    /// Quota mode: the descriptor's own or the global setting.
    quota: bool,
    /// Upstream's stats key, for the per-stats-key counters.
    stats_key: Cow<'a, str>,
    metadata: Option<&'a Metadata>,
    /// What the descriptor spends: its `hits_addend`, or the request's.
    cost: u64,
}

impl<'a> Matched<'a> {
    fn from_config(resolved: Resolved<'a>, global_quota: bool, cost: u64) -> Self {
        Matched {
            list_key: None,
            name: resolved.name(),
            shadow: resolved.shadow_mode(),
            quota: global_quota || resolved.quota_mode(),
            stats_key: Cow::Owned(resolved.stats_key().to_owned()),
            metadata: resolved.metadata(),
            cost,
            key: resolved.into_key(),
        }
    }
}

struct Limited<'a> {
    matched: Matched<'a>,
    policy: Cow<'a, Policy>,
}

impl Limited<'_> {
    /// The descriptor as an engine rule; a question (cost 0) asks about a cost of 1 and spends
    /// nothing.
    fn rule(&self, mode: Mode) -> Rule<'_> {
        let cost = self.matched.cost;
        let mut rule = Rule::new(&self.policy, self.matched.key.as_bytes(), cost.max(1));
        if let Some(listed) = &self.matched.list_key {
            rule = rule.with_list_key(listed.as_bytes());
        }
        rule.shadow = mode.apart(&self.matched);
        rule.question = cost == 0;
        rule
    }
}

/// One descriptor of the request, read off the wire.
struct Asked {
    entries: Vec<(String, String)>,
    cost: u64,
    limit_override: Option<RateLimitOverride>,
}

/// What the engine said about one limited descriptor.
#[derive(Clone, Copy)]
struct Answer {
    verdict: RuleVerdict,
    /// What to report as `limit_remaining`: 0 when denied, else the budget after this request
    /// (spent) or as it stands (not spent).
    remaining: u64,
    /// The count before this request, for the per-stats-key counters.
    before: u64,
}

/// The engine rules of one group of descriptors and where their answers go.
#[derive(Default)]
struct Group<'r> {
    rules: Vec<Rule<'r>>,
    /// `rules[i]` is the descriptor `slots[at[i]]`.
    at: Vec<usize>,
}

impl<'r> Group<'r> {
    fn push(&mut self, rule: Rule<'r>, slot: usize) {
        self.rules.push(rule);
        self.at.push(slot);
    }

    /// Decides the group with the engine, recording it when `commit`; fills `answers`.
    async fn decide(
        &self,
        state: &SharedState,
        commit: bool,
        slots: &[Slot<'_>],
        mode: Mode,
        answers: &mut [Option<Answer>],
    ) -> Result<(), Status> {
        if self.rules.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let result = if commit {
            state.engine.check_all(&self.rules).await
        } else {
            state.engine.peek_all(&self.rules).await
        };
        metrics::store_latency(started.elapsed());
        let verdict = result.map_err(|err| Status::invalid_argument(err.to_string()))?;
        if commit {
            self.count_decisions(&verdict, slots, mode);
        } else if let Some(err) = verdict.store_error() {
            metrics::store_error(err);
        }
        if verdict.outcome() == Outcome::Error {
            return Err(self.unavailable(&verdict));
        }
        if verdict.rules().len() != self.rules.len() {
            return Err(Status::internal(format!(
                "the engine answered {} rules of {}",
                verdict.rules().len(),
                self.rules.len()
            )));
        }
        // A committed, allowed verdict has spent; a denied one and a question report untouched
        // budgets (the engine gives them back); an allowed peek reports the budget after a spend
        // that did not happen, so it is given back here.
        let spent = commit && verdict.allowed();
        let given_back = !commit && verdict.allowed();
        for ((&slot, rule), result) in self.at.iter().zip(&self.rules).zip(verdict.rules()) {
            let decision = result.decision;
            let standing = if decision.allowed && given_back && !rule.question {
                decision.remaining.saturating_add(rule.cost).min(decision.limit)
            } else {
                decision.remaining
            };
            let (remaining, before) = if !decision.allowed {
                (0, decision.limit.saturating_sub(standing))
            } else if spent && !rule.question {
                (
                    standing,
                    decision.limit.saturating_sub(standing).saturating_sub(rule.cost),
                )
            } else {
                (standing, decision.limit.saturating_sub(standing))
            };
            answers[slot] = Some(Answer {
                verdict: *result,
                remaining,
                before,
            });
        }
        Ok(())
    }

    /// `tollgate_decisions_total` for a committed verdict. A descriptor decided apart for quota
    /// mode or upstream's counting is counted `denied` when over, not `shadow_denied`; in a
    /// refused request, rules that would have allowed spent nothing and are not counted.
    fn count_decisions(&self, verdict: &Verdict, slots: &[Slot<'_>], mode: Mode) {
        let refused = !verdict.allowed();
        for ((rule, result), &slot) in self.rules.iter().zip(verdict.rules()).zip(&self.at) {
            count::extras(rule, result);
            let outcome = match result.outcome {
                Outcome::Allowed | Outcome::Degraded if refused => continue,
                Outcome::ShadowDenied
                    if !mode.global_shadow && slots[slot].matched().is_some_and(|m| !m.shadow) =>
                {
                    Outcome::Denied
                }
                outcome => outcome,
            };
            count::decision(rule.policy.name(), outcome);
            if outcome == Outcome::Denied {
                count::denied_key(rule.policy.name(), rule.key);
            }
            if result.decision.degraded {
                count::degraded(rule.policy.name());
            }
        }
        if let Some(err) = verdict.store_error() {
            metrics::store_error(err);
        }
    }

    /// `UNAVAILABLE`, naming the descriptor whose limit fails closed.
    fn unavailable(&self, verdict: &Verdict) -> Status {
        let cause = verdict
            .store_error()
            .map_or_else(|| "the store failed".to_owned(), ToString::to_string);
        match verdict.deciding().and_then(|(i, _)| self.at.get(i)) {
            Some(slot) => {
                Status::unavailable(format!("descriptors[{slot}]: {cause}; its limit fails closed"))
            }
            None => Status::unavailable(cause),
        }
    }
}

async fn should_rate_limit(
    service: &RlsService,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    let state = &service.state;
    let settings = &state.settings.envoy;
    let mode = Mode {
        global_shadow: settings.global_shadow_mode,
        count_every: settings.count_every_descriptor,
    };
    if request.domain.is_empty() {
        return Err(Status::unknown("rate limit domain must not be empty"));
    }
    if request.descriptors.is_empty() {
        return Err(Status::unknown("rate limit descriptor list must not be empty"));
    }
    // Kept for the dynamic metadata, which describes the request as it came.
    let wire = settings
        .response_dynamic_metadata
        .then(|| request.descriptors.clone());
    let request_cost = u64::from(request.hits_addend.max(1));
    let mut asked = Vec::with_capacity(request.descriptors.len());
    for (i, descriptor) in request.descriptors.into_iter().enumerate() {
        let RateLimitDescriptor {
            entries,
            limit,
            hits_addend,
            is_negative_hits,
        } = descriptor;
        if is_negative_hits {
            return Err(Status::invalid_argument(format!(
                "descriptors[{i}]: is_negative_hits is not supported"
            )));
        }
        asked.push(Asked {
            entries: entries
                .into_iter()
                .map(|entry| (entry.key, entry.value))
                .collect(),
            cost: hits_addend.map_or(request_cost, |addend| addend.value),
            limit_override: limit,
        });
    }

    // An owned handle, not a guard: it is held across store round trips.
    let limits = state.limits.load_full();
    // A descriptor with an override takes no part in matching, `unlimited` or `replaces`.
    let mut resolved: Vec<Option<Resolved<'_>>> = asked
        .iter()
        .map(|asked| match asked.limit_override {
            Some(_) => None,
            None => limits.resolve(&request.domain, &asked.entries),
        })
        .collect();
    // Upstream decides "unlimited" before `replaces`: a replaced unlimited limit still answers
    // as unlimited.
    let unlimited: Vec<bool> = resolved
        .iter()
        .map(|r| r.as_ref().is_some_and(Resolved::is_unlimited))
        .collect();
    apply_replaces(&mut resolved);
    let global_quota = settings.global_quota_mode;
    let mut slots: Vec<Slot<'_>> = Vec::with_capacity(asked.len());
    for (i, ((asked, resolved), unlimited)) in asked.into_iter().zip(resolved).zip(unlimited).enumerate() {
        let cost = asked.cost;
        let listed = list_key(&asked.entries);
        let mut slot = match (asked.limit_override, resolved) {
            (Some(limit), _) if limits.has_domain(&request.domain) => override_slot(
                &service.overrides,
                &request.domain,
                asked.entries,
                cost,
                global_quota,
                &limit,
            )
            .map_err(|err| err.status(i))?,
            (Some(_), _) => Slot::None { quota: global_quota },
            _ if unlimited => Slot::Unlimited,
            (None, None) => Slot::None { quota: global_quota },
            (None, Some(resolved)) => match (resolved.policy(), resolved.deny_all()) {
                (Some(policy), _) => limited_slot(
                    Matched::from_config(resolved, global_quota, cost),
                    Cow::Borrowed(policy),
                ),
                (None, Some((period, policy_name))) => Slot::DenyAll {
                    matched: Matched::from_config(resolved, global_quota, cost),
                    period,
                    policy_name: Cow::Borrowed(policy_name),
                },
                (None, None) => Slot::Unlimited,
            },
        };
        if let Slot::Limited(limited) = &mut slot
            && limited.matched.list_key.is_none()
        {
            limited.matched.list_key = listed;
        }
        if let Slot::Limited(limited) = &slot {
            tollgate::store::validate_key(limited.matched.key.as_bytes())
                .map_err(|err| Status::invalid_argument(format!("descriptors[{i}]: {err}")))?;
        }
        slots.push(slot);
    }

    // Every limited descriptor, questions (a cost of 0) included, is one rule of one request to
    // the engine, which decides them all or nothing, penalties included; descriptors decided
    // apart (shadow, quota mode, global shadow, upstream's counting) are shadow rules to it. A
    // refusal at the door (an enforced deny-all descriptor or a cost no budget admits, or every
    // quota-mode descriptor over at the door) refuses the request without the store: then the
    // limited descriptors are only looked at, so nothing is spent.
    let mut limited = Group::default();
    for (i, slot) in slots.iter().enumerate() {
        if let Slot::Limited(one) = slot {
            limited.push(one.rule(mode), i);
        }
    }
    let mut answers: Vec<Option<Answer>> = vec![None; slots.len()];
    let refused = refused_at_door(&slots, mode);
    limited
        .decide(state, !refused, &slots, mode, &mut answers)
        .await?;
    if mode.count_every && !refused {
        drain(state, &slots, &answers).await;
    }
    Ok(respond(
        service,
        &request.domain,
        &slots,
        &answers,
        wire,
        request.hits_addend,
    ))
}

/// Upstream's counting of a charge larger than the budget left: upstream adds it anyway and its
/// counter goes past the limit; tollgate's counters stop at the limit, so what is left is spent
/// instead. The next request then finds nothing left, as it would upstream (Envoy's pattern of
/// asking with `hits_addend: 0` and charging the tokens used afterwards relies on it). A second
/// store call, made only under upstream's counting, for descriptors that were over.
async fn drain(state: &SharedState, slots: &[Slot<'_>], answers: &[Option<Answer>]) {
    let mut rules = Vec::new();
    for (slot, answer) in slots.iter().zip(answers) {
        let (Slot::Limited(limited), Some(answer)) = (slot, answer) else {
            continue;
        };
        let decision = answer.verdict.decision;
        let left = decision.limit.saturating_sub(answer.before);
        if decision.allowed || limited.matched.cost <= 1 || left == 0 {
            continue;
        }
        rules.push(Rule::new(&limited.policy, limited.matched.key.as_bytes(), left).as_shadow());
    }
    if rules.is_empty() {
        return;
    }
    match state.engine.check_all(&rules).await {
        Ok(verdict) => {
            if let Some(err) = verdict.store_error() {
                metrics::store_error(err);
            }
        }
        // Not reached: the same keys and policies were just decided.
        Err(err) => tracing::warn!(error = %err, "draining an overcharged budget failed"),
    }
}

/// Whether the request is over the limit before the store is asked.
fn refused_at_door(slots: &[Slot<'_>], mode: Mode) -> bool {
    let enforced = slots
        .iter()
        .any(|slot| slot.over_at_door() && slot.matched().is_some_and(|m| !mode.apart(m)));
    if enforced {
        return true;
    }
    if mode.global_shadow || mode.count_every {
        return false;
    }
    // Every quota-mode descriptor over at the door (and none of them in shadow mode, which
    // answers OK): the request is over whatever the store says.
    let mut quota = slots.iter().filter(|slot| slot.role().quota).peekable();
    quota.peek().is_some()
        && quota.all(|slot| slot.over_at_door() && slot.matched().is_some_and(|m| !m.shadow))
}

/// A limited descriptor, or over the limit outright when its cost can never be admitted.
fn limited_slot<'a>(matched: Matched<'a>, policy: Cow<'a, Policy>) -> Slot<'a> {
    if matched.cost > policy.max_cost() {
        Slot::TooLarge { matched, policy }
    } else {
        Slot::Limited(Limited { matched, policy })
    }
}

/// The slot of a descriptor that carries its own limit; see [`overrides`].
fn override_slot<'a>(
    overrides: &OverridePolicies,
    domain: &str,
    entries: Vec<(String, String)>,
    cost: u64,
    global_quota: bool,
    limit: &RateLimitOverride,
) -> Result<Slot<'a>, OverrideError> {
    let matched = Matched {
        list_key: list_key(&entries),
        stats_key: Cow::Owned(override_stats_key(domain, &entries)),
        key: override_key(domain, &entries),
        name: None,
        shadow: false,
        quota: global_quota,
        metadata: None,
        cost,
    };
    Ok(match overrides.get(limit.requests_per_unit, limit.unit)? {
        Override::DenyAll { period, policy_name } => Slot::DenyAll {
            matched,
            period,
            policy_name: Cow::Owned(policy_name),
        },
        Override::Limited(policy) => limited_slot(matched, Cow::Owned(policy)),
    })
}

/// The header added to the answer of a request with a deny-listed key, with the value
/// `blocked`: the reason, since Envoy's answer has no field for one.
pub const BLOCKED_HEADER: &str = "x-tollgate-reason";

/// What allow and deny lists match for a descriptor: its `remote_address` value, else its last
/// entry's value (`None` for an empty value).
fn list_key(entries: &[(String, String)]) -> Option<String> {
    entries
        .iter()
        .find(|(key, _)| key == "remote_address")
        .or_else(|| entries.last())
        .map(|(_, value)| value.clone())
        .filter(|value| !value.is_empty())
}

/// Upstream's stats key of a limit override: the domain, then each entry as `key_value` (or
/// `key` for an empty value), joined by `.`.
fn override_stats_key(domain: &str, entries: &[(String, String)]) -> String {
    let mut out = domain.to_owned();
    for (key, value) in entries {
        out.push('.');
        out.push_str(key);
        if !value.is_empty() {
            out.push('_');
            out.push_str(value);
        }
    }
    out
}

/// Builds the answer and counts each descriptor under its stats key.
fn respond(
    service: &RlsService,
    domain: &str,
    slots: &[Slot<'_>],
    answers: &[Option<Answer>],
    wire: Option<Vec<RateLimitDescriptor>>,
    hits_addend: u32,
) -> RateLimitResponse {
    let settings = &service.state.settings.envoy;
    let statuses: Vec<DescriptorStatus> = slots
        .iter()
        .zip(answers)
        .map(|(slot, answer)| {
            let (status, hit) = status(slot, answer.as_ref());
            if let (Some(matched), Some(hit)) = (slot.matched(), hit) {
                service
                    .stats
                    .record(&matched.stats_key, hit, settings.near_limit_ratio);
            }
            status
        })
        .collect();
    let roles: Vec<Role> = slots.iter().map(Slot::role).collect();
    let mut overall_code = answer::overall(&statuses, &roles);
    let response_headers_to_add = match &settings.response_headers {
        Some(names) => answer::headers(names, &statuses, &roles),
        None => Vec::new(),
    };
    if overall_code == Code::OverLimit && settings.global_shadow_mode {
        overall_code = Code::Ok;
        stats::global_shadow_mode();
    }
    // A deny-listed key is refused whatever the shadow settings, and says why in a header
    // (Envoy's answer has no reason field; it adds these headers to the client's answer).
    let blocked = answers
        .iter()
        .flatten()
        .any(|a| a.verdict.outcome == Outcome::Blocked);
    let mut response_headers_to_add = response_headers_to_add;
    if blocked {
        overall_code = Code::OverLimit;
        response_headers_to_add.push(HeaderValue {
            key: BLOCKED_HEADER.to_owned(),
            value: "blocked".to_owned(),
            raw_value: Vec::new(),
        });
    }
    let dynamic_metadata = wire.map(|descriptors| {
        let passed = slots
            .iter()
            .zip(&statuses)
            .filter(|(_, status)| status.code != i32::from(Code::OverLimit))
            .filter_map(|(slot, _)| slot.matched().and_then(|m| m.metadata));
        answer::dynamic_metadata(domain, &descriptors, hits_addend, passed)
    });
    RateLimitResponse {
        overall_code: overall_code.into(),
        statuses,
        response_headers_to_add,
        dynamic_metadata,
        ..Default::default()
    }
}

/// One descriptor's status, and the hit to count under its stats key (none without a limit).
fn status(slot: &Slot<'_>, answer: Option<&Answer>) -> (DescriptorStatus, Option<Hit>) {
    let code = |over: bool, matched: &Matched<'_>| {
        if over && !matched.shadow {
            Code::OverLimit
        } else {
            Code::Ok
        }
    };
    match slot {
        Slot::None { .. } => (
            DescriptorStatus {
                code: Code::Ok.into(),
                ..Default::default()
            },
            None,
        ),
        Slot::Unlimited => (
            DescriptorStatus {
                code: Code::Ok.into(),
                limit_remaining: u32::MAX,
                ..Default::default()
            },
            None,
        ),
        Slot::DenyAll {
            matched,
            period,
            policy_name,
        } => {
            count::decision(policy_name, refusal(matched));
            let hit = Hit {
                cost: matched.cost,
                limit: 0,
                before: 0,
                over: true,
                shadow: matched.shadow,
            };
            (deny_all_status(matched, *period, code(true, matched)), Some(hit))
        }
        Slot::TooLarge { matched, policy } => {
            count::decision(policy.name(), refusal(matched));
            let hit = Hit {
                cost: matched.cost,
                limit: policy.max_cost(),
                before: 0,
                over: true,
                shadow: matched.shadow,
            };
            let status = DescriptorStatus {
                code: code(true, matched).into(),
                current_limit: Some(current_limit(policy, matched.name)),
                limit_remaining: 0,
                duration_until_reset: None,
                quota: None,
            };
            (status, Some(hit))
        }
        Slot::Limited(limited) => {
            let matched = &limited.matched;
            let Some(answer) = answer else {
                // Not reached: every limited descriptor is in a group that was decided.
                return (
                    DescriptorStatus {
                        code: Code::Ok.into(),
                        current_limit: Some(current_limit(&limited.policy, matched.name)),
                        ..Default::default()
                    },
                    None,
                );
            };
            let decision = answer.verdict.decision;
            let over = !decision.allowed;
            let blocked = answer.verdict.outcome == Outcome::Blocked;
            let hit = Hit {
                cost: matched.cost,
                limit: decision.limit,
                before: answer.before,
                over,
                shadow: matched.shadow,
            };
            let status = DescriptorStatus {
                code: if blocked {
                    Code::OverLimit.into()
                } else {
                    code(over, matched).into()
                },
                current_limit: Some(current_limit(&limited.policy, matched.name)),
                limit_remaining: saturate(answer.remaining),
                duration_until_reset: Some(whole_seconds(decision.reset_after)),
                quota: None,
            };
            (status, Some(hit))
        }
    }
}

/// The outcome a door-level refusal is counted as.
fn refusal(matched: &Matched<'_>) -> Outcome {
    if matched.shadow {
        Outcome::ShadowDenied
    } else {
        Outcome::Denied
    }
}

/// The answer for `requests_per_unit: 0`, as upstream gives it: over the limit (OK in shadow
/// mode), nothing left, and the time to the end of the current unit, counted from the epoch.
fn deny_all_status(matched: &Matched<'_>, period: Duration, code: Code) -> DescriptorStatus {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let period_ns = period.as_nanos().max(1);
    let into_period_ns = since_epoch.as_nanos() % period_ns;
    let until_reset = Duration::from_nanos(u64::try_from(period_ns - into_period_ns).unwrap_or(u64::MAX));
    let (_, unit) = in_unit(1, period);
    DescriptorStatus {
        code: code.into(),
        current_limit: Some(CurrentLimit {
            name: matched.name.unwrap_or_default().to_owned(),
            requests_per_unit: 0,
            unit: unit.into(),
        }),
        limit_remaining: 0,
        duration_until_reset: Some(whole_seconds(until_reset)),
        quota: None,
    }
}

fn saturate(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// `duration`, rounded up to whole seconds.
fn whole_seconds(duration: Duration) -> ProtoDuration {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    ProtoDuration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// The policy as upstream's `requests_per_unit` per `unit`; see the module docs for windows
/// that are not a unit.
fn current_limit(policy: &Policy, name: Option<&str>) -> CurrentLimit {
    let (count, period) = tollgate_config::per_period(policy);
    let (requests_per_unit, unit) = in_unit(count, period);
    CurrentLimit {
        name: name.unwrap_or_default().to_owned(),
        requests_per_unit,
        unit: unit.into(),
    }
}

/// `count` per `period` in the longest unit not longer than `period` (seconds when shorter than
/// a second), rounded down, at least 1.
fn in_unit(count: u64, period: Duration) -> (u32, Unit) {
    let period_us = period.as_micros().max(1);
    let (unit_secs, unit) = UNITS
        .iter()
        .copied()
        .find(|(secs, _)| u128::from(*secs) * 1_000_000 <= period_us)
        .unwrap_or((1, Unit::Second));
    let scaled = u128::from(count) * u128::from(unit_secs) * 1_000_000 / period_us;
    (u32::try_from(scaled.max(1)).unwrap_or(u32::MAX), unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_units_are_reported_as_they_are() {
        assert_eq!(in_unit(10, Duration::from_secs(1)), (10, Unit::Second));
        assert_eq!(in_unit(5, Duration::from_secs(86_400)), (5, Unit::Day));
        assert_eq!(in_unit(7, Duration::from_secs(7 * 86_400)), (7, Unit::Week));
        assert_eq!(in_unit(3, Duration::from_secs(365 * 86_400)), (3, Unit::Year));
    }

    #[test]
    fn other_windows_are_scaled_down_to_the_longest_shorter_unit() {
        assert_eq!(in_unit(100, Duration::from_secs(90)), (66, Unit::Minute));
        assert_eq!(
            in_unit(1, Duration::from_secs(2 * 3_600)),
            (1, Unit::Hour),
            "at least 1"
        );
        assert_eq!(in_unit(5, Duration::from_millis(500)), (10, Unit::Second));
        assert_eq!(
            in_unit(u64::MAX / 2, Duration::from_millis(1)),
            (u32::MAX, Unit::Second)
        );
    }

    #[test]
    fn reset_is_rounded_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)).seconds, 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)).seconds, 2);
        assert_eq!(whole_seconds(Duration::ZERO).seconds, 0);
    }
}
