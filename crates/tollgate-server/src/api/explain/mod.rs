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
//! A concurrency policy (asked on its own, with cost 1) is explained by the key's live leases,
//! read without taking a slot ([`ConcurrencyStore::in_flight`]): `limit` is `max_in_flight`,
//! `used` the leases in flight, `reset_after_ms` the time until the last one expires, and the
//! decision whether an acquisition would get a slot now (`retry_after_ms`: until the oldest lease
//! expires).
//!
//! An Envoy descriptor set is planned by the same planner as `ShouldRateLimit` and `POST /json`
//! ([`tollgate_config::envoy_plan`]), with the server's global modes (shadow, quota, upstream's
//! counting), and run as the gRPC door runs it, its checks as peeks ([`Plan::looking`](tollgate_config::envoy_plan::Plan::looking)): the
//! answer is the one the gRPC door would give now, allow and deny lists included. tollgate rules are asked as
//! questions ([`Rule::as_question`]) in one `peek_all`. Either way the store decides as the
//! check would (overrides included) and records nothing, on every store. Explain is read only:
//! nothing is spent, no penalty starts, no override is loaded into a cache it was not already
//! in.
//!
//! Overrides and allow and deny lists are an operator's, and they name keys, so a caller
//! without the admin token ([`Audience::Public`]) is shown neither: no override (the algorithm
//! and parameters are the policy's own), and a decision taken as if no list applied
//! ([`Engine::peek_all_unlisted`]); [`Explanation::hidden`] says what was left out.

use std::time::Duration;

use tollgate::concurrency::{ConcurrencyPolicy, ConcurrencyStore};
use tollgate::overrides::{Override, OverrideStore};
use tollgate::{Engine, Error, Outcome, Policy, Rule, RuleVerdict, Store};
use tollgate_config::Limits;
use tollgate_config::envoy_plan::{Asked, DescriptorAnswer, Kind, Modes, PlanError, Planner};
use tollgate_config::limits::EntryMatch;

use crate::api::override_view::{answer as override_answer, parameters};
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

/// Who an explanation is for, which decides what it may show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// An operator (the admin token, or a server without one, or the command line): everything.
    Admin,
    /// A caller without the admin token: no override and no list membership.
    Public,
}

impl Audience {
    /// What an answer for this audience leaves out, as [`Explanation::hidden`] lists it.
    fn hidden(self) -> Vec<&'static str> {
        match self {
            Audience::Admin => vec![],
            Audience::Public => vec!["overrides", "access_lists"],
        }
    }

    /// The verdict of `rules` this audience may see: with the lists for an operator, without
    /// them for the public.
    async fn peek<S: Store>(
        self,
        engine: &Engine<S>,
        rules: &[Rule<'_>],
    ) -> Result<tollgate::Verdict, Error> {
        match self {
            Audience::Admin => engine.peek_all(rules).await,
            Audience::Public => engine.peek_all_unlisted(rules).await,
        }
    }
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
    /// A concurrency policy asked beside other rules, or with a cost other than 1.
    #[error("`{policy}` is a concurrency policy: {why}")]
    Concurrency {
        /// The policy named.
        policy: String,
        /// What to ask instead.
        why: &'static str,
    },
    /// The planner refused a descriptor (a bad limit override or key).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The engine refused the input (a bad key or cost) or the store failed.
    #[error(transparent)]
    Store(#[from] Error),
}

/// Explains `request` against `limits` on `engine`'s store, planning Envoy descriptors as
/// `envoy` says, for an operator ([`Audience::Admin`]); see the [module docs](self).
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
pub async fn explain<S: Store + OverrideStore + ConcurrencyStore>(
    limits: &Limits,
    engine: &Engine<S>,
    envoy: EnvoyContext<'_>,
    request: &ExplainRequest,
) -> Result<Explanation, ExplainError> {
    explain_for(limits, engine, envoy, request, Audience::Admin).await
}

/// [`explain`] for `audience`: for [`Audience::Public`], without overrides and lists.
///
/// ```
/// use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};
/// use tollgate::{Engine, MemoryStore};
/// use tollgate_config::envoy_plan::{Modes, Planner};
/// use tollgate_server::explain::{AskedRule, Audience, EnvoyContext, ExplainRequest, explain_for};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = tollgate_config::parse("a.yaml", "policies:\n  api: {algorithm: sliding_log, limit: 2, window: 1m}\n")?;
/// let engine = Engine::new(MemoryStore::new());
/// engine.set_access_lists(AccessLists::new([AccessEntry::new(None, Listed::Deny, EntryKind::Key, "mallory")?]));
/// let planner = Planner::default();
/// let envoy = EnvoyContext { planner: &planner, modes: Modes::default() };
/// let asked = ExplainRequest::Rules(vec![AskedRule { policy: "api".into(), key: "mallory".into(), cost: 1 }]);
/// let admin = explain_for(&limits, &engine, envoy, &asked, Audience::Admin).await?;
/// assert_eq!(admin.outcome, "blocked");
/// let public = explain_for(&limits, &engine, envoy, &asked, Audience::Public).await?;
/// assert_eq!(public.outcome, "allowed");
/// assert_eq!(public.hidden, ["overrides", "access_lists"]);
/// # Ok(())
/// # }
/// ```
pub async fn explain_for<S: Store + OverrideStore + ConcurrencyStore>(
    limits: &Limits,
    engine: &Engine<S>,
    envoy: EnvoyContext<'_>,
    request: &ExplainRequest,
    audience: Audience,
) -> Result<Explanation, ExplainError> {
    match request {
        ExplainRequest::Rules(asked) => explain_rules(limits, engine, asked, audience).await,
        ExplainRequest::Envoy { domain, descriptors } => {
            explain_descriptors(limits, engine, envoy, domain, descriptors, audience).await
        }
    }
}

/// tollgate rules, asked as questions; a concurrency policy, by its leases.
async fn explain_rules<S: Store + OverrideStore + ConcurrencyStore>(
    limits: &Limits,
    engine: &Engine<S>,
    asked: &[AskedRule],
    audience: Audience,
) -> Result<Explanation, ExplainError> {
    if asked.is_empty() {
        return Err(ExplainError::Empty("rules must not be empty"));
    }
    if let [one] = asked
        && limits.policy(&one.policy).is_none()
        && let Some(policy) = limits.concurrency_policy(&one.policy)
    {
        return explain_leases(engine, policy, one).await;
    }
    let mut named = Vec::with_capacity(asked.len());
    for (i, rule) in asked.iter().enumerate() {
        // A check costs at least 1; only an Envoy descriptor asks with 0.
        if rule.cost == 0 {
            return Err(ExplainError::Store(Error::ZeroCost));
        }
        if limits.concurrency_policy(&rule.policy).is_some() {
            return Err(ExplainError::Concurrency {
                policy: rule.policy.clone(),
                why: "explain it on its own; a check never holds a lease beside rate limits",
            });
        }
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
    let verdict = audience.peek(engine, &questions).await?;
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
            audience,
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
        hidden: audience.hidden(),
    })
}

/// A concurrency policy: the key's live leases as they stand, read without taking a slot, and
/// whether an acquisition would get one now.
async fn explain_leases<S: ConcurrencyStore>(
    engine: &Engine<S>,
    policy: &ConcurrencyPolicy,
    asked: &AskedRule,
) -> Result<Explanation, ExplainError> {
    if asked.cost != 1 {
        return Err(ExplainError::Concurrency {
            policy: asked.policy.clone(),
            why: "a lease takes one slot, so the cost is 1",
        });
    }
    let seen = engine.store().in_flight(policy, asked.key.as_bytes()).await?;
    let free = seen.in_flight < seen.limit;
    let decision = if free { Outcome::Allowed } else { Outcome::Denied };
    let mut rule = unexplained(None, "policy", vec![], 1);
    rule.policy = Some(policy.name().to_owned());
    rule.key = Some(asked.key.clone());
    rule.algorithm = Some("concurrency");
    rule.parameters = Some(serde_json::json!({
        "max_in_flight": policy.max_in_flight(),
        "lease_timeout": tollgate_config::duration::format_duration(policy.lease_timeout()),
    }));
    rule.state = Some(BudgetState {
        limit: seen.limit,
        remaining: seen.limit.saturating_sub(seen.in_flight),
        used: seen.in_flight,
        reset_after_ms: seen.last_expiry.map_or(0, millis_up),
        penalty_left_ms: None,
        debt_left_ms: None,
    });
    rule.decision = decision.as_str();
    rule.retry_after_ms = seen.next_expiry.filter(|_| !free).map(millis_up);
    Ok(Explanation {
        allowed: free,
        outcome: decision.as_str(),
        degraded: false,
        rules: vec![rule],
        // Leases have no overrides nor lists: nothing is left out, whoever asks.
        hidden: vec![],
    })
}

/// An Envoy descriptor set, planned as the gRPC door plans it and run with peek ops.
async fn explain_descriptors<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    envoy: EnvoyContext<'_>,
    domain: &str,
    descriptors: &[Asked],
    audience: Audience,
) -> Result<Explanation, ExplainError> {
    if !limits.has_domain(domain) {
        return Err(ExplainError::UnknownDomain(domain.to_owned()));
    }
    if descriptors.is_empty() {
        return Err(ExplainError::Empty("descriptors must not be empty"));
    }
    let plan = envoy
        .planner
        .plan(limits, envoy.modes, domain, descriptors.to_vec())?
        .looking();
    let request = match audience {
        Audience::Admin => plan.request(),
        Audience::Public => plan.request().unlisted(),
    };
    let settled = engine.run(&request).await?;
    let answer = plan.answer(&settled);
    let verdict = settled.peeked.as_ref();
    let mut explained = Vec::with_capacity(descriptors.len());
    for (i, (asked, d)) in descriptors.iter().zip(&answer.descriptors).enumerate() {
        explained.push(explain_descriptor(limits, engine, audience, domain, i, asked, d).await?);
    }
    Ok(Explanation {
        allowed: !answer.over && answer.outcome.allows(),
        outcome: answer.outcome.as_str(),
        degraded: verdict.is_some_and(tollgate::Verdict::degraded),
        rules: explained,
        hidden: audience.hidden(),
    })
}

/// One descriptor of a planned answer.
async fn explain_descriptor<S: Store + OverrideStore>(
    limits: &Limits,
    engine: &Engine<S>,
    audience: Audience,
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
    // A descriptor no limit applies to, blocked by a global deny list.
    let decision = match d.refusal {
        Some(Outcome::Blocked) => Outcome::Blocked.as_str(),
        _ => decision,
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
        budget(engine, audience, &mut rule, policy, key, result, standing).await?;
    }
    Ok(rule)
}

/// A budget as it stands before the request.
struct Standing {
    remaining: u64,
    reset_after: Duration,
}

/// Fills in what the store says of a limited rule: the override in force (for an operator), its
/// parameters, the budget as it stands, the penalty left and the decision.
async fn budget<S: Store + OverrideStore>(
    engine: &Engine<S>,
    audience: Audience,
    rule: &mut ExplainedRule,
    policy: &Policy,
    key: &str,
    result: &RuleVerdict,
    mut standing: Standing,
) -> Result<(), ExplainError> {
    let penalty = match policy.block_for() {
        Some(_) => engine.store().penalty_left(policy, key.as_bytes()).await?,
        None => None,
    };
    // Past its limit: a question of cost 0 is refused only for a key in debt (or blocked, which
    // the penalty already says); its `remaining` is the budget as it stands.
    let past = Rule::new(policy, key, 0).as_question();
    let mut limit = result.decision.limit;
    let past = if result.outcome == Outcome::Blocked {
        // A deny-listed rule was never put to the store (the engine blocks it first), so its
        // budget is read past the lists: it shows what the key spent
        // (nothing, for a fresh key). It is blocked by the list, not by spending.
        let asked = engine.peek_all_unlisted(&[past]).await?;
        let stands = asked.rules().first().map(|r| r.decision).unwrap_or_default();
        limit = stands.limit;
        standing = Standing {
            remaining: stands.remaining,
            reset_after: if stands.remaining >= stands.limit {
                Duration::ZERO
            } else {
                stands.reset_after
            },
        };
        Some(stands)
    } else if penalty.is_none() {
        let asked = audience.peek(engine, &[past]).await?;
        asked.rules().first().map(|r| r.decision)
    } else {
        None
    };
    let debt_left = match penalty {
        Some(_) => None,
        None => past.filter(|d| !d.allowed).and_then(|d| d.retry_after),
    };
    // The public is not told of an override: it names keys, and it is an operator's.
    let found: Option<Override> = match audience {
        Audience::Admin => engine.store().override_for(policy, key.as_bytes()).await?,
        Audience::Public => None,
    };
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
    rule.fingerprint = Some(in_force.fingerprint().to_string());
    rule.state = Some(BudgetState {
        limit,
        remaining: standing.remaining,
        used: limit.saturating_sub(standing.remaining),
        reset_after_ms: millis_up(standing.reset_after),
        penalty_left_ms: penalty.map(millis_up),
        debt_left_ms: debt_left.map(millis_up),
    });
    rule.decision = result.outcome.as_str();
    rule.retry_after_ms = d.retry_after.filter(|_| !d.allowed).map(millis_up);
    Ok(())
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
/// `settings` are those the server runs with (its Envoy modes, such as upstream's
/// `SHADOW_MODE`, and how it reads config files), so a request is explained as that server
/// would answer it.
pub async fn run_cli(
    config: &std::path::Path,
    store: Option<&str>,
    options: &crate::runtime::store::StoreOptions,
    settings: &crate::Settings,
    request: &ExplainRequest,
) -> anyhow::Result<Explanation> {
    let limits = tollgate_config::load_with(config, &settings.load)?;
    let modes = settings.envoy.modes();
    let store = crate::runtime::store::AnyStore::open(store, options).await?;
    let engine = Engine::new(store);
    let planner = Planner::default();
    let envoy = EnvoyContext {
        planner: &planner,
        modes,
    };
    Ok(explain(&limits, &engine, envoy, request).await?)
}

mod explanation;
pub(crate) mod routes;

pub use explanation::{BudgetState, ExplainedEntry, ExplainedRule, Explanation};
use explanation::{explained_entries, unexplained};

pub(crate) use routes::routes;

/// The examples of `docs/explain.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../../../docs/explain.md")]
struct ExplainDoc;
