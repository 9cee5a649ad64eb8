//! The line format: one JSON object per request, what it asked and what it was answered, in the
//! terms `tollgate replay` runs again. Fields at their default are left out.
//!
//! ```json
//! {"time_us":1732665600000000,"door":"http","ops":[{"op":"check","policy":"movies","key":"alice","cost":1}],"outcome":"allowed"}
//! {"time_us":1732665600000050,"door":"http","ops":[{"op":"charge","policy":"tokens","key":"alice","cost":1200,"debt":200,"recorded":true,"answer":"denied"}],"outcome":"denied"}
//! {"time_us":1732665600000100,"door":"grpc","domain":"edge","descriptors":[{"entries":[["remote_address","192.0.2.7"]]}],"ops":[{"op":"check","policy":"envoy:edge.remote_address","key":"remote_address_192.0.2.7","cost":1}],"outcome":"denied"}
//! ```
//!
//! Lines written before ops were logged carry `rules` instead of `ops`, each a check
//! (`{"policy","key","cost"}`): they read as ops of kind `check`, so a replay reads old and new
//! logs alike. A line's `outcome` is worked out by [`LoggedOutcome::settled`] for the doors
//! whose request is its ops, the same function a replay decides with, so a logged outcome and
//! a replayed one cannot mean different things.

use std::hash::{BuildHasher, Hasher};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use serde::{Deserialize, Serialize};
use tollgate::{Done, Op, Outcome, Request, Rule, Settled};

/// The door a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Door {
    /// The JSON API: `POST /v1/check`, `POST /v1/charge`, `POST /v1/refund`.
    Http,
    /// The Envoy rate limit service over gRPC.
    Grpc,
    /// The Envoy rate limit service over HTTP, `POST /json`.
    Json,
    /// `tollgate proxy`'s routes.
    Proxy,
}

impl Door {
    /// The door's name, as lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Grpc => "grpc",
            Door::Json => "json",
            Door::Proxy => "proxy",
        }
    }
}

/// What a request was answered, in the three terms a replay compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggedOutcome {
    /// Let through (allowed, only a shadow rule would have denied, or a failure mode allowed).
    Allowed,
    /// Refused: over a limit, or on a deny list; or a charge that took its key past its limit.
    Denied,
    /// The store failed and a `fail_closed` policy refused, or a refund failed.
    Error,
}

impl LoggedOutcome {
    /// The outcome's name, as lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            LoggedOutcome::Allowed => "allowed",
            LoggedOutcome::Denied => "denied",
            LoggedOutcome::Error => "error",
        }
    }

    /// The outcome of a request whose ops are the whole request (a rules door's: `http`,
    /// `proxy`), from what one [`Engine::run`](tollgate::Engine::run) settled: the worst of
    /// the checks' verdict (`denied` when a listed key blocked it), each charge (`denied` when
    /// it left a debt: over the limit, as the Envoy doors answer a charge past it) and each
    /// refund (`error` when the store failed). Charges and refunds alone are `allowed`
    /// otherwise: neither is ever refused for budget.
    ///
    /// ```
    /// use tollgate::{Algorithm, Engine, MemoryStore, Op, Policy, Request, Rule};
    /// use tollgate_server::decision_log::LoggedOutcome;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::new(MemoryStore::new());
    /// let tokens = Policy::new("tokens", Algorithm::sliding_log(1_000, std::time::Duration::from_secs(3600))?)?;
    /// let charge = |cost| Request::one(Op::Charge(Rule::new(&tokens, "tenant-a", cost)));
    /// let first = charge(600);
    /// assert_eq!(LoggedOutcome::settled(&first, &engine.run(&first).await?), LoggedOutcome::Allowed);
    /// // 1,200 of 1,000: a debt of 200.
    /// let second = charge(600);
    /// assert_eq!(LoggedOutcome::settled(&second, &engine.run(&second).await?), LoggedOutcome::Denied);
    /// # Ok(())
    /// # }
    /// ```
    pub fn settled(request: &Request<'_>, settled: &Settled) -> LoggedOutcome {
        let mut outcome = match &settled.verdict {
            Some(verdict) => LoggedOutcome::from(verdict.outcome()),
            None => LoggedOutcome::Allowed,
        };
        if settled.blocked {
            outcome = outcome.max(LoggedOutcome::Denied);
        }
        for (op, done) in request.ops().iter().zip(&settled.ops) {
            let this = match (op, done) {
                (Op::Charge(_), Done::Charged { charged, .. }) if charged.debt > 0 => LoggedOutcome::Denied,
                (Op::Refund(_), Done::Refunded(Err(_))) => LoggedOutcome::Error,
                _ => continue,
            };
            outcome = outcome.max(this);
        }
        outcome
    }

    /// Worse of the two: `error` over `denied` over `allowed`.
    fn max(self, other: LoggedOutcome) -> LoggedOutcome {
        let rank = |o: LoggedOutcome| match o {
            LoggedOutcome::Allowed => 0,
            LoggedOutcome::Denied => 1,
            LoggedOutcome::Error => 2,
        };
        if rank(other) > rank(self) { other } else { self }
    }
}

impl From<Outcome> for LoggedOutcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Allowed | Outcome::ShadowDenied | Outcome::Degraded => LoggedOutcome::Allowed,
            Outcome::Denied | Outcome::Blocked => LoggedOutcome::Denied,
            Outcome::Error => LoggedOutcome::Error,
        }
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// When it was decided, in microseconds since the Unix epoch.
    pub time_us: u64,
    /// Through which door.
    pub door: Door,
    /// An Envoy door's domain (`grpc`, `json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// An Envoy door's descriptors, as they came.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<LoggedDescriptor>,
    /// An Envoy request's `hits_addend` (0, the default, counts as 1).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hits_addend: u32,
    /// What the request asked of the engine, in its order, with what each charge and refund
    /// was answered. Older lines' `rules` read as checks.
    #[serde(default, alias = "rules", skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<LoggedOp>,
    /// What it was answered.
    pub outcome: LoggedOutcome,
}

/// What an op asks: the [`Op`]s a line records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// [`Op::Check`]; also every rule of a line written before ops were logged.
    #[default]
    Check,
    /// [`Op::Count`]: a check under upstream's counting.
    Count,
    /// [`Op::Peek`]: looked at, recording nothing.
    Peek,
    /// [`Op::Charge`]: a cost recorded whatever is left.
    Charge,
    /// [`Op::Refund`]: a cost given back.
    Refund,
}

impl OpKind {
    /// The kind's name, as lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Check => "check",
            OpKind::Count => "count",
            OpKind::Peek => "peek",
            OpKind::Charge => "charge",
            OpKind::Refund => "refund",
        }
    }

    /// The op of this kind for `rule`.
    pub fn op(self, rule: Rule<'_>) -> Op<'_> {
        match self {
            OpKind::Check => Op::Check(rule),
            OpKind::Count => Op::Count(rule),
            OpKind::Peek => Op::Peek(rule),
            OpKind::Charge => Op::Charge(rule),
            OpKind::Refund => Op::Refund(rule),
        }
    }
}

/// One op of a request, and for a charge or a refund what it was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedOp {
    /// What it asks (`check` when left out, as in older lines' `rules`).
    #[serde(default)]
    pub op: OpKind,
    /// The policy's name.
    pub policy: String,
    /// The key, or its keyed hash.
    pub key: String,
    /// The cost.
    pub cost: u64,
    /// A charge: the units it left owed past the limit.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub debt: u64,
    /// A charge: whether it was recorded (false when the store failed and the failure mode
    /// could not record it, or when the request held its charges back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<bool>,
    /// A charge or a refund: what a check of cost 1 of the key got right after it (`allowed`,
    /// `denied`), or `error` for a refund the store could not make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<LoggedOutcome>,
}

/// An Envoy descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedDescriptor {
    /// Its entries, `[key, value]` (the value hashed when keys are).
    pub entries: Vec<[String; 2]>,
    /// Its own `hits_addend`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: it gives its hits back.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refund: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// An Envoy request as it came, and its overall answer, which only the door's plan knows.
#[derive(Debug, Clone, Copy)]
pub struct EnvoyAsked<'a> {
    /// The domain.
    pub domain: &'a str,
    /// The descriptors as they came.
    pub descriptors: &'a [RateLimitDescriptor],
    /// The request's `hits_addend`.
    pub hits_addend: u32,
    /// The overall answer: `denied` for `OVER_LIMIT`, `error` for `UNAVAILABLE`.
    pub outcome: LoggedOutcome,
}

/// What a door asked and was answered, borrowed from the request: all a line is made of.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// A request one [`Engine::run`](tollgate::Engine::run) settled: a rules door's, whose
    /// outcome is [`LoggedOutcome::settled`], or an Envoy door's (`envoy`) with its own.
    Run {
        /// The ops.
        request: &'a Request<'a>,
        /// What the engine made of them.
        settled: &'a Settled,
        /// The Envoy request they were planned from.
        envoy: Option<EnvoyAsked<'a>>,
    },
    /// Checks decided elsewhere (the proxy's tower layer), and their verdict's outcome.
    Checks(&'a [Rule<'a>], Outcome),
}

impl Asked<'_> {
    /// Whether the request decided anything: a rules door's request of peeks only (`GET
    /// /v1/limits/...`) spent nothing and is not logged. An Envoy request is, whatever its ops:
    /// one refused at the door is only looked at, and was answered all the same.
    pub(super) fn decided(&self) -> bool {
        match self {
            Asked::Run {
                request, envoy: None, ..
            } => request
                .ops()
                .iter()
                .any(|op| !matches!(op, Op::Peek(_) | Op::Listed(_))),
            _ => true,
        }
    }

    /// The hash sampling goes by: every key of the request (its rules' keys, or its Envoy
    /// descriptors' values), so that every request of a kept key is kept.
    pub(super) fn sample_hash(&self, hasher: &impl BuildHasher) -> u64 {
        let mut h = hasher.build_hasher();
        match self {
            Asked::Run {
                envoy: Some(envoy), ..
            } => envoy
                .descriptors
                .iter()
                .flat_map(|d| &d.entries)
                .for_each(|entry| h.write(entry.value.as_bytes())),
            Asked::Run { request, .. } => request
                .ops()
                .iter()
                .filter_map(Op::rule)
                .for_each(|rule| h.write(rule.key)),
            Asked::Checks(rules, _) => rules.iter().for_each(|rule| h.write(rule.key)),
        }
        h.finish()
    }

    /// The line of the request through `door`, decided at `time_us`.
    pub(super) fn line(&self, door: Door, time_us: u64) -> LogLine {
        let mut line = LogLine {
            time_us,
            door,
            domain: None,
            descriptors: Vec::new(),
            hits_addend: 0,
            ops: Vec::new(),
            outcome: LoggedOutcome::Allowed,
        };
        match *self {
            Asked::Checks(rules, outcome) => {
                line.ops = rules.iter().map(|rule| logged_op(OpKind::Check, rule)).collect();
                line.outcome = outcome.into();
            }
            Asked::Run {
                request,
                settled,
                envoy,
            } => {
                line.ops = logged_ops(request, settled);
                line.outcome = match envoy {
                    Some(envoy) => envoy.outcome,
                    None => LoggedOutcome::settled(request, settled),
                };
                if let Some(envoy) = envoy {
                    line.domain = Some(envoy.domain.to_owned());
                    line.hits_addend = envoy.hits_addend;
                    line.descriptors = envoy.descriptors.iter().map(logged_descriptor).collect();
                }
            }
        }
        line
    }
}

/// Each op of `request` but listed keys (which no rule limits and a replay plans again), with
/// what each charge and refund was answered.
fn logged_ops(request: &Request<'_>, settled: &Settled) -> Vec<LoggedOp> {
    let answer = |allowed: bool| match allowed {
        true => LoggedOutcome::Allowed,
        false => LoggedOutcome::Denied,
    };
    request
        .ops()
        .iter()
        .zip(&settled.ops)
        .filter_map(|(op, done)| {
            let (kind, rule) = match op {
                Op::Check(rule) => (OpKind::Check, rule),
                Op::Count(rule) => (OpKind::Count, rule),
                Op::Peek(rule) => (OpKind::Peek, rule),
                Op::Charge(rule) => (OpKind::Charge, rule),
                Op::Refund(rule) => (OpKind::Refund, rule),
                _ => return None,
            };
            let mut logged = logged_op(kind, rule);
            match done {
                Done::Charged { charged, recorded } => {
                    logged.debt = charged.debt;
                    logged.recorded = Some(*recorded);
                    logged.answer = Some(answer(charged.decision.allowed));
                }
                Done::Held(decision) => {
                    logged.recorded = Some(false);
                    logged.answer = Some(answer(decision.allowed));
                }
                Done::Refunded(Ok(decision)) => logged.answer = Some(answer(decision.allowed)),
                Done::Refunded(Err(_)) => logged.answer = Some(LoggedOutcome::Error),
                _ => {}
            }
            Some(logged)
        })
        .collect()
}

fn logged_op(op: OpKind, rule: &Rule<'_>) -> LoggedOp {
    LoggedOp {
        op,
        policy: rule.policy.name().to_owned(),
        key: String::from_utf8_lossy(rule.key).into_owned(),
        cost: rule.cost,
        debt: 0,
        recorded: None,
        answer: None,
    }
}

fn logged_descriptor(descriptor: &RateLimitDescriptor) -> LoggedDescriptor {
    LoggedDescriptor {
        entries: descriptor
            .entries
            .iter()
            .map(|e| [e.key.clone(), e.value.clone()])
            .collect(),
        hits_addend: descriptor.hits_addend.map(|a| a.value),
        refund: descriptor.is_negative_hits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_line_of_rules_reads_as_checks() {
        let old = r#"{"time_us":7,"door":"http","rules":[{"policy":"movies","key":"alice","cost":2}],"outcome":"denied"}"#;
        let line: LogLine = serde_json::from_str(old).expect("an older line");
        assert_eq!(line.ops.len(), 1);
        assert_eq!(line.ops[0].op, OpKind::Check);
        assert_eq!((line.ops[0].key.as_str(), line.ops[0].cost), ("alice", 2));
        assert_eq!(line.outcome, LoggedOutcome::Denied);
        // Written again, it is a line of ops.
        let written = serde_json::to_string(&line).expect("encode");
        assert_eq!(
            written,
            r#"{"time_us":7,"door":"http","ops":[{"op":"check","policy":"movies","key":"alice","cost":2}],"outcome":"denied"}"#
        );
    }

    #[test]
    fn an_op_of_an_unknown_kind_is_refused_naming_it() {
        let line = r#"{"time_us":7,"door":"http","ops":[{"op":"borrow","policy":"p","key":"k","cost":1}],"outcome":"allowed"}"#;
        let err = serde_json::from_str::<LogLine>(line).expect_err("an unknown op");
        assert!(err.to_string().contains("unknown variant `borrow`"), "{err}");
    }

    #[test]
    fn a_charge_line_carries_its_debt_and_answer() {
        let line = LogLine {
            time_us: 1,
            door: Door::Http,
            domain: None,
            descriptors: Vec::new(),
            hits_addend: 0,
            ops: vec![LoggedOp {
                op: OpKind::Charge,
                policy: "tokens".into(),
                key: "tenant-a".into(),
                cost: 600,
                debt: 200,
                recorded: Some(true),
                answer: Some(LoggedOutcome::Denied),
            }],
            outcome: LoggedOutcome::Denied,
        };
        let written = serde_json::to_string(&line).expect("encode");
        assert_eq!(
            written,
            r#"{"time_us":1,"door":"http","ops":[{"op":"charge","policy":"tokens","key":"tenant-a","cost":600,"debt":200,"recorded":true,"answer":"denied"}],"outcome":"denied"}"#
        );
        assert_eq!(serde_json::from_str::<LogLine>(&written).expect("decode"), line);
    }

    #[test]
    fn the_worse_outcome_wins() {
        use LoggedOutcome::{Allowed, Denied, Error};
        assert_eq!(Allowed.max(Denied), Denied);
        assert_eq!(Denied.max(Allowed), Denied);
        assert_eq!(Error.max(Denied), Error);
        assert_eq!(Allowed.max(Allowed), Allowed);
    }
}
