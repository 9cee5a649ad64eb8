//! The rules a request names (`{"policy", "key", "cost"}` and lists of them): the request bodies
//! of check, refund and explain, and how a named policy becomes an engine [`Rule`]. Shared, so
//! that every route reads a rule the same way and with the same bounds.

use serde::Deserialize;
use serde_json::Value;
use tollgate::{Op, Rule};
use tollgate_config::NamedPolicy;

use super::body::from_json_value;
use super::error::ApiError;
use crate::ops::decision_log::OpKind;

/// The most rules one `POST /v1/check` may carry: enough for every limit a request is subject to,
/// small enough that one request cannot make the store lock or script over many keys.
pub(crate) const MAX_RULES: usize = 16;

/// The body of `POST /v1/check` for one rule.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OneRule {
    /// The policy to decide with.
    #[schema(min_length = 1)]
    pub(crate) policy: String,
    /// The key counted under it: a user, an IP, a tenant (at most the server's `--max-key-len`,
    /// 1024 bytes by default).
    #[schema(min_length = 1, max_length = 1024)]
    pub(crate) key: String,
    /// What this request costs (default 1); above what the policy can ever admit is refused.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) cost: Option<u64>,
}

/// The body of `POST /v1/check` for several rules, decided all or nothing.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RuleList {
    /// The rules (1 to 16).
    #[schema(min_items = 1, max_items = 16)]
    pub(crate) rules: Vec<RuleBody>,
}

/// The body of `POST /v1/check`: one rule, or a list under `rules`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = CheckRequest)]
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
    pub(crate) policy: String,
    /// The key (at most the server's `--max-key-len`, 1024 bytes by default).
    #[schema(min_length = 1, max_length = 1024)]
    pub(crate) key: String,
    /// What this request costs under this rule (default 1).
    #[serde(default = "one")]
    #[schema(minimum = 1, maximum = 1_000_000_000, default = 1)]
    pub(crate) cost: u64,
}

pub(crate) fn one() -> u64 {
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
    pub(crate) cost: u64,
}

/// The rule of `named` for `key`: a shadow rule when the policy is in shadow mode.
pub(crate) fn rule<'a>(named: &'a NamedPolicy, key: &'a str, cost: u64) -> Rule<'a> {
    let rule = Rule::new(named.policy(), key, cost);
    if named.shadow() { rule.as_shadow() } else { rule }
}

/// The op of `kind` for `key` under `named`, as the JSON API builds it: a check or a peek is
/// [`rule`] (a shadow rule under a policy in shadow mode), a charge or a refund its plain rule
/// (`POST /v1/charge`, `POST /v1/refund`). Replay builds a logged op with it, so it decides
/// what the door would.
pub(crate) fn op<'a>(kind: OpKind, named: &'a NamedPolicy, key: &'a str, cost: u64) -> Op<'a> {
    match kind {
        OpKind::Check | OpKind::Count | OpKind::Peek => kind.op(rule(named, key, cost)),
        OpKind::Charge | OpKind::Refund => kind.op(Rule::new(named.policy(), key, cost)),
    }
}

/// Reads the body of a check or a charge: one rule, or a list under `rules` (1 to
/// [`MAX_RULES`]). The two forms are told apart by `rules` rather than by `CheckBody`'s
/// untagged parse, so that each gets its own precise errors; `what` names the operation in the
/// error of a body with both.
pub(crate) fn one_or_many(body: Value, what: &str) -> Result<CheckBody, ApiError> {
    let Some(members) = body.as_object() else {
        return Ok(CheckBody::One(from_json_value(body)?));
    };
    if !members.contains_key("rules") {
        return from_json_value(body).map(CheckBody::One).map_err(|err| {
            if err
                .message()
                .starts_with("invalid JSON body: missing field `policy`")
            {
                ApiError::bad_request("missing field `policy` (or `rules`)")
            } else {
                err
            }
        });
    }
    if members.len() > 1 {
        return Err(ApiError::bad_request(format!(
            "a {what} has either `rules` or `policy`, `key` and `cost`, not both"
        )));
    }
    let list: RuleList = from_json_value(body)?;
    if list.rules.is_empty() {
        return Err(ApiError::bad_request("rules must not be empty"));
    }
    if list.rules.len() > MAX_RULES {
        return Err(ApiError::bad_request(format!(
            "{} rules, above the maximum of {MAX_RULES}",
            list.rules.len()
        )));
    }
    Ok(CheckBody::Many(list))
}
