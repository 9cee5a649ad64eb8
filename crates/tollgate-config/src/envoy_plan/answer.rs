//! From the engine's verdict to the answer of a planned request: each descriptor's code, limit,
//! budget and reset, the request's code, and what the doors count and show.

use std::time::Duration;

use tollgate::{Charged, Done, Outcome, Policy, RuleVerdict, Settled, Verdict};

use super::{Hits, Matched, Plan, Slot};
use crate::{Metadata, Unit};

/// How a descriptor came to its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// No configured limit matched.
    NoMatch,
    /// One matched, and another descriptor's limit `replaces` it.
    Replaced,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0` (configured or overridden): every request is over.
    DenyAll,
    /// A configured limit.
    Configured,
    /// The descriptor's own limit.
    LimitOverride,
}

/// A limit as upstream reports it: `requests_per_unit` per `unit`, with its `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentLimit<'p> {
    /// The rate limit's `name`, empty when it has none.
    pub name: &'p str,
    /// What the unit admits (scaled to the unit for windows and rates that are not one).
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// Where one descriptor's hit landed, for upstream's per-stats-key counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// The descriptor's cost.
    pub cost: u64,
    /// The limit (0 for a deny-all limit).
    pub limit: u64,
    /// The count before the hit.
    pub before: u64,
    /// Whether the descriptor was over the limit.
    pub over: bool,
    /// Whether the descriptor is in its own `shadow_mode`.
    pub shadow: bool,
}

/// One descriptor's part of the answer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DescriptorAnswer<'p> {
    /// How it came to its limit.
    pub kind: Kind,
    /// Its code is `OVER_LIMIT`.
    pub over: bool,
    /// The limit it answers for; `None` without one.
    pub current_limit: Option<CurrentLimit<'p>>,
    /// Upstream's `limit_remaining`: 0 when over, `u32::MAX` when unlimited, else the budget
    /// after this request (when it spent) or as it stands.
    pub remaining: u64,
    /// Upstream's `duration_until_reset`: when the budget is whole again; `None` without a
    /// limit, and for a cost no budget admits.
    pub reset: Option<Duration>,
    /// In quota mode (its own or the global one).
    pub quota: bool,
    /// The policy its rule is decided under, with the store key.
    pub policy: Option<&'p Policy>,
    /// The key its budget is kept under.
    pub key: Option<&'p str>,
    /// The name its decisions are counted under (the policy's, or a deny-all limit's).
    pub policy_name: Option<&'p str>,
    /// What it costs; 0 asks.
    pub cost: u64,
    /// It never denies the request: its own `shadow_mode`, or global shadow mode.
    pub shadow: bool,
    /// Upstream's stats key, with the hit to count under it.
    pub stats: Option<(&'p str, Hit)>,
    /// The outcome to count for a refusal decided without the store (deny-all, a cost too
    /// large); the engine's verdict counts the rest.
    pub refusal: Option<Outcome>,
    /// The limit's `metadata`, for the answer's dynamic metadata when it passes.
    pub metadata: Option<&'p Metadata>,
    /// The engine's verdict of its rule.
    pub verdict: Option<RuleVerdict>,
    /// Its budget as it stood before the request.
    pub standing: Option<u64>,
    /// For a descriptor charged or refunded: what the store said after it (a check of cost 1
    /// now), and the units owed past the limit.
    pub settled: Option<Charged>,
}

/// The answer to a planned request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Answer<'p> {
    /// The request's code is `OVER_LIMIT`.
    pub over: bool,
    /// A key is deny-listed: the request is over whatever the modes say.
    pub blocked: bool,
    /// The request was over and global shadow mode answered it `OK`.
    pub shadowed: bool,
    /// The request's outcome, in the engine's labels.
    pub outcome: Outcome,
    /// The store failed and a limit fails closed, or a refund failed: the message naming its
    /// descriptor. Doors answer `UNAVAILABLE` (or 503) instead of the rest.
    pub unavailable: Option<String>,
    /// One per descriptor, in request order.
    pub descriptors: Vec<DescriptorAnswer<'p>>,
    /// When the request was decided, since the Unix epoch, on the engine's clock: where rate
    /// limit headers place their resets.
    pub now: Duration,
}

impl Answer<'_> {
    /// The descriptor whose numbers the rate limit headers show, as upstream picks it: the last
    /// one over its limit that is not in quota mode, else the first with the least budget left
    /// among those with a limit.
    pub fn headline(&self) -> Option<&DescriptorAnswer<'_>> {
        let mut least = u64::from(u32::MAX);
        let mut chosen = None;
        for d in &self.descriptors {
            if d.current_limit.is_some() && d.remaining.min(u64::from(u32::MAX)) < least {
                chosen = Some(d);
                least = d.remaining;
            }
            if d.kind != Kind::Unlimited && !d.quota && d.over {
                chosen = Some(d);
                least = 0;
            }
        }
        chosen.filter(|d| d.current_limit.is_some())
    }
}

impl<'l> Plan<'l> {
    /// The answer from what the engine `settled` of [`request`](Self::request).
    pub fn answer(&self, settled: &Settled) -> Answer<'_> {
        let (verdict, spent) = match (&settled.verdict, &settled.peeked) {
            (Some(verdict), _) => (Some(verdict), settled.spent),
            (None, peeked) => (peeked.as_ref(), false),
        };
        let rule_of = |i: usize, of: Option<&Verdict>| of.and_then(|v| v.rules().get(i)).copied();
        let mut done = settled.ops.iter();
        let spends = spent && verdict.is_some_and(Verdict::spends);
        let given_back = !spent && verdict.is_some_and(Verdict::spends);
        let mut limited_at = Vec::new();
        let mut refund_failed = None;
        let mut listed = self.unlimited_keys.iter().peekable();
        let descriptors: Vec<DescriptorAnswer<'_>> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, slot)| match slot {
                Slot::Limited { matched, policy } if matched.hits != Hits::Checked => {
                    let charged = match (self.looking, done.next()) {
                        (true, _) | (false, None) => None,
                        (false, Some(done)) => match done {
                            Done::Charged { charged, .. } => Some(*charged),
                            Done::Held(decision) | Done::Refunded(Ok(decision)) => Some(Charged {
                                decision: *decision,
                                debt: 0,
                            }),
                            Done::Refunded(Err(err)) => {
                                refund_failed.get_or_insert_with(|| {
                                    format!("descriptors[{i}]: a refund failed: {err}")
                                });
                                None
                            }
                            _ => None,
                        },
                    };
                    self.settled(matched, policy, charged)
                }
                Slot::Limited { matched, policy } => {
                    limited_at.push(i);
                    let verdict = match done.next() {
                        Some(Done::Checked(at)) => rule_of(*at, settled.verdict.as_ref()),
                        Some(Done::Peeked(at)) => rule_of(*at, settled.peeked.as_ref()),
                        _ => None,
                    };
                    self.limited(matched, policy, verdict, spends, given_back)
                }
                _ => {
                    let blocked = match listed.next_if(|(at, _)| *at == i) {
                        Some((_, Some(_))) => matches!(done.next(), Some(Done::Listed { denied: true })),
                        _ => false,
                    };
                    let mut answer = self.decided_at_door(slot, settled.now);
                    if blocked {
                        answer.over = true;
                        answer.refusal = Some(Outcome::Blocked);
                    }
                    answer
                }
            })
            .collect();
        let blocked = settled.blocked || verdict.is_some_and(|v| v.outcome() == Outcome::Blocked);
        let over = overall(&descriptors);
        let shadowed = over && self.modes.global_shadow;
        let failed_closed = verdict.filter(|v| v.outcome() == Outcome::Error).map(|v| {
            let cause = v
                .store_error()
                .map_or_else(|| "the store failed".to_owned(), ToString::to_string);
            match v.deciding().and_then(|(rule, _)| limited_at.get(rule)) {
                Some(index) => format!("descriptors[{index}]: {cause}; its limit fails closed"),
                None => cause,
            }
        });
        let engine = verdict.map_or(Outcome::Allowed, Verdict::outcome);
        let outcome = if blocked {
            Outcome::Blocked
        } else if engine == Outcome::Error {
            Outcome::Error
        } else if over && !shadowed {
            Outcome::Denied
        } else if shadowed {
            Outcome::ShadowDenied
        } else if engine.allows() {
            engine
        } else {
            Outcome::Allowed
        };
        Answer {
            over: blocked || (over && !shadowed),
            blocked,
            shadowed,
            outcome,
            unavailable: failed_closed.or(refund_failed),
            descriptors,
            now: settled.now,
        }
    }

    fn limited<'p>(
        &self,
        matched: &'p Matched<'_>,
        policy: &'p Policy,
        verdict: Option<RuleVerdict>,
        spends: bool,
        given_back: bool,
    ) -> DescriptorAnswer<'p> {
        let mut answer = self.described(matched, matched.kind);
        answer.policy = Some(policy);
        answer.policy_name = Some(policy.name());
        answer.current_limit = Some(current_limit(policy, matched.name));
        let Some(verdict) = verdict else {
            // Not reached: the engine answers every rule it is given.
            return answer;
        };
        let decision = verdict.decision;
        // A spent, allowed verdict reports the budget after the spend; a denied one and a
        // question the budget as it stands; an allowed peek the budget after a spend that did
        // not happen, given back here.
        let standing = if decision.allowed && given_back && matched.cost > 0 {
            decision
                .remaining
                .saturating_add(matched.cost)
                .min(decision.limit)
        } else {
            decision.remaining
        };
        let (remaining, before) = if !decision.allowed {
            (0, decision.limit.saturating_sub(standing))
        } else if spends && matched.cost > 0 {
            let before = decision
                .limit
                .saturating_sub(standing)
                .saturating_sub(matched.cost);
            (standing, before)
        } else {
            (standing, decision.limit.saturating_sub(standing))
        };
        let blocked = verdict.outcome == Outcome::Blocked;
        answer.over = blocked || (!decision.allowed && !matched.shadow);
        answer.remaining = remaining;
        answer.reset = Some(decision.reset_after);
        answer.standing = Some(decision.limit.saturating_sub(before));
        answer.stats = Some((
            &matched.stats_key,
            Hit {
                cost: matched.cost,
                limit: decision.limit,
                before,
                over: !decision.allowed,
                shadow: matched.shadow,
            },
        ));
        answer.verdict = Some(verdict);
        answer
    }

    /// A descriptor charged or refunded: over when the charge took it past its limit.
    fn settled<'p>(
        &self,
        matched: &'p Matched<'_>,
        policy: &'p Policy,
        settled: Option<Charged>,
    ) -> DescriptorAnswer<'p> {
        let mut answer = self.described(matched, matched.kind);
        answer.policy = Some(policy);
        answer.policy_name = Some(policy.name());
        answer.current_limit = Some(current_limit(policy, matched.name));
        let Some(settled) = settled else {
            return answer;
        };
        let decision = settled.decision;
        let charged = matched.hits == Hits::Charged;
        let past = charged && settled.debt > 0;
        // The store answers what a check of cost 1 would get now, its `remaining` counted after
        // that one request: what is left is one more when it would pass.
        let left = match decision.allowed {
            true => decision.remaining.saturating_add(1).min(decision.limit),
            false => decision.remaining,
        };
        answer.over = past && !matched.shadow;
        answer.remaining = if past { 0 } else { left };
        answer.reset = Some(decision.reset_after);
        if charged {
            // Where the count was before the charge, as upstream's stats split it.
            let used = decision.limit.saturating_sub(left).saturating_add(settled.debt);
            let before = used.saturating_sub(matched.cost);
            answer.standing = Some(decision.limit.saturating_sub(before));
            answer.stats = Some((
                &matched.stats_key,
                Hit {
                    cost: matched.cost,
                    limit: decision.limit,
                    before,
                    over: past,
                    shadow: matched.shadow,
                },
            ));
        }
        answer.settled = Some(settled);
        answer
    }

    /// A descriptor the store never sees.
    fn decided_at_door<'p>(&'p self, slot: &'p Slot<'_>, since_epoch: Duration) -> DescriptorAnswer<'p> {
        let refusal = |matched: &Matched<'_>| {
            if matched.shadow {
                Outcome::ShadowDenied
            } else {
                Outcome::Denied
            }
        };
        match slot {
            Slot::None { quota, replaced } => {
                let mut answer = nothing(if *replaced { Kind::Replaced } else { Kind::NoMatch });
                answer.quota = *quota;
                answer
            }
            Slot::Unlimited => {
                let mut answer = nothing(Kind::Unlimited);
                answer.remaining = u64::from(u32::MAX);
                answer
            }
            Slot::DenyAll {
                matched,
                unit,
                policy_name,
            } => {
                let mut answer = self.described(matched, Kind::DenyAll);
                answer.over = !matched.shadow;
                answer.policy_name = Some(policy_name);
                answer.current_limit = Some(CurrentLimit {
                    name: matched.name.unwrap_or_default(),
                    requests_per_unit: 0,
                    unit: *unit,
                });
                answer.reset = Some(unit.until_end(since_epoch));
                answer.refusal = Some(refusal(matched));
                answer.stats = Some((&matched.stats_key, over_at_door(matched, 0)));
                answer
            }
            Slot::TooLarge { matched, policy } => {
                let mut answer = self.described(matched, matched.kind);
                answer.over = !matched.shadow;
                answer.policy = Some(policy);
                answer.policy_name = Some(policy.name());
                answer.key = Some(&matched.key);
                answer.current_limit = Some(current_limit(policy, matched.name));
                answer.refusal = Some(refusal(matched));
                answer.stats = Some((&matched.stats_key, over_at_door(matched, policy.max_cost())));
                answer
            }
            Slot::Limited { .. } => unreachable!("decided by the engine"),
        }
    }

    /// The parts of a matched descriptor's answer that do not depend on the decision.
    fn described<'p>(&self, matched: &'p Matched<'_>, kind: Kind) -> DescriptorAnswer<'p> {
        let mut answer = nothing(kind);
        answer.quota = matched.quota;
        answer.key = Some(&matched.key);
        answer.cost = matched.cost;
        answer.shadow = matched.shadow || self.modes.global_shadow;
        answer.metadata = matched.metadata;
        answer
    }
}

/// The answer of a descriptor without a limit.
fn nothing<'p>(kind: Kind) -> DescriptorAnswer<'p> {
    DescriptorAnswer {
        kind,
        over: false,
        current_limit: None,
        remaining: 0,
        reset: None,
        quota: false,
        policy: None,
        key: None,
        policy_name: None,
        cost: 0,
        shadow: false,
        stats: None,
        refusal: None,
        metadata: None,
        verdict: None,
        standing: None,
        settled: None,
    }
}

fn over_at_door(matched: &Matched<'_>, limit: u64) -> Hit {
    Hit {
        cost: matched.cost,
        limit,
        before: 0,
        over: true,
        shadow: matched.shadow,
    }
}

/// The policy as upstream's `requests_per_unit` per `unit`.
fn current_limit<'p>(policy: &Policy, name: Option<&'p str>) -> CurrentLimit<'p> {
    let (requests_per_unit, unit) = crate::reported_limit(policy);
    CurrentLimit {
        name: name.unwrap_or_default(),
        requests_per_unit,
        unit,
    }
}

/// Upstream's overall code: over when a descriptor not in quota mode is over its limit, or when
/// the request has quota-mode descriptors and every one of them is over.
fn overall(descriptors: &[DescriptorAnswer<'_>]) -> bool {
    let (mut failed, mut quota, mut quota_failed) = (0, 0, 0);
    for d in descriptors.iter().filter(|d| d.kind != Kind::Unlimited) {
        if d.quota {
            quota += 1;
            quota_failed += usize::from(d.over);
        } else {
            failed += usize::from(d.over);
        }
    }
    failed > 0 || (quota > 0 && quota == quota_failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(over: bool, remaining: u64, limit: Option<u32>, quota: bool) -> DescriptorAnswer<'static> {
        let mut d = nothing(Kind::Configured);
        d.over = over;
        d.remaining = remaining;
        d.quota = quota;
        d.current_limit = limit.map(|requests_per_unit| CurrentLimit {
            name: "",
            requests_per_unit,
            unit: Unit::Minute,
        });
        d
    }

    fn answer(descriptors: Vec<DescriptorAnswer<'static>>) -> Answer<'static> {
        Answer {
            over: overall(&descriptors),
            blocked: false,
            shadowed: false,
            outcome: Outcome::Allowed,
            unavailable: None,
            descriptors,
            now: Duration::ZERO,
        }
    }

    #[test]
    fn one_plain_descriptor_over_is_enough() {
        assert!(overall(&[
            status(false, 3, Some(5), false),
            status(true, 0, Some(5), false)
        ]));
    }

    #[test]
    fn quota_descriptors_are_over_only_all_together() {
        assert!(!overall(&[
            status(true, 0, Some(1), true),
            status(false, 1, Some(2), true)
        ]));
        assert!(overall(&[
            status(true, 0, Some(1), true),
            status(true, 0, Some(2), true)
        ]));
        // A plain descriptor over is still over on its own.
        assert!(overall(&[
            status(false, 1, Some(1), true),
            status(true, 0, Some(2), false)
        ]));
    }

    #[test]
    fn the_headline_is_the_descriptor_closest_to_its_limit() {
        let a = answer(vec![
            status(false, 7, Some(10), false),
            status(false, 2, Some(5), false),
            status(false, 2, Some(9), false),
        ]);
        assert_eq!(
            a.headline()
                .and_then(|d| d.current_limit)
                .map(|l| l.requests_per_unit),
            Some(5)
        );
    }

    #[test]
    fn the_headline_is_the_last_plain_descriptor_over_its_limit() {
        let a = answer(vec![
            status(true, 0, Some(3), false),
            status(true, 0, Some(4), false),
            status(false, 0, Some(6), false),
        ]);
        assert_eq!(
            a.headline()
                .and_then(|d| d.current_limit)
                .map(|l| l.requests_per_unit),
            Some(4)
        );
        assert!(answer(vec![status(false, 0, None, false)]).headline().is_none());
    }
}
