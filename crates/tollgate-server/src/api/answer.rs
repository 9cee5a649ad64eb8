//! Turning the engine's [`Verdict`] into the API's answer: the JSON decision types (the very
//! types the OpenAPI document describes), the rate limit headers, and the 403 and 503 problems
//! of a blocked key and a store that failed closed. Check, peek and refund answer through here,
//! so one policy looks the same whichever route asked.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::headers::{self, millis_up};
use tollgate::{Outcome, Rule, RuleVerdict, Verdict};
use utoipa::ToSchema;

use crate::runtime::problem::{BLOCKED_TYPE, Problem};

/// The decision on one rule, the answer of `POST /v1/check` with `policy` and `key`, and of
/// `GET /v1/limits/{policy}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The policy's limit (a window's limit, a bucket's capacity, GCRA's burst).
    pub limit: u64,
    /// What is left of it after this decision.
    pub remaining: u64,
    /// Milliseconds until the budget is full again.
    pub reset_after_ms: u64,
    /// When denied: milliseconds until a request of this cost could pass.
    pub retry_after_ms: Option<u64>,
    /// The store failed and the policy's failure mode decided.
    pub degraded: bool,
    /// Present and true when the rule was decided in shadow mode (the policy is in shadow mode,
    /// or the key is outside a gradually enforced policy's share): it never denies.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// Present when the key is on an allow list (`allow`: never limited, nothing spent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed: Option<&'static str>,
}

/// The decision on a list of rules, decided all or nothing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ListDecision {
    /// Whether the request may pass: no enforced rule denied it.
    pub allowed: bool,
    /// A rule's store failed and its failure mode decided.
    pub degraded: bool,
    /// When denied: milliseconds until the rule that waits longest could pass.
    pub retry_after_ms: Option<u64>,
    /// One entry per rule, in request order.
    pub rules: Vec<RuleDecision>,
}

/// One rule's part in a [`ListDecision`].
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RuleDecision {
    /// The rule's policy.
    pub policy: String,
    /// `allowed`, `denied`, `shadow_denied` (a shadow rule that would have denied) or `degraded`.
    pub outcome: &'static str,
    /// Whether this rule let the request pass.
    pub allowed: bool,
    /// The rule was decided in shadow mode (the policy is, or the key is outside a gradually
    /// enforced policy's share): it never denies.
    pub shadow: bool,
    /// The policy's limit.
    pub limit: u64,
    /// What is left; a rule that would have allowed a denied request reports its untouched budget.
    pub remaining: u64,
    /// Milliseconds until the budget is full again.
    pub reset_after_ms: u64,
    /// When this rule denied: milliseconds until it could pass.
    pub retry_after_ms: Option<u64>,
    /// The store failed and the policy's failure mode decided.
    pub degraded: bool,
    /// Present when the key is on an allow list (`allow`: never limited, nothing spent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed: Option<&'static str>,
}

/// The answer of `POST /v1/check`: one decision, or a list's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum CheckAnswer {
    /// For `policy` and `key`.
    One(Decision),
    /// For `rules`.
    Many(ListDecision),
}

impl Decision {
    /// The answer for `decision`; `denied` says whether the request was refused (a retry time is
    /// only given then).
    pub(crate) fn of(decision: &tollgate::Decision, denied: bool) -> Self {
        Decision {
            allowed: !denied,
            limit: decision.limit,
            remaining: decision.remaining,
            reset_after_ms: millis_up(decision.reset_after),
            retry_after_ms: decision.retry_after.filter(|_| denied).map(millis_up),
            degraded: decision.degraded,
            shadow: false,
            listed: None,
        }
    }

    /// With the rule's shadow and list marks from the engine's `result`.
    pub(crate) fn marked(self, result: &RuleVerdict) -> Self {
        Decision {
            shadow: result.shadow,
            listed: result.listed.map(tollgate::access::Listed::as_str),
            ..self
        }
    }
}

impl RuleDecision {
    /// One rule's part in a list answer.
    pub(crate) fn of(rule: &Rule<'_>, result: &RuleVerdict) -> RuleDecision {
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
}

/// `RateLimit-Policy` and `RateLimit` for the rules [`headers::reported`] picks (the rule the
/// tower layer and the proxy follow too: enforced rules with a budget of their own, each budget
/// once), a policy named once in `RateLimit-Policy`; and `Retry-After` (whole seconds, rounded
/// up) when the request is refused, from the rule that makes the client wait longest.
pub(crate) fn rate_limit_headers(map: &mut HeaderMap, rules: &[Rule<'_>], verdict: &Verdict) {
    let mut policies: Vec<String> = Vec::new();
    let mut budgets: Vec<String> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    for i in headers::reported(rules, verdict) {
        let (rule, result) = (&rules[i], &verdict.rules()[i]);
        if !named.contains(&rule.policy.name()) {
            named.push(rule.policy.name());
            policies.push(headers::ratelimit_policy(rule.policy));
        }
        budgets.push(headers::ratelimit(rule.policy, &result.decision));
    }
    if !policies.is_empty() {
        insert(map, "ratelimit-policy", policies.join(", "));
        insert(map, "ratelimit", budgets.join(", "));
    }
    if !verdict.allowed()
        && let Some(wait) = verdict.retry_after()
    {
        insert(
            map,
            header::RETRY_AFTER.as_str(),
            headers::seconds_up(wait).max(1).to_string(),
        );
    }
}

/// The 403 of a request with a deny-listed key: which entry matched is logged, not told.
pub(crate) fn blocked(rules: &[Rule<'_>], verdict: &Verdict) -> Response {
    let policy = verdict
        .blocked_by()
        .and_then(|(i, _)| rules.get(i))
        .map(|rule| rule.policy.name());
    let detail = match policy {
        Some(name) => format!("the key of policy `{name}` is on a deny list"),
        None => "the key is on a deny list".to_owned(),
    };
    Problem::new(StatusCode::FORBIDDEN, detail)
        .kind(BLOCKED_TYPE)
        .policy(policy)
        .reason("blocked")
        .into_response()
}

/// The answer when the store failed and a rule fails closed: 503, with the rule's policy and
/// when to try again.
pub(crate) fn unavailable(rules: &[Rule<'_>], verdict: &Verdict) -> Response {
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
    let mut response = Problem::new(StatusCode::SERVICE_UNAVAILABLE, detail)
        .policy(policy)
        .into_response();
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
