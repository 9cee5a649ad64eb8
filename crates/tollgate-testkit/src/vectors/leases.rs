//! Concurrency policies: each step an acquisition, a release or a reading of a key's leases,
//! with the answer every store must give. The steps are the table `leases.txt`.

use std::time::Duration;

use tollgate::concurrency::ConcurrencyPolicy;

use super::T0_US;
use super::table::{self, Row};

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
    pub key: Vec<u8>,
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
    pub policy: ConcurrencyPolicy,
    /// The steps, in time order.
    pub steps: Vec<LeaseStep>,
}

/// Every concurrency vector of `leases.txt`.
pub fn concurrency() -> Vec<LeaseVector> {
    table::blocks("leases.txt", include_str!("leases.txt"))
        .iter()
        .map(|block| LeaseVector {
            name: block.name,
            policy: block.concurrency_policy(),
            steps: block.rows.iter().map(step).collect(),
        })
        .collect()
}

/// `at op key answer in_flight ms [last_ms]`.
fn step(row: &Row) -> LeaseStep {
    let op = match row.word(1) {
        "acquire" => LeaseOp::Acquire,
        "in_flight" => LeaseOp::InFlight,
        "release:unknown" => LeaseOp::ReleaseUnknown,
        other => match other.strip_prefix("release:").map(str::parse) {
            Some(Ok(n)) => LeaseOp::Release(n),
            _ => row.fail(&format!("unknown op `{other}`")),
        },
    };
    let (answer, last_expiry_ms) = if op == LeaseOp::InFlight {
        if row.word(3) != "-" {
            row.fail("an in_flight step answers `-`");
        }
        let last = match row.words().len() {
            6 => None,
            7 => row.ms(6),
            _ => row.fail("expected 6 or 7 words"),
        };
        (false, last)
    } else {
        row.expect_len(6);
        (row.yes(3), None)
    };
    LeaseStep {
        at_ms: row.at_ms(0),
        key: row.key(2),
        op,
        expect: (answer, row.number(4), row.ms(5)),
        last_expiry_ms,
    }
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
                LeaseOp::Acquire => match store.acquire(&vector.policy, &step.key).await {
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
                LeaseOp::InFlight => match store.in_flight(&vector.policy, &step.key).await {
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
                    match store.release(&vector.policy, &step.key, id).await {
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
