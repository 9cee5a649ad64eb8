//! The HTTP/JSON API: what a NestJS, Spring or any other service calls to ask for a decision.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/check` `{"policy", "key", "cost"?}` | decide and record: 200 allowed, 429 denied |
//! | `POST /v1/check` `{"rules": [{"policy", "key", "cost"?}, ...]}` | the same for several policies at once, all or nothing |
//! | `GET /v1/limits/{policy}/{key}?cost=N` | the same answer, recording nothing (peek) |
//! | `DELETE /v1/limits/{policy}/{key}` | forget the key's state (admin) |
//! | `POST /v1/attempts/{purpose}/{key}` `{"ttl_seconds"}` | count a failed attempt |
//! | `GET /v1/attempts/{purpose}/{key}` | the count and its TTL |
//! | `GET /v1/attempts/{purpose}/{key}/check?max=N` | whether another attempt is allowed |
//! | `DELETE /v1/attempts/{purpose}/{key}` | clear the counter (after a success; admin) |
//! | `GET /metrics`, `/healthz`, `/readyz` | Prometheus, liveness, store health: JSON naming the failure class |
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
//! unusable input, 404 for an unknown policy or route, 405 for a method a route does not take,
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
use serde_json::{Value, json};
use tollgate::{AttemptsStore, Error, Outcome, Rule, RuleVerdict, Verdict, headers};

use crate::metrics;
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
        .route("/v1/limits/{policy}/{key}", get(peek).delete(reset))
        .route(
            "/v1/attempts/{purpose}/{key}",
            post(count_attempt).get(attempts).delete(clear_attempts),
        )
        .route("/v1/attempts/{purpose}/{key}/check", get(check_attempts))
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
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
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
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
    let mut body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    if let (Some(policy), Some(members)) = (policy, body.as_object_mut()) {
        members.insert("policy".into(), policy.into());
    }
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
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
fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
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
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// `POST /v1/check`: one rule at the top level, or a list under `rules`. One struct with
/// optional fields, not an untagged enum, so a mistake is named (`missing field `key``) rather
/// than "did not match any variant".
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    policy: Option<String>,
    key: Option<String>,
    cost: Option<u64>,
    rules: Option<Vec<RuleBody>>,
}

/// One rule of a list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleBody {
    policy: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

#[derive(Deserialize)]
struct CostQuery {
    #[serde(default = "one")]
    cost: u64,
}

async fn check(
    State(state): State<SharedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: CheckBody = json_body(body)?;
    match body.rules {
        Some(rules) => {
            if body.policy.is_some() || body.key.is_some() || body.cost.is_some() {
                return Err(ApiError::bad_request(
                    "a check has either `rules` or `policy`, `key` and `cost`, not both",
                ));
            }
            check_list(&state, &rules).await
        }
        None => {
            let policy = body
                .policy
                .ok_or_else(|| ApiError::bad_request("missing field `policy` (or `rules`)"))?;
            let key = body
                .key
                .ok_or_else(|| ApiError::bad_request("missing field `key`"))?;
            decide_one(&state, &policy, &key, body.cost.unwrap_or(1), true).await
        }
    }
}

async fn peek(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    query: Result<Query<CostQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    decide_one(&state, &policy, &key, query.cost, false).await
}

async fn reset(
    State(state): State<SharedState>,
    Path((policy, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let limits = state.limits.load_full();
    let named = limits.policy(&policy).ok_or_else(|| unknown_policy(&policy))?;
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
    let named = limits.policy(policy).ok_or_else(|| unknown_policy(policy))?;
    check_key(state, key)?;
    let rules = [rule(named, key, cost)];
    let verdict = decide(state, &rules, commit).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(unavailable(&rules, &verdict));
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
    let body = json!({
        "allowed": !denied,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "reset_after_ms": millis_up(decision.reset_after),
        "retry_after_ms": decision.retry_after.filter(|_| denied).map(millis_up),
        "degraded": decision.degraded,
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
            .ok_or_else(|| unknown_policy(&body.policy).at(i))?;
        check_key(state, &body.key).map_err(|e| e.at(i))?;
        tollgate::store::validate_check(named.policy(), body.key.as_bytes(), body.cost)
            .map_err(|e| ApiError::from(e).at(i))?;
        rules.push(rule(named, &body.key, body.cost));
    }
    let verdict = decide(state, &rules, true).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(unavailable(&rules, &verdict));
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
    let results: Vec<Value> = rules
        .iter()
        .zip(verdict.rules())
        .map(|(rule, result)| rule_json(rule, result))
        .collect();
    let body = json!({
        "allowed": !denied,
        "degraded": verdict.degraded(),
        "retry_after_ms": verdict.retry_after().map(millis_up),
        "rules": results,
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
fn rule_json(rule: &Rule<'_>, result: &RuleVerdict) -> Value {
    let decision = &result.decision;
    let enforced_denial = result.outcome == Outcome::Denied;
    json!({
        "policy": rule.policy.name(),
        "outcome": result.outcome.as_str(),
        "allowed": result.outcome.allows(),
        "shadow": result.shadow,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "reset_after_ms": millis_up(decision.reset_after),
        "retry_after_ms": decision.retry_after.filter(|_| enforced_denial).map(millis_up),
        "degraded": decision.degraded,
    })
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

fn insert(map: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(value) = HeaderValue::from_str(&value) {
        map.insert(name, value);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountAttempt {
    ttl_seconds: u64,
}

#[derive(Deserialize)]
struct MaxQuery {
    max: Option<u64>,
}

async fn count_attempt(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let request: CountAttempt = json_body(body)?;
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state
        .store
        .increment_attempts(&name, Duration::from_secs(request.ttl_seconds))
        .await?;
    Ok(Json(json!({ "attempts": count })))
}

async fn attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let name = attempts_key(&state, &purpose, &key)?;
    let count = state.store.get_attempts(&name).await?;
    let ttl = state.store.get_ttl(&name).await?;
    Ok(Json(
        json!({ "attempts": count, "ttl_seconds": ttl.map(headers::seconds_up) }),
    ))
}

async fn check_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    query: Result<Query<MaxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let max = query
        .max
        .ok_or_else(|| ApiError::bad_request("missing query parameter `max`"))?;
    let name = attempts_key(&state, &purpose, &key)?;
    let status = state.store.check_limit(&name, max).await?;
    Ok(Json(json!({
        "allowed": status.allowed,
        "remaining": status.remaining,
        "ttl_seconds": status.ttl.map(headers::seconds_up),
    })))
}

async fn clear_attempts(
    State(state): State<SharedState>,
    Path((purpose, key)): Path<(String, String)>,
    request_headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &request_headers)?;
    let name = attempts_key(&state, &purpose, &key)?;
    state.store.reset_attempts(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn render_metrics(State(state): State<SharedState>) -> String {
    metrics::store_breakers(&state.store.breakers());
    metrics::install().render()
}

/// Ready when the store can decide now; otherwise 503 with the class of the store's failure
/// (`timeout`, `connection`, `auth`, `cluster`, ...), so an operator sees a wrong password or a
/// wrong cluster mode without reading logs.
async fn ready(State(state): State<SharedState>) -> Response {
    let health = state.store.health().await;
    metrics::store_breakers(&health.breakers);
    let breakers: Vec<serde_json::Value> = health
        .breakers
        .iter()
        .map(|(node, open)| json!({"node": node, "open": open}))
        .collect();
    let body = json!({
        "ready": health.ready,
        "store": state.store.kind(),
        "class": health.class,
        "error": health.error,
        "breakers": breakers,
    });
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

fn check_key(state: &SharedState, key: &str) -> Result<(), ApiError> {
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

fn unknown_policy(name: &str) -> ApiError {
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
fn millis_up(duration: Duration) -> u64 {
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
