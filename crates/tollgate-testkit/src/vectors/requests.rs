//! Requests limited by several rules, decided all or nothing by one [`Store::decide`]: each step
//! the rules of one request, with each rule's answer. The steps are the table `requests.txt`.

use tollgate::{Decision, Policy, Rule, Store};

use super::T0_US;
use super::table::{self, Block, Row};

/// One rule of a multi-rule step.
#[derive(Debug, Clone)]
pub struct RuleSpec {
    /// The policy: an index into [`MultiVector::policies`].
    pub policy: usize,
    /// The key.
    pub key: Vec<u8>,
    /// The cost.
    pub cost: u64,
    /// Whether it is a shadow rule (counted, never denying).
    pub shadow: bool,
}

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

/// Every multi-rule vector of `requests.txt`.
pub fn multi() -> Vec<MultiVector> {
    table::blocks("requests.txt", include_str!("requests.txt"))
        .iter()
        .map(|block| MultiVector {
            name: block.name,
            policies: block.policies(),
            steps: steps(block),
        })
        .collect()
}

/// `at decide|peek RULE`, then `and RULE` for each further rule of the request.
fn steps(block: &Block) -> Vec<MultiStep> {
    let mut steps: Vec<MultiStep> = Vec::new();
    for row in &block.rows {
        let first = if row.word(0) == "and" {
            1
        } else {
            let commit = match row.word(1) {
                "decide" => true,
                "peek" => false,
                other => row.fail(&format!("expected decide, peek or and, got `{other}`")),
            };
            steps.push(MultiStep {
                at_ms: row.at_ms(0),
                rules: Vec::new(),
                commit,
                expect: Vec::new(),
            });
            2
        };
        let Some(step) = steps.last_mut() else {
            row.fail("an `and` line before any request")
        };
        let (rule, expect) = rule(block, row, first);
        step.rules.push(rule);
        step.expect.push(expect);
    }
    steps
}

/// `policy key cost [shadow] allowed remaining retry`, from word `at` on.
fn rule(block: &Block, row: &Row, at: usize) -> (RuleSpec, (bool, u64, Option<u64>)) {
    let shadow = row.word(at + 3) == "shadow";
    let answer = at + 3 + usize::from(shadow);
    row.expect_len(answer + 3);
    let rule = RuleSpec {
        policy: block.policy_index(row, row.word(at)),
        key: row.key(at + 1),
        cost: row.number(at + 2),
        shadow,
    };
    (
        rule,
        (row.yes(answer), row.number(answer + 1), row.ms(answer + 2)),
    )
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
                .map(|rule| {
                    let decided = Rule::new(&vector.policies[rule.policy], &rule.key, rule.cost);
                    if rule.shadow { decided.as_shadow() } else { decided }
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
