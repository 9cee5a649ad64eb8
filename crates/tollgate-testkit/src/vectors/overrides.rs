//! Runtime overrides, set and removed between decisions: each step a set, a removal, or a
//! decision under whatever override is in force, with the answer every store must give. The
//! steps are the table `overrides.txt`.

use std::time::Duration;

use tollgate::overrides::{Override, OverrideStore, OverrideTarget};
use tollgate::{Algorithm, Decision, Error, Policy, Rule, Store};

use super::T0_US;
use super::table::{self, Block, Row};

/// What an override step does.
#[derive(Debug, Clone)]
pub enum OverrideOp {
    /// `set_override` of the vector's policy.
    Set(OverrideTarget, Algorithm, Option<Duration>),
    /// `remove_override`; expects whether there was one in `expect.0`.
    Remove(OverrideTarget),
    /// `check(policy, key, cost)`.
    Check(Vec<u8>, u64),
    /// `peek(policy, key, cost)`.
    Peek(Vec<u8>, u64),
    /// Two enforced rules of the vector's policy, `(key, cost)` each, decided together (on a
    /// cluster, two slots).
    Both([(Vec<u8>, u64); 2]),
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

/// Every override vector of `overrides.txt`.
pub fn overrides() -> Vec<OverrideVector> {
    table::blocks("overrides.txt", include_str!("overrides.txt"))
        .iter()
        .map(|block| {
            let policy = block.policy();
            OverrideVector {
                name: block.name,
                steps: steps(block, &policy),
                policy,
            }
        })
        .collect()
}

/// `at set TARGET {fields}`, `at remove TARGET yes|no`, `at check|peek key cost ANSWER`, or `at
/// both key cost ANSWER` followed by `and key cost ANSWER`.
fn steps(block: &Block, policy: &Policy) -> Vec<OverrideStep> {
    let mut steps = Vec::new();
    let mut rows = block.rows.iter();
    while let Some(row) = rows.next() {
        let at_ms = row.at_ms(0);
        let (op, expect) = match row.word(1) {
            "set" => {
                row.expect_len(4);
                let parsed = tollgate_config::ours::parse_override(block.file, row.word(3), policy)
                    .unwrap_or_else(|e| row.fail(&e.to_string()));
                (OverrideOp::Set(target(row), parsed.algorithm, parsed.ttl), vec![])
            }
            "remove" => {
                row.expect_len(4);
                (OverrideOp::Remove(target(row)), vec![(row.yes(3), 0, 0, None)])
            }
            "check" => (OverrideOp::Check(row.key(2), row.number(3)), vec![answer(row, 4)]),
            "peek" => (OverrideOp::Peek(row.key(2), row.number(3)), vec![answer(row, 4)]),
            "both" => {
                let Some(second) = rows.next().filter(|next| next.word(0) == "and") else {
                    row.fail("a `both` line is followed by an `and` line")
                };
                let rules = [(row.key(2), row.number(3)), (second.key(1), second.number(2))];
                (OverrideOp::Both(rules), vec![answer(row, 4), answer(second, 3)])
            }
            other => row.fail(&format!("unknown op `{other}`")),
        };
        steps.push(OverrideStep { at_ms, op, expect });
    }
    steps
}

/// Word 2 as an override's target: `key:K` or `prefix:P`.
fn target(row: &Row) -> OverrideTarget {
    let word = row.word(2);
    let (kind, value) = word
        .split_once(':')
        .unwrap_or_else(|| row.fail("expected key:K or prefix:P"));
    let value = table::key(value).unwrap_or_else(|message| row.fail(&message));
    match kind {
        "key" => OverrideTarget::key(value),
        "prefix" => OverrideTarget::prefix(value),
        _ => row.fail("expected key:K or prefix:P"),
    }
}

/// `allowed remaining limit retry` from word `at` on, the last words of the line.
fn answer(row: &Row, at: usize) -> (bool, u64, u64, Option<u64>) {
    row.expect_len(at + 4);
    (
        row.yes(at),
        row.number(at + 1),
        row.number(at + 2),
        row.ms(at + 3),
    )
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
                OverrideOp::Both([(a, cost_a), (b, cost_b)]) => store
                    .decide(&[Rule::new(p, a, *cost_a), Rule::new(p, b, *cost_b)], true)
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
