//! What the engine answers: every rule's decision and outcome, and the request's.

use std::time::Duration;

use std::sync::Arc;

use crate::access::{AccessEntry, Listed};
use crate::{Decision, Error};

/// How a rule, or a whole request, came out: the label every door reports in its metrics, so
/// that one number means the same thing over HTTP, gRPC and the middleware.
///
/// ```
/// use tollgate::Outcome;
///
/// assert_eq!(Outcome::ShadowDenied.as_str(), "shadow_denied");
/// assert!(Outcome::Degraded.allows() && !Outcome::Error.allows());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Allowed by the store.
    Allowed,
    /// A shadow rule would have denied; the request was let through.
    ShadowDenied,
    /// The store failed and the failure mode let the request through (`fail_open`, or `local`
    /// and the local limiter allowed).
    Degraded,
    /// An enforced rule denied (the store, or the `local` failure mode's limiter).
    Denied,
    /// The store failed and a `fail_closed` rule refused the request.
    Error,
    /// A rule's key is on a deny list: the request is refused without asking the store (a
    /// door answers 403 or `OVER_LIMIT`), whatever its budget, shadow mode or failure mode.
    Blocked,
}

impl Outcome {
    /// Every outcome, for metrics that pre-register their label values.
    pub const ALL: [Outcome; 6] = [
        Outcome::Allowed,
        Outcome::ShadowDenied,
        Outcome::Degraded,
        Outcome::Denied,
        Outcome::Error,
        Outcome::Blocked,
    ];

    /// The label: `allowed`, `shadow_denied`, `degraded`, `denied`, `error` or `blocked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Degraded => "degraded",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
            Outcome::Blocked => "blocked",
        }
    }

    /// Whether the request passes.
    pub fn allows(self) -> bool {
        matches!(self, Outcome::Allowed | Outcome::ShadowDenied | Outcome::Degraded)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule's part in a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleVerdict {
    /// The rule's decision. In a denied request, a rule that would have allowed reports its
    /// budget as it stands: the request spent nothing (its `reset_after` is then an upper bound,
    /// zero when the budget is whole).
    pub decision: Decision,
    /// How this rule came out.
    pub outcome: Outcome,
    /// True for a shadow rule (a policy in shadow mode, or a key outside a gradually enforced
    /// policy's share).
    pub shadow: bool,
    /// The list the rule's key is on, if any: an allow-listed rule is never denied (it was
    /// decided as a question and spent nothing); a deny-listed one blocked the request.
    pub listed: Option<Listed>,
}

/// The engine's answer for a whole request.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Engine, MemoryStore, Outcome, Policy, Rule};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let minute = Policy::new("minute", Algorithm::sliding_log(10, Duration::from_secs(60))?)?;
/// let second = Policy::new("second", Algorithm::sliding_log(1, Duration::from_secs(1))?)?;
/// let rules = [Rule::new(&minute, "k", 1), Rule::new(&second, "k", 1)];
/// assert!(engine.check_all(&rules).await?.allowed());
/// let verdict = engine.check_all(&rules).await?;
/// assert_eq!(verdict.outcome(), Outcome::Denied);
/// // The one-second rule speaks for the request; the minute rule spent nothing.
/// assert_eq!(verdict.deciding().unwrap().0, 1);
/// assert_eq!(verdict.rules()[0].decision.remaining, 9);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Verdict {
    pub(crate) outcome: Outcome,
    pub(crate) rules: Rules,
    pub(crate) store_error: Option<Error>,
    /// For a blocked request: the first deny-listed rule and the entry it matched.
    pub(crate) blocked_by: Option<(usize, Arc<AccessEntry>)>,
    /// Whether the rules that fitted spent (or, for a peek, would spend).
    pub(crate) spends: bool,
}

/// The rules' verdicts, one inline.
#[derive(Debug)]
pub(crate) enum Rules {
    One(RuleVerdict),
    Many(Vec<RuleVerdict>),
}

impl Verdict {
    /// Whether the request passes.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.outcome.allows()
    }

    /// The request's label: `Blocked` if a rule's key is deny-listed, else `Error` if a
    /// `fail_closed` rule met a store failure, else `Denied`
    /// if an enforced rule denied, else `Degraded` if a failure mode decided, else
    /// `ShadowDenied` if a shadow rule would have denied, else `Allowed`.
    #[inline]
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Every rule's verdict, in the order the rules were given.
    #[inline]
    pub fn rules(&self) -> &[RuleVerdict] {
        match &self.rules {
            Rules::One(r) => std::slice::from_ref(r),
            Rules::Many(v) => v,
        }
    }

    /// The enforced rule that speaks for the request, with its index: when denied, the denial
    /// with the longest wait; when allowed, the most restrictive rule (least remaining, then
    /// longest reset), whose numbers belong in rate limit headers. `None` when no enforced rule
    /// has a decision to report.
    pub fn deciding(&self) -> Option<(usize, &RuleVerdict)> {
        let enforced = self.rules().iter().enumerate().filter(|(_, r)| !r.shadow);
        if self.allowed() {
            enforced
                .filter(|(_, r)| r.outcome != Outcome::Error)
                .min_by(|(_, a), (_, b)| {
                    a.decision
                        .remaining
                        .cmp(&b.decision.remaining)
                        .then(b.decision.reset_after.cmp(&a.decision.reset_after))
                })
        } else {
            let blocking = self.outcome;
            enforced
                .filter(|(_, r)| r.outcome == blocking)
                .max_by_key(|(_, r)| r.decision.retry_after.unwrap_or(r.decision.reset_after))
        }
    }

    /// Whether the rules that fitted spent their cost (for a peek: would spend it). The same as
    /// [`allowed`](Self::allowed) unless rules decided apart ([`Rule::apart`](crate::Rule))
    /// denied: they deny the request, and the others have spent all the same.
    #[inline]
    pub fn spends(&self) -> bool {
        self.spends
    }

    /// When denied, how long until a retry can pass; `None` when allowed.
    pub fn retry_after(&self) -> Option<Duration> {
        if self.allowed() {
            return None;
        }
        self.deciding().and_then(|(_, r)| r.decision.retry_after)
    }

    /// True when the store failed and failure modes decided.
    pub fn degraded(&self) -> bool {
        self.store_error.is_some()
    }

    /// For a [`Blocked`](Outcome::Blocked) request: the index of the first deny-listed rule and
    /// the entry its key matched (for logs; a client need not be told which entry).
    pub fn blocked_by(&self) -> Option<(usize, &AccessEntry)> {
        self.blocked_by.as_ref().map(|(i, entry)| (*i, &**entry))
    }

    /// The store failure the failure modes answered, for logs.
    pub fn store_error(&self) -> Option<&Error> {
        self.store_error.as_ref()
    }
}
