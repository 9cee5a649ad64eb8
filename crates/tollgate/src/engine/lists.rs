//! Allow and deny lists and gradual enforcement, applied to a request's rules before the store
//! decides them, and the relabelling of allow-listed rules after; see the
//! [engine docs](super#allow-and-deny-lists-gradual-enforcement).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::verdict::Rules;
use super::{Engine, Outcome, RuleVerdict, Verdict};
use crate::access::Listed;
use crate::{Apart, Decision, Rule};

impl<S> Engine<S> {
    /// The rules as the store is to decide them: deny lists checked (a blocked request's
    /// verdict instead), allow-listed rules made shadow questions (their indices in the `Vec`), keys
    /// outside a gradual share made shadow. Borrowed as given when nothing applies.
    pub(super) fn adjust<'a, 'r>(&self, rules: &'r [Rule<'a>], lists: Lists) -> Adjusted<'r, 'a> {
        let mut adjusted = Cow::Borrowed(rules);
        let mut allowed = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            if let Some(share) = rule.policy.enforcement()
                && !rule.shadow
                && !share.enforces(rule.policy.name(), rule.key)
            {
                let rule = &mut adjusted.to_mut()[i];
                rule.shadow = true;
                rule.apart = None;
            } else if rule.apart.is_some() {
                // The store decides a rule apart as a shadow rule: its denial stops nothing
                // else. A shadow rule stays one (it never denies, apart or not).
                let rule = &mut adjusted.to_mut()[i];
                if rule.shadow {
                    rule.apart = None;
                } else {
                    rule.shadow = true;
                }
            }
        }
        if lists == Lists::Ignored || !self.listing.load(Ordering::Acquire) {
            return Adjusted::Rules(adjusted, allowed);
        }
        let lists = self.access.read();
        let mut denied: Vec<(usize, Arc<crate::access::AccessEntry>)> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match lists.lookup(rule.policy.name(), rule.listed_key()) {
                Some(entry) if entry.list() == Listed::Deny => denied.push((i, Arc::clone(entry))),
                Some(_) => allowed.push(i),
                None => {}
            }
        }
        drop(lists);
        if let Some((first, entry)) = denied.first().cloned() {
            return Adjusted::Blocked(blocked(&adjusted, &denied, first, entry));
        }
        for &i in &allowed {
            let rule = &mut adjusted.to_mut()[i];
            rule.shadow = true;
            rule.question = true;
            rule.apart = None;
        }
        Adjusted::Rules(adjusted, allowed)
    }
}

/// Whether a decision applies the allow and deny lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lists {
    Applied,
    Ignored,
}

/// The rules as the store is to decide them, with the indices of the allow-listed ones; or the
/// verdict of a blocked request.
pub(super) enum Adjusted<'r, 'a> {
    Rules(Cow<'r, [Rule<'a>]>, Vec<usize>),
    Blocked(Verdict),
}

/// The verdict of a request with deny-listed rules (`denied`, by index): every rule blocked,
/// nothing decided.
fn blocked(
    rules: &[Rule<'_>],
    denied: &[(usize, Arc<crate::access::AccessEntry>)],
    first: usize,
    entry: Arc<crate::access::AccessEntry>,
) -> Verdict {
    let verdicts = rules
        .iter()
        .enumerate()
        .map(|(i, rule)| RuleVerdict {
            decision: Decision {
                allowed: false,
                limit: rule.policy.max_cost(),
                remaining: 0,
                reset_after: std::time::Duration::ZERO,
                retry_after: None,
                degraded: false,
            },
            outcome: Outcome::Blocked,
            shadow: rule.shadow,
            listed: denied.iter().any(|(d, _)| *d == i).then_some(Listed::Deny),
        })
        .collect::<Vec<_>>();
    Verdict {
        outcome: Outcome::Blocked,
        rules: match <[RuleVerdict; 1]>::try_from(verdicts) {
            Ok([one]) => Rules::One(one),
            Err(many) => Rules::Many(many),
        },
        store_error: None,
        blocked_by: Some((first, entry)),
        spends: false,
    }
}

/// Allow-listed rules (by index) were decided as shadow questions: they are allowed, whatever
/// the budget said, and the request's outcome is taken again without their would-be denials.
/// `rules` are the caller's, `adjusted` the store's.
pub(super) fn relabel_allowed(
    verdict: &mut Verdict,
    allowed: &[usize],
    rules: &[Rule<'_>],
    adjusted: &[Rule<'_>],
) {
    if allowed.is_empty() {
        return;
    }
    let slice = match &mut verdict.rules {
        Rules::One(r) => std::slice::from_mut(r),
        Rules::Many(v) => v.as_mut_slice(),
    };
    for &i in allowed {
        if let Some(r) = slice.get_mut(i) {
            r.decision.allowed = true;
            r.decision.retry_after = None;
            r.outcome = if r.decision.degraded {
                Outcome::Degraded
            } else {
                Outcome::Allowed
            };
            r.shadow = rules.get(i).is_some_and(|rule| rule.shadow);
            r.listed = Some(Listed::Allow);
        }
    }
    verdict.outcome = request_outcome(adjusted, slice);
}

/// The request's outcome: the most severe of its rules', where a quota rule's denial counts
/// only when every quota rule of the request is denied. `rules` are the store's (a rule apart
/// has `apart` set only when it is not a shadow rule).
pub(super) fn request_outcome(rules: &[Rule<'_>], verdicts: &[RuleVerdict]) -> Outcome {
    let quota = |rule: &Rule<'_>| rule.apart == Some(Apart::Quota);
    let mut quotas = rules
        .iter()
        .zip(verdicts)
        .filter(|(rule, _)| quota(rule))
        .peekable();
    let quota_over = quotas.peek().is_some() && quotas.all(|(_, r)| r.outcome == Outcome::Denied);
    rules
        .iter()
        .zip(verdicts)
        .filter(|(rule, r)| quota_over || !quota(rule) || r.outcome != Outcome::Denied)
        .map(|(_, r)| r.outcome)
        .max()
        .unwrap_or(Outcome::Allowed)
}
