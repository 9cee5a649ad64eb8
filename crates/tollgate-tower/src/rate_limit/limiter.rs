//! The decision for one request: keys, store calls, and the answer. Shared (in an `Arc`) by the
//! layer and every service it makes, so every clone and connection counts into one state.
//!
//! # Order of work
//!
//! 1. Every rule's key is extracted. A rule without a key is skipped or answers 400, as its
//!    [`MissingKey`] says; a key past [`MAX_KEY_LEN`] answers 400. Nothing is spent yet.
//! 2. With one rule left, it is checked: decided and recorded in one store call.
//! 3. With several, all or nothing: each is first *peeked* (decided without recording). If an
//!    enforced rule would deny, the request is denied and no rule spends anything; the denying
//!    rules are then checked once more so that the denial itself is recorded (a denied check
//!    spends nothing, but starts a policy's `block_for` penalty and fills a Redis store's deny
//!    cache). Otherwise every rule is checked, in order.
//!
//! This is not a transaction: between the peek and the check another request can take a rule's
//! last unit; that check then denies while the rules checked before it have already spent. The
//! window is one store round trip per rule wide and only matters when a budget is about to run
//! out. On a 429, the rate limit headers of rules that would have allowed report their budget
//! as it stands, untouched by the denied request. Shadow rules take part in the peeks only to be reported; they never deny, and their
//! would-be denials are counted from their checks, so only on requests the enforced rules let
//! through.
//!
//! # Store errors
//!
//! A store call that returns `Err` follows the rule's policy's [`FailureMode`]: `FailClosed`
//! answers 503 at once (rules already checked keep what they spent); `FailOpen` and `Local` let
//! the request through as far as this rule goes, with no headers for it (there is no budget to
//! report). A shadow rule never denies, whatever its failure mode. `Local` cannot limit locally here,
//! since the store itself failed; a networked store such as `RedisStore` applies `Local` on its
//! own and answers with a degraded decision, which the layer uses like any other. Every error is
//! counted and logged at `warn`.

use axum::body::Body;
use axum::http::Response;
use axum::http::request::Parts;
use tollgate::bounds::MAX_KEY_LEN;
use tollgate::{Decision, Error, FailureMode};

use crate::problem::{Problems, RateLimitHeaders};
use crate::stats::{Counter, Stats};
use crate::store::SharedStore;
use crate::{MissingKey, Rule};

/// The store, the rules and the counters of one layer.
pub(crate) struct Limiter {
    pub(crate) store: Box<dyn SharedStore>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) stats: Stats,
    pub(crate) problems: Problems,
}

/// What to do with a request.
pub(crate) enum Verdict {
    /// Pass it on; add these headers (if any) to the response.
    Pass(Option<RateLimitHeaders>),
    /// Answer with this response instead.
    Answer(Response<Body>),
}

/// A rule that applies to this request, with its key and what the store said.
struct Applied<'a> {
    rule: &'a Rule,
    key: Vec<u8>,
    answer: Answer,
}

#[derive(Clone, Copy)]
enum Answer {
    NotAsked,
    /// From a peek: an allowed one counts this request as if admitted, which it was not (yet).
    Peeked(Decision),
    Decided(Decision),
    /// The store failed and the failure mode let the request through.
    Failed,
}

impl Applied<'_> {
    /// Denied and enforced: the whole request is denied.
    fn blocks(&self) -> bool {
        !self.rule.shadow && self.decision().is_some_and(|d| !d.allowed)
    }

    /// The budget as it stands: a peek that would allow reports what would be left after this
    /// request, so its cost is given back (this request spent nothing).
    fn decision(&self) -> Option<Decision> {
        match self.answer {
            Answer::Peeked(d) if d.allowed => Some(Decision {
                remaining: d.remaining.saturating_add(self.rule.cost).min(d.limit),
                ..d
            }),
            Answer::Peeked(d) | Answer::Decided(d) => Some(d),
            Answer::NotAsked | Answer::Failed => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Peek,
    Check,
}

impl Limiter {
    /// Decides `parts`; see the module docs for the order of work.
    pub(crate) async fn decide(&self, parts: &Parts) -> Verdict {
        match self.decide_inner(parts).await {
            Ok(headers) => {
                self.stats.bump(Counter::Allowed);
                Verdict::Pass(headers)
            }
            Err(response) => Verdict::Answer(*response),
        }
    }

    async fn decide_inner(&self, parts: &Parts) -> Result<Option<RateLimitHeaders>, Box<Response<Body>>> {
        let mut applied = self.keys(parts)?;
        if applied.len() > 1 {
            for a in &mut applied {
                a.answer = self.ask(a, Op::Peek).await?;
            }
            if applied.iter().any(Applied::blocks) {
                for a in applied.iter_mut().filter(|a| a.blocks()) {
                    // Record the denial. An error here changes nothing: the request is denied.
                    if let Ok(Answer::Decided(d)) = self.ask(a, Op::Check).await
                        && !d.allowed
                    {
                        a.answer = Answer::Decided(d);
                    }
                }
                return Err(Box::new(self.deny(&applied)));
            }
        }
        for i in 0..applied.len() {
            if matches!(applied[i].answer, Answer::Failed) {
                continue;
            }
            let answer = self.ask(&applied[i], Op::Check).await?;
            let a = &mut applied[i];
            a.answer = answer;
            if let (true, Answer::Decided(d)) = (a.rule.shadow, answer)
                && !d.allowed
            {
                self.stats.bump(Counter::ShadowDenied);
                tracing::info!(
                    policy = a.rule.policy.name(),
                    key = %String::from_utf8_lossy(&a.key),
                    retry_after_ms = d.retry_after.map(|r| r.as_millis() as u64),
                    "shadow mode: rate limit would have denied this request",
                );
            }
            if a.blocks() {
                return Err(Box::new(self.deny(&applied)));
            }
        }
        Ok(RateLimitHeaders::new(enforced_decisions(&applied)))
    }

    /// The rules that apply, with their keys; or the 400 for a missing or oversized key.
    fn keys(&self, parts: &Parts) -> Result<Vec<Applied<'_>>, Box<Response<Body>>> {
        let mut applied = Vec::with_capacity(self.rules.len());
        for rule in &self.rules {
            match rule.key.extract(parts) {
                Some(key) if key.len() > MAX_KEY_LEN => {
                    self.stats.bump(Counter::RejectedKey);
                    let what = rule.key.describe();
                    return Err(Box::new(self.problems.key_too_long(
                        &rule.policy,
                        &what,
                        key.len(),
                    )));
                }
                Some(key) => applied.push(Applied {
                    rule,
                    key,
                    answer: Answer::NotAsked,
                }),
                None => match rule.on_missing_key {
                    MissingKey::Skip => {}
                    MissingKey::Reject => {
                        self.stats.bump(Counter::RejectedKey);
                        let what = rule.key.describe();
                        return Err(Box::new(self.problems.missing_key(&rule.policy, &what)));
                    }
                },
            }
        }
        Ok(applied)
    }

    /// One store call; a store error becomes `Failed`, or the 503 under `FailClosed`.
    async fn ask(&self, applied: &Applied<'_>, op: Op) -> Result<Answer, Box<Response<Body>>> {
        let (policy, key, cost) = (&applied.rule.policy, applied.key.as_slice(), applied.rule.cost);
        let result = match op {
            Op::Peek => self.store.peek(policy, key, cost).await,
            Op::Check => self.store.check(policy, key, cost).await,
        };
        match result {
            Ok(decision) => {
                if decision.degraded {
                    self.stats.bump(Counter::Degraded);
                }
                Ok(match op {
                    Op::Peek => Answer::Peeked(decision),
                    Op::Check => Answer::Decided(decision),
                })
            }
            Err(err) => self.failed(applied, &err),
        }
    }

    fn failed(&self, applied: &Applied<'_>, err: &Error) -> Result<Answer, Box<Response<Body>>> {
        self.stats.bump(Counter::StoreError);
        let policy = &applied.rule.policy;
        let mode = policy.failure_mode();
        tracing::warn!(policy = policy.name(), error = %err, failure_mode = %mode, "rate limit store failed");
        match mode {
            FailureMode::FailClosed if !applied.rule.shadow => {
                self.stats.bump(Counter::FailedClosed);
                Err(Box::new(self.problems.store_unavailable(policy)))
            }
            _ => Ok(Answer::Failed),
        }
    }

    /// The 429: the enforced denial with the longest wait speaks for the request.
    fn deny(&self, applied: &[Applied<'_>]) -> Response<Body> {
        self.stats.bump(Counter::Denied);
        let longest = applied
            .iter()
            .filter(|a| a.blocks())
            .filter_map(|a| Some((a, a.decision()?)))
            .max_by_key(|(_, d)| d.retry_after.unwrap_or(d.reset_after));
        let Some((denier, decision)) = longest else {
            // Unreachable by construction: deny is only called when a rule blocks.
            return self.problems.store_unavailable(&applied[0].rule.policy);
        };
        tracing::debug!(policy = denier.rule.policy.name(), "rate limit denied a request");
        let mut response = self.problems.rate_limited(&denier.rule.policy, &decision);
        if let Some(headers) = RateLimitHeaders::new(enforced_decisions(applied)) {
            headers.append_to(response.headers_mut());
        }
        response
    }
}

/// The enforced rules that have a decision, for the headers: shadow rules stay invisible.
fn enforced_decisions<'a>(applied: &'a [Applied<'_>]) -> impl Iterator<Item = (&'a Rule, Decision)> {
    applied
        .iter()
        .filter(|a| !a.rule.shadow)
        .filter_map(|a| Some((a.rule, a.decision()?)))
}
