//! Failure modes: what a request or a concurrency acquisition gets when the store cannot decide.
//! Applied here, once, for every store and every class of failure; see the [engine docs](super)
//! for the rules.

use std::sync::Arc;
use std::time::Duration;

use super::verdict::{Outcome, RuleVerdict};
use crate::concurrency::{Acquire, ConcurrencyPolicy, Full, Lease, LeaseId, LeaseIds, Release};
use crate::{Charged, Clock, Decision, FailureMode, MemoryStore, PerRule, Policy, Rule};

/// How long a client refused by `FailClosed` is told to wait: the store is expected back within
/// about this long (a circuit breaker probes it at this pace or faster).
pub(crate) const FAIL_CLOSED_RETRY: Duration = Duration::from_secs(1);

/// Every rule's verdict when the store failed, as its policy's failure mode says.
pub(crate) fn decide(
    fallback: &MemoryStore<Arc<dyn Clock>>,
    rules: &[Rule<'_>],
    commit: bool,
) -> Vec<RuleVerdict> {
    let closed = rules
        .iter()
        .any(|r| !r.shadow && r.policy.failure_mode() == FailureMode::FailClosed);
    let mut verdicts: Vec<RuleVerdict> = rules
        .iter()
        .map(|rule| match rule.policy.failure_mode() {
            FailureMode::FailClosed if !rule.shadow => RuleVerdict {
                decision: refused(rule.policy),
                outcome: Outcome::Error,
                shadow: false,
                listed: None,
            },
            _ => RuleVerdict {
                decision: admitted(rule),
                outcome: Outcome::Degraded,
                shadow: rule.never_denies(),
                listed: None,
            },
        })
        .collect();

    let local: Vec<(usize, Policy)> = rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| match rule.policy.failure_mode() {
            FailureMode::Local { instances } => Some((i, rule.policy.local_share(instances))),
            _ => None,
        })
        .collect();
    if local.is_empty() {
        return verdicts;
    }
    let local_rules: Vec<Rule<'_>> = local
        .iter()
        .map(|(i, share)| Rule {
            policy: share,
            ..rules[*i]
        })
        .collect();
    // A closed rule refuses the request: the local limiter is only asked, never charged.
    if let Ok(decisions) = fallback.decide(&local_rules, commit && !closed) {
        for ((i, _), decision) in local.iter().zip(decisions.as_slice()) {
            let decision = Decision {
                degraded: true,
                ..*decision
            };
            verdicts[*i].decision = decision;
            verdicts[*i].outcome = if decision.allowed {
                Outcome::Degraded
            } else {
                super::denial(&rules[*i])
            };
        }
    }
    verdicts
}

/// Every rule's answer to a charge when the store failed, and how many were recorded nowhere:
/// `Local` rules are charged to `fallback` on their policy's local share (together, in one
/// call); the others cannot be recorded, and answer what a check would get under their failure
/// mode. Every answer is `degraded`.
pub(crate) fn charge(
    fallback: &MemoryStore<Arc<dyn Clock>>,
    rules: &[Rule<'_>],
) -> (PerRule<Charged>, usize) {
    let mut charged: PerRule<Charged> = rules
        .iter()
        .map(|rule| Charged {
            decision: match rule.policy.failure_mode() {
                FailureMode::FailClosed => refused(rule.policy),
                _ => admitted(&Rule::new(rule.policy, rule.key, 1)),
            },
            debt: 0,
        })
        .collect();
    let local: Vec<(usize, Policy)> = rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| match rule.policy.failure_mode() {
            FailureMode::Local { instances } => Some((i, rule.policy.local_share(instances))),
            _ => None,
        })
        .collect();
    let mut recorded = 0;
    if !local.is_empty() {
        let local_rules: Vec<Rule<'_>> = local
            .iter()
            .map(|(i, share)| Rule::new(share, rules[*i].key, rules[*i].cost))
            .collect();
        if let Ok(answers) = fallback.charge(&local_rules) {
            for ((i, _), answer) in local.iter().zip(answers) {
                charged[*i] = Charged {
                    decision: Decision {
                        degraded: true,
                        ..answer.decision
                    },
                    debt: answer.debt,
                };
            }
            recorded = local.len();
        }
    }
    (charged, rules.len() - recorded)
}

/// Admitted without the store.
fn admitted(rule: &Rule<'_>) -> Decision {
    let limit = rule.policy.max_cost();
    Decision {
        allowed: true,
        limit,
        remaining: limit.saturating_sub(rule.cost),
        reset_after: Duration::ZERO,
        retry_after: None,
        degraded: true,
    }
}

/// Refused without the store.
fn refused(policy: &Policy) -> Decision {
    Decision {
        allowed: false,
        limit: policy.max_cost(),
        remaining: 0,
        reset_after: FAIL_CLOSED_RETRY,
        retry_after: Some(FAIL_CLOSED_RETRY),
        degraded: true,
    }
}

/// The answer to an acquisition when the store failed, as the policy's failure mode says:
/// `FailOpen` grants a lease held nowhere, `FailClosed` denies, and `Local` acquires from
/// `fallback` with the policy's [`local_share`](ConcurrencyPolicy::local_share) (a full limiter
/// grants). Every answer is `degraded`.
pub(crate) fn acquire(
    fallback: &MemoryStore<Arc<dyn Clock>>,
    policy: &ConcurrencyPolicy,
    key: &[u8],
) -> Acquire {
    match policy.failure_mode() {
        FailureMode::FailOpen => granted(policy, fallback.lease_ids()),
        FailureMode::FailClosed => Acquire::Denied(Full {
            in_flight: 0,
            limit: policy.max_in_flight(),
            retry_after: FAIL_CLOSED_RETRY,
            degraded: true,
        }),
        FailureMode::Local { instances } => match fallback.acquire(&policy.local_share(instances), key) {
            Ok(acquire) => degraded(acquire),
            // Full of live leases: let it through, as a full limiter does for checks.
            Err(_) => granted(policy, fallback.lease_ids()),
        },
    }
}

/// Frees `lease` in `fallback` if the `Local` failure mode granted it there while the store was
/// away; `None` when it was not held there (it is the store's).
pub(crate) fn release(
    fallback: &MemoryStore<Arc<dyn Clock>>,
    policy: &ConcurrencyPolicy,
    key: &[u8],
    lease: LeaseId,
) -> Option<Release> {
    let FailureMode::Local { instances } = policy.failure_mode() else {
        return None;
    };
    match fallback.release(&policy.local_share(instances), key, lease) {
        Ok(released @ Release::Released { .. }) => Some(released),
        _ => None,
    }
}

/// A lease granted without the store, held nowhere: its release answers `NotHeld`.
fn granted(policy: &ConcurrencyPolicy, ids: &LeaseIds) -> Acquire {
    Acquire::Granted(Lease {
        id: ids.next(),
        expires_in: policy.lease_timeout(),
        in_flight: 0,
        limit: policy.max_in_flight(),
        degraded: true,
    })
}

/// The same answer marked as decided by the failure mode.
fn degraded(acquire: Acquire) -> Acquire {
    match acquire {
        Acquire::Granted(lease) => Acquire::Granted(Lease {
            degraded: true,
            ..lease
        }),
        Acquire::Denied(full) => Acquire::Denied(Full {
            degraded: true,
            ..full
        }),
    }
}
