//! The guide: how to use tollgate well, in chapters that read top to bottom, each with examples
//! that run as tests. Nothing here is code; it is documentation with a place in the API docs,
//! next to the items it talks about.
//!
//! - [`choosing`]: the six algorithms in plain words, which to use when, and what "20 per
//!   minute" means for each: burst versus rate, shown on a simulated clock.
//! - [`keys`]: what to count a request against, the key types every call accepts, how policies
//!   keep keys apart, and what makes a good key.
//! - [`failure_modes`]: what happens when the store cannot decide, per policy: admit, refuse,
//!   or keep limiting locally, and how to tell from a verdict.
//! - [`charges`]: budgets whose cost is known only after the response (LLM tokens, bytes):
//!   ask whether the key is past its limit before, charge the real cost after.
//! - [`redis`]: moving from the memory store to Redis or Redis Cluster without rewriting the
//!   code that checks: generic code over [`Store`](crate::Store), the [`Engine`](crate::Engine),
//!   hash tags.
//!
//! The same ground, for operators rather than programmers, is in the repository's `docs/`:
//! `algorithms.md`, `failure-modes.md`, `redis.md`.

pub mod charges;
pub mod choosing;
pub mod failure_modes;
pub mod keys;
pub mod redis;
