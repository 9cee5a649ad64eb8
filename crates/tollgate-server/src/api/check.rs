//! Deciding: `POST /v1/check` (one rule, or a list decided all or nothing) and
//! `GET /v1/limits/{policy}/{key}` (the same answer, recording nothing). A request becomes a list
//! of rules and one call to the engine decides it; [`answer`](super::answer) turns the verdict
//! back into JSON and headers, and [`count`] counts it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tollgate::headers::millis_up;
use tollgate::{Op, Outcome, Request, Rule, Verdict};

use super::answer::{self, CheckAnswer, Decision, ListDecision, RuleDecision};
use super::body::json_body;
use super::error::ApiError;
use super::policy::rate_policy;
use super::rules::{CheckBody, CostQuery, RuleBody, one_or_many, rule};
use crate::ops::count::{self, Through};
use crate::ops::decision_log::Door;
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

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
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "A key is on a deny list", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed and a policy fails closed", body = Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn check(
    State(state): State<SharedState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = one_or_many(json_body(body)?, "check")?;
    match body {
        CheckBody::Many(list) => check_list(&state, &list.rules).await,
        CheckBody::One(one) => decide_one(&state, &one.policy, &one.key, one.cost.unwrap_or(1), true).await,
    }
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
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The key is on a deny list", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed and the policy fails closed", body = Problem, content_type = "application/problem+json"),
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

/// Decides `rules` with one engine call (recording them when `commit`) and counts what happened.
async fn decide(state: &SharedState, rules: &[Rule<'_>], commit: bool) -> Result<Verdict, ApiError> {
    let op = if commit { Op::Check } else { Op::Peek };
    let request = Request::new(rules.iter().copied().map(op).collect());
    let settled = state.engine.run(&request).await?;
    count::settled(Through::Rules(Door::Http), &request, &settled);
    match (settled.verdict, settled.peeked) {
        (Some(verdict), _) | (None, Some(verdict)) => Ok(verdict),
        (None, None) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no decision")),
    }
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
    let named = rate_policy(&limits, policy)?;
    state.settings.check_key(key.as_bytes())?;
    let rules = [rule(named, key, cost)];
    let verdict = decide(state, &rules, commit).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(answer::unavailable(&rules, &verdict));
    }
    if verdict.outcome() == Outcome::Blocked {
        return Ok(answer::blocked(&rules, &verdict));
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
    // A check's answer and a peek's have the same shape: `CheckAnswer::One` is a `Decision`.
    let body = CheckAnswer::One(Decision::of(&result.decision, denied).marked(result));
    let mut response = (status, Json(body)).into_response();
    answer::rate_limit_headers(response.headers_mut(), &rules, &verdict);
    Ok(response)
}

/// A list of rules (1 to `MAX_RULES`, see [`one_or_many`]), decided all or nothing by one
/// `check_all`.
async fn check_list(state: &SharedState, bodies: &[RuleBody]) -> Result<Response, ApiError> {
    let limits = state.limits.load_full();
    let mut rules = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let named = rate_policy(&limits, &body.policy).map_err(|e| e.at(i))?;
        // The key against the server's bound; then the cost against the policy.
        state
            .settings
            .check_key(body.key.as_bytes())
            .map_err(|e| ApiError::from(e).at(i))?;
        tollgate::store::validate_check(named.policy(), body.key.as_bytes(), body.cost)
            .map_err(|e| ApiError::from(e).at(i))?;
        rules.push(rule(named, &body.key, body.cost));
    }
    let verdict = decide(state, &rules, true).await?;
    if verdict.outcome() == Outcome::Error {
        return Ok(answer::unavailable(&rules, &verdict));
    }
    if verdict.outcome() == Outcome::Blocked {
        return Ok(answer::blocked(&rules, &verdict));
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
        .map(|(rule, result)| RuleDecision::of(rule, result))
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
    answer::rate_limit_headers(response.headers_mut(), &rules, &verdict);
    Ok(response)
}
