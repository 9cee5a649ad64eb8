//! Explain: what a check would answer and why, without spending anything.
//!
//! [`explain`] takes the same input as a check, in either form: tollgate rules (`policy`, `key`,
//! `cost`) or an Envoy descriptor set (`domain`, descriptors of `key`/`value` entries), and
//! answers for each rule or descriptor:
//!
//! - which configured limit it reached and why (`matched`): `policy` (a tollgate rule names its
//!   policy), or for a descriptor `exact`, `wildcard` or `default` (how its last entry matched,
//!   with every entry's match listed), `replaced` (another matched limit's `replaces` drops it),
//!   `unlimited`, `deny_all` (`requests_per_unit: 0`) or `no_match`;
//! - the runtime override in force for its key, if any ([`tollgate::overrides`]);
//! - the algorithm and the parameters in force (the override's, else the policy's);
//! - the budget as it stands: the limit, what is left, what is used, the time until it is
//!   whole again, and the time left on a `block_for` penalty ([`Store::penalty_left`]);
//! - what the check would decide: the rule's outcome and how long to wait when denied (a
//!   `block_for` penalty shows as a denial whose wait is the penalty's).
//!
//! An Envoy descriptor set is planned by the same planner as `ShouldRateLimit` and `POST /json`
//! ([`tollgate_config::envoy_plan`]), with the server's global modes (shadow, quota, upstream's
//! counting), and its rules are looked at with [`Engine::peek_all`]: the answer is the one the
//! gRPC door would give now, allow and deny lists included. tollgate rules are asked as
//! questions ([`Rule::as_question`]) in one `peek_all`. Either way the store decides as the
//! check would (overrides included) and records nothing, on every store. Explain is read only:
//! nothing is spent, no penalty starts, no override is loaded into a cache it was not already
//! in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tollgate::overrides::{Override, OverrideStore};
use tollgate::{Engine, Error, Outcome, Policy, Rule, RuleVerdict, Store};
use tollgate_config::Limits;
use tollgate_config::envoy_plan::{Asked, DescriptorAnswer, Kind, Modes, PlanError, Planner};
use tollgate_config::limits::EntryMatch;

use crate::api::overrides::{OverrideAnswer, answer as override_answer, parameters};
use tollgate::headers::millis_up;

/// What to explain: the input of a check.
#[derive(Debug, Clone)]
pub enum ExplainRequest {
    /// tollgate rules, decided together as `POST /v1/check` decides them.
    Rules(Vec<AskedRule>),
    /// An Envoy descriptor set, as `ShouldRateLimit` gets it: each descriptor's entries, cost
    /// (Envoy's `hits_addend`) and limit override.
    Envoy {
        /// The domain.
        domain: String,
        /// The descriptors, in order.
        descriptors: Vec<Asked>,
    },
}

/// How the server plans Envoy requests, for explain to plan them the same way.
#[derive(Debug, Clone, Copy)]
pub struct EnvoyContext<'a> {
    /// The planner (it keeps the policies of recent limit overrides).
    pub planner: &'a Planner,
    /// The global modes in force.
    pub modes: Modes,
}

/// One tollgate rule to explain.
#[derive(Debug, Clone)]
pub struct AskedRule {
    /// The policy.
    pub policy: String,
    /// The key.
    pub key: String,
    /// The cost (at least 1).
    pub cost: u64,
}

/// Why explain could not answer: the input a check would refuse too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// A rule names a policy the config does not have.
    #[error("{at}unknown policy `{policy}`")]
    UnknownPolicy {
        /// `rules[i]: ` when there are several rules, else empty.
        at: String,
        /// The policy named.
        policy: String,
    },
    /// The domain is not configured.
    #[error("unknown domain `{0}`")]
    UnknownDomain(String),
    /// Nothing to explain.
    #[error("{0}")]
    Empty(&'static str),
    /// The planner refused a descriptor (a bad limit override or key).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The engine refused the input (a bad key or cost) or the store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

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
}

/// Explains `request` against `limits` on `engine`'s store, planning Envoy descriptors as
/// `envoy` says; see the [module docs](self).
///
/// ```
/// use tollgate::{Engine, MemoryStore};
/// use tollgate_config::envoy_plan::{Modes, Planner};
/// use tollgate_server::explain::{AskedRule, EnvoyContext, ExplainRequest, explain};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = tollgate_config::parse("a.yaml", "policies:\n  api: {algorithm: sliding_log, limit: 2, window: 1m}\n")?;
/// let engine = Engine::new(MemoryStore::new());
/// let planner = Planner::default();
/// let envoy = EnvoyContext { planner: &planner, modes: Modes::default() };
/// let asked = ExplainRequest::Rules(vec![AskedRule { policy: "api".into(), key: "ann".into(), cost: 1 }]);
/// let answer = explain(&limits, &engine, envoy, &asked).await?;
/// assert!(answer.allowed);
/// assert_eq!(answer.rules[0].matched, "policy");
/// assert_eq!(answer.rules[0].state.as_ref().map(|s| s.remaining), Some(2));
/// // Nothing was spent: asking again gives the same answer.
/// let again = explain(&limits, &engine, envoy, &asked).await?;
/// assert_eq!(again.rules[0].state.as_ref().map(|s| s.remaining), Some(2));
/// # Ok(())
/// # }
/// ```
pub async fn explain<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    envoy: EnvoyContext<'_>,
    request: &ExplainRequest,
) -> Result<Explanation, ExplainError> {
    match request {
        ExplainRequest::Rules(asked) => explain_rules(limits, engine, asked).await,
        ExplainRequest::Envoy { domain, descriptors } => {
            explain_descriptors(limits, engine, envoy, domain, descriptors).await
        }
    }
}

/// tollgate rules, asked as questions.
async fn explain_rules<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    asked: &[AskedRule],
) -> Result<Explanation, ExplainError> {
    if asked.is_empty() {
        return Err(ExplainError::Empty("rules must not be empty"));
    }
    let mut named = Vec::with_capacity(asked.len());
    for (i, rule) in asked.iter().enumerate() {
        let found = limits
            .policy(&rule.policy)
            .ok_or_else(|| ExplainError::UnknownPolicy {
                at: if asked.len() > 1 {
                    format!("rules[{i}]: ")
                } else {
                    String::new()
                },
                policy: rule.policy.clone(),
            })?;
        named.push(found);
    }
    let questions: Vec<Rule<'_>> = asked
        .iter()
        .zip(&named)
        .map(|(rule, named)| {
            let question = Rule::new(named.policy(), &rule.key, rule.cost).as_question();
            if named.shadow() {
                question.as_shadow()
            } else {
                question
            }
        })
        .collect();
    let verdict = engine.peek_all(&questions).await?;
    let mut rules = Vec::with_capacity(asked.len());
    for ((rule, named), result) in asked.iter().zip(&named).zip(verdict.rules()) {
        let mut explained = unexplained(None, "policy", vec![], rule.cost);
        explained.shadow = named.shadow();
        let d = &result.decision;
        let standing = Standing {
            remaining: d.remaining,
            reset_after: d.reset_after,
        };
        budget(
            engine,
            &mut explained,
            named.policy(),
            &rule.key,
            result,
            standing,
        )
        .await?;
        rules.push(explained);
    }
    Ok(Explanation {
        allowed: verdict.allowed(),
        outcome: verdict.outcome().as_str(),
        degraded: verdict.degraded(),
        rules,
    })
}

/// An Envoy descriptor set, planned as the gRPC door plans it and looked at with `peek_all`.
async fn explain_descriptors<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    envoy: EnvoyContext<'_>,
    domain: &str,
    descriptors: &[Asked],
) -> Result<Explanation, ExplainError> {
    if !limits.has_domain(domain) {
        return Err(ExplainError::UnknownDomain(domain.to_owned()));
    }
    if descriptors.is_empty() {
        return Err(ExplainError::Empty("descriptors must not be empty"));
    }
    let plan = envoy
        .planner
        .plan(limits, envoy.modes, domain, descriptors.to_vec())?;
    let rules = plan.rules();
    let verdict = match rules.is_empty() {
        true => None,
        false => Some(engine.peek_all(&rules).await?),
    };
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let answer = plan.answer(verdict.as_ref(), false, since_epoch);
    let mut explained = Vec::with_capacity(descriptors.len());
    for (i, (asked, d)) in descriptors.iter().zip(&answer.descriptors).enumerate() {
        explained.push(explain_descriptor(limits, engine, domain, i, asked, d).await?);
    }
    Ok(Explanation {
        allowed: !answer.over && answer.outcome.allows(),
        outcome: answer.outcome.as_str(),
        degraded: verdict.as_ref().is_some_and(tollgate::Verdict::degraded),
        rules: explained,
    })
}

/// One descriptor of a planned answer.
async fn explain_descriptor<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    domain: &str,
    index: usize,
    asked: &Asked,
    d: &DescriptorAnswer<'_>,
) -> Result<ExplainedRule, ExplainError> {
    let (entries, last) = match d.kind {
        Kind::LimitOverride => (vec![], "limit_override"),
        _ => {
            let matches = limits.explain_entries(domain, &asked.entries);
            let last = matches.last().map_or("no_match", EntryMatch::as_str);
            (explained_entries(&asked.entries, &matches), last)
        }
    };
    let (matched, decision) = match d.kind {
        Kind::NoMatch => ("no_match", "no_match"),
        Kind::Replaced => ("replaced", "no_match"),
        Kind::Unlimited => ("unlimited", "unlimited"),
        Kind::DenyAll => ("deny_all", "deny_all"),
        _ => (last, d.refusal.map_or("allowed", Outcome::as_str)),
    };
    let mut rule = unexplained(Some(index), matched, entries, asked.cost);
    rule.decision = decision;
    rule.shadow = d.shadow;
    rule.policy = d.policy_name.map(str::to_owned);
    rule.key = d.key.map(str::to_owned);
    if d.kind == Kind::DenyAll {
        rule.retry_after_ms = d.current_limit.map(|limit| millis_up(limit.unit.length()));
    }
    if let (Some(policy), Some(key), Some(result), Some(standing)) = (d.policy, d.key, &d.verdict, d.standing)
    {
        let decision = &result.decision;
        // The reset of a budget untouched by this request: none when it is whole; else the
        // decision's, an upper bound.
        let reset_after = if standing >= decision.limit {
            Duration::ZERO
        } else {
            decision.reset_after
        };
        let standing = Standing {
            remaining: standing,
            reset_after,
        };
        budget(engine, &mut rule, policy, key, result, standing).await?;
    }
    Ok(rule)
}

/// A budget as it stands before the request.
struct Standing {
    remaining: u64,
    reset_after: Duration,
}

/// Fills in what the store says of a limited rule: the override in force, its parameters, the
/// budget as it stands, the penalty left and the decision.
async fn budget<S: Store + OverrideStore>(
    engine: &Engine<S>,
    rule: &mut ExplainedRule,
    policy: &Policy,
    key: &str,
    result: &RuleVerdict,
    standing: Standing,
) -> Result<(), ExplainError> {
    let penalty = match policy.block_for() {
        Some(_) => engine.store().penalty_left(policy, key.as_bytes()).await?,
        None => None,
    };
    let found: Option<Override> = engine.store().override_for(policy, key.as_bytes()).await?;
    let in_force = found
        .as_ref()
        .filter(|o| o.algorithm.name() == policy.algorithm().name())
        .map_or_else(|| policy.algorithm().clone(), |o| o.algorithm.clone());
    let d = &result.decision;
    rule.policy = Some(policy.name().to_owned());
    rule.key = Some(key.to_owned());
    rule.r#override = found.as_ref().map(|o| override_answer(policy, o));
    rule.algorithm = Some(in_force.name());
    rule.parameters = Some(parameters(&in_force));
    rule.state = Some(BudgetState {
        limit: d.limit,
        remaining: standing.remaining,
        used: d.limit.saturating_sub(standing.remaining),
        reset_after_ms: millis_up(standing.reset_after),
        penalty_left_ms: penalty.map(millis_up),
    });
    rule.decision = result.outcome.as_str();
    rule.retry_after_ms = d.retry_after.filter(|_| !d.allowed).map(millis_up);
    Ok(())
}

fn unexplained(
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
        state: None,
        decision: "no_match",
        retry_after_ms: None,
    }
}

fn explained_entries(entries: &[(String, String)], matches: &[EntryMatch]) -> Vec<ExplainedEntry> {
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

/// Reads a descriptor written `key=value,key=value` (the CLI's `--descriptor`, the query's
/// `descriptor`): entries split at `,`, each at its first `=`.
///
/// ```
/// use tollgate_server::explain::parse_descriptor;
///
/// assert_eq!(
///     parse_descriptor("path=/login,method=POST")?,
///     [("path".to_owned(), "/login".to_owned()), ("method".to_owned(), "POST".to_owned())]
/// );
/// assert!(parse_descriptor("path").is_err());
/// # Ok::<(), String>(())
/// ```
pub fn parse_descriptor(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(|entry| {
            entry
                .split_once('=')
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .ok_or_else(|| format!("expected `key=value`, got `{entry}`"))
        })
        .collect()
}

/// `tollgate explain`: loads the config at `config`, opens the store at `store` (the memory
/// store, empty, when `None`: the answer then shows matching and parameters on a fresh budget)
/// and explains `request`.
///
/// `modes` are the Envoy modes the server runs with (upstream's `SHADOW_MODE`, `QUOTA_MODE`), so
/// a descriptor set is explained as that server would answer it.
pub async fn run_cli(
    config: &std::path::Path,
    store: Option<&str>,
    options: &crate::runtime::store::StoreOptions,
    modes: Modes,
    request: &ExplainRequest,
) -> anyhow::Result<Explanation> {
    let limits = tollgate_config::load(config)?;
    let store = crate::runtime::store::AnyStore::open(store, options).await?;
    let engine = Engine::new(store);
    let planner = Planner::default();
    let envoy = EnvoyContext {
        planner: &planner,
        modes,
    };
    Ok(explain(&limits, &engine, envoy, request).await?)
}

// The HTTP door: `GET /v1/explain` with the input in the query, `POST /v1/explain` with it in a
// JSON body.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::routing::get;
use serde::Deserialize;

use tollgate_config::Unit;
use tollgate_config::envoy_plan::{LimitOverride, OverrideError};

use crate::api::error::ApiError;
use crate::runtime::SharedState;

/// The explain routes, merged into [`crate::api::router`].
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
                   holding `,` needs `POST`).",
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
    answer(&state, body).await
}

#[utoipa::path(
    post,
    path = "/v1/explain",
    tag = "decisions",
    summary = "Explain a check (JSON body)",
    description = "The same as `GET /v1/explain`, with the input as JSON: `rules` (as `POST \
                   /v1/check`), or `policy` and `key`, or `domain` and `descriptors`; each with \
                   an optional `cost`. Spends nothing.",
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
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Explanation>, ApiError> {
    let bytes = crate::api::body::body_bytes(body)?;
    let body: ExplainBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    answer(&state, body).await
}

async fn answer(state: &SharedState, body: ExplainBody) -> Result<Json<Explanation>, ApiError> {
    let request = body.into_request(state)?;
    let limits = state.limits.load_full();
    let envoy = EnvoyContext {
        planner: &state.planner,
        modes: state.settings.envoy.modes(),
    };
    Ok(Json(explain(&limits, &state.engine, envoy, &request).await?))
}

/// The examples of `docs/explain.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/explain.md")]
struct ExplainDoc;
