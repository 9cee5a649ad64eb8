//! The HTTP/JSON API: what a NestJS, Spring or any other service calls to ask for a decision.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/check` `{"policy", "key", "cost"?}` | decide and record: 200 allowed, 429 denied |
//! | `POST /v1/check` `{"rules": [{"policy", "key", "cost"?}, ...]}` | the same for several policies at once, all or nothing |
//! | `GET /v1/limits/{policy}/{key}?cost=N` | the same answer, recording nothing (peek) |
//! | `POST /v1/refund` `{"policy", "key", "cost"?}` | give back what an admitted request spent (it failed on the caller's side) |
//! | `DELETE /v1/limits/{policy}/{key}` | forget the key's state (admin) |
//! | `GET /v1/explain?policy&key&cost` or `?domain&descriptor=k=v,...` (or `POST` with JSON) | what a check would decide and why, spending nothing (see [`crate::explain`]) |
//! | `POST /v1/concurrency/{policy}/{key}/acquire` | take a lease of a concurrency policy: 200 with its id, 429 when full (see [`crate::concurrency`]) |
//! | `POST /v1/concurrency/{policy}/{key}/release` `{"lease_id"}` | give the lease back |
//! | `POST /v1/attempts/{purpose}/{key}` `{"ttl_seconds"}` | count a failed attempt |
//! | `GET /v1/attempts/{purpose}/{key}` | the count and its TTL |
//! | `GET /v1/attempts/{purpose}/{key}/check?max=N` | whether another attempt is allowed |
//! | `DELETE /v1/attempts/{purpose}/{key}` | clear the counter (after a success; admin) |
//! | `GET, POST, DELETE /v1/admin/access` | allow and deny list entries (admin; see [`crate::admin`]) |
//! | `GET /v1/admin/top-offenders?policy=&n=` | the most denied keys per policy (admin) |
//! | `GET /v1/overrides/{policy}` | the policy's runtime overrides (admin; see [`crate::overrides`]) |
//! | `PUT`/`GET`/`DELETE /v1/overrides/{policy}/keys/{key}` | set, read, remove one key's override (admin) |
//! | `PUT`/`GET`/`DELETE /v1/overrides/{policy}/prefixes/{prefix}` | the same for every key under a prefix (admin) |
//! | `GET /metrics`, `/healthz`, `/readyz` | Prometheus, liveness, store health: JSON naming the failure class |
//! | `GET /openapi.json` | this API as an OpenAPI 3.1 document (see [`crate::openapi`]) |
//!
//! The dashboard (`/dashboard`, its data at `/dashboard/data` behind the same admin token) is
//! served beside these routes; see [`crate::dashboard`].
//!
//! Every decision is the [`Engine`](tollgate::Engine)'s: a request becomes a list of rules (a
//! policy marked `shadow` gives a shadow rule) and one [`check_all`](tollgate::Engine::check_all)
//! decides it, failure modes included. This module only translates.
//!
//! # One rule or several
//!
//! `{"policy", "key", "cost"?}` answers with the decision:
//! `{"allowed", "limit", "remaining", "reset_after_ms", "retry_after_ms", "degraded"}`.
//!
//! `{"rules": [...]}` (1 to [`MAX_RULES`] rules) decides every rule together: if any enforced
//! rule denies, the answer is 429 and no rule spends anything (only the `block_for` penalties of
//! the rules that denied start); rules that name the same policy and key spend from one budget.
//! The body is `{"allowed", "degraded", "retry_after_ms", "rules": [...]}` with, for each rule in
//! request order, `{"policy", "outcome", "allowed", "shadow", "limit", "remaining",
//! "reset_after_ms", "retry_after_ms", "degraded"}`; `outcome` is `allowed`, `shadow_denied`,
//! `degraded` or `denied`, and a rule that would have allowed a denied request reports its
//! budget as it stands.
//!
//! Decisions carry the IETF `RateLimit-Policy` and `RateLimit` headers (one entry per enforced
//! rule of a list), and `Retry-After` (whole seconds, rounded up) when denied, from the rule that
//! makes the client wait longest.
//!
//! # Errors
//!
//! Every error is an RFC 9457 problem (`application/problem+json`) with the status, its reason
//! as `title`, and a `detail` that names the problem (``rules[2]: unknown policy `x` ``): 400 for
//! unusable input, 403 for a key on a deny list (type `urn:tollgate:problem:blocked`, with
//! `"reason": "blocked"` and the `policy`), 404 for an unknown policy or route, 405 for a method a route does not take,
//! 408 for a body that did not arrive in time, 413 for a body over the limit ([`MAX_BODY`] by
//! default), 414 and 431 for an oversized target or header section, 401 for a missing admin
//! token, and 503 when the store failed and a rule's policy fails closed
//! (`on_store_failure: fail_closed`), with `Retry-After`. Bodies are parsed here rather than by
//! an extractor so that malformed JSON, a missing field and an oversized body all get that shape.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use tollgate::{AttemptsStore, Error, Outcome, Rule, RuleVerdict, Verdict, headers};

use crate::metrics;
use crate::openapi::{
    AttemptCount, Attempts, AttemptsCheck, Breaker, CheckAnswer, Decision, ListDecision, Readiness,
    RuleDecision,
};
use crate::state::SharedState;
use tollgate_config::NamedPolicy;

/// The largest request body accepted by default
/// ([`ListenerOptions::max_body_bytes`](crate::listener::ListenerOptions::max_body_bytes)).
pub const MAX_BODY: usize = 64 * 1024;

/// The most rules one `POST /v1/check` may carry: enough for every limit a request is subject to,
/// small enough that one request cannot make the store lock or script over many keys.
pub const MAX_RULES: usize = 16;

/// The media type of every error body.
const PROBLEM_JSON: &str = "application/problem+json";

/// The API's routes over `state`. Tests drive it with `oneshot`; the binary serves it.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/refund", post(refund))
        .route("/v1/limits/{policy}/{key}", get(peek).delete(reset))
        .route(
            "/v1/concurrency/{policy}/{key}/acquire",
            post(crate::concurrency::acquire),
        )
        .route(
            "/v1/concurrency/{policy}/{key}/release",
            post(crate::concurrency::release),
        )
        .route(
            "/v1/attempts/{purpose}/{key}",
            post(count_attempt).get(attempts).delete(clear_attempts),
        )
        .route("/v1/attempts/{purpose}/{key}/check", get(check_attempts))
        .route(
            "/v1/admin/access",
            get(crate::admin::list)
                .post(crate::admin::add)
                .delete(crate::admin::remove),
        )
        .route("/v1/admin/top-offenders", get(crate::admin::top_offenders))
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready))
        .route("/openapi.json", get(openapi_json))
        .merge(crate::overrides::routes())
        .merge(crate::explain::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .layer(axum::middleware::from_fn(crate::problem::bare_errors))
        .layer(DefaultBodyLimit::max(state.settings.listeners.max_body_bytes))
        .with_state(state)
}

/// An error answer: a status and the problem's `detail`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// The same error, about rule `index` of a list.
    fn at(mut self, index: usize) -> Self {
        self.message = format!("rules[{index}]: {}", self.message);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        problem(self.status, self.message, None)
    }
}

/// An RFC 9457 problem response, with `policy` as an extension member when one is to blame.
pub(crate) fn problem(status: StatusCode, detail: String, policy: Option<&str>) -> Response {
    problem_typed(status, "about:blank", detail, policy, None)
}

/// The `type` of the 403 a deny-listed key gets, with `"reason": "blocked"`.
pub const BLOCKED_TYPE: &str = "urn:tollgate:problem:blocked";

/// A problem of type `kind`, with the `policy` and `reason` extension members when given.
fn problem_typed(
    status: StatusCode,
    kind: &str,
    detail: String,
    policy: Option<&str>,
    reason: Option<&str>,
) -> Response {
    let mut body = json!({
        "type": kind,
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if let Some(members) = body.as_object_mut() {
        if let Some(policy) = policy {
            members.insert("policy".into(), policy.into());
        }
        if let Some(reason) = reason {
            members.insert("reason".into(), reason.into());
        }
    }
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

/// The 403 of a request with a deny-listed key: which entry matched is logged, not told.
fn blocked(rules: &[Rule<'_>], verdict: &Verdict) -> Response {
    let policy = verdict
        .blocked_by()
        .and_then(|(i, _)| rules.get(i))
        .map(|rule| rule.policy.name());
    let detail = match policy {
        Some(name) => format!("the key of policy `{name}` is on a deny list"),
        None => "the key is on a deny list".to_owned(),
    };
    problem_typed(
        StatusCode::FORBIDDEN,
        BLOCKED_TYPE,
        detail,
        policy,
        Some("blocked"),
    )
}

/// Unusable input is the caller's fault (400); a failing store is ours (503).
impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        if err.is_bad_input() {
            ApiError::bad_request(err.to_string())
        } else {
            metrics::store_error(&err);
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
    }
}

/// Parses a JSON body, turning every way it can be wrong into a 4xx naming the problem.
pub(crate) fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body_bytes(body)?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A body's bytes, or the 4xx for a body that was too large, too slow or unreadable.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if let Some(cut) = crate::listener::BodyLimitError::find(&rejection) {
            if matches!(cut, crate::listener::BodyLimitError::TimedOut(_)) {
                metrics::connection_timed_out("http", "body");
            }
            return ApiError::new(cut.status(), cut.to_string());
        }
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is too large".to_owned()
        } else {
            rejection.body_text()
        };
        ApiError::new(status, message)
    })
}

/// The body of `POST /v1/check` for one rule.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OneRule {
    /// The policy to decide with.
    #[schema(min_length = 1)]
    policy: String,
    /// The key counted under it: a user, an IP, a tenant (at most the server's `--max-key-len`,
    /// 1024 bytes by default).
    #[schema(min_length = 1, max_length = 1024)]
    key: String,
    /// What this request costs (default 1); above what the policy can ever admit is refused.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    cost: Option<u64>,
}

/// The body of `POST /v1/check` for several rules, decided all or nothing.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleList {
    /// The rules (1 to 16).
    #[schema(min_items = 1, max_items = 16)]
    rules: Vec<RuleBody>,
}

/// The body of `POST /v1/check`: one rule, or a list under `rules`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = CheckRequest)]
#[allow(dead_code)] // `check` parses the two forms itself, for errors that name the field
pub(crate) enum CheckBody {
    /// `policy`, `key` and optionally `cost`.
    One(OneRule),
    /// `rules`.
    Many(RuleList),
}

/// One rule of a list.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = RuleRequest)]
pub(crate) struct RuleBody {
    /// The policy.
    #[schema(min_length = 1)]
    policy: String,
    /// The key (at most the server's `--max-key-len`, 1024 bytes by default).
    #[schema(min_length = 1, max_length = 1024)]
    key: String,
    /// What this request costs under this rule (default 1).
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1_000_000_000, default = 1)]
    cost: u64,
}

fn one() -> u64 {
    1
}

impl RuleBody {
    /// Its policy, key and cost.
    pub(crate) fn parts(self) -> (String, String, u64) {
        (self.policy, self.key, self.cost)
    }
}

#[derive(Deserialize)]
pub(crate) struct CostQuery {
    #[serde(default = "one")]
    cost: u64,
}

#[utoipa::path(
    post,
    path = "/v1/check",
    tag = "decisions",
    summary = "Decide and record",
    description = "One rule (`policy`, `key`, `cost`) or a list under `rules`, decided all or nothing: \
                   a denied list spends nothing on any rule. Carries `RateLimit-Policy` and `RateLimit`, \
                   and `Retry-After` when denied.",
    request_body(content = CheckBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Allowed", body = CheckAnswer, headers(
            ("RateLimit-Policy" = String, description = "Each enforced rule's policy (IETF draft)"),
            ("RateLimit" = String, description = "Each enforced rule's remaining budget and reset (IETF draft)"))),
        (status = 429, description = "Denied", body = CheckAnswer, headers(
            ("RateLimit-Policy" = String, description = "Each enforced rule's policy (IETF draft)"),
            ("RateLimit" = String, description = "Each enforced rule's remaining budget and reset (IETF draft)"),
            ("Retry-After" = u64, description = "Whole seconds to wait"))),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "A key is on a deny list", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed and a policy fails closed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn check(
    State(state): State<SharedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // One rule or a list, told apart by `rules` so that each gets its own precise errors.
    let body: serde_json::Value = json_body(body)?;
    let is_list = body
        .as_object()
        .is_some_and(|members| members.contains_key("rules"));
    if is_list {
        if body.as_object().is_some_and(|members| members.len() > 1) {
            return Err(ApiError::bad_request(
                "a check has either `rules` or `policy`, `key` and `cost`, not both",
            ));
        }
        let list: RuleList = from_json_value(body)?;
        check_list(&state, &list.rules).await
    } else {
        let one: OneRule = from_json_value(body).map_err(|err| {
            if err
                .message
                .starts_with("invalid JSON body: missing field `policy`")
            {
                ApiError::bad_request("missing field `policy` (or `rules`)")
            } else {
                err
            }
        })?;
        decide_one(&state, &one.policy, &one.key, one.cost.unwrap_or(1), true).await
    }
}

/// A parsed JSON body as `T`, with the same errors as [`json_body`].
fn from_json_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

#[utoipa::path(
    get,
    path = "/v1/limits/{policy}/{key}",
    tag = "decisions",
    summary = "Peek",
    description = "The answer a check of this cost would get now, recording nothing.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("key" = String, Path, description = "The key"),
        ("cost" = Option<u64>, Query, minimum = 1, maximum = 1_000_000_000, description = "The cost to ask about (default 1)"),
    ),
    responses(
        (status = 200, description = "The decision, with `allowed` false when the check would be denied", body = Decision),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key is on a deny list", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed and the policy fails closed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn peek(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    query: Result<Query<CostQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    decide_one(&state, &policy, &key, query.cost, false).await
}

#[utoipa::path(
    post,
    path = "/v1/refund",
    tag = "decisions",
    summary = "Refund",
    description = "Give back up to `cost` of what the key spent under the policy, for an admitted \
                   request that then failed on the caller's side, within the algorithm's meaning: a \
                   window's count while that window is current, a log's newest entries, a bucket's or \
                   GCRA's budget up to full. A penalty already started stays. The answer is what a \
                   check of cost 1 would get now. Open to the same callers as a check (no admin \
                   token): it can only give back, never lift a block nor raise a budget past full.",
    request_body(content = OneRule, content_type = "application/json"),
    responses(
        (status = 200, description = "Refunded; what a check of cost 1 would get now", body = Decision),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed: nothing may have been given back", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn refund(
    State(state): State<SharedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let one: OneRule = json_body(body)?;
    let limits = state.limits.load_full();
    let named = limits
        .policy(&one.policy)
        .ok_or_else(|| unknown_policy(&one.policy))?;
    check_key(&state, &one.key)?;
    let cost = one.cost.unwrap_or(1);
    let started = Instant::now();
    let refunded = state
        .engine
        .refund(named.policy(), one.key.as_bytes(), cost)
        .await;
    metrics::store_latency(started.elapsed());
    let decision = refunded?;
    metrics::refund(named.policy().name(), cost);
    let body = Decision {
        allowed: decision.allowed,
        limit: decision.limit,
        remaining: decision.remaining,
        reset_after_ms: millis_up(decision.reset_after),
        retry_after_ms: decision.retry_after.filter(|_| !decision.allowed).map(millis_up),
        degraded: decision.degraded,
        shadow: false,
        listed: None,
    };
    Ok((StatusCode::OK, Json(body)).into_response())
}

#[utoipa::path(
    delete,
    path = "/v1/limits/{policy}/{key}",
    tag = "decisions",
    summary = "Reset",
    description = "Forget the key's state under the policy, penalty included. Needs \
                   `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("policy" = String, Path, description = "A configured policy"),
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 204, description = "Reset"),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn reset(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let limits = state.limits.load_full();
    let named = limits
        .policy(&policy)
        .ok_or_else(|| not_a_rate_policy(&limits, &policy))?;
    check_key(&state, &key)?;
    state.engine.reset(named.policy(), key.as_bytes()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The rule of `named` for `key`: a shadow rule when the policy is in shadow mode.
fn rule<'a>(named: &'a NamedPolicy, key: &'a str, cost: u64) -> Rule<'a> {
    let rule = Rule::new(named.policy(), key, cost);
    if named.shadow() { rule.as_shadow() } else { rule }
}

/// Decides `rules` with the engine (recording them when `commit`) and counts what happened.
async fn decide(state: &SharedState, rules: &[Rule<'_>], commit: bool) -> Result<Verdict, ApiError> {
    let started = Instant::now();
    let result = if commit {
        state.engine.check_all(rules).await
    } else {
        state.engine.peek_all(rules).await
    };
    metrics::store_latency(started.elapsed());
    let verdict = result?;
    if commit {
        metrics::verdict(rules, &verdict);
    } else if let Some(err) = verdict.store_error() {
        metrics::store_error(err);
    }
    Ok(verdict)
}

/// Check or peek of one rule: the decision as JSON, with the rate limit headers.
async fn decide_one(
    state: &SharedState,
    policy: &str,
    key: &str,
    cost: u64,
    commit: bool,
) -> Result<Response, ApiError> {
    let limits = state.limits.load_full();
    let named = limits
        .policy(policy)
        .ok_or_else(|| not_a_rate_policy(&limits, policy))?;
    check_key(state, key)?;
    let rules = [rule(named, key, cost)];
    let verdict = decide(state, &rules, commit).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(unavailable(&rules, &verdict));
    }
    if verdict.outcome() == Outcome::Blocked {
        return Ok(blocked(&rules, &verdict));
    }
    let Some(result) = verdict.rules().first() else {
        return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no decision"));
    };
    let denied = !verdict.allowed();
    let status = if denied && commit {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let decision = &result.decision;
    // A check's answer and a peek's have the same shape: `CheckAnswer::One` is a `Decision`.
    let body = CheckAnswer::One(Decision {
        allowed: !denied,
        limit: decision.limit,
        remaining: decision.remaining,
        reset_after_ms: millis_up(decision.reset_after),
        retry_after_ms: decision.retry_after.filter(|_| denied).map(millis_up),
        degraded: decision.degraded,
        shadow: result.shadow,
        listed: result.listed.map(tollgate::access::Listed::as_str),
    });
    let mut response = (status, Json(body)).into_response();
    let map = response.headers_mut();
    insert(map, "ratelimit-policy", headers::ratelimit_policy(named.policy()));
    insert(map, "ratelimit", headers::ratelimit(named.policy(), decision));
    if let (true, Some(seconds)) = (denied, headers::retry_after_seconds(decision)) {
        insert(map, header::RETRY_AFTER.as_str(), seconds.to_string());
    }
    Ok(response)
}

/// A list of rules, decided all or nothing by one `check_all`.
async fn check_list(state: &SharedState, bodies: &[RuleBody]) -> Result<Response, ApiError> {
    if bodies.is_empty() {
        return Err(ApiError::bad_request("rules must not be empty"));
    }
    if bodies.len() > MAX_RULES {
        return Err(ApiError::bad_request(format!(
            "{} rules, above the maximum of {MAX_RULES}",
            bodies.len()
        )));
    }
    let limits = state.limits.load_full();
    let mut rules = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let named = limits
            .policy(&body.policy)
            .ok_or_else(|| not_a_rate_policy(&limits, &body.policy).at(i))?;
        check_key(state, &body.key).map_err(|e| e.at(i))?;
        tollgate::store::validate_check(named.policy(), body.key.as_bytes(), body.cost)
            .map_err(|e| ApiError::from(e).at(i))?;
        rules.push(rule(named, &body.key, body.cost));
    }
    let verdict = decide(state, &rules, true).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(unavailable(&rules, &verdict));
    }
    if verdict.outcome() == Outcome::Blocked {
        return Ok(blocked(&rules, &verdict));
    }
    if verdict.rules().len() != rules.len() {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the engine answered {} rules of {}",
                verdict.rules().len(),
                rules.len()
            ),
        ));
    }
    let denied = !verdict.allowed();
    let results: Vec<RuleDecision> = rules
        .iter()
        .zip(verdict.rules())
        .map(|(rule, result)| rule_answer(rule, result))
        .collect();
    let body = CheckAnswer::Many(ListDecision {
        allowed: !denied,
        degraded: verdict.degraded(),
        retry_after_ms: verdict.retry_after().map(millis_up),
        rules: results,
    });
    let status = if denied {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let mut response = (status, Json(body)).into_response();
    list_headers(response.headers_mut(), &rules, &verdict);
    Ok(response)
}

/// One rule's part in a list answer.
fn rule_answer(rule: &Rule<'_>, result: &RuleVerdict) -> RuleDecision {
    let decision = &result.decision;
    let enforced_denial = result.outcome == Outcome::Denied;
    RuleDecision {
        policy: rule.policy.name().to_owned(),
        outcome: result.outcome.as_str(),
        allowed: result.outcome.allows(),
        shadow: result.shadow,
        limit: decision.limit,
        remaining: decision.remaining,
        reset_after_ms: millis_up(decision.reset_after),
        retry_after_ms: decision.retry_after.filter(|_| enforced_denial).map(millis_up),
        degraded: decision.degraded,
        listed: result.listed.map(tollgate::access::Listed::as_str),
    }
}

/// `RateLimit-Policy` and `RateLimit` with one entry per enforced rule in request order (a rule
/// repeated with the same key is listed once), and `Retry-After` when denied.
fn list_headers(map: &mut HeaderMap, rules: &[Rule<'_>], verdict: &Verdict) {
    let mut policies: Vec<String> = Vec::new();
    let mut budgets: Vec<String> = Vec::new();
    for (i, (rule, result)) in rules.iter().zip(verdict.rules()).enumerate() {
        if rule.shadow {
            continue;
        }
        let seen = |same: fn(&Rule<'_>, &Rule<'_>) -> bool| {
            rules[..i]
                .iter()
                .any(|earlier| !earlier.shadow && same(earlier, rule))
        };
        if !seen(|a, b| a.policy.name() == b.policy.name()) {
            policies.push(headers::ratelimit_policy(rule.policy));
        }
        if !seen(|a, b| a.policy.name() == b.policy.name() && a.key == b.key) {
            budgets.push(headers::ratelimit(rule.policy, &result.decision));
        }
    }
    if !policies.is_empty() {
        insert(map, "ratelimit-policy", policies.join(", "));
        insert(map, "ratelimit", budgets.join(", "));
    }
    if let Some(wait) = verdict.retry_after() {
        insert(
            map,
            header::RETRY_AFTER.as_str(),
            headers::seconds_up(wait).max(1).to_string(),
        );
    }
}

/// The answer when the store failed and a rule fails closed: 503, with the rule's policy and
/// when to try again.
fn unavailable(rules: &[Rule<'_>], verdict: &Verdict) -> Response {
    let policy = verdict
        .deciding()
        .and_then(|(i, _)| rules.get(i))
        .map(|rule| rule.policy.name());
    let cause = verdict
        .store_error()
        .map_or_else(|| "the store failed".to_owned(), ToString::to_string);
    let detail = match policy {
        Some(name) => format!("{cause}; policy `{name}` fails closed"),
        None => cause,
    };
    let mut response = problem(StatusCode::SERVICE_UNAVAILABLE, detail, policy);
    if let Some(wait) = verdict.retry_after() {
        insert(
            response.headers_mut(),
            header::RETRY_AFTER.as_str(),
            headers::seconds_up(wait).max(1).to_string(),
        );
    }
    response
}

pub(crate) fn insert(map: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(value) = HeaderValue::from_str(&value) {
        map.insert(name, value);
    }
}

/// The body of `POST /v1/attempts/{purpose}/{key}`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CountAttemptRequest)]
pub(crate) struct CountAttempt {
    /// How long the counter lives after this attempt, in seconds (at most 1000 days).
    #[schema(minimum = 1, maximum = 86_400_000)]
    ttl_seconds: u64,
}

#[derive(Deserialize)]
pub(crate) struct MaxQuery {
    max: Option<u64>,
}

#[utoipa::path(
    post,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Count a failed attempt",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    request_body(content = CountAttempt, content_type = "application/json"),
    responses(
        (status = 200, description = "The count after this attempt", body = AttemptCount),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn count_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<AttemptCount>, ApiError> {
    let request: CountAttempt = json_body(body)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state
        .store
        .increment_attempts(&name, Duration::from_secs(request.ttl_seconds))
        .await?;
    Ok(Json(AttemptCount { attempts: count }))
}

#[utoipa::path(
    get,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Read a counter",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    responses(
        (status = 200, description = "The count and its time to live", body = Attempts),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
) -> Result<Json<Attempts>, ApiError> {
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state.store.get_attempts(&name).await?;
    let ttl = state.store.get_ttl(&name).await?;
    Ok(Json(Attempts {
        attempts: count,
        ttl_seconds: ttl.map(headers::seconds_up),
    }))
}

#[utoipa::path(
    get,
    path = "/v1/attempts/{purpose}/{key}/check",
    tag = "attempts",
    summary = "Whether another attempt is allowed",
    params(
        ("purpose" = String, Path, description = "What the attempts are for"),
        ("key" = String, Path, description = "Whose attempts"),
        ("max" = u64, Query, minimum = 1, maximum = 1_000_000_000, description = "The most attempts allowed"),
    ),
    responses(
        (status = 200, description = "Allowed or not, and what is left", body = AttemptsCheck),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn check_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    query: Result<Query<MaxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AttemptsCheck>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let max = query
        .max
        .ok_or_else(|| ApiError::bad_request("missing query parameter `max`"))?;
    if max > tollgate::bounds::MAX_LIMIT {
        return Err(ApiError::bad_request(format!(
            "max is {max}, above the maximum of {}",
            tollgate::bounds::MAX_LIMIT
        )));
    }
    let name = attempts_key(&state, &purpose, &key)?;
    let status = state.store.check_limit(&name, max).await?;
    Ok(Json(AttemptsCheck {
        allowed: status.allowed,
        remaining: status.remaining,
        ttl_seconds: status.ttl.map(headers::seconds_up),
    }))
}

#[utoipa::path(
    delete,
    path = "/v1/attempts/{purpose}/{key}",
    tag = "attempts",
    summary = "Clear a counter",
    description = "After a success. Needs `Authorization: Bearer <token>` when the server has an admin token.",
    params(
        ("purpose" = String, Path, description = "What the attempts are for (`login`); counters of different purposes never meet"),
        ("key" = String, Path, description = "Whose attempts: a user name, an IP"),
    ),
    responses(
        (status = 204, description = "Cleared"),
        (status = 401, description = "Admin token missing or wrong", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 400, description = "Unusable input", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::openapi::Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn clear_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let name = attempts_key(&state, &purpose, &key)?;
    state.store.reset_attempts(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain"))
)]
pub(crate) async fn render_metrics(State(state): State<SharedState>) -> String {
    metrics::store_breakers(&state.store.breakers());
    let mut text = metrics::install().render();
    metrics::render_top_offenders(&mut text);
    text
}

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    summary = "Liveness",
    responses((status = 200, description = "The process serves", body = String, content_type = "text/plain"))
)]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json"))
)]
pub(crate) async fn openapi_json() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = DOCUMENT.get_or_init(crate::openapi::document_json).as_str();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    summary = "Readiness",
    responses(
        (status = 200, description = "The store can decide now", body = Readiness),
        (status = 503, description = "It cannot: the failure's class and every node's breaker", body = Readiness),
    )
)]
/// Ready when the store can decide now; otherwise 503 with the class of the store's failure
/// (`timeout`, `connection`, `auth`, `cluster`, ...), so an operator sees a wrong password or a
/// wrong cluster mode without reading logs.
pub(crate) async fn ready(State(state): State<SharedState>) -> Response {
    let health = state.store.health().await;
    metrics::store_breakers(&health.breakers);
    let breakers = health
        .breakers
        .iter()
        .map(|(node, open)| Breaker {
            node: node.clone(),
            open: *open,
        })
        .collect();
    let body = Readiness {
        ready: health.ready,
        store: state.store.kind(),
        class: health.class,
        error: health.error,
        breakers,
    };
    let status = match health.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(body)).into_response()
}

/// Attempts counters of different purposes never meet: the purpose is length-prefixed.
fn attempts_key(state: &SharedState, purpose: &str, key: &str) -> Result<Vec<u8>, ApiError> {
    if purpose.is_empty() {
        return Err(ApiError::bad_request("purpose must not be empty"));
    }
    check_key(state, key)?;
    Ok(format!("{}:{purpose}{key}", purpose.len()).into_bytes())
}

pub(crate) fn check_key(state: &SharedState, key: &str) -> Result<(), ApiError> {
    let max = state.settings.max_key_len;
    if key.is_empty() {
        return Err(ApiError::bad_request("key must not be empty"));
    }
    if key.len() > max {
        return Err(ApiError::bad_request(format!(
            "key is {} bytes, above the maximum of {max}",
            key.len()
        )));
    }
    Ok(())
}

/// Why `name` is not a rate policy: a concurrency policy (400, saying where to go) or nothing
/// (404).
fn not_a_rate_policy(limits: &tollgate_config::Limits, name: &str) -> ApiError {
    crate::concurrency::not_checkable(limits, name).unwrap_or_else(|| unknown_policy(name))
}

pub(crate) fn unknown_policy(name: &str) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, format!("unknown policy `{name}`"))
}

/// Admin calls need `Authorization: Bearer <token>` when a token is configured. The token is
/// compared in constant time, so response timing does not reveal how much of a guess was right.
pub(crate) fn authorize_admin(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.settings.admin_token else {
        return Ok(());
    };
    let given = request_headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin token required: Authorization: Bearer <token>",
        ))
    }
}

/// Equal contents, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// Milliseconds, rounded up, so a client waiting that long is never early.
pub(crate) fn millis_up(duration: Duration) -> u64 {
    let micros = duration.as_micros();
    u64::try_from(micros.div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_equal_only_when_identical() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn milliseconds_round_up() {
        assert_eq!(millis_up(Duration::from_micros(1)), 1);
        assert_eq!(millis_up(Duration::from_millis(20)), 20);
        assert_eq!(millis_up(Duration::ZERO), 0);
    }
}
