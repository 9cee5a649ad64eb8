//! The HTTP door of explain: `GET /v1/explain` with the input in the query, `POST
//! /v1/explain` with it in a JSON body; both read it into an [`ExplainRequest`] and answer
//! [`explain`](super::explain)'s [`Explanation`].

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use serde::Deserialize;

use tollgate_config::Unit;
use tollgate_config::envoy_plan::{Hits, LimitOverride, OverrideError};

use super::{
    Asked, AskedRule, Audience, EnvoyContext, ExplainError, ExplainRequest, Explanation, explain_for,
    parse_descriptor,
};
use crate::api::error::ApiError;
use crate::runtime::SharedState;

/// The explain routes, merged into [`crate::api::router`](fn@crate::api::router).
pub(crate) fn routes() -> Router<SharedState> {
    Router::new().route("/v1/explain", get(explain_query).post(explain_body))
}

impl From<ExplainError> for ApiError {
    fn from(err: ExplainError) -> Self {
        match err {
            ExplainError::Store(err) => ApiError::from(err),
            ExplainError::Plan(err) => ApiError::bad_request(err.to_string()),
            err @ (ExplainError::UnknownPolicy { .. } | ExplainError::UnknownDomain(_)) => {
                ApiError::new(StatusCode::NOT_FOUND, err.to_string())
            }
            err => ApiError::bad_request(err.to_string()),
        }
    }
}

/// The body of `POST /v1/explain`: a check's rules, or an Envoy descriptor set.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainBody {
    /// tollgate rules (1 to 16), as `POST /v1/check` takes them.
    rules: Option<Vec<crate::api::rules::RuleBody>>,
    /// One tollgate rule: its policy (with `key`, and `cost`).
    policy: Option<String>,
    /// One tollgate rule: its key.
    key: Option<String>,
    /// What the request costs (default 1), for one rule or every descriptor; 0 asks an Envoy
    /// descriptor without spending (`hits_addend: 0`).
    cost: Option<u64>,
    /// An Envoy domain (with `descriptors`).
    domain: Option<String>,
    /// Envoy descriptors, each a list of `{"key", "value"}` entries.
    descriptors: Option<Vec<ExplainDescriptor>>,
}

/// One Envoy descriptor of an explain body.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainDescriptor {
    /// The entries, in order.
    entries: Vec<ExplainEntryBody>,
    /// The descriptor's own limit (Envoy's `limit`), instead of the config's.
    limit: Option<ExplainLimit>,
}

/// A descriptor's own limit: `requests_per_unit` per `unit`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainLimit {
    /// What the unit admits; 0 denies every request.
    requests_per_unit: u32,
    /// `SECOND`, `MINUTE`, `HOUR`, `DAY`, `WEEK`, `MONTH` or `YEAR` (any case).
    unit: String,
}

/// One entry of a descriptor.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExplainEntryBody {
    key: String,
    value: String,
}

impl ExplainBody {
    fn into_request(self, state: &SharedState) -> Result<ExplainRequest, ApiError> {
        let cost = self.cost.unwrap_or(1);
        match (self.rules, self.policy, self.key, self.domain, self.descriptors) {
            (Some(rules), None, None, None, None) => {
                if rules.len() > crate::api::rules::MAX_RULES {
                    return Err(ApiError::bad_request(format!(
                        "{} rules, above the maximum of {}",
                        rules.len(),
                        crate::api::rules::MAX_RULES
                    )));
                }
                let mut asked = Vec::with_capacity(rules.len());
                for rule in rules {
                    let (policy, key, cost) = rule.parts();
                    state.settings.check_key(key.as_bytes())?;
                    asked.push(AskedRule { policy, key, cost });
                }
                Ok(ExplainRequest::Rules(asked))
            }
            (None, Some(policy), Some(key), None, None) => {
                state.settings.check_key(key.as_bytes())?;
                Ok(ExplainRequest::Rules(vec![AskedRule { policy, key, cost }]))
            }
            (None, None, None, Some(domain), Some(descriptors)) => {
                let mut asked = Vec::with_capacity(descriptors.len());
                for (i, d) in descriptors.into_iter().enumerate() {
                    let limit = d
                        .limit
                        .map(|limit| {
                            let unit = Unit::from_name(&limit.unit).ok_or_else(|| {
                                ApiError::bad_request(format!(
                                    "descriptors[{i}].limit.unit: {}",
                                    OverrideError::Unit(format!("`{}`", limit.unit))
                                ))
                            })?;
                            Ok::<_, ApiError>(LimitOverride {
                                requests_per_unit: limit.requests_per_unit,
                                unit,
                            })
                        })
                        .transpose()?;
                    asked.push(Asked {
                        entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                        cost,
                        limit,
                        hits: Hits::Checked,
                    });
                }
                Ok(ExplainRequest::Envoy {
                    domain,
                    descriptors: asked,
                })
            }
            _ => Err(ApiError::bad_request(
                "explain takes `rules`, or `policy` and `key`, or `domain` and `descriptors` (each with an optional `cost`)",
            )),
        }
    }
}

#[utoipa::path(
    get,
    path = "/v1/explain",
    tag = "decisions",
    summary = "Explain a check",
    description = "What a check would decide and why, spending nothing: the limit each rule or \
                   descriptor reached and how it matched (`policy`, `exact`, `wildcard`, \
                   `default`, `replaced`, `unlimited`, `deny_all`, `no_match`), the runtime \
                   override in force, the algorithm and parameters in force, the budget as it \
                   stands and the decision. Either `policy` and `key` (and `cost`), or `domain` \
                   and one `descriptor` per descriptor, written `key=value,key=value` (a value \
                   holding `,` needs `POST`). When the server has an admin token, a caller \
                   without it is shown no override and no allow or deny list (the decision is \
                   taken as if none applied); `hidden` lists what was left out.",
    params(
        ("policy" = Option<String>, Query, description = "A configured policy"),
        ("key" = Option<String>, Query, description = "The key"),
        ("cost" = Option<u64>, Query, minimum = 0, maximum = 1_000_000_000, description = "The cost (default 1; 0 asks an Envoy descriptor without spending)"),
        ("domain" = Option<String>, Query, description = "An Envoy domain"),
        ("descriptor" = Option<Vec<String>>, Query, description = "An Envoy descriptor: `key=value,key=value`; repeat for several"),
    ),
    responses(
        (status = 200, description = "The explanation", body = Explanation),
        (status = 400, description = "Unusable input", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy or domain", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn explain_query(
    State(state): State<SharedState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Json<Explanation>, ApiError> {
    let query = query.unwrap_or_default();
    let mut body = ExplainBody {
        rules: None,
        policy: None,
        key: None,
        cost: None,
        domain: None,
        descriptors: None,
    };
    let mut descriptors = vec![];
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        let once = |slot: &mut Option<String>| match slot {
            Some(_) => Err(ApiError::bad_request(format!("`{name}` is given twice"))),
            None => {
                *slot = Some(value.clone().into_owned());
                Ok(())
            }
        };
        match &*name {
            "policy" => once(&mut body.policy)?,
            "key" => once(&mut body.key)?,
            "domain" => once(&mut body.domain)?,
            "cost" => {
                let cost = value.parse().map_err(|_| {
                    ApiError::bad_request(format!("cost: expected a whole number, got `{value}`"))
                })?;
                body.cost = Some(cost);
            }
            "descriptor" => {
                let entries = parse_descriptor(&value)
                    .map_err(|e| ApiError::bad_request(format!("descriptor[{}]: {e}", descriptors.len())))?
                    .into_iter()
                    .map(|(key, value)| ExplainEntryBody { key, value })
                    .collect();
                descriptors.push(ExplainDescriptor { entries, limit: None });
            }
            other => return Err(ApiError::bad_request(format!("unknown parameter `{other}`"))),
        }
    }
    if !descriptors.is_empty() {
        body.descriptors = Some(descriptors);
    }
    answer(&state, &headers, body).await
}

#[utoipa::path(
    post,
    path = "/v1/explain",
    tag = "decisions",
    summary = "Explain a check (JSON body)",
    description = "The same as `GET /v1/explain`, with the input as JSON: `rules` (as `POST \
                   /v1/check`), or `policy` and `key`, or `domain` and `descriptors`; each with \
                   an optional `cost`. Spends nothing. Without the admin token (when the \
                   server has one), overrides and lists are left out, as `hidden` says.",
    request_body(content = ExplainBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The explanation", body = Explanation),
        (status = 400, description = "Unusable input", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy or domain", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = crate::runtime::problem::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn explain_body(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Explanation>, ApiError> {
    let bytes = crate::api::body::body_bytes(body)?;
    let body: ExplainBody = crate::api::body::parse_json(&bytes)?;
    answer(&state, &headers, body).await
}

/// The explanation, for an operator when the caller has the admin token (or the server has
/// none), else without overrides and lists.
async fn answer(
    state: &SharedState,
    headers: &HeaderMap,
    body: ExplainBody,
) -> Result<Json<Explanation>, ApiError> {
    let audience = match crate::api::auth::authorize_admin(state, headers) {
        Ok(()) => Audience::Admin,
        Err(_) => Audience::Public,
    };
    let request = body.into_request(state)?;
    let limits = state.limits.load_full();
    let envoy = EnvoyContext {
        planner: &state.planner,
        modes: state.settings.envoy.modes(),
    };
    Ok(Json(
        explain_for(&limits, &state.engine, envoy, &request, audience).await?,
    ))
}
