//! [`Explanation`], what explain answers: the request's outcome and each rule's or descriptor's
//! part, the types the OpenAPI document describes.

use serde::Serialize;
use tollgate_config::limits::EntryMatch;

use crate::api::override_view::OverrideAnswer;

/// The answer: what the check would decide, and each rule's part.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Explanation {
    /// Whether the check would let the request pass.
    pub allowed: bool,
    /// The request's outcome: `allowed`, `denied`, `shadow_denied`, `degraded`, `error` or
    /// `blocked` (a key is on a deny list).
    pub outcome: &'static str,
    /// The store could not answer and the failure modes did; the state shown is theirs.
    pub degraded: bool,
    /// One entry per rule or descriptor, in request order.
    pub rules: Vec<ExplainedRule>,
    /// What this answer leaves out because the caller has no admin token (the server has
    /// one): `overrides` (none is shown, and the parameters are the policy's own) and
    /// `access_lists` (the decision is taken as if no allow or deny list applied). Empty when
    /// nothing was left out.
    pub hidden: Vec<&'static str>,
}

impl Explanation {
    /// The answer as indented JSON, as `tollgate explain` prints it.
    pub fn to_pretty_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|err| format!("{{\"error\": \"{err}\"}}"))
    }
}

/// One rule or descriptor, explained.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExplainedRule {
    /// The descriptor's index, for an Envoy descriptor set.
    pub descriptor: Option<usize>,
    /// Why this limit applies: `policy`, `exact`, `wildcard`, `default`, `limit_override` (the
    /// descriptor's own limit), `replaced`, `unlimited`, `deny_all` or `no_match`.
    pub matched: &'static str,
    /// For a descriptor: how each entry matched, as far as the match got.
    pub entries: Vec<ExplainedEntry>,
    /// The policy decided (`envoy:<domain>.<path>` for a descriptor); null when none is.
    pub policy: Option<String>,
    /// The key its budget is kept under.
    pub key: Option<String>,
    /// What the request costs under it.
    pub cost: u64,
    /// Decided in shadow mode: it never denies the request.
    pub shadow: bool,
    /// The runtime override in force for the key, if any.
    pub r#override: Option<OverrideAnswer>,
    /// The algorithm in force.
    pub algorithm: Option<&'static str>,
    /// Its parameters in force (the override's, else the policy's), in the config's fields.
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
    /// The fingerprint of the algorithm and parameters in force (16 hexadecimal digits): it
    /// changes exactly when a config change makes stored state read under other numbers; a
    /// reload logs it and `tollgate check-config --against` compares it.
    pub fingerprint: Option<String>,
    /// The budget as it stands, before this request.
    pub state: Option<BudgetState>,
    /// What the check would decide for this rule: `allowed`, `denied`, `shadow_denied`,
    /// `degraded`, `blocked`, or `unlimited` / `deny_all` / `no_match` for a descriptor the
    /// store never sees.
    pub decision: &'static str,
    /// When it would deny: milliseconds until a request of this cost could pass.
    pub retry_after_ms: Option<u64>,
}

/// How one entry of a descriptor matched.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ExplainedEntry {
    /// The entry's key.
    pub key: String,
    /// The entry's value.
    pub value: String,
    /// `exact`, `wildcard`, `default` (a descriptor without a value), or `none` where the match
    /// stopped.
    pub matched: &'static str,
    /// The wildcard pattern it matched.
    pub pattern: Option<String>,
}

/// A budget as it stands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BudgetState {
    /// The limit in force: a window's limit, a bucket's capacity, GCRA's burst.
    pub limit: u64,
    /// What is left of it now.
    pub remaining: u64,
    /// What is used: the window's count, the bucket's level.
    pub used: u64,
    /// Milliseconds until the budget is whole again if nothing else arrives (a penalty
    /// included).
    pub reset_after_ms: u64,
    /// When the key is blocked by the policy's `block_for` penalty: milliseconds until the
    /// block ends (every check is denied until then, whatever the budget).
    pub penalty_left_ms: Option<u64>,
    /// When the key is past its limit, in debt after a charge (`POST /v1/charge`, a
    /// descriptor's own `hits_addend`): milliseconds until the algorithm has paid the debt
    /// back. Null when it is not (a budget exactly spent is not past its limit).
    pub debt_left_ms: Option<u64>,
}

pub(super) fn unexplained(
    descriptor: Option<usize>,
    matched: &'static str,
    entries: Vec<ExplainedEntry>,
    cost: u64,
) -> ExplainedRule {
    ExplainedRule {
        descriptor,
        matched,
        entries,
        policy: None,
        key: None,
        cost,
        shadow: false,
        r#override: None,
        algorithm: None,
        parameters: None,
        fingerprint: None,
        state: None,
        decision: "no_match",
        retry_after_ms: None,
    }
}

pub(super) fn explained_entries(entries: &[(String, String)], matches: &[EntryMatch]) -> Vec<ExplainedEntry> {
    entries
        .iter()
        .enumerate()
        .map(|(i, (key, value))| {
            let found = matches.get(i);
            ExplainedEntry {
                key: key.clone(),
                value: value.clone(),
                matched: found.map_or("none", EntryMatch::as_str),
                pattern: match found {
                    Some(EntryMatch::Wildcard { pattern }) => Some(pattern.clone()),
                    _ => None,
                },
            }
        })
        .collect()
}
