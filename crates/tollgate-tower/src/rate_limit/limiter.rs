//! The decision for one request: keys, one call to the engine, and the answer. Shared (in an
//! `Arc`) by the layer and every service it makes, so every clone and connection counts into one
//! state.
//!
//! The order of work is described in the [module above](super).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::Response;
use axum::http::request::Parts;
use tollgate::bounds::MAX_KEY_LEN;
use tollgate::{Done, Error, Op, Outcome, Policy, Request, Rule, Settled, StoreErrorKind, Verdict};

use crate::engine::SharedEngine;
use crate::key::Key;
use crate::problem::{Problems, RateLimitHeaders};
use crate::stats::{Counter, Stats};
use crate::{ClientIp, KeyedPolicy, LogSampler, MissingKey};

/// The engine, the rules and the counters of one layer.
pub(crate) struct Limiter {
    pub(crate) engine: Arc<dyn SharedEngine>,
    pub(crate) policies: Vec<KeyedPolicy>,
    pub(crate) stats: Stats,
    pub(crate) problems: Problems,
    /// Whether the missing peer address has been logged: once per layer, since it repeats on
    /// every request until the app is fixed.
    pub(crate) told_no_peer: AtomicBool,
    /// Give an admitted request's cost back when the inner service answers 5xx.
    pub(crate) refund_on_server_error: bool,
    /// Told every verdict, with the rules it is for.
    pub(crate) on_verdict: Option<VerdictHook>,
}

/// What [`on_verdict`](crate::RateLimitLayerBuilder::on_verdict) calls with each verdict.
pub(crate) type VerdictHook = Arc<dyn Fn(&[tollgate::Rule<'_>], &Verdict) + Send + Sync>;

/// What an admitted request spent, per rule: kept (only with `refund_on_server_error`) to give
/// back if the inner service fails.
pub(crate) struct Spent(Vec<(Policy, Box<[u8]>, u64)>);

/// What to do with a request.
pub(crate) enum Action {
    /// Pass it on; add these headers (if any) to the response, and give back what it spent
    /// (if kept) should the response be a 5xx.
    Pass(Option<RateLimitHeaders>, Option<Spent>),
    /// Answer with this response instead.
    Answer(Response<Body>),
}

/// The rules that apply to a request, each with its key.
enum Keyed<'l, 'p> {
    /// The common case, one rule: nothing collected into vectors.
    One(&'l KeyedPolicy, Key<'p>),
    Many(Vec<(&'l KeyedPolicy, Key<'p>)>),
    /// No rule applies: every key missing, every rule skipped.
    Unlimited,
    /// Answered before the engine is asked: a missing or oversized key. Boxed, so that the
    /// common case is not moved around at the size of a response.
    Answer(Box<Response<Body>>),
}

impl Limiter {
    /// Whether [`decide_now`](Self::decide_now) can decide: the store never waits.
    pub(crate) fn decides_at_once(&self) -> bool {
        self.engine.decides_at_once()
    }

    /// Decides `parts` without waiting, for a store that [decides at
    /// once](Self::decides_at_once); see the module docs for the order of work.
    pub(crate) fn decide_now(&self, parts: &Parts) -> Action {
        match self.keyed(parts) {
            Keyed::Unlimited => self.unlimited(),
            Keyed::Answer(response) => Action::Answer(*response),
            Keyed::One(rule, key) => {
                let bound = [rule.bind(key.as_bytes())];
                self.act(&[rule], &bound, checked(self.engine.run_now(&checks(&bound))))
            }
            Keyed::Many(keyed) => self.decide_many_now(&keyed),
        }
    }

    /// [`decide_now`](Self::decide_now) for several rules, kept out of the one-rule road.
    #[inline(never)]
    fn decide_many_now(&self, keyed: &[(&KeyedPolicy, Key<'_>)]) -> Action {
        let (applied, bound) = bind(keyed);
        self.act(&applied, &bound, checked(self.engine.run_now(&checks(&bound))))
    }

    /// Decides `parts`; see the module docs for the order of work.
    pub(crate) async fn decide(&self, parts: &Parts) -> Action {
        match self.keyed(parts) {
            Keyed::Unlimited => self.unlimited(),
            Keyed::Answer(response) => Action::Answer(*response),
            Keyed::One(rule, key) => {
                let bound = [rule.bind(key.as_bytes())];
                let request = checks(&bound);
                let settled = self.engine.run(&request).await;
                self.act(&[rule], &bound, checked(settled))
            }
            Keyed::Many(keyed) => {
                let (applied, bound) = bind(&keyed);
                let request = checks(&bound);
                let settled = self.engine.run(&request).await;
                self.act(&applied, &bound, checked(settled))
            }
        }
    }

    /// Every rule's key, or the answer when a rule has none and rejects such requests, a key
    /// is too long, or no rule applies. Nothing is spent yet.
    fn keyed<'l, 'p>(&'l self, parts: &'p Parts) -> Keyed<'l, 'p> {
        if let [rule] = self.policies.as_slice() {
            return match self.key(rule, parts) {
                Err(response) => Keyed::Answer(response),
                Ok(None) => Keyed::Unlimited,
                Ok(Some(key)) => Keyed::One(rule, key),
            };
        }
        self.keyed_many(parts)
    }

    /// [`keyed`](Self::keyed) for several rules, kept out of the one-rule road.
    #[inline(never)]
    fn keyed_many<'l, 'p>(&'l self, parts: &'p Parts) -> Keyed<'l, 'p> {
        let mut keyed = Vec::with_capacity(self.policies.len());
        for rule in &self.policies {
            match self.key(rule, parts) {
                Err(response) => return Keyed::Answer(response),
                Ok(None) => {}
                Ok(Some(key)) => keyed.push((rule, key)),
            }
        }
        if keyed.is_empty() {
            return Keyed::Unlimited;
        }
        Keyed::Many(keyed)
    }

    /// No rule applies (every key missing, every rule skipped): the request passes as is.
    fn unlimited(&self) -> Action {
        self.stats.bump(Counter::Allowed);
        Action::Pass(None, None)
    }

    /// Gives back what a request spent, now, for a store that [decides at
    /// once](Self::decides_at_once). Out of line: only a 5xx with
    /// [`refund_on_server_error`](crate::RateLimitLayerBuilder::refund_on_server_error) gets here.
    #[cold]
    #[inline(never)]
    pub(crate) fn refund_now(&self, spent: &Spent) {
        let request = spent.refunds();
        self.refunded(&request, self.engine.run_now(&request));
    }

    /// Gives back what a request spent, in one engine call.
    pub(crate) async fn refund(&self, spent: &Spent) {
        let request = spent.refunds();
        let settled = self.engine.run(&request).await;
        self.refunded(&request, settled);
    }

    /// Counts and logs each refund of `request`.
    fn refunded(&self, request: &Request<'_>, settled: Result<Settled, Error>) {
        let results: Vec<(&Policy, Result<(), &Error>)> = match &settled {
            Ok(settled) => request
                .ops()
                .iter()
                .zip(&settled.ops)
                .filter_map(|(op, done)| match (op.rule(), done) {
                    (Some(rule), Done::Refunded(result)) => Some((rule.policy, result.as_ref().map(|_| ()))),
                    _ => None,
                })
                .collect(),
            Err(err) => request
                .ops()
                .iter()
                .filter_map(|op| op.rule().map(|rule| (rule.policy, Err(err))))
                .collect(),
        };
        for (policy, result) in results {
            self.refunded_one(policy, result);
        }
    }

    fn refunded_one(&self, policy: &Policy, result: Result<(), &Error>) {
        match result {
            Ok(_) => self.stats.bump(Counter::Refund),
            Err(err) => {
                self.stats.bump(Counter::RefundFailed);
                if REFUND_ERROR_LOG.due() {
                    tracing::warn!(
                        policy = policy.name(),
                        class = err.class().unwrap_or("other"),
                        error = %err,
                        "refund after a server error failed; the spend stays (sampled: at most one line a second)",
                    );
                }
            }
        }
    }

    /// `rule`'s key in `parts`: `None` to skip the rule, the 400 for a missing or oversized
    /// key, or the 500 when the rule needs the peer address and the app was served without it.
    /// Only a usable key is handled here; the rest is out of line, off the road of a request
    /// that passes.
    fn key<'p>(&self, rule: &KeyedPolicy, parts: &'p Parts) -> Result<Option<Key<'p>>, Box<Response<Body>>> {
        match rule.key.key(parts) {
            Some(key) if key.as_bytes().len() <= MAX_KEY_LEN => Ok(Some(key)),
            Some(key) => Err(self.key_too_long(rule, key.as_bytes().len())),
            None => self.no_key(rule, parts),
        }
    }

    /// The 400 for a key of `len` bytes, past the store's bound.
    #[cold]
    #[inline(never)]
    fn key_too_long(&self, rule: &KeyedPolicy, len: usize) -> Box<Response<Body>> {
        self.stats.bump(Counter::RejectedKey);
        let what = rule.key.describe();
        Box::new(self.problems.key_too_long(&rule.policy, &what, len))
    }

    /// A request without `rule`'s key: skip the rule, or the 400, or the 500 when the rule needs
    /// the peer address and the app was served without it.
    #[inline(never)]
    fn no_key<'p>(&self, rule: &KeyedPolicy, parts: &Parts) -> Result<Option<Key<'p>>, Box<Response<Body>>> {
        if rule.key.needs_peer() && ClientIp::peer_addr(parts).is_none() {
            self.stats.bump(Counter::NoPeerAddress);
            let what = rule.key.describe();
            if !self.told_no_peer.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    policy = rule.policy.name(),
                    key = %what,
                    fix = "serve the app with `into_make_service_with_connect_info::<SocketAddr>()`",
                    "rate limit keys on the peer address and the request has none; every such \
                     request is answered 500 (logged once per layer)",
                );
            }
            return Err(Box::new(self.problems.no_peer_address(&rule.policy, &what)));
        }
        match rule.on_missing_key {
            MissingKey::Skip => Ok(None),
            MissingKey::Reject => {
                self.stats.bump(Counter::RejectedKey);
                let what = rule.key.describe();
                Err(Box::new(self.problems.missing_key(&rule.policy, &what)))
            }
        }
    }

    /// The engine's answer for the rules that apply (`applied[i]` is bound as `bound[i]`; never
    /// empty), as an action. A request that passes is handled here; every other answer, and
    /// what it logs, is built out of line, so the road of an admitted request stays short.
    fn act(
        &self,
        applied: &[&KeyedPolicy],
        bound: &[tollgate::Rule<'_>],
        decided: Result<Verdict, Error>,
    ) -> Action {
        let verdict = match decided {
            Ok(verdict) => verdict,
            Err(err) => return self.refused(applied, &err),
        };
        self.count(bound, &verdict);
        if let Some(hook) = &self.on_verdict {
            hook(bound, &verdict);
        }
        match verdict.outcome() {
            Outcome::Allowed | Outcome::ShadowDenied | Outcome::Degraded => {
                self.stats.bump(Counter::Allowed);
                let spent = if self.refund_on_server_error {
                    spent(bound, &verdict)
                } else {
                    None
                };
                Action::Pass(RateLimitHeaders::new(applied, bound, &verdict), spent)
            }
            Outcome::Denied | Outcome::Blocked | Outcome::Error => {
                Action::Answer(self.answer(applied, bound, &verdict))
            }
        }
    }

    /// The engine refused the request's rules. Not reached: keys are non-empty and bounded,
    /// and costs checked, before the engine sees them. Refuse rather than let an undecided
    /// request through.
    #[cold]
    #[inline(never)]
    fn refused(&self, applied: &[&KeyedPolicy], err: &Error) -> Action {
        self.stats.bump(Counter::FailedClosed);
        tracing::error!(error = %err, "rate limit engine refused the request's rules");
        Action::Answer(self.problems.store_unavailable(&applied[0].policy, None))
    }

    /// The layer's own answer to a request that does not pass: 429, 403 or 503.
    #[inline(never)]
    fn answer(
        &self,
        applied: &[&KeyedPolicy],
        bound: &[tollgate::Rule<'_>],
        verdict: &Verdict,
    ) -> Response<Body> {
        match verdict.outcome() {
            Outcome::Blocked => {
                self.stats.bump(Counter::Blocked);
                let at = verdict.blocked_by().map_or(0, |(i, _)| i);
                let policy = &applied.get(at).unwrap_or(&applied[0]).policy;
                if let Some((_, entry)) = verdict.blocked_by()
                    && BLOCKED_LOG.due()
                {
                    tracing::info!(policy = policy.name(), entry = %entry, "deny list blocked a request (sampled: at most one line a second)");
                }
                self.problems.blocked(policy)
            }
            Outcome::Denied => {
                self.stats.bump(Counter::Denied);
                // An enforced rule denied, so there is a deciding one.
                let (policy, decision) = match verdict.deciding() {
                    Some((i, r)) => (&applied[i].policy, Some(r.decision)),
                    None => (&applied[0].policy, None),
                };
                tracing::debug!(policy = policy.name(), "rate limit denied a request");
                let mut response = match decision {
                    Some(decision) => self.problems.rate_limited(policy, &decision),
                    None => self.problems.store_unavailable(policy, None),
                };
                if let Some(headers) = RateLimitHeaders::new(applied, bound, verdict) {
                    headers.append_to(response.headers_mut());
                }
                response
            }
            // `Error`; the outcomes that pass are not answered here.
            _ => {
                self.stats.bump(Counter::FailedClosed);
                let (policy, decision) = match verdict.deciding() {
                    Some((i, r)) => (&applied[i].policy, Some(r.decision)),
                    None => (&applied[0].policy, None),
                };
                self.problems.store_unavailable(policy, decision.as_ref())
            }
        }
    }

    /// Counts and logs what the verdict says beyond its outcome: a store failure, failure modes
    /// at work, shadow denials.
    fn count(&self, bound: &[tollgate::Rule<'_>], verdict: &Verdict) {
        if let Some(err) = verdict.store_error() {
            self.store_failed(bound, verdict, err);
        }
        if verdict.rules().iter().any(|r| r.decision.degraded) {
            self.stats.bump(Counter::Degraded);
        }
        for (rule, r) in bound.iter().zip(verdict.rules()) {
            if r.outcome == Outcome::ShadowDenied {
                self.shadow_denied(rule, &r.decision);
            }
        }
    }

    /// Counts a store failure, and logs it (sampled).
    #[cold]
    #[inline(never)]
    fn store_failed(&self, bound: &[tollgate::Rule<'_>], verdict: &Verdict, err: &Error) {
        self.stats.bump(Counter::StoreError);
        if STORE_ERROR_LOG.due() {
            let policies: Vec<&str> = bound.iter().map(|r| r.policy.name()).collect();
            tracing::warn!(
                class = err.class().unwrap_or("other"),
                error = %err,
                policies = ?policies,
                outcome = verdict.outcome().as_str(),
                "rate limit store failed; failure modes decided (sampled: at most one line a second)",
            );
        }
    }

    /// Counts a shadow rule that would have denied, and logs it (sampled).
    #[inline(never)]
    fn shadow_denied(&self, rule: &tollgate::Rule<'_>, decision: &tollgate::Decision) {
        self.stats.bump(Counter::ShadowDenied);
        if SHADOW_LOG.due() {
            tracing::info!(
                policy = rule.policy.name(),
                key = %String::from_utf8_lossy(rule.key),
                retry_after_ms = decision.retry_after.map(|d| d.as_millis() as u64),
                "shadow mode: rate limit would have denied this request (sampled: at most one line a second)",
            );
        }
    }
}

/// The rules and their engine rules, side by side.
fn bind<'a>(keyed: &'a [(&'a KeyedPolicy, Key<'_>)]) -> (Vec<&'a KeyedPolicy>, Vec<tollgate::Rule<'a>>) {
    keyed
        .iter()
        .map(|(rule, key)| (*rule, rule.bind(key.as_bytes())))
        .unzip()
}

/// What the rules of an admitted request spent: every rule the engine allowed, the store or a
/// failure mode (a shadow rule that would have denied spent nothing). Where a spend was
/// recorded is the engine's to know: its refund gives back in the `Local` failure mode's
/// limiter and in the store alike, as at every other door, and a store still away is a failed
/// refund. `None` when nothing was spent.
#[inline(never)]
fn spent(bound: &[tollgate::Rule<'_>], verdict: &Verdict) -> Option<Spent> {
    let spent: Vec<_> = bound
        .iter()
        .zip(verdict.rules())
        .filter(|(_, r)| matches!(r.outcome, Outcome::Allowed | Outcome::Degraded))
        .map(|(rule, _)| (rule.policy.clone(), rule.key.into(), rule.cost))
        .collect();
    (!spent.is_empty()).then_some(Spent(spent))
}

impl Spent {
    /// The refunds that give it back, as one engine request.
    fn refunds(&self) -> Request<'_> {
        (self.0.iter())
            .map(|(policy, key, cost)| Op::Refund(Rule::new(policy, key, *cost)))
            .collect()
    }
}

/// The request of checking every rule of `bound`, all or nothing.
fn checks<'a>(bound: &[Rule<'a>]) -> Request<'a> {
    bound.iter().copied().map(Op::Check).collect()
}

/// The checks' verdict of a settled request of [`checks`].
fn checked(settled: Result<Settled, Error>) -> Result<Verdict, Error> {
    settled?
        .verdict
        .ok_or_else(|| Error::store(StoreErrorKind::Script, "the engine answered no verdict"))
}

/// Store failures and shadow denials repeat on every request while they last: one line a second
/// each shows them without a line per request; [`Stats`] counts them all.
static STORE_ERROR_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
static SHADOW_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
static BLOCKED_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
static REFUND_ERROR_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));
