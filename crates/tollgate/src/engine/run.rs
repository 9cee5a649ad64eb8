//! [`Engine::run`]: one request, whatever it mixes, in one call and one fixed order.
//!
//! The steps are listed on the method.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::request::{Done, Op, Request, Settled};
use super::{Engine, Lists, validate};
use crate::store::{self, Store};
use crate::{FailureMode, Outcome, PerRule, Rule};

impl<S: Store> Engine<S> {
    /// Runs every op of `request` in one call, in this order whatever the ops' order:
    ///
    /// 1. Every op is validated first: bad input refuses the whole request before anything is
    ///    recorded.
    /// 2. Listed keys ([`Op::Listed`]) are looked up in the global deny list: one there blocks the
    ///    request, whose checks are then only looked at.
    /// 3. The checks and counts are decided together, all or nothing ([`Engine::check_all`]); the
    ///    peeks are looked at ([`Engine::peek_all`]).
    /// 4. The charges are recorded in one call ([`Engine::charge_all`]), or looked at when the
    ///    request holds them back and was not admitted (a listed key blocked it, its checks
    ///    refused it, or it had only peeks); each says whether it was recorded anywhere.
    /// 5. Each refund is made.
    /// 6. Counts the store refused are charged their cost, in one call, unless the request failed
    ///    closed or spent nothing.
    ///
    /// The failure modes apply at each step, as in the calls named. The request's time is read
    /// from the engine's clock, so a door on a manual clock (`tollgate test`, replay) places
    /// deny-all resets in virtual time too.
    ///
    /// `Err` only for bad input; a failing store is answered by the failure modes (and a
    /// refund's failure is its [`Done::Refunded`] answer).
    pub async fn run(&self, request: &Request<'_>) -> Result<Settled, crate::Error> {
        for op in &request.ops {
            match op {
                Op::Check(rule) | Op::Count(rule) | Op::Peek(rule) => validate(rule)?,
                Op::Charge(rule) => store::validate_charge(rule)?,
                Op::Refund(rule) => store::validate_check(rule.policy, rule.key, rule.cost)?,
                Op::Listed(_) => {}
            }
        }
        let lists = if request.unlisted {
            Lists::Ignored
        } else {
            Lists::Applied
        };
        if let [Op::Check(rule)] = request.ops.as_slice() {
            // The road of most requests: one check, nothing else to run.
            let verdict = self.decide_valid(std::slice::from_ref(rule), true, lists).await?;
            return Ok(Settled {
                verdict: Some(verdict),
                spent: true,
                peeked: None,
                ops: PerRule::One(Done::Checked(0)),
                blocked: false,
                charge_error: None,
                now: Duration::from_micros(self.clock.now_us()),
            });
        }
        let denied = self.listed(request, lists);
        let blocked = denied.contains(&true);
        let checks = rules_of(request, Op::checks);
        let peeks = rules_of(request, |op| matches!(op, Op::Peek(_)));
        let spend = !blocked;
        let verdict = match checks.is_empty() {
            true => None,
            false => Some(self.decide_valid(&checks, spend, lists).await?),
        };
        let peeked = match peeks.is_empty() {
            true => None,
            false => Some(self.decide_valid(&peeks, false, lists).await?),
        };
        // Admitted only by checks that allow: a request of peeks only decided nothing.
        let refused = blocked
            || match &verdict {
                Some(verdict) => !verdict.allowed(),
                None => peeked.is_some(),
            };
        let hold = request.hold_charges && refused;
        let charged = self.charges(request, hold).await?;
        let mut charge_error = charged.error;
        let mut charges = charged.done.into_iter();
        let mut denied = denied.into_iter();
        let (mut checked, mut looked) = (0, 0);
        let mut ops = Vec::with_capacity(request.ops.len());
        for op in &request.ops {
            ops.push(match op {
                Op::Check(_) | Op::Count(_) => {
                    checked += 1;
                    Done::Checked(checked - 1)
                }
                Op::Peek(_) => {
                    looked += 1;
                    Done::Peeked(looked - 1)
                }
                Op::Charge(_) => charges.next().expect("one answer per charge"),
                Op::Refund(rule) => Done::Refunded(self.refund(rule.policy, rule.key, rule.cost).await),
                Op::Listed(_) => Done::Listed {
                    denied: denied.next().unwrap_or(false),
                },
            });
        }
        if spend && let Some(verdict) = &verdict {
            let over = over_counted(request, &checks, verdict);
            if !over.is_empty() && verdict.outcome() != Outcome::Error {
                let counted = self.charge_all(&over).await?;
                charge_error = charge_error.or(counted.store_error);
            }
        }
        Ok(Settled {
            verdict,
            spent: spend,
            peeked,
            ops: PerRule::from(ops),
            blocked,
            charge_error,
            now: Duration::from_micros(self.clock.now_us()),
        })
    }

    /// Per listed key, in order: whether a global deny list holds it.
    fn listed(&self, request: &Request<'_>, lists: Lists) -> Vec<bool> {
        let keys = request.ops.iter().filter_map(|op| match op {
            Op::Listed(key) => Some(*key),
            _ => None,
        });
        if lists == Lists::Ignored || !self.listing.load(Ordering::Acquire) {
            return keys.map(|_| false).collect();
        }
        let access = self.access.read();
        keys.map(|key| access.global_deny(key).is_some()).collect()
    }

    /// The charges' answers, in order: recorded in one call, or (`hold`) looked at as checks of
    /// cost 1.
    async fn charges(&self, request: &Request<'_>, hold: bool) -> Result<Charged, crate::Error> {
        let rules = rules_of(request, |op| matches!(op, Op::Charge(_)));
        if rules.is_empty() {
            return Ok(Charged::default());
        }
        if hold {
            let asked: Vec<Rule<'_>> = rules.iter().map(|r| Rule::new(r.policy, r.key, 1)).collect();
            let looked = self.decide_valid(&asked, false, Lists::Ignored).await?;
            return Ok(Charged {
                done: looked.rules().iter().map(|r| Done::Held(r.decision)).collect(),
                error: None,
            });
        }
        let charges = self.charge_all(&rules).await?;
        let local = |rule: &Rule<'_>| matches!(rule.policy.failure_mode(), FailureMode::Local { .. });
        // The `Local` limiter takes all of a request's local charges or none of them.
        let local_recorded = charges.unrecorded == rules.iter().filter(|r| !local(r)).count();
        let failed = charges.store_error.is_some();
        let done = rules
            .iter()
            .zip(charges.rules.as_slice())
            .map(|(rule, &charged)| Done::Charged {
                charged,
                recorded: !failed || (local(rule) && local_recorded),
            })
            .collect();
        Ok(Charged {
            done,
            error: charges.store_error,
        })
    }
}

/// The charges of a request, answered.
#[derive(Default)]
struct Charged {
    done: Vec<Done>,
    error: Option<crate::Error>,
}

/// The rules of the ops `pick` picks, in order.
fn rules_of<'a>(request: &Request<'a>, pick: impl Fn(&Op<'a>) -> bool) -> Vec<Rule<'a>> {
    request
        .ops
        .iter()
        .filter(|op| pick(op))
        .filter_map(|op| op.rule().copied())
        .collect()
}

/// The counts the store refused, to be charged their cost: not listed, not a question.
fn over_counted<'a>(request: &Request<'a>, checks: &[Rule<'a>], verdict: &crate::Verdict) -> Vec<Rule<'a>> {
    request
        .ops
        .iter()
        .filter(|op| op.checks())
        .zip(checks.iter().zip(verdict.rules()))
        .filter(|(op, (rule, r))| {
            matches!(op, Op::Count(_)) && !r.decision.allowed && r.listed.is_none() && rule.cost > 0
        })
        .map(|(_, (rule, _))| Rule::new(rule.policy, rule.key, rule.cost))
        .collect()
}
