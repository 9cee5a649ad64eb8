//! One decision at a time: each step a check, peek, reset, refund or charge of one key, with
//! the answer every store must give. The steps are the table `decisions.txt`.

use std::future::Future;

use tollgate::{Decision, Error, Policy, Rule};

use super::T0_US;
use super::table::{self, Row};

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
    pub key: Vec<u8>,
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

/// Every vector of `decisions.txt`.
pub fn all() -> Vec<Vector> {
    table::blocks("decisions.txt", include_str!("decisions.txt"))
        .iter()
        .map(|block| Vector {
            name: block.name,
            policy: block.policy(),
            steps: block.rows.iter().map(step).collect(),
        })
        .collect()
}

/// `at op key [cost allowed remaining retry [debt]]`.
fn step(row: &Row) -> Step {
    let op = match row.word(1) {
        "check" => Op::Check,
        "peek" => Op::Peek,
        "reset" => Op::Reset,
        "refund" => Op::Refund,
        "charge" => Op::Charge,
        other => row.fail(&format!("unknown op `{other}`")),
    };
    if op == Op::Reset {
        row.expect_len(3);
        return Step {
            at_ms: row.at_ms(0),
            key: row.key(2),
            op,
            cost: 1,
            expect: (true, 0, None),
            debt: 0,
        };
    }
    row.expect_len(if op == Op::Charge { 8 } else { 7 });
    Step {
        at_ms: row.at_ms(0),
        key: row.key(2),
        op,
        cost: row.number(3),
        expect: (row.yes(4), row.number(5), row.ms(6)),
        debt: if op == Op::Charge { row.number(7) } else { 0 },
    }
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
        let key = step.key.as_slice();
        match step.op {
            Op::Check => self.check(policy, key, step.cost).await.map(decided),
            Op::Peek => self.peek(policy, key, step.cost).await.map(decided),
            Op::Reset => self.reset(policy, key).await.map(|()| None),
            Op::Refund => self.refund(policy, key, step.cost).await.map(decided),
            Op::Charge => {
                let charged = self.charge(&[Rule::new(policy, key, step.cost)]).await?;
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
