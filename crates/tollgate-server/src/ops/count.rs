//! Counting what was decided: the one place every door reports a [`Verdict`] to, so that
//! `tollgate_decisions_total`, the dashboard's tally and its most denied keys cannot disagree
//! about what happened.
//!
//! A door calls [`verdict`] with the rules it asked the engine about and the engine's answer,
//! after a committed check (a peek decides nothing and is not counted). The HTTP API and the
//! proxy (through the tower layer's verdict hook) call it directly; the Envoy door still counts
//! its descriptors one by one with `decision`, `extras`, `denied_key` and `degraded`,
//! the pieces [`verdict`] is made of.
//!
//! Outcome labels are [`Outcome::as_str`], the same bounded set at every door.
//!
//! What a request asked and what it was answered also goes to the decision log, when one is
//! on ([`decision_log`]), from the same call: [`settled`] takes the door ([`Through`]) with
//! the request and what the engine settled, once per request, so that checks, charges and
//! refunds reach the log alike; the proxy, whose tower layer decides its checks, logs through
//! [`answered`]. A door passes what it was asked; whether to log, sample or hash is decided
//! there, once.

use std::time::Duration;

use tollgate::{Done, Op, Outcome, Request, Rule, RuleVerdict, Settled, Verdict};
use tollgate_tower::LogSampler;

use super::decision_log::{self, Asked, Door, EnvoyAsked};
use super::metrics;
use super::recorder::RECORDER;

/// The door that ran a request, for the decision log.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Through<'a> {
    /// A rules door (`POST /v1/check` and its peeks, `POST /v1/charge`, `POST /v1/refund`):
    /// the request's ops are all it asked.
    Rules(Door),
    /// An Envoy door (gRPC, `POST /json`): the request as it came, and its overall answer.
    Envoy(Door, EnvoyAsked<'a>),
    /// No door: the library's own calls (the Envoy handler's `answer`, replay), counted and
    /// never logged.
    Unlogged,
}

/// The proxy's checks, decided by its tower layer, were answered `outcome`: one line in the
/// decision log, when one is on and samples the request's keys. When the log is off this is
/// one lock-free load.
pub fn answered(door: Door, rules: &[Rule<'_>], outcome: Outcome) {
    decision_log::record(door, Asked::Checks(rules, outcome));
}

/// Records everything one [`Engine::run`](tollgate::Engine::run) did for `request`: the checks'
/// verdict when it spent ([`verdict`]), each charge (`tollgate_charges_total`, and the ones
/// recorded nowhere), each refund made, and every store failure met (a peek's included); and
/// the request and its answers in the decision log, when one is on (see [`Through`]).
pub fn settled(through: Through<'_>, request: &Request<'_>, settled: &Settled) {
    if let Some(checked) = &settled.verdict {
        let rules: Vec<Rule<'_>> = request
            .ops()
            .iter()
            .filter(|op| matches!(op, Op::Check(_) | Op::Count(_)))
            .filter_map(|op| op.rule().copied())
            .collect();
        match settled.spent {
            true => verdict(&rules, checked),
            false => checked.store_error().into_iter().for_each(metrics::store_error),
        }
    }
    if let Some(err) = settled.peeked.as_ref().and_then(Verdict::store_error) {
        metrics::store_error(err);
    }
    if let Some(err) = &settled.charge_error {
        metrics::store_error(err);
    }
    for (op, done) in request.ops().iter().zip(&settled.ops) {
        match (op, done) {
            (Op::Charge(rule), Done::Charged { recorded, .. }) => {
                metrics::charge(rule.policy.name(), rule.cost, *recorded);
            }
            (Op::Refund(rule), Done::Refunded(Ok(_))) => metrics::refund(rule.policy.name(), rule.cost),
            (Op::Refund(_), Done::Refunded(Err(err))) => metrics::store_error(err),
            _ => {}
        }
    }
    let envoy = match through {
        Through::Rules(door) => (door, None),
        Through::Envoy(door, envoy) => (door, Some(envoy)),
        Through::Unlogged => return,
    };
    decision_log::record(
        envoy.0,
        Asked::Run {
            request,
            settled,
            envoy: envoy.1,
        },
    );
}

/// Records what the engine decided for `rules` (a committed check, not a peek): each rule's
/// outcome under its policy, the rules a failure mode decided, the denied keys, and the store
/// failure if any.
///
/// In a request that spent nothing, a rule that would have allowed decided nothing, so it is
/// not counted; denials, would-be (shadow) denials and errors are. (Rules decided apart spend
/// on their own: a request they deny has still spent on the others, which are counted.)
pub fn verdict(rules: &[Rule<'_>], verdict: &Verdict) {
    let refused = !verdict.spends();
    if let Some((at, entry)) = verdict.blocked_by()
        && BLOCKED_LOG.due()
    {
        let policy = rules.get(at).map_or("", |r| r.policy.name());
        tracing::info!(policy, entry = %entry, "deny list blocked a request (sampled: at most one line a second)");
    }
    for (rule, result) in rules.iter().zip(verdict.rules()) {
        extras(rule, result);
        if refused && matches!(result.outcome, Outcome::Allowed | Outcome::Degraded) {
            continue;
        }
        decision(rule.policy.name(), result.outcome);
        if result.outcome == Outcome::Denied {
            denied_key(rule.policy.name(), rule.key);
        }
        if result.outcome == Outcome::ShadowDenied && SHADOW_LOG.due() {
            tracing::info!(
                policy = rule.policy.name(),
                "shadow rule would have denied (sampled: at most one line a second)"
            );
        }
        if result.decision.degraded {
            degraded(rule.policy.name());
            if DEGRADED_LOG.due() {
                tracing::warn!(
                    policy = rule.policy.name(),
                    outcome = result.outcome.as_str(),
                    "failure mode decided without the store (sampled: at most one line a second)"
                );
            }
        }
    }
    if let Some(err) = verdict.store_error() {
        metrics::store_error(err);
    }
}

/// One rule decided under `policy` with `outcome`: `tollgate_decisions_total{policy, outcome}`
/// and the dashboard's tally of the same.
pub(crate) fn decision(policy: &str, outcome: Outcome) {
    ::metrics::counter!("tollgate_decisions_total", "policy" => policy.to_owned(), "outcome" => outcome.as_str())
        .increment(1);
    RECORDER.decision(policy, outcome);
}

/// `key` was denied by `policy` (an enforced denial): the dashboard's most denied keys, which
/// the admin API's top offenders and the `tollgate_top_offender_denials` gauge read.
pub(crate) fn denied_key(policy: &str, key: &[u8]) {
    RECORDER.denied_key(policy, key);
}

/// What a rule's verdict says beyond its outcome, at every door: an allow or deny list match
/// (`tollgate_access_list_matches_total{policy, list}`), and for a gradually enforced policy
/// which part the key is in (`tollgate_gradual_checks_total{policy, part}`) and whether it
/// would have been denied (`tollgate_gradual_would_deny_total{policy, part}`), `part` being
/// `enforced` or `shadow`.
pub(crate) fn extras(rule: &Rule<'_>, result: &RuleVerdict) {
    if let Some(list) = result.listed {
        ::metrics::counter!("tollgate_access_list_matches_total", "policy" => rule.policy.name().to_owned(), "list" => list.as_str())
            .increment(1);
    }
    if rule.policy.enforcement().is_some() {
        let part = if result.shadow { "shadow" } else { "enforced" };
        let policy = rule.policy.name().to_owned();
        ::metrics::counter!("tollgate_gradual_checks_total", "policy" => policy.clone(), "part" => part)
            .increment(1);
        if matches!(result.outcome, Outcome::Denied | Outcome::ShadowDenied) {
            ::metrics::counter!("tollgate_gradual_would_deny_total", "policy" => policy, "part" => part)
                .increment(1);
        }
    }
}

/// A decision a failure mode took because the store could not.
pub(crate) fn degraded(policy: &str) {
    ::metrics::counter!("tollgate_degraded_decisions_total", "policy" => policy.to_owned()).increment(1);
}

static BLOCKED_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
static SHADOW_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
static DEGRADED_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
