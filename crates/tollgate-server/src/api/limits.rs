//! A key's budget beyond checking it: `POST /v1/refund` gives back what an admitted request
//! spent, `DELETE /v1/limits/{policy}/{key}` (admin) forgets the key's state.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tollgate::{Done, Op, Request, Rule};

use super::answer::Decision;
use super::auth::{authorize_admin, authorize_app};
use super::body::json_body;
use super::error::ApiError;
use super::policy::rate_policy;
use super::rules::OneRule;
use crate::ops::count::{self, Through};
use crate::ops::decision_log::Door;
use crate::runtime::SharedState;
use crate::runtime::problem::Problem;

#[utoipa::path(
    post,
    path = "/v1/refund",
    tag = "decisions",
    summary = "Refund",
    description = "Give back up to `cost` of what the key spent under the policy, for an admitted \
                   request that then failed on the caller's side, within the algorithm's meaning: a \
                   window's count while that window is current, a log's newest entries, a bucket's or \
                   GCRA's budget up to full. A penalty already started stays. The answer is what a \
                   check of cost 1 would get now. It can only give back, never lift a block nor raise \
                   a budget past full. Needs `Authorization: Bearer <token>` with the app or the \
                   admin token when the server has one.",
    request_body(content = OneRule, content_type = "application/json"),
    responses(
        (status = 200, description = "Refunded; what a check of cost 1 would get now", body = Decision),
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "App or admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed: nothing may have been given back", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("app_token" = []), ("admin_token" = []))
)]
pub(crate) async fn refund(
    State(state): State<SharedState>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize_app(&state, &request_headers)?;
    let one: OneRule = json_body(body)?;
    let limits = state.limits.load_full();
    let named = limits
        .policy(&one.policy)
        .ok_or_else(|| ApiError::unknown_policy(&one.policy))?;
    state.settings.check_key(one.key.as_bytes())?;
    let cost = one.cost.unwrap_or(1);
    let request = Request::one(Op::Refund(Rule::new(named.policy(), &one.key, cost)));
    let settled = state.engine.run(&request).await?;
    count::settled(Through::Rules(Door::Http), &request, &settled);
    let decision = match settled.ops.into_iter().next() {
        Some(Done::Refunded(refunded)) => refunded?,
        _ => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "no refund answered",
            ));
        }
    };
    let body = Decision::of(&decision, !decision.allowed);
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
        (status = 400, description = "Unusable input", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
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
    let named = rate_policy(&limits, &policy)?;
    state.settings.check_key(key.as_bytes())?;
    state.engine.reset(named.policy(), key.as_bytes()).await?;
    Ok(StatusCode::NO_CONTENT)
}
