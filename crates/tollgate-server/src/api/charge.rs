//! `POST /v1/charge`: record a cost known only after the response (LLM tokens, bytes sent, rows
//! scanned). A check refuses what does not fit and spends nothing; a charge is never refused for
//! budget: it records its cost whatever is left, the key goes into debt, and later checks are
//! refused until the algorithm has paid the debt back (see `docs/charges.md`). The usual pair is
//! a peek or a check before the work and a charge of what it really cost after it.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::headers::millis_up;
use tollgate::{Charged, Done, Op, Request, Rule};
use utoipa::ToSchema;

use super::auth::authorize_app;
use super::body::json_body;
use super::error::ApiError;
use super::policy::rate_policy;
use super::rules::{CheckBody, RuleBody, one_or_many};
use crate::ops::count::{self, Through};
use crate::ops::decision_log::Door;
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

/// The answer of a charge of one rule: what a check of cost 1 would get right after it, and the
/// debt.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChargeDecision {
    /// Whether a check of cost 1 would pass now.
    pub allowed: bool,
    /// The policy's limit (a window's limit, a bucket's capacity, GCRA's burst).
    pub limit: u64,
    /// What is left of it: 0 while in debt.
    pub remaining: u64,
    /// Milliseconds until the budget is full again, the debt paid back first.
    pub reset_after_ms: u64,
    /// When a check of cost 1 would be denied: milliseconds until it could pass.
    pub retry_after_ms: Option<u64>,
    /// Units owed beyond the budget; 0 when none.
    pub debt: u64,
    /// Whether the charge was recorded: by the store, or while it fails by a `local` policy's
    /// fallback limiter. False when neither could (`fail_open`, `fail_closed`, or a `local`
    /// limiter full of keys it must keep); counted in `tollgate_charges_unrecorded_total`.
    pub recorded: bool,
    /// The store failed and the policy's failure mode answered.
    pub degraded: bool,
}

/// The answer of a charge of several rules, recorded together.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ChargeList {
    /// A rule's store failed and its failure mode answered.
    pub degraded: bool,
    /// One entry per rule, in request order.
    pub rules: Vec<RuleCharge>,
}

/// One rule's part of a [`ChargeList`].
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RuleCharge {
    /// The rule's policy.
    pub policy: String,
    /// The rest as for one rule.
    #[serde(flatten)]
    pub charge: ChargeDecision,
}

/// The answer of `POST /v1/charge`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum ChargeAnswer {
    /// For `policy` and `key`.
    One(ChargeDecision),
    /// For `rules`.
    Many(ChargeList),
}

#[utoipa::path(
    post,
    path = "/v1/charge",
    tag = "decisions",
    summary = "Charge after the fact",
    description = "Record a cost known only after the work was done (tokens, bytes), whatever is \
                   left: a charge is never refused for budget. Past the limit the key goes into \
                   debt, and checks are refused (429 with `Retry-After`) until the algorithm has \
                   paid it back: a window's end, a log's entries leaving it, a bucket's refill or \
                   leak, GCRA's rate. One rule (`policy`, `key`, `cost`) or a list under `rules`, \
                   recorded together. The cost may exceed the policy's limit. Needs \
                   `Authorization: Bearer <token>` with the app or the admin token when the server \
                   has one. Starts no `block_for` penalty; the next refused check does.",
    request_body(content = CheckBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded (or, with `recorded: false`, lost to a failing store); what a check of cost 1 would get now, with the debt", body = ChargeAnswer),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn charge(
    State(state): State<SharedState>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize_app(&state, &request_headers)?;
    let (is_list, bodies) = match one_or_many(json_body(body)?, "charge")? {
        CheckBody::Many(list) => (true, list.rules),
        CheckBody::One(one) => (
            false,
            vec![RuleBody {
                policy: one.policy,
                key: one.key,
                cost: one.cost.unwrap_or(1),
            }],
        ),
    };
    let limits = state.limits.load_full();
    let at = |i: usize, err: ApiError| if is_list { err.at(i) } else { err };
    let mut rules = Vec::with_capacity(bodies.len());
    for (i, body) in bodies.iter().enumerate() {
        let named = rate_policy(&limits, &body.policy).map_err(|e| at(i, e))?;
        state
            .settings
            .check_key(body.key.as_bytes())
            .map_err(|e| at(i, ApiError::from(e)))?;
        let rule = Rule::new(named.policy(), &body.key, body.cost);
        tollgate::store::validate_charge(&rule).map_err(|e| at(i, ApiError::from(e)))?;
        rules.push(rule);
    }
    let request = Request::new(rules.iter().copied().map(Op::Charge).collect());
    let settled = state.engine.run(&request).await?;
    count::settled(Through::Rules(Door::Http), &request, &settled);
    let degraded = settled.charge_error.is_some();
    let charges: Vec<(Charged, bool)> = settled
        .ops
        .iter()
        .filter_map(|done| match done {
            Done::Charged { charged, recorded } => Some((*charged, *recorded)),
            _ => None,
        })
        .collect();
    let answer = |(charged, recorded): &(Charged, bool)| ChargeDecision {
        allowed: charged.decision.allowed,
        limit: charged.decision.limit,
        remaining: charged.decision.remaining,
        reset_after_ms: millis_up(charged.decision.reset_after),
        retry_after_ms: charged.decision.retry_after.map(millis_up),
        debt: charged.debt,
        recorded: *recorded,
        degraded: charged.decision.degraded,
    };
    let body = if is_list {
        ChargeAnswer::Many(ChargeList {
            degraded,
            rules: rules
                .iter()
                .zip(&charges)
                .map(|(rule, charged)| RuleCharge {
                    policy: rule.policy.name().to_owned(),
                    charge: answer(charged),
                })
                .collect(),
        })
    } else {
        let one = charges
            .first()
            .ok_or_else(|| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "no charge answered"))?;
        ChargeAnswer::One(answer(one))
    };
    Ok((StatusCode::OK, Json(body)).into_response())
}
