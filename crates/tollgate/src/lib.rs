//! tollgate decides, per key, whether a request may pass: atomically, fast, and with memory that
//! stays bounded when bots flood it with new keys.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, MemoryStore, Policy};
//!
//! let store = MemoryStore::new();
//! // At most 20 requests per minute per client, exactly, and a 60 s lock-out after that.
//! let movies = Policy::new("movies", Algorithm::sliding_log(20, Duration::from_secs(60))?)?
//!     .with_block_for(Duration::from_secs(60))?;
//!
//! for _ in 0..20 {
//!     assert!(store.check(&movies, "198.51.100.4", 1)?.allowed);
//! }
//! let denied = store.check(&movies, "198.51.100.4", 1)?;
//! assert!(!denied.allowed);
//! assert_eq!(denied.retry_after.map(|d| d.as_secs()), Some(60));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layout
//!
//! - [`policy`]: a [`Policy`] is a name, an [`Algorithm`] with validated parameters and an
//!   optional `block_for` penalty, and the [`HashTag`] that places its keys in a cluster.
//! - [`algorithm`]: [`Algorithm`], one module per algorithm, each its parameters and a pure
//!   step function on integer microseconds, and [`algorithm::decide`], which adds penalties; it
//!   reads a policy through [`PolicyParts`](algorithm::PolicyParts), since policies are built from it.
//! - [`rate`]: [`Rate`], the pace of the buckets and of GCRA.
//! - [`penalty`]: [`Penalty`], the block after a denial, growing for repeat offenders.
//! - [`lease`]: [`LeaseOptions`], how a networked store may lease a hot key's budget to one
//!   instance (opt-in per policy, with [`Policy::with_lease`]).
//! - [`access`]: allow and deny lists (CIDR ranges, keys, key prefixes; global or per policy),
//!   compiled for a lookup on every request; the [`Engine`] applies them.
//! - [`enforcement`]: gradual enforcement, a policy enforced for a stable share of its keys and
//!   shadowed for the rest ([`Policy::with_enforcement`]).
//! - [`overrides`]: [`Override`] and the [`OverrideStore`] trait: another limit for one key or
//!   key prefix of a policy, set at run time, kept in the store so every instance applies it.
//! - [`concurrency`]: [`ConcurrencyPolicy`](concurrency::ConcurrencyPolicy) and the
//!   [`ConcurrencyStore`](concurrency::ConcurrencyStore) trait: at most `n` requests of a key in
//!   flight, with leases that are released or expire.
//! - [`attempts`]: the attempts counter for brute-force protection.
//! - [`decision`]: [`Decision`], [`Charged`], [`AttemptTry`] and [`AttemptsStatus`], the answers.
//! - [`rule`]: a [`Rule`] is one limit of a request: a policy, a key, a cost, shadow or not.
//! - [`engine`]: the [`Engine`] decides a request's rules all or nothing on any store, applies
//!   failure modes once, and labels the [`Outcome`]; every door (HTTP, gRPC, middleware, proxy)
//!   goes through it.
//! - [`store`]: the [`Store`] trait every backend implements (one atomic `decide` of a list of
//!   rules; `reset`, `refund`, and `charge`, a cost recorded after the fact that is never
//!   refused and may leave a key in debt), the [`AttemptsStore`] trait beside it, and the input
//!   checks they share.
//! - [`memory`]: [`MemoryStore`], the embedded, bounded, sharded default; a request's rules are
//!   decided under the locks of the shards they touch, taken in order.
//! - [`clock`]: [`Clock`], with [`SystemClock`] and [`ManualClock`] for tests.
//! - [`bounds`]: the accepted range of every parameter.
//! - [`fingerprint`]: [`Fingerprint`], one number for an algorithm's parameters, so a changed
//!   policy is seen across a reload and a fleet.
//! - [`error`]: [`PolicyError`] at construction, [`Error`] from store operations.
//! - [`top_keys`]: [`top_keys::TopKeys`], the most frequent keys of a stream (Space-Saving) in
//!   memory fixed up front, for "who is being limited" without a count per key.
//! - [`headers`]: the IETF `RateLimit-Policy` / `RateLimit` fields and `Retry-After`, as text.
//! - [`guide`]: documentation only, to read in order: [choosing an algorithm](guide::choosing)
//!   (burst versus rate), [keys](guide::keys), [failure modes](guide::failure_modes),
//!   [moving to Redis](guide::redis).
//!
//! This crate does no I/O, keeps no process-global state and needs no async runtime.

pub mod access;
pub mod algorithm;
pub mod attempts;
pub mod bounds;
pub mod cidr;
pub mod clock;
pub mod concurrency;
pub mod decision;
pub mod enforcement;
pub mod engine;
pub mod error;
pub mod fingerprint;
pub mod guide;
pub mod headers;
pub mod lease;
pub mod memory;
pub mod overrides;
pub mod penalty;
pub mod policy;
pub mod rate;
pub mod rule;
pub mod store;
pub mod top_keys;

pub use algorithm::Algorithm;
pub use algorithm::fixed_window::Anchor;
pub use algorithm::migrate::OnChange;
pub use cidr::{Cidr, CidrError};
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::{AttemptTry, AttemptsStatus, Charged, Decision, Decisions, PerRule};
pub use enforcement::Enforcement;
pub use engine::{Charges, Done, Engine, EngineBuilder, Op, Outcome, Request, RuleVerdict, Settled, Verdict};
pub use error::{Error, PolicyError, StoreErrorKind};
pub use fingerprint::Fingerprint;
pub use lease::LeaseOptions;
pub use memory::{MemoryStore, MemoryStoreBuilder};
pub use overrides::{Override, OverrideStore, OverrideTarget};
pub use penalty::Penalty;
pub use policy::{FailureMode, HashTag, Policy};
pub use rate::Rate;
pub use rule::{Apart, Rule};
pub use store::{AttemptsStore, Store};

/// The examples of `docs/penalties.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/penalties.md")]
struct PenaltiesDoc;

/// The examples of `docs/login.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/login.md")]
struct LoginDoc;

/// The examples of `docs/calendar-quotas.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/calendar-quotas.md")]
struct CalendarQuotasDoc;

/// The examples of `docs/access-lists.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/access-lists.md")]
struct AccessListsDoc;

/// The examples of `docs/gradual-enforcement.md`, run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/gradual-enforcement.md")]
struct GradualEnforcementDoc;
