//! Conformance vectors: (time, key, cost) -> expected decision, shared by every store; and
//! charges that go into debt, refused checks while it lasts and the debt paid back; and
//! multi-rule vectors: (time, rules) -> expected decision of each rule, for
//! [`tollgate::Store::decide`]'s all-or-nothing; and concurrency vectors, leases acquired,
//! released and expired; and override vectors: overrides set and removed between decisions, for
//! [`tollgate::OverrideStore`].
//!
//! The same vectors run against the memory store, standalone Redis and Redis Cluster, on a
//! manual clock (the Redis store passes that clock's time to its scripts), and every store must
//! give exactly the expected decisions. [`run`] drives one store through every vector and returns
//! each step's full decision, so tests can also require the stores to agree on every field,
//! `reset_after` included.
//!
//! The vectors are tables, one file per kind, compiled in and read when a test asks for them:
//! `decisions.txt` ([`all`], [`run`]), `requests.txt` ([`multi`], [`run_multi`]), `leases.txt`
//! ([`concurrency`], [`run_concurrency`]) and `overrides.txt` ([`overrides`](fn@overrides),
//! [`run_overrides`]). Each file's header says what its columns mean; each vector's policies are
//! written as tollgate's config writes them.

mod decisions;
mod leases;
mod overrides;
mod requests;
mod table;

pub use decisions::{Op, Step, Subject, Vector, all, run};
pub use leases::{LeaseOp, LeaseStep, LeaseVector, concurrency, run_concurrency};
pub use overrides::{OverrideOp, OverrideStep, OverrideVector, overrides, run_overrides};
pub use requests::{MultiStep, MultiVector, RuleSpec, multi, run_multi};

/// A multiple of every window used here, so epoch-aligned windows start at offset 0.
pub const T0_US: u64 = 28_333_333 * 60_000_000;

#[cfg(test)]
mod tests {
    /// Every table reads, and every vector has a step.
    #[test]
    fn every_table_reads() {
        assert!(super::all().iter().all(|v| !v.steps.is_empty()));
        assert!(super::multi().iter().all(|v| !v.steps.is_empty()));
        assert!(super::concurrency().iter().all(|v| !v.steps.is_empty()));
        assert!(super::overrides().iter().all(|v| !v.steps.is_empty()));
    }
}
