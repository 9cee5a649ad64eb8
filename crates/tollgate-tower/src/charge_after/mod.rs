//! Charge after the response: for budgets whose cost is known only once the work is done, the
//! tokens an LLM answer used or the rows a report scanned.
//!
//! [`ChargeAfterLayer`] asks before the inner service whether the key is past its limit (a
//! question of cost 0: a budget exactly spent is not past it), answers 429 when it is, and
//! otherwise lets the request through; once the response is there, it computes the cost from
//! the response's status and headers with the closure it was given, and charges it
//! ([`Engine::charge_all`](tollgate::Engine::charge_all)): recorded whatever is left, the key
//! going into debt past its limit, so later requests are refused until the algorithm has paid
//! the debt back. A client can so use at most its budget plus the cost of the responses it had
//! in flight when it crossed it.
//!
//! # An LLM gateway
//!
//! The upstream model reports the tokens an answer used in a header; each tenant has 10,000
//! tokens an hour:
//!
//! ```
//! use std::time::Duration;
//! use axum::http::{HeaderName, Request, StatusCode};
//! use axum::body::Body;
//! use axum::{Router, routing::post};
//! use tollgate::{Algorithm, MemoryStore, Policy};
//! use tollgate_tower::{ChargeAfterLayer, KeyExtractor};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tokens = Policy::new("tokens", Algorithm::sliding_log(10_000, Duration::from_secs(3600))?)?;
//! let tenant = KeyExtractor::header(HeaderName::from_static("x-tenant"));
//! // The cost of an answer: its `x-tokens-used` header, nothing for an answer without one.
//! let layer = ChargeAfterLayer::new(MemoryStore::new(), tokens, tenant, |response| {
//!     response
//!         .headers
//!         .get("x-tokens-used")
//!         .and_then(|v| v.to_str().ok())
//!         .and_then(|v| v.parse().ok())
//!         .unwrap_or(0)
//! });
//! let app = Router::new()
//!     .route("/v1/chat", post(|| async { ([("x-tokens-used", "6000")], "an answer") }))
//!     .layer(layer);
//! let ask = || Request::post("/v1/chat").header("x-tenant", "acme").body(Body::empty());
//! // 6,000 of 10,000, then 12,000: the second answer took the tenant past its budget.
//! assert_eq!(app.clone().oneshot(ask()?).await?.status(), StatusCode::OK);
//! assert_eq!(app.clone().oneshot(ask()?).await?.status(), StatusCode::OK);
//! assert_eq!(app.oneshot(ask()?).await?.status(), StatusCode::TOO_MANY_REQUESTS);
//! # Ok(())
//! # }
//! ```
//!
//! With [`ChargeAfterLayer::new`] the charge is made when the response head is there, before
//! its body is sent. A cost that only the end of a streamed body knows, the bytes sent, is
//! [`ChargeAfterLayer::body_bytes`]: the body's data bytes are counted as they go out and
//! charged once, when the body ends (its end reaches the client once the charge is recorded),
//! fails, or is dropped (a client that went away is charged what was sent).
//!
//! ```
//! use std::time::Duration;
//! use axum::http::{HeaderName, Request};
//! use axum::body::{Body, to_bytes};
//! use axum::{Router, routing::get};
//! use std::sync::Arc;
//! use tollgate::{Algorithm, Anchor, Engine, MemoryStore, Policy};
//! use tollgate_tower::{ChargeAfterLayer, KeyExtractor};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A million bytes a minute per client.
//! let egress = Policy::new("egress", Algorithm::fixed_window(1_000_000, Duration::from_secs(60), Anchor::Epoch)?)?;
//! let engine = Arc::new(Engine::new(MemoryStore::new()));
//! let client = KeyExtractor::header(HeaderName::from_static("x-client"));
//! let layer = ChargeAfterLayer::body_bytes_with_engine(engine.clone(), egress.clone(), client);
//! let app = Router::new().route("/export", get(|| async { "x".repeat(4_000) })).layer(layer);
//! let response = app.oneshot(Request::get("/export").header("x-client", "c1").body(Body::empty())?).await?;
//! assert_eq!(to_bytes(response.into_body(), usize::MAX).await?.len(), 4_000);
//! // Charged the 4,000 bytes sent; a peek of cost 1 counts itself too.
//! assert_eq!(engine.store().peek(&egress, "c1", 1)?.remaining, 1_000_000 - 4_001);
//! # Ok(())
//! # }
//! ```
//!
//! Allow and deny lists do not apply to the charge; a check with
//! [`RateLimitLayer`](crate::RateLimitLayer) in front still applies them to admission. A charge
//! the failing store could not record (`fail_open`, `fail_closed`, or a `local` limiter full of
//! keys it must keep) is counted in [`StatsSnapshot::unrecorded_charges`](crate::StatsSnapshot)
//! and logged, sampled; otherwise `local` records it in the engine's fallback limiter. What the
//! engine says of each charge is all the layer goes by.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::response::Parts;
use axum::http::{Request, Response, StatusCode};
use serde_json::json;
use tollgate::{Done, Engine, Op, Outcome, Policy, Rule, Store, Verdict};
use tower::{Layer, Service};

use crate::engine::SharedEngine;
use crate::problem::{KEY_TOO_LONG, MISSING_KEY, Problems, object};
use crate::stats::{Counter, Stats};
use crate::{KeyExtractor, LogSampler};

mod metered;

use metered::Metered;

/// The cost of a response, from its status and headers; 0 charges nothing.
type CostOf = dyn Fn(&Parts) -> u64 + Send + Sync;

/// What a response costs.
enum Cost {
    /// Computed from the head, charged before the body is sent.
    Head(Box<CostOf>),
    /// The body's data bytes, charged when the body ends, fails or is dropped.
    BodyBytes,
}

/// Asks before the inner service, charges the response's cost after it; see the
/// [module docs](self). `Clone`: every clone shares one engine.
#[derive(Clone)]
pub struct ChargeAfterLayer {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Arc<dyn SharedEngine>,
    policy: Policy,
    key: KeyExtractor,
    cost: Cost,
    problems: Problems,
    stats: Stats,
}

impl ChargeAfterLayer {
    /// Charges `cost(response)` of `policy`'s budget for the key `key` finds, on `store`.
    pub fn new<S: Store + 'static>(
        store: S,
        policy: Policy,
        key: KeyExtractor,
        cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        Self::with_engine(Arc::new(Engine::new(store)), policy, key, cost)
    }

    /// The same over an engine shared with other layers (and its failure modes and fallback).
    pub fn with_engine<S: Store + 'static>(
        engine: Arc<Engine<S>>,
        policy: Policy,
        key: KeyExtractor,
        cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static,
    ) -> Self {
        Self::made(engine, policy, key, Cost::Head(Box::new(cost)))
    }

    /// Charges the number of data bytes of each response's body, once it ends, fails or is
    /// dropped, of `policy`'s budget for the key `key` finds, on `store`.
    pub fn body_bytes<S: Store + 'static>(store: S, policy: Policy, key: KeyExtractor) -> Self {
        Self::body_bytes_with_engine(Arc::new(Engine::new(store)), policy, key)
    }

    /// [`body_bytes`](Self::body_bytes) over an engine shared with other layers.
    pub fn body_bytes_with_engine<S: Store + 'static>(
        engine: Arc<Engine<S>>,
        policy: Policy,
        key: KeyExtractor,
    ) -> Self {
        Self::made(engine, policy, key, Cost::BodyBytes)
    }

    fn made(engine: Arc<dyn SharedEngine>, policy: Policy, key: KeyExtractor, cost: Cost) -> Self {
        ChargeAfterLayer {
            shared: Arc::new(Shared {
                engine,
                policy,
                key,
                cost,
                problems: Problems::default(),
                stats: Stats::default(),
            }),
        }
    }

    /// The layer's counters, shared by every clone: what the question before each request
    /// decided (a request is `allowed`, `denied`, `blocked`, `failed_closed` or
    /// `rejected_keys`; `degraded` and `store_errors` when a failure mode answered its question
    /// or its charge), and the [`charges`](crate::StatsSnapshot::charges) made after the
    /// responses, with those recorded nowhere
    /// ([`unrecorded_charges`](crate::StatsSnapshot::unrecorded_charges)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::http::HeaderName;
    /// use tollgate::{Algorithm, MemoryStore, Policy};
    /// use tollgate_tower::{ChargeAfterLayer, KeyExtractor};
    ///
    /// let tokens = Policy::new("tokens", Algorithm::sliding_log(10_000, Duration::from_secs(3600))?)?;
    /// let tenant = KeyExtractor::header(HeaderName::from_static("x-tenant"));
    /// let layer = ChargeAfterLayer::new(MemoryStore::new(), tokens, tenant, |_| 1);
    /// let stats = layer.stats().snapshot();
    /// assert_eq!((stats.charges, stats.unrecorded_charges), (0, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.shared.stats.clone()
    }
}

impl fmt::Debug for ChargeAfterLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChargeAfterLayer")
            .field("policy", &self.shared.policy.name())
            .field("key", &self.shared.key.describe())
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for ChargeAfterLayer {
    type Service = ChargeAfter<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ChargeAfter {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service a [`ChargeAfterLayer`] makes.
#[derive(Clone)]
pub struct ChargeAfter<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for ChargeAfter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChargeAfter")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type BoxedFuture<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

static UNRECORDED_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

impl<S, B, ResBody> Service<Request<B>> for ChargeAfter<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxedFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was polled ready goes into the future; `self` keeps a fresh clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let policy = &shared.policy;
            let Some(key) = shared.key.extract(&parts) else {
                shared.stats.bump(Counter::RejectedKey);
                return Ok(shared.problems.missing_key(policy, &shared.key.describe()));
            };
            if key.len() > tollgate::bounds::MAX_KEY_LEN {
                shared.stats.bump(Counter::RejectedKey);
                return Ok(shared.problems.response(
                    StatusCode::BAD_REQUEST,
                    KEY_TOO_LONG,
                    format!(
                        "`{}` keys on {}, which is {} bytes here, above the maximum of {}",
                        policy.name(),
                        shared.key.describe(),
                        key.len(),
                        tollgate::bounds::MAX_KEY_LEN
                    ),
                    object(json!({ "policy": policy.name() })),
                ));
            }
            // Before: is the key past its limit? A budget exactly spent is not.
            let question = tollgate::Request::one(Op::Peek(Rule::new(policy, &key, 0).as_question()));
            let settled = shared.engine.run(&question).await;
            let mut degraded = false;
            match settled.map(|settled| settled.peeked) {
                Ok(None) => {}
                Ok(Some(verdict)) => {
                    degraded = shared.failure_mode_answered(&verdict);
                    match (verdict.outcome(), verdict.rules().first()) {
                        (Outcome::Error, decision) => {
                            shared.stats.bump(Counter::FailedClosed);
                            return Ok(shared
                                .problems
                                .store_unavailable(policy, decision.map(|r| &r.decision)));
                        }
                        (Outcome::Blocked, _) => {
                            shared.stats.bump(Counter::Blocked);
                            return Ok(shared.problems.blocked(policy));
                        }
                        (outcome, Some(result)) if !outcome.allows() => {
                            shared.stats.bump(Counter::Denied);
                            return Ok(shared.problems.rate_limited(policy, &result.decision));
                        }
                        _ => {}
                    }
                }
                Err(err) => {
                    shared.stats.bump(Counter::RejectedKey);
                    return Ok(shared.problems.response(
                        StatusCode::BAD_REQUEST,
                        MISSING_KEY,
                        err.to_string(),
                        object(json!({ "policy": policy.name() })),
                    ));
                }
            }
            shared.stats.bump(Counter::Allowed);
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let (head, body) = response.into_parts();
            // After: what the response cost, recorded whatever is left.
            match &shared.cost {
                Cost::Head(cost_of) => {
                    let cost = cost_of(&head);
                    charge(shared.clone(), key, cost, degraded).await;
                    Ok(Response::from_parts(head, Body::new(body)))
                }
                Cost::BodyBytes => Ok(Response::from_parts(
                    head,
                    Body::new(Metered::new(body, shared.clone(), key, degraded)),
                )),
            }
        })
    }
}

impl Shared {
    /// Counts a store failure and a failure mode at work in the question's `verdict`; whether
    /// a failure mode answered.
    fn failure_mode_answered(&self, verdict: &Verdict) -> bool {
        if verdict.store_error().is_some() {
            self.stats.bump(Counter::StoreError);
        }
        let degraded = verdict.degraded();
        if degraded {
            self.stats.bump(Counter::Degraded);
        }
        degraded
    }
}

/// Charges `cost` (0 charges nothing, more than the largest limit charges that) to `key`,
/// recorded whatever is left, as the engine says; a charge recorded nowhere is counted and
/// logged, sampled. `counted`: the request was counted as degraded already, by its question.
async fn charge(shared: Arc<Shared>, key: Vec<u8>, cost: u64, counted: bool) {
    let cost = cost.min(tollgate::bounds::MAX_LIMIT);
    if cost == 0 {
        return;
    }
    let policy = &shared.policy;
    let request = tollgate::Request::one(Op::Charge(Rule::new(policy, &key, cost)));
    let (recorded, failed) = match shared.engine.run(&request).await {
        Ok(settled) => (
            matches!(settled.ops.first(), Some(Done::Charged { recorded: true, .. })),
            settled.charge_error.is_some(),
        ),
        Err(_) => (false, false),
    };
    shared.stats.bump(Counter::Charge);
    if failed && !counted {
        shared.stats.bump(Counter::StoreError);
        shared.stats.bump(Counter::Degraded);
    }
    if !recorded {
        unrecorded(&shared, cost);
    }
}

/// A charge of `cost` that could not be made at all (no runtime to make it on): counted as a
/// charge recorded nowhere.
fn lost(shared: &Shared, cost: u64) {
    shared.stats.bump(Counter::Charge);
    unrecorded(shared, cost);
}

/// A charge of `cost` recorded nowhere: counted, and logged, sampled.
fn unrecorded(shared: &Shared, cost: u64) {
    shared.stats.bump(Counter::UnrecordedCharge);
    let policy = &shared.policy;
    if UNRECORDED_LOG.due() {
        tracing::warn!(
            policy = policy.name(),
            cost,
            "a charge was not recorded: the store failed (sampled: at most one line a second)"
        );
    }
}
