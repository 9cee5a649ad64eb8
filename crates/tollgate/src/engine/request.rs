//! [`Request`]: everything one client request asks of the engine, in one value, so that every
//! door (HTTP, gRPC, the tower layer, explain, replay) reads its input, builds one request, makes
//! one [`Engine::run`](super::Engine::run) call and answers from the [`Settled`] result. The
//! order of the steps (checks first, all or nothing; then charges, refunds and over-limit
//! counting) and the failure modes are the engine's, never a door's.

use std::time::Duration;

use crate::{Charged, Decision, Error, PerRule, Rule, Verdict};

/// One thing a request asks of the engine.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Op<'a> {
    /// Decided with every other check of the request in one atomic store call, all or nothing,
    /// and spent when the request is admitted.
    Check(Rule<'a>),
    /// A check under upstream's counting (envoyproxy/ratelimit): decided with the checks, and
    /// when the store refuses it, charged its cost all the same, the key going into debt as
    /// upstream's counter goes past its limit. Give it [`Apart::Alone`](crate::Apart) so that
    /// it spends on its own.
    Count(Rule<'a>),
    /// Looked at as a check would be, recording nothing.
    Peek(Rule<'a>),
    /// A cost known after the fact, recorded whatever is left (see
    /// [`Store::charge`](crate::Store::charge)).
    Charge(Rule<'a>),
    /// Gives back up to the rule's cost (see [`Store::refund`](crate::Store::refund)).
    Refund(Rule<'a>),
    /// A key no rule limits that a global deny list still judges: a deny-listed one blocks the
    /// request (its checks are then only looked at, and nothing is spent).
    Listed(&'a [u8]),
}

impl<'a> Op<'a> {
    /// The op's rule; `None` for [`Op::Listed`].
    pub fn rule(&self) -> Option<&Rule<'a>> {
        match self {
            Op::Check(rule) | Op::Count(rule) | Op::Peek(rule) | Op::Charge(rule) | Op::Refund(rule) => {
                Some(rule)
            }
            Op::Listed(_) => None,
        }
    }

    /// Whether the op is decided with the checks, all or nothing.
    pub(crate) fn checks(&self) -> bool {
        matches!(self, Op::Check(_) | Op::Count(_))
    }
}

/// The ops of one request, and how they are run.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Done, Engine, MemoryStore, Op, Policy, Request, Rule};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(MemoryStore::new());
/// let calls = Policy::new("calls", Algorithm::sliding_log(10, Duration::from_secs(60))?)?;
/// let tokens = Policy::new("tokens", Algorithm::sliding_log(1_000, Duration::from_secs(60))?)?;
/// // Check the call, and charge the tokens the previous answer took.
/// let request = Request::new(vec![
///     Op::Check(Rule::new(&calls, "tenant-a", 1)),
///     Op::Charge(Rule::new(&tokens, "tenant-a", 1_200)),
/// ]);
/// let settled = engine.run(&request).await?;
/// assert!(settled.allowed());
/// let Done::Charged { charged, recorded } = &settled.ops[1] else { unreachable!() };
/// assert!(*recorded && charged.debt == 200);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    /// One op inline: a request of one check allocates nothing.
    pub(crate) ops: PerRule<Op<'a>>,
    pub(crate) unlisted: bool,
    pub(crate) hold_charges: bool,
}

impl<'a> Request<'a> {
    /// A request of `ops`, run in the engine's order whatever their order here; answers come
    /// back in this order.
    pub fn new(ops: Vec<Op<'a>>) -> Self {
        Request {
            ops: PerRule::from(ops),
            unlisted: false,
            hold_charges: false,
        }
    }

    /// A request of one op, allocating nothing.
    pub fn one(op: Op<'a>) -> Self {
        Request {
            ops: PerRule::One(op),
            unlisted: false,
            hold_charges: false,
        }
    }

    /// The ops.
    pub fn ops(&self) -> &[Op<'a>] {
        &self.ops
    }

    /// Answers as if there were no allow or deny list: what the limits and the budget alone
    /// say. For an answer that must not tell whether a key is listed (explain, to a caller
    /// without the admin token).
    #[must_use]
    pub fn unlisted(mut self) -> Self {
        self.unlisted = true;
        self
    }

    /// Records no charge unless the checks admit the request: when a listed key blocks it, its
    /// checks refuse it, or it has peeks and no check, each charge is looked at instead, as a
    /// check of cost 1 ([`Done::Held`]). Upstream's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    #[must_use]
    pub fn holding_charges_when_refused(mut self) -> Self {
        self.hold_charges = true;
        self
    }
}

/// A request of the ops, allocating nothing for one.
impl<'a> FromIterator<Op<'a>> for Request<'a> {
    fn from_iter<I: IntoIterator<Item = Op<'a>>>(ops: I) -> Self {
        Request {
            ops: ops.into_iter().collect(),
            unlisted: false,
            hold_charges: false,
        }
    }
}

/// What one op came to, in the request's order.
#[derive(Debug)]
#[non_exhaustive]
pub enum Done {
    /// A check or a count: its verdict is the `usize`-th rule of [`Settled::verdict`].
    Checked(usize),
    /// A peek: its verdict is the `usize`-th rule of [`Settled::peeked`].
    Peeked(usize),
    /// A charge: what a check of cost 1 would get after it, the debt, and whether it was
    /// recorded anywhere (in the store, or in the `Local` failure mode's limiter).
    Charged {
        /// The answer.
        charged: Charged,
        /// False when the store failed and the cost could be recorded nowhere.
        recorded: bool,
    },
    /// A charge held back ([`Request::holding_charges_when_refused`]): what a check of cost 1
    /// would get.
    Held(Decision),
    /// A refund: the store's answer after it, or why it failed (a refund has no failure mode).
    Refunded(Result<Decision, Error>),
    /// A listed key: whether a global deny list holds it.
    Listed {
        /// It blocked the request.
        denied: bool,
    },
}

/// The engine's answer to a [`Request`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Settled {
    /// The checks' and counts' verdict, their rules in request order; `None` without any.
    pub verdict: Option<Verdict>,
    /// Whether the checks were recorded; false when a listed key blocked the request and they
    /// were only looked at.
    pub spent: bool,
    /// The peeks' verdict, their rules in request order; `None` without any.
    pub peeked: Option<Verdict>,
    /// Per op, in the request's order.
    pub ops: PerRule<Done>,
    /// A listed key ([`Op::Listed`]) is on a global deny list.
    pub blocked: bool,
    /// The store's error while charging (a charge or an over-limit count), when it failed.
    pub charge_error: Option<Error>,
    /// When the request was run, on the engine's clock, since the Unix epoch.
    pub now: Duration,
}

impl Settled {
    /// Whether the request passes: no listed key blocked it and its checks (if any) allow.
    pub fn allowed(&self) -> bool {
        !self.blocked && self.verdict.as_ref().is_none_or(Verdict::allowed)
    }

    /// Every store error the request met: the checks', the peeks', the charges'.
    pub fn store_errors(&self) -> impl Iterator<Item = &Error> {
        [
            self.verdict.as_ref().and_then(Verdict::store_error),
            self.peeked.as_ref().and_then(Verdict::store_error),
            self.charge_error.as_ref(),
        ]
        .into_iter()
        .flatten()
    }
}
