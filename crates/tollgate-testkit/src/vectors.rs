//! Conformance vectors: (time, key, cost) -> expected decision, shared by every store; and
//! charges that go into debt, refused checks while it lasts and the debt paid back; and
//! multi-rule vectors: (time, rules) -> expected decision of each rule, for
//! [`tollgate::Store::decide`]'s all-or-nothing; and override vectors: overrides set and removed
//! between decisions, for [`tollgate::OverrideStore`].
//!
//! The same vectors run against the memory store, standalone Redis and Redis Cluster, on a
//! manual clock (the Redis store passes that clock's time to its scripts), and every store must
//! give exactly the expected decisions. [`run`] drives one store through every vector and returns
//! each step's full decision, so tests can also require the stores to agree on every field,
//! `reset_after` included.

use std::future::Future;
use std::time::Duration;

use tollgate::algorithm::calendar_quota::{Period, Weekday};
use tollgate::overrides::{Override, OverrideStore, OverrideTarget};
use tollgate::{Algorithm, Anchor, Decision, Error, HashTag, Penalty, Policy, Rate, Rule, Store};

/// A multiple of every window used here, so epoch-aligned windows start at offset 0.
pub const T0_US: u64 = 28_333_333 * 60_000_000;

/// What a step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `check(policy, key, cost)`.
    Check,
    /// `peek(policy, key, cost)`.
    Peek,
    /// `reset(policy, key)`; expects nothing.
    Reset,
    /// `refund(policy, key, cost)`; expects what a peek of cost 1 says after it.
    Refund,
    /// `charge([Rule::new(policy, key, cost)])`; expects what a peek of cost 1 says after it, and
    /// the debt.
    Charge,
}

/// One step: at `T0_US + at_ms`, do `op` on `key` with `cost`; expect `(allowed, remaining,
/// retry_after in ms)`.
#[derive(Debug, Clone)]
pub struct Step {
    /// Milliseconds after `T0_US`.
    pub at_ms: u64,
    /// The key.
    pub key: &'static [u8],
    /// The operation.
    pub op: Op,
    /// The cost.
    pub cost: u64,
    /// Expected `(allowed, remaining, retry_after_ms)`; ignored for `Reset`.
    pub expect: (bool, u64, Option<u64>),
    /// Expected debt of a `Charge`; 0 for the other operations.
    pub debt: u64,
}

/// A policy and its steps.
#[derive(Debug, Clone)]
pub struct Vector {
    /// What the vector shows.
    pub name: &'static str,
    /// The policy.
    pub policy: Policy,
    /// The steps, in time order.
    pub steps: Vec<Step>,
}

const fn ok(at_ms: u64, cost: u64, remaining: u64) -> Step {
    Step {
        at_ms,
        key: b"k",
        op: Op::Check,
        cost,
        expect: (true, remaining, None),
        debt: 0,
    }
}

const fn no(at_ms: u64, cost: u64, remaining: u64, retry_ms: u64) -> Step {
    Step {
        at_ms,
        key: b"k",
        op: Op::Check,
        cost,
        expect: (false, remaining, Some(retry_ms)),
        debt: 0,
    }
}

/// A refund of `cost` at `at_ms`, expecting a peek of cost 1 after it to say `expect`.
const fn refund(at_ms: u64, cost: u64, expect: (bool, u64, Option<u64>)) -> Step {
    Step {
        at_ms,
        key: b"k",
        op: Op::Refund,
        cost,
        expect,
        debt: 0,
    }
}

/// A charge of `cost` at `at_ms`, expecting `debt` and a peek of cost 1 after it to say `expect`.
const fn charge(at_ms: u64, cost: u64, debt: u64, expect: (bool, u64, Option<u64>)) -> Step {
    Step {
        at_ms,
        key: b"k",
        op: Op::Charge,
        cost,
        expect,
        debt,
    }
}

/// Milliseconds from `T0_US` to a UTC time written as RFC 3339, for the calendar vectors.
fn utc(text: &str) -> u64 {
    let at: jiff::Timestamp = text.parse().expect("vector time");
    (at.as_microsecond() as u64 - T0_US) / 1000
}

fn calendar(name: &str, limit: u64, period: Period, zone: &str) -> Policy {
    policy(name, Algorithm::calendar_quota(limit, period, zone))
}

const fn peek(step: Step) -> Step {
    Step { op: Op::Peek, ..step }
}

const fn on(key: &'static [u8], step: Step) -> Step {
    Step { key, ..step }
}

const fn reset(at_ms: u64) -> Step {
    Step {
        at_ms,
        key: b"k",
        op: Op::Reset,
        cost: 1,
        expect: (true, 0, None),
        debt: 0,
    }
}

fn policy(name: &str, algorithm: Result<Algorithm, tollgate::PolicyError>) -> Policy {
    Policy::new(name, algorithm.expect("vector algorithm")).expect("vector policy")
}

fn blocking(policy: Policy, block_for: Duration) -> Policy {
    policy.with_block_for(block_for).expect("vector penalty")
}

/// Every vector.
pub fn all() -> Vec<Vector> {
    let s = Duration::from_secs;
    vec![
        Vector {
            name: "fixed window, epoch: resets at the aligned edge; peek changes nothing",
            policy: policy("fw-epoch", Algorithm::fixed_window(3, s(10), Anchor::Epoch)),
            steps: vec![
                ok(0, 1, 2),
                peek(ok(1, 2, 0)),
                ok(5_000, 2, 0),
                peek(no(5_001, 1, 0, 4_999)),
                no(5_001, 1, 0, 4_999),
                no(9_999, 1, 0, 1),
                ok(10_000, 3, 0),
                ok(20_000, 1, 2),
            ],
        },
        Vector {
            name: "fixed window, first hit: the window starts at the first request",
            policy: policy("fw-first", Algorithm::fixed_window(2, s(10), Anchor::FirstHit)),
            steps: vec![
                ok(3_000, 1, 1),
                // Redis keeps the state for its reset time in real time, while these steps run
                // on a manual clock: a state meant to outlive a step by 1 ms could vanish under
                // load, so the window is full a whole second before its end.
                ok(12_000, 1, 0),
                no(12_000, 1, 0, 1_000),
                ok(13_000, 1, 1),
                no(13_000, 2, 1, 10_000),
            ],
        },
        Vector {
            name: "sliding log: each request frees one window after it",
            policy: policy("log", Algorithm::sliding_log(3, s(10))),
            steps: vec![
                ok(0, 1, 2),
                ok(4_000, 1, 1),
                ok(8_000, 1, 0),
                no(9_999, 1, 0, 1),
                ok(10_000, 1, 0),
                no(10_001, 2, 0, 7_999),
                peek(ok(14_000, 1, 0)),
                ok(14_000, 1, 0),
                ok(14_000 + 10_000, 2, 1),
            ],
        },
        Vector {
            name: "sliding log: same-microsecond requests share an entry",
            policy: policy("log-same", Algorithm::sliding_log(4, s(1))),
            steps: vec![
                ok(0, 1, 3),
                ok(0, 2, 1),
                ok(0, 1, 0),
                no(0, 1, 0, 1_000),
                ok(1_000, 4, 0),
            ],
        },
        Vector {
            name: "sliding window: the previous window is weighted by its overlap",
            policy: policy("sw", Algorithm::sliding_window(10, s(10))),
            steps: vec![
                ok(0, 10, 0),
                no(9_000, 1, 0, 2_000),
                ok(11_000, 1, 0),
                no(11_000, 1, 0, 1_000),
                ok(15_000, 4, 0),
                ok(20_000, 5, 0),
                no(20_000, 1, 0, 2_000),
                ok(40_000, 10, 0),
            ],
        },
        Vector {
            name: "token bucket: starts full, one token per interval",
            policy: policy(
                "tb",
                Rate::per_second(2).and_then(|r| Algorithm::token_bucket(3, r)),
            ),
            steps: vec![
                ok(0, 3, 0),
                no(0, 1, 0, 500),
                no(499, 1, 0, 1),
                ok(500, 1, 0),
                no(600, 2, 0, 900),
                ok(1_500, 2, 0),
                ok(10_000, 3, 0),
            ],
        },
        Vector {
            name: "leaky bucket: fills and drains",
            policy: policy(
                "lb",
                Rate::per_second(1).and_then(|r| Algorithm::leaky_bucket(3, r)),
            ),
            steps: vec![
                ok(0, 2, 1),
                ok(100, 1, 0),
                no(200, 1, 0, 800),
                ok(1_000, 1, 0),
                no(1_500, 3, 0, 2_500),
                ok(4_000, 3, 0),
            ],
        },
        Vector {
            name: "gcra: rate 10/s, burst 5, the documented example",
            policy: policy("gcra", Rate::per_second(10).and_then(|r| Algorithm::gcra(r, 5))),
            steps: vec![
                ok(0, 1, 4),
                ok(0, 1, 3),
                ok(0, 1, 2),
                ok(0, 1, 1),
                ok(0, 1, 0),
                no(0, 1, 0, 100),
                ok(100, 1, 0),
                no(150, 1, 0, 50),
                ok(200, 1, 0),
                ok(700, 5, 0),
            ],
        },
        Vector {
            name: "block_for: a denial blocks every check until it ends; reset lifts it",
            policy: blocking(
                policy("blocked", Algorithm::fixed_window(2, s(1), Anchor::Epoch)),
                s(30),
            ),
            steps: vec![
                ok(0, 2, 0),
                no(500, 1, 0, 30_000),
                no(5_000, 1, 0, 25_500),
                on(b"other", ok(5_000, 1, 1)),
                no(30_499, 1, 0, 1),
                ok(30_500, 1, 1),
                ok(31_000, 2, 0),
                no(31_001, 1, 0, 30_000),
                reset(31_002),
                ok(31_003, 2, 0),
            ],
        },
        Vector {
            name: "escalating penalty: each repeat offense within the memory takes the next step, then the last",
            policy: policy("escalating", Algorithm::fixed_window(1, s(1), Anchor::Epoch)).with_penalty(
                Penalty::sequence([s(1), s(10), s(60)])
                    .and_then(|p| p.remember_for(s(30)))
                    .expect("vector penalty"),
            ),
            steps: vec![
                ok(0, 1, 0),
                no(100, 1, 0, 1_000),
                no(500, 1, 0, 600),
                ok(1_100, 1, 0),
                // A peek tells the block a repeat would get, and starts nothing.
                peek(no(1_150, 1, 0, 10_000)),
                no(1_200, 1, 0, 10_000),
                on(b"other", ok(1_300, 1, 0)),
                on(b"other", no(1_400, 1, 0, 1_000)),
                ok(11_200, 1, 0),
                no(11_300, 1, 0, 60_000),
                ok(71_300, 1, 0),
                no(71_400, 1, 0, 60_000),
                // 30 s after the last block ended the offenses are forgotten: the first step again.
                ok(161_400, 1, 0),
                no(161_500, 1, 0, 1_000),
            ],
        },
        Vector {
            name: "escalating penalty by growth: reset forgets the offense count",
            policy: policy("growing", Rate::per_second(1).and_then(|r| Algorithm::gcra(r, 1)))
                .with_penalty(Penalty::growth(s(1), 3, s(9)).expect("vector penalty")),
            steps: vec![
                ok(0, 1, 0),
                no(100, 1, 0, 1_000),
                ok(1_100, 1, 0),
                no(1_200, 1, 0, 3_000),
                ok(4_200, 1, 0),
                no(4_300, 1, 0, 9_000),
                reset(4_400),
                ok(4_500, 1, 0),
                no(4_600, 1, 0, 1_000),
            ],
        },
        Vector {
            name: "refund, fixed window: the count goes down while its window is current",
            policy: policy("refund-fw", Algorithm::fixed_window(3, s(1), Anchor::Epoch)),
            steps: vec![
                ok(0, 3, 0),
                refund(100, 2, (true, 1, None)),
                ok(200, 2, 0),
                no(300, 1, 0, 700),
                // The window has passed: nothing to give back, and a fresh window anyway.
                refund(1_000, 3, (true, 2, None)),
                ok(1_100, 3, 0),
            ],
        },
        Vector {
            name: "refund, sliding log: newest entries first, expired ones untouched",
            policy: policy("refund-log", Algorithm::sliding_log(3, s(1))),
            steps: vec![
                ok(0, 1, 2),
                ok(100, 2, 0),
                refund(200, 1, (true, 0, None)),
                ok(300, 1, 0),
                no(400, 1, 0, 600),
                refund(1_050, 3, (true, 2, None)),
                ok(1_100, 3, 0),
            ],
        },
        Vector {
            name: "refund, sliding window: the newest count first while it weighs",
            policy: policy("refund-sw", Algorithm::sliding_window(4, s(1))),
            steps: vec![
                ok(0, 4, 0),
                refund(500, 1, (true, 0, None)),
                ok(600, 1, 0),
                refund(1_500, 2, (true, 2, None)),
                // The previous window's 2 still weigh 0.4 here: 0.8 + 2 used.
                ok(1_600, 2, 1),
                // 2 from the current count, the other 2 from the previous one.
                refund(1_700, 4, (true, 3, None)),
            ],
        },
        Vector {
            name: "refund, buckets and gcra: the cost comes back, never past full",
            policy: policy(
                "refund-tb",
                Rate::per_second(1).and_then(|r| Algorithm::token_bucket(3, r)),
            ),
            steps: vec![
                ok(0, 2, 1),
                // 1 + 3 tokens, clamped to the capacity of 3.
                refund(100, 3, (true, 2, None)),
                ok(200, 3, 0),
                refund(300, 1, (true, 0, None)),
            ],
        },
        Vector {
            name: "refund, leaky bucket",
            policy: policy(
                "refund-lb",
                Rate::per_second(1).and_then(|r| Algorithm::leaky_bucket(3, r)),
            ),
            steps: vec![ok(0, 3, 0), refund(100, 2, (true, 1, None)), ok(200, 2, 0)],
        },
        Vector {
            name: "refund, gcra",
            policy: policy(
                "refund-gcra",
                Rate::per_second(10).and_then(|r| Algorithm::gcra(r, 5)),
            ),
            steps: vec![
                ok(0, 5, 0),
                refund(10, 2, (true, 1, None)),
                ok(20, 2, 0),
                refund(30, 5, (true, 4, None)),
            ],
        },
        Vector {
            name: "refund gives budget back but never lifts a block",
            policy: blocking(
                policy("refund-blocked", Algorithm::fixed_window(1, s(1), Anchor::Epoch)),
                s(10),
            ),
            steps: vec![
                ok(0, 1, 0),
                no(100, 1, 0, 10_000),
                refund(200, 1, (false, 0, Some(9_900))),
                ok(10_100, 1, 0),
            ],
        },
        Vector {
            name: "calendar quota, daily in Paris across the spring clock change (a 23-hour day)",
            policy: calendar("daily-paris", 2, Period::Day, "Europe/Paris"),
            steps: vec![
                ok(utc("2024-03-30T22:30:00Z"), 2, 0),
                // Midnight in Paris is 23:00 UTC in winter time.
                no(utc("2024-03-30T22:45:00Z"), 1, 0, 15 * 60_000),
                ok(utc("2024-03-30T23:00:00Z"), 1, 1),
                ok(utc("2024-03-31T21:59:59Z"), 1, 0),
                // The next midnight is 22:00 UTC in summer time: 23 hours later.
                no(utc("2024-03-31T21:59:59.5Z"), 1, 0, 500),
                ok(utc("2024-03-31T22:00:00Z"), 2, 0),
            ],
        },
        Vector {
            name: "calendar quota, monthly in UTC at the end of a leap February, with a refund",
            policy: calendar("monthly-utc", 1, Period::Month, "UTC"),
            steps: vec![
                ok(utc("2024-02-29T23:59:59Z"), 1, 0),
                no(utc("2024-02-29T23:59:59.9Z"), 1, 0, 100),
                ok(utc("2024-03-01T00:00:00Z"), 1, 0),
                refund(utc("2024-03-01T00:00:00.1Z"), 1, (true, 0, None)),
                ok(utc("2024-03-01T00:00:00.2Z"), 1, 0),
                no(utc("2024-03-31T23:59:59Z"), 1, 0, 1_000),
            ],
        },
        Vector {
            name: "calendar quota, weekly from Sunday in New York across the fall clock change (169 hours)",
            policy: policy(
                "weekly-new-york",
                Algorithm::calendar_quota(1, Period::Week, "America/New_York").map(|a| match a {
                    Algorithm::CalendarQuota(q) => Algorithm::CalendarQuota(q.week_starts(Weekday::Sunday)),
                    other => other,
                }),
            ),
            steps: vec![
                ok(utc("2024-11-03T04:00:00Z"), 1, 0),
                no(utc("2024-11-09T12:00:00Z"), 1, 0, 17 * 3_600_000),
                ok(utc("2024-11-10T05:00:00Z"), 1, 0),
            ],
        },
        Vector {
            name: "calendar quota, yearly in Tokyo: the year ends at 15:00 UTC",
            policy: calendar("yearly-tokyo", 3, Period::Year, "Asia/Tokyo"),
            steps: vec![
                ok(utc("2024-12-31T14:59:59Z"), 3, 0),
                no(utc("2024-12-31T14:59:59.5Z"), 1, 0, 500),
                ok(utc("2024-12-31T15:00:00Z"), 3, 0),
            ],
        },
        Vector {
            name: "fixed window charge: the count goes past the limit, the window's end clears it",
            policy: policy("charge-fw", Algorithm::fixed_window(4, s(10), Anchor::Epoch)),
            steps: vec![
                ok(0, 1, 3),
                charge(1, 5, 2, (false, 0, Some(9_999))),
                no(2, 1, 0, 9_998),
                ok(10_000, 4, 0),
            ],
        },
        Vector {
            name: "sliding log charge: the units leave the window entry by entry",
            policy: policy("charge-log", Algorithm::sliding_log(4, s(10))),
            steps: vec![
                ok(0, 1, 3),
                charge(1_000, 5, 2, (false, 0, Some(10_000))),
                no(5_000, 1, 0, 6_000),
                no(10_000, 1, 0, 1_000),
                ok(11_000, 4, 0),
            ],
        },
        Vector {
            name: "sliding window charge: the count past the limit is weighted as it slides out",
            policy: policy("charge-sw", Algorithm::sliding_window(4, s(10))),
            steps: vec![
                charge(0, 6, 2, (false, 0, Some(15_000))),
                no(12_000, 1, 0, 3_000),
                ok(15_000, 1, 0),
            ],
        },
        Vector {
            name: "token bucket charge: tokens owed, the refill pays them back first",
            policy: policy(
                "charge-tb",
                Algorithm::token_bucket(4, Rate::per_second(1).unwrap()),
            ),
            steps: vec![
                ok(0, 1, 3),
                charge(500, 5, 2, (false, 0, Some(2_500))),
                no(2_999, 1, 0, 1),
                ok(3_000, 1, 0),
            ],
        },
        Vector {
            name: "leaky bucket charge: the level goes above the capacity and leaks",
            policy: policy(
                "charge-lb",
                Algorithm::leaky_bucket(4, Rate::per_second(1).unwrap()),
            ),
            steps: vec![
                ok(0, 1, 3),
                charge(500, 5, 2, (false, 0, Some(2_500))),
                no(2_999, 1, 0, 1),
                ok(3_000, 1, 0),
            ],
        },
        Vector {
            name: "gcra charge: the TAT moves past now + tolerance",
            policy: policy("charge-gcra", Algorithm::gcra(Rate::per_second(1).unwrap(), 4)),
            steps: vec![
                ok(0, 1, 3),
                charge(500, 5, 2, (false, 0, Some(2_500))),
                no(2_999, 1, 0, 1),
                ok(3_000, 1, 0),
            ],
        },
        Vector {
            name: "calendar quota charge: the period's end clears the debt",
            policy: calendar("charge-daily", 4, Period::Day, "UTC"),
            steps: vec![
                charge(utc("2024-05-01T23:59:59Z"), 6, 2, (false, 0, Some(1_000))),
                no(utc("2024-05-01T23:59:59.5Z"), 1, 0, 500),
                ok(utc("2024-05-02T00:00:00Z"), 4, 0),
            ],
        },
        Vector {
            name: "a charge starts no penalty; the next refused check does",
            policy: blocking(
                policy("charge-block", Algorithm::fixed_window(4, s(10), Anchor::Epoch)),
                s(60),
            ),
            steps: vec![
                charge(0, 5, 1, (false, 0, Some(60_000))),
                peek(no(1, 1, 0, 60_000)),
                ok(10_000, 1, 3),
                charge(10_001, 4, 1, (false, 0, Some(60_000))),
                no(10_002, 1, 0, 60_000),
                no(20_000, 1, 0, 50_002),
            ],
        },
        Vector {
            name: "keys with any bytes are separate",
            policy: policy("bytes", Algorithm::sliding_log(1, s(60))),
            steps: vec![
                on(b"a:b", ok(0, 1, 0)),
                on(b"a", ok(0, 1, 0)),
                on(b"{a}", ok(0, 1, 0)),
                on(b"}a{", ok(0, 1, 0)),
                on(b"a b\n\xff", ok(0, 1, 0)),
                on(b"a:b", no(1, 1, 0, 59_999)),
                on(b"}a{", no(1, 1, 0, 59_999)),
            ],
        },
    ]
}

/// The stores under test, seen through one interface (the Redis store's methods are async).
pub trait Subject {
    /// Runs one step and returns the decision (`None` for a reset) with the debt (0 but for a
    /// charge).
    fn step(
        &self,
        policy: &Policy,
        step: &Step,
    ) -> impl Future<Output = Result<Option<(Decision, u64)>, Error>>;
}

impl<S: tollgate::Store> Subject for S {
    async fn step(&self, policy: &Policy, step: &Step) -> Result<Option<(Decision, u64)>, Error> {
        let decided = |d: Decision| Some((d, 0));
        match step.op {
            Op::Check => self.check(policy, step.key, step.cost).await.map(decided),
            Op::Peek => self.peek(policy, step.key, step.cost).await.map(decided),
            Op::Reset => self.reset(policy, step.key).await.map(|()| None),
            Op::Refund => self.refund(policy, step.key, step.cost).await.map(decided),
            Op::Charge => {
                let charged = self.charge(&[Rule::new(policy, step.key, step.cost)]).await?;
                Ok(charged.first().map(|c| (c.decision, c.debt)))
            }
        }
    }
}

/// Runs every vector on `store`, setting `clock` before each step. Panics naming the vector and
/// step on the first decision that differs from the expectation; returns every decision, in
/// order, so stores can be compared field by field.
pub async fn run(store: &impl Subject, clock: &tollgate::ManualClock) -> Vec<Option<Decision>> {
    let mut decisions = vec![];
    for vector in all() {
        for (i, step) in vector.steps.iter().enumerate() {
            clock.set_us(T0_US + step.at_ms * 1000);
            let decision = store
                .step(&vector.policy, step)
                .await
                .unwrap_or_else(|e| panic!("{}: step {i} failed: {e}", vector.name));
            if let Some((d, debt)) = decision {
                let got = (
                    d.allowed,
                    d.remaining,
                    d.retry_after.map(|r| r.as_micros() as u64),
                    debt,
                );
                let (allowed, remaining, retry_ms) = step.expect;
                let want = (allowed, remaining, retry_ms.map(|ms| ms * 1000), step.debt);
                assert_eq!(got, want, "{}: step {i} at {} ms", vector.name, step.at_ms);
            }
            decisions.push(decision.map(|(d, _)| d));
        }
    }
    decisions
}

/// One rule of a multi-rule step: the policy (an index into [`MultiVector::policies`]), the key,
/// the cost, and whether it is a shadow rule.
pub type RuleSpec = (usize, &'static [u8], u64, bool);

/// One multi-rule step: at `T0_US + at_ms`, decide `rules` together (with `commit`, or as a
/// peek); expect each rule's `(allowed, remaining, retry_after in ms)`, in order.
#[derive(Debug, Clone)]
pub struct MultiStep {
    /// Milliseconds after `T0_US`.
    pub at_ms: u64,
    /// The rules of the request.
    pub rules: Vec<RuleSpec>,
    /// `false` for a peek.
    pub commit: bool,
    /// Expected `(allowed, remaining, retry_after_ms)` per rule.
    pub expect: Vec<(bool, u64, Option<u64>)>,
}

/// Policies and the multi-rule requests made of them.
#[derive(Debug, Clone)]
pub struct MultiVector {
    /// What the vector shows.
    pub name: &'static str,
    /// The policies.
    pub policies: Vec<Policy>,
    /// The steps, in time order.
    pub steps: Vec<MultiStep>,
}

fn request(at_ms: u64, rules: Vec<RuleSpec>, expect: Vec<(bool, u64, Option<u64>)>) -> MultiStep {
    MultiStep {
        at_ms,
        rules,
        commit: true,
        expect,
    }
}

fn look(at_ms: u64, rules: Vec<RuleSpec>, expect: Vec<(bool, u64, Option<u64>)>) -> MultiStep {
    MultiStep {
        commit: false,
        ..request(at_ms, rules, expect)
    }
}

const fn yes(remaining: u64) -> (bool, u64, Option<u64>) {
    (true, remaining, None)
}

const fn denied(retry_ms: u64) -> (bool, u64, Option<u64>) {
    (false, 0, Some(retry_ms))
}

/// Every multi-rule vector. Names differ from [`all`]'s, so both can run on one store. With
/// the default hash tag the rules of a request sit on different cluster slots; the penalty
/// vector tags by key, so its rules share one.
pub fn multi() -> Vec<MultiVector> {
    let s = Duration::from_secs;
    let rate = |n| Rate::per_second(n).expect("vector rate");
    vec![
        MultiVector {
            name: "every rule allows: every rule spends",
            policies: vec![
                policy("mv-all-fw", Algorithm::fixed_window(3, s(10), Anchor::Epoch)),
                policy("mv-all-gcra", Algorithm::gcra(rate(10), 5)),
                policy("mv-all-log", Algorithm::sliding_log(2, s(10))),
            ],
            steps: vec![
                request(
                    0,
                    vec![(0, b"m", 1, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![yes(2), yes(4), yes(1)],
                ),
                request(
                    0,
                    vec![(0, b"m", 2, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![yes(0), yes(3), yes(0)],
                ),
            ],
        },
        MultiVector {
            name: "one rule denies: nothing is spent on any rule",
            policies: vec![
                policy("mv-one-fw", Algorithm::fixed_window(3, s(10), Anchor::Epoch)),
                policy("mv-one-log", Algorithm::sliding_log(1, s(10))),
                policy("mv-one-tb", Algorithm::token_bucket(2, rate(1))),
            ],
            steps: vec![
                request(
                    0,
                    vec![(0, b"m", 1, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![yes(2), yes(0), yes(1)],
                ),
                // The budgets of the rules that would pass are reported untouched, and stay so.
                request(
                    1_000,
                    vec![(0, b"m", 1, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![yes(1), denied(9_000), yes(1)],
                ),
                request(
                    1_000,
                    vec![(0, b"m", 2, false), (2, b"m", 2, false)],
                    vec![yes(0), yes(0)],
                ),
            ],
        },
        MultiVector {
            name: "block_for starts on every rule that denied, and only there",
            policies: vec![
                blocking(
                    policy("mv-pen-fw", Algorithm::fixed_window(1, s(10), Anchor::Epoch)),
                    s(30),
                )
                .with_hash_tag(HashTag::Key),
                blocking(policy("mv-pen-gcra", Algorithm::gcra(rate(1), 1)), s(20))
                    .with_hash_tag(HashTag::Key),
                policy("mv-pen-sw", Algorithm::sliding_window(5, s(10))).with_hash_tag(HashTag::Key),
            ],
            steps: vec![
                request(
                    0,
                    vec![(0, b"m", 1, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![yes(0), yes(0), yes(4)],
                ),
                request(
                    100,
                    vec![(0, b"m", 1, false), (1, b"m", 1, false), (2, b"m", 1, false)],
                    vec![denied(30_000), denied(20_000), yes(3)],
                ),
                request(5_000, vec![(1, b"m", 1, false)], vec![denied(15_100)]),
                request(5_000, vec![(0, b"m", 1, false)], vec![denied(25_100)]),
                request(5_000, vec![(2, b"m", 4, false)], vec![yes(0)]),
            ],
        },
        MultiVector {
            name: "a shadow rule that denies does not deny the request",
            policies: vec![
                policy("mv-shadow-log", Algorithm::sliding_log(1, s(10))),
                policy("mv-shadow-fw", Algorithm::fixed_window(5, s(10), Anchor::Epoch)),
            ],
            steps: vec![
                request(
                    0,
                    vec![(0, b"m", 1, true), (1, b"m", 1, false)],
                    vec![yes(0), yes(4)],
                ),
                request(
                    100,
                    vec![(0, b"m", 1, true), (1, b"m", 1, false)],
                    vec![denied(9_900), yes(3)],
                ),
                request(200, vec![(1, b"m", 1, false)], vec![yes(2)]),
            ],
        },
        MultiVector {
            name: "mixed algorithms: the tightest denies, the others keep their budget; peeks change nothing",
            policies: vec![
                policy("mv-mix-log", Algorithm::sliding_log(2, s(1))),
                policy("mv-mix-lb", Algorithm::leaky_bucket(3, rate(1))),
                policy("mv-mix-gcra", Algorithm::gcra(rate(10), 5)),
                policy("mv-mix-fw", Algorithm::fixed_window(10, s(1), Anchor::FirstHit)),
            ],
            steps: vec![
                request(
                    0,
                    vec![
                        (0, b"u", 1, false),
                        (1, b"u", 1, false),
                        (2, b"u", 1, false),
                        (3, b"u", 1, false),
                    ],
                    vec![yes(1), yes(2), yes(4), yes(9)],
                ),
                request(
                    0,
                    vec![
                        (0, b"u", 1, false),
                        (1, b"u", 1, false),
                        (2, b"u", 1, false),
                        (3, b"u", 1, false),
                    ],
                    vec![yes(0), yes(1), yes(3), yes(8)],
                ),
                request(
                    0,
                    vec![
                        (0, b"u", 1, false),
                        (1, b"u", 1, false),
                        (2, b"u", 1, false),
                        (3, b"u", 1, false),
                    ],
                    vec![denied(1_000), yes(0), yes(2), yes(7)],
                ),
                request(
                    0,
                    vec![(1, b"u", 1, false), (2, b"u", 1, false), (3, b"u", 1, false)],
                    vec![yes(0), yes(2), yes(7)],
                ),
                look(
                    500,
                    vec![(1, b"u", 1, false), (3, b"u", 1, false)],
                    vec![denied(500), yes(6)],
                ),
                look(
                    500,
                    vec![(1, b"u", 1, false), (3, b"u", 1, false)],
                    vec![denied(500), yes(6)],
                ),
                request(
                    1_000,
                    vec![(0, b"u", 2, false), (3, b"u", 1, false)],
                    vec![yes(0), yes(9)],
                ),
            ],
        },
        MultiVector {
            name: "a calendar quota beside another rule: all or nothing, and its day ends at midnight in its zone",
            policies: vec![
                calendar("mv-cal-day", 2, Period::Day, "Asia/Kolkata"),
                policy("mv-cal-log", Algorithm::sliding_log(3, s(3_600))),
            ],
            steps: vec![
                request(
                    utc("2023-11-15T18:29:00Z"),
                    vec![(0, b"c", 1, false), (1, b"c", 1, false)],
                    vec![yes(1), yes(2)],
                ),
                request(
                    utc("2023-11-15T18:29:00Z"),
                    vec![(0, b"c", 1, false), (1, b"c", 1, false)],
                    vec![yes(0), yes(1)],
                ),
                // Midnight in Kolkata (UTC+05:30) is 18:30 UTC: the day's quota is spent until
                // then, and the log's budget stays untouched.
                request(
                    utc("2023-11-15T18:29:30Z"),
                    vec![(0, b"c", 1, false), (1, b"c", 1, false)],
                    vec![denied(30_000), yes(0)],
                ),
                look(
                    utc("2023-11-15T18:29:59.999Z"),
                    vec![(0, b"c", 1, false)],
                    vec![denied(1)],
                ),
                request(
                    utc("2023-11-15T18:30:00Z"),
                    vec![(0, b"c", 1, false), (1, b"c", 1, false)],
                    vec![yes(1), yes(0)],
                ),
            ],
        },
    ]
}

/// Runs every multi-rule vector on `store` through [`Store::decide`], setting `clock` before each
/// step. Panics naming the vector and step on the first decision that differs from the
/// expectation; returns every step's decisions, so stores can be compared field by field.
pub async fn run_multi(store: &impl Store, clock: &tollgate::ManualClock) -> Vec<Vec<Decision>> {
    let mut all_decisions = vec![];
    for vector in multi() {
        for (i, step) in vector.steps.iter().enumerate() {
            clock.set_us(T0_US + step.at_ms * 1000);
            let rules: Vec<Rule<'_>> = step
                .rules
                .iter()
                .map(|&(p, key, cost, shadow)| {
                    let rule = Rule::new(&vector.policies[p], key, cost);
                    if shadow { rule.as_shadow() } else { rule }
                })
                .collect();
            let decisions = store
                .decide(&rules, step.commit)
                .await
                .unwrap_or_else(|e| panic!("{}: step {i} failed: {e}", vector.name));
            let decisions = decisions.as_slice().to_vec();
            let got: Vec<_> = decisions
                .iter()
                .map(|d| {
                    (
                        d.allowed,
                        d.remaining,
                        d.retry_after.map(|r| r.as_micros() as u64),
                    )
                })
                .collect();
            let want: Vec<_> = step
                .expect
                .iter()
                .map(|&(allowed, remaining, retry_ms)| (allowed, remaining, retry_ms.map(|ms| ms * 1000)))
                .collect();
            assert_eq!(got, want, "{}: step {i} at {} ms", vector.name, step.at_ms);
            all_decisions.push(decisions);
        }
    }
    all_decisions
}

/// What a concurrency step does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    /// `acquire(policy, key)`.
    Acquire,
    /// `release(policy, key, id)` of the lease granted by step `n` of the same vector.
    Release(usize),
    /// `release` of an id no store ever granted.
    ReleaseUnknown,
    /// `in_flight(policy, key)`: expects `(false, in_flight, ms until the earliest expiry)`, and
    /// the step's `last_expiry_ms`.
    InFlight,
}

/// One concurrency step: at `T0_US + at_ms`, do `op` on `key`; expect `(granted or released,
/// in_flight, ms)`, where ms is the lease's `expires_in` when granted, the `retry_after` when
/// denied, and `None` for a release.
#[derive(Debug, Clone)]
pub struct LeaseStep {
    /// Milliseconds after `T0_US`.
    pub at_ms: u64,
    /// The key.
    pub key: &'static [u8],
    /// The operation.
    pub op: LeaseOp,
    /// Expected `(granted or released, in_flight, expires_in or retry_after in ms)`.
    pub expect: (bool, u64, Option<u64>),
    /// [`LeaseOp::InFlight`] only: the expected ms until the newest live lease expires.
    pub last_expiry_ms: Option<u64>,
}

/// A concurrency policy and its steps.
#[derive(Debug, Clone)]
pub struct LeaseVector {
    /// What the vector shows.
    pub name: &'static str,
    /// The policy.
    pub policy: tollgate::concurrency::ConcurrencyPolicy,
    /// The steps, in time order.
    pub steps: Vec<LeaseStep>,
}

const fn take(at_ms: u64, in_flight: u64, expires_in_ms: u64) -> LeaseStep {
    LeaseStep {
        at_ms,
        key: b"k",
        op: LeaseOp::Acquire,
        expect: (true, in_flight, Some(expires_in_ms)),
        last_expiry_ms: None,
    }
}

const fn full(at_ms: u64, in_flight: u64, retry_ms: u64) -> LeaseStep {
    LeaseStep {
        at_ms,
        key: b"k",
        op: LeaseOp::Acquire,
        expect: (false, in_flight, Some(retry_ms)),
        last_expiry_ms: None,
    }
}

const fn give_back(at_ms: u64, step: usize, released: bool, in_flight: u64) -> LeaseStep {
    LeaseStep {
        at_ms,
        key: b"k",
        op: LeaseOp::Release(step),
        expect: (released, in_flight, None),
        last_expiry_ms: None,
    }
}

const fn live(at_ms: u64, in_flight: u64, expiries_ms: Option<(u64, u64)>) -> LeaseStep {
    let (next, last) = match expiries_ms {
        Some((next, last)) => (Some(next), Some(last)),
        None => (None, None),
    };
    LeaseStep {
        at_ms,
        key: b"k",
        op: LeaseOp::InFlight,
        expect: (false, in_flight, next),
        last_expiry_ms: last,
    }
}

/// Every concurrency vector: acquire, deny with the earliest expiry as the hint, release,
/// expiry exactly at the timeout, releases of expired and unknown leases, keys apart, and the
/// live leases read without taking a slot.
pub fn concurrency() -> Vec<LeaseVector> {
    use tollgate::concurrency::ConcurrencyPolicy;
    let s = Duration::from_secs;
    let policy = |name: &str, max: u64, timeout: Duration, tag: HashTag| {
        ConcurrencyPolicy::new(name, max, timeout)
            .expect("vector policy")
            .with_hash_tag(tag)
    };
    vec![
        LeaseVector {
            name: "two in flight: the third waits for the earliest expiry; a release frees a slot",
            policy: policy("exports", 2, s(30), HashTag::PolicyAndKey),
            steps: vec![
                take(0, 1, 30_000),
                take(10_000, 2, 30_000),
                full(10_001, 2, 19_999),
                give_back(12_000, 1, true, 1),
                take(12_000, 2, 30_000),
                full(12_000, 2, 18_000),
                give_back(12_500, 1, false, 0),
            ],
        },
        LeaseVector {
            name: "a lease never released ends at its timeout, and cannot be released after",
            policy: policy("jobs", 1, s(5), HashTag::Key),
            steps: vec![
                take(0, 1, 5_000),
                full(4_999, 1, 1),
                take(5_000, 1, 5_000),
                give_back(5_001, 0, false, 0),
                give_back(5_002, 2, true, 0),
                take(5_003, 1, 5_000),
            ],
        },
        LeaseVector {
            name: "keys are apart; an unknown lease is not held",
            policy: policy("uploads", 1, Duration::from_millis(1_500), HashTag::PolicyAndKey),
            steps: vec![
                take(0, 1, 1_500),
                LeaseStep {
                    key: b"other",
                    ..take(1, 1, 1_500)
                },
                LeaseStep {
                    op: LeaseOp::ReleaseUnknown,
                    ..give_back(2, 0, false, 0)
                },
                full(3, 1, 1_497),
                LeaseStep {
                    key: b"other",
                    ..give_back(4, 1, true, 0)
                },
                full(4, 1, 1_496),
            ],
        },
        LeaseVector {
            name: "in_flight counts the live leases and changes nothing; an expired one is not counted",
            policy: policy("reports", 2, s(10), HashTag::PolicyAndKey),
            steps: vec![
                live(0, 0, None),
                take(0, 1, 10_000),
                live(1, 1, Some((9_999, 9_999))),
                live(1, 1, Some((9_999, 9_999))),
                take(4_000, 2, 10_000),
                live(5_000, 2, Some((5_000, 9_000))),
                full(5_000, 2, 5_000),
                live(10_000, 1, Some((4_000, 4_000))),
                live(14_000, 0, None),
                take(14_000, 1, 10_000),
            ],
        },
    ]
}

/// Drives `store` through every concurrency vector on `clock`, asserting each step, and returns
/// each step's answer as `(granted or released, in_flight, µs)` so stores can be compared.
pub async fn run_concurrency(
    store: &impl tollgate::concurrency::ConcurrencyStore,
    clock: &tollgate::ManualClock,
) -> Vec<(bool, u64, Option<u64>)> {
    use tollgate::concurrency::{Acquire, LeaseId, Release};
    let mut answers = vec![];
    for vector in concurrency() {
        let mut granted: Vec<Option<LeaseId>> = vec![];
        for (i, step) in vector.steps.iter().enumerate() {
            clock.set_us(T0_US + step.at_ms * 1000);
            let context = format!("{}: step {i} at {} ms", vector.name, step.at_ms);
            let (got, id) = match step.op {
                LeaseOp::Acquire => match store.acquire(&vector.policy, step.key).await {
                    Ok(Acquire::Granted(lease)) => (
                        (true, lease.in_flight, Some(lease.expires_in.as_micros() as u64)),
                        Some(lease.id),
                    ),
                    Ok(Acquire::Denied(full)) => (
                        (false, full.in_flight, Some(full.retry_after.as_micros() as u64)),
                        None,
                    ),
                    Err(e) => panic!("{context}: {e}"),
                },
                LeaseOp::InFlight => match store.in_flight(&vector.policy, step.key).await {
                    Ok(seen) => {
                        assert_eq!(seen.limit, vector.policy.max_in_flight(), "{context}");
                        let us = |d: Option<Duration>| d.map(|d| d.as_micros() as u64);
                        let last = step.last_expiry_ms.map(|ms| ms * 1000);
                        assert_eq!(us(seen.last_expiry), last, "{context}: last expiry");
                        ((false, seen.in_flight, us(seen.next_expiry)), None)
                    }
                    Err(e) => panic!("{context}: {e}"),
                },
                LeaseOp::Release(_) | LeaseOp::ReleaseUnknown => {
                    let id = match step.op {
                        LeaseOp::Release(n) => {
                            granted[n].unwrap_or_else(|| panic!("{context}: step {n} granted nothing"))
                        }
                        _ => LeaseId::new(u128::MAX),
                    };
                    match store.release(&vector.policy, step.key, id).await {
                        Ok(Release::Released { in_flight }) => ((true, in_flight, None), None),
                        Ok(Release::NotHeld) => ((false, 0, None), None),
                        Err(e) => panic!("{context}: {e}"),
                    }
                }
            };
            let (ok, in_flight, ms) = step.expect;
            assert_eq!(got, (ok, in_flight, ms.map(|ms| ms * 1000)), "{context}");
            granted.push(id);
            answers.push(got);
        }
    }
    answers
}

/// What an override step does.
#[derive(Debug, Clone)]
pub enum OverrideOp {
    /// `set_override` of the vector's policy.
    Set(OverrideTarget, Algorithm, Option<Duration>),
    /// `remove_override`; expects whether there was one in `expect.0`.
    Remove(OverrideTarget),
    /// `check(policy, key, cost)`.
    Check(&'static [u8], u64),
    /// `peek(policy, key, cost)`.
    Peek(&'static [u8], u64),
    /// Two enforced rules of the vector's policy decided together (on a cluster, two slots).
    Both(&'static [u8], &'static [u8]),
}

/// One override step at `T0_US + at_ms`, expecting each decision's `(allowed, remaining,
/// limit, retry_after in ms)` (one for a check, two for `Both`, none for a set; for a remove,
/// `allowed` says whether there was an override).
#[derive(Debug, Clone)]
pub struct OverrideStep {
    /// Milliseconds after `T0_US`.
    pub at_ms: u64,
    /// The operation.
    pub op: OverrideOp,
    /// The expected decisions.
    pub expect: Vec<(bool, u64, u64, Option<u64>)>,
}

/// A policy and its override steps.
#[derive(Debug, Clone)]
pub struct OverrideVector {
    /// What the vector shows.
    pub name: &'static str,
    /// The policy.
    pub policy: Policy,
    /// The steps, in time order.
    pub steps: Vec<OverrideStep>,
}

fn at(at_ms: u64, op: OverrideOp, expect: Vec<(bool, u64, u64, Option<u64>)>) -> OverrideStep {
    OverrideStep { at_ms, op, expect }
}

/// Every override vector. Expiries are given to prefix overrides only: a key override's
/// expiry is the Redis hash's own TTL, on Redis's clock rather than the test's.
pub fn overrides() -> Vec<OverrideVector> {
    use OverrideOp::{Both, Check, Peek, Remove, Set};
    let s = Duration::from_secs;
    let rate = |n| Rate::per_second(n).expect("vector rate");
    let key = |k: &str| OverrideTarget::key(k);
    let prefix = |p: &str| OverrideTarget::prefix(p);
    let log = |n| Algorithm::sliding_log(n, s(10)).expect("vector algorithm");
    let window = |n| Algorithm::fixed_window(n, s(10), Anchor::Epoch).expect("vector algorithm");
    vec![
        OverrideVector {
            name: "a key override raises one key's limit, keeps its spend; removing it restores the policy",
            policy: policy("ov-log", Algorithm::sliding_log(2, s(10))),
            steps: vec![
                at(0, Check(b"k", 1), vec![(true, 1, 2, None)]),
                at(0, Check(b"k", 1), vec![(true, 0, 2, None)]),
                at(0, Check(b"k", 1), vec![(false, 0, 2, Some(10_000))]),
                at(1_000, Set(key("k"), log(5), None), vec![]),
                at(1_000, Peek(b"k", 1), vec![(true, 2, 5, None)]),
                at(1_000, Check(b"k", 1), vec![(true, 2, 5, None)]),
                at(1_000, Check(b"other", 1), vec![(true, 1, 2, None)]),
                at(2_000, Remove(key("k")), vec![(true, 0, 0, None)]),
                at(2_000, Remove(key("k")), vec![(false, 0, 0, None)]),
                at(2_000, Check(b"k", 1), vec![(false, 0, 2, Some(8_000))]),
            ],
        },
        OverrideVector {
            name: "the key beats the longest prefix, which beats a shorter one; a prefix override lapses",
            policy: policy("ov-fw", Algorithm::fixed_window(2, s(10), Anchor::Epoch)),
            steps: vec![
                at(0, Set(prefix("t:"), window(4), None), vec![]),
                at(0, Set(prefix("t:1"), window(6), Some(s(5))), vec![]),
                at(0, Set(key("t:1x"), window(1), None), vec![]),
                at(0, Check(b"t:1a", 1), vec![(true, 5, 6, None)]),
                at(0, Check(b"t:2a", 1), vec![(true, 3, 4, None)]),
                at(0, Check(b"t:1x", 1), vec![(true, 0, 1, None)]),
                at(0, Check(b"t:1x", 1), vec![(false, 0, 1, Some(10_000))]),
                at(0, Check(b"u", 1), vec![(true, 1, 2, None)]),
                // A cost is bounded by the policy's own limit, whatever the override.
                at(4_999, Check(b"t:1a", 2), vec![(true, 3, 6, None)]),
                at(5_000, Check(b"t:1a", 1), vec![(true, 0, 4, None)]),
                at(5_000, Check(b"t:1a", 1), vec![(false, 0, 4, Some(5_000))]),
                at(5_000, Remove(prefix("t:1")), vec![(false, 0, 0, None)]),
                at(5_000, Remove(prefix("t:")), vec![(true, 0, 0, None)]),
                at(5_000, Check(b"t:2a", 1), vec![(true, 0, 2, None)]),
            ],
        },
        OverrideVector {
            name: "a bucket override changes capacity and rate; rules decided together each get theirs",
            policy: policy("ov-tb", Algorithm::token_bucket(2, rate(1))),
            steps: vec![
                at(
                    0,
                    Set(
                        key("a"),
                        Algorithm::token_bucket(10, rate(10)).expect("vector"),
                        None,
                    ),
                    vec![],
                ),
                at(0, Check(b"a", 2), vec![(true, 8, 10, None)]),
                at(0, Both(b"a", b"b"), vec![(true, 7, 10, None), (true, 1, 2, None)]),
                at(0, Both(b"a", b"b"), vec![(true, 6, 10, None), (true, 0, 2, None)]),
                // b is out: nothing is spent on a either (the store reports a as if it had
                // spent; the engine gives its cost back in what it reports).
                at(
                    0,
                    Both(b"a", b"b"),
                    vec![(true, 5, 10, None), (false, 0, 2, Some(1_000))],
                ),
                // 100 ms at 10/s: one more token.
                at(100, Peek(b"a", 1), vec![(true, 6, 10, None)]),
                at(
                    100,
                    Set(
                        key("a"),
                        Algorithm::token_bucket(3, rate(10)).expect("vector"),
                        None,
                    ),
                    vec![],
                ),
                at(100, Check(b"a", 1), vec![(true, 2, 3, None)]),
            ],
        },
    ]
}

/// Runs every override vector on `store`, setting `clock` before each step. Panics naming the
/// vector and step on the first answer that differs from the expectation; returns every
/// decision, so stores can be compared field by field.
pub async fn run_overrides<S: Store + OverrideStore>(
    store: &S,
    clock: &tollgate::ManualClock,
) -> Vec<Decision> {
    let mut all = vec![];
    for vector in overrides() {
        for (i, step) in vector.steps.iter().enumerate() {
            clock.set_us(T0_US + step.at_ms * 1000);
            let fail = |e: Error| -> ! { panic!("{}: step {i} failed: {e}", vector.name) };
            let p = &vector.policy;
            let decisions: Vec<Decision> = match &step.op {
                OverrideOp::Set(target, algorithm, ttl) => {
                    let value =
                        Override::new(p, target.clone(), algorithm.clone(), *ttl).unwrap_or_else(|e| fail(e));
                    store.set_override(p, &value).await.unwrap_or_else(|e| fail(e));
                    vec![]
                }
                OverrideOp::Remove(target) => {
                    let removed = store.remove_override(p, target).await.unwrap_or_else(|e| fail(e));
                    vec![Decision {
                        allowed: removed,
                        ..Decision::default()
                    }]
                }
                OverrideOp::Check(key, cost) => {
                    vec![store.check(p, key, *cost).await.unwrap_or_else(|e| fail(e))]
                }
                OverrideOp::Peek(key, cost) => {
                    vec![store.peek(p, key, *cost).await.unwrap_or_else(|e| fail(e))]
                }
                OverrideOp::Both(a, b) => store
                    .decide(&[Rule::new(p, *a, 1), Rule::new(p, *b, 1)], true)
                    .await
                    .unwrap_or_else(|e| fail(e))
                    .as_slice()
                    .to_vec(),
            };
            let got: Vec<_> = decisions
                .iter()
                .map(|d| {
                    (
                        d.allowed,
                        d.remaining,
                        d.limit,
                        d.retry_after.map(|r| r.as_micros() as u64),
                    )
                })
                .collect();
            let want: Vec<_> = step
                .expect
                .iter()
                .map(|&(allowed, remaining, limit, retry_ms)| {
                    (allowed, remaining, limit, retry_ms.map(|ms| ms * 1000))
                })
                .collect();
            assert_eq!(got, want, "{}: step {i} at {} ms", vector.name, step.at_ms);
            all.extend(decisions);
        }
    }
    all
}
