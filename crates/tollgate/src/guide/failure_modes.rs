//! # When the store fails
//!
//! A networked store can be slow, unreachable, out of memory or misconfigured; a memory store
//! can be full of keys it must not forget. Then the store cannot decide, and each policy's
//! [`FailureMode`](crate::FailureMode) does, applied once by the [`Engine`](crate::Engine) for
//! every store and every kind of failure:
//!
//! | mode | while the store fails | outcome | for |
//! |---|---|---|---|
//! | `FailOpen` | every request passes | [`Degraded`](crate::Outcome::Degraded) | availability first: catalogues, search |
//! | `FailClosed` | every request is refused, with a short `retry_after` | [`Error`](crate::Outcome::Error) | protection first: logins, payments |
//! | `Local { instances }` (the default, 1) | an in-memory limiter on this instance decides, with the limit divided by `instances` | `Degraded` or `Denied` | a fleet that should stay near its global limit |
//!
//! A store failure is never an `Err` from [`Engine::check`](crate::Engine::check); `Err` is
//! kept for unusable input (an empty key, a zero cost). The verdict says what happened:
//! [`Verdict::outcome`](crate::Verdict::outcome), and [`Verdict::store_error`](crate::Verdict::store_error)
//! with the failure and its class (`timeout`, `connection`, `auth`, `out_of_memory`, ...).
//! A decision is applied at most once: a call that may have reached the store is never sent
//! again.
//!
//! Here is a store that always times out, and three policies over it:
//!
//! ```
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! use tollgate::{Algorithm, Decisions, Engine, Error, FailureMode, Outcome, Policy, Rule, Store, StoreErrorKind};
//!
//! /// A store whose every call times out, as Redis does when its host is gone.
//! struct Away;
//!
//! impl Store for Away {
//!     async fn decide(&self, _: &[Rule<'_>], _: bool) -> Result<Decisions, Error> {
//!         Err(Error::store(StoreErrorKind::Timeout, "no answer within 50ms"))
//!     }
//!     async fn reset(&self, _: &Policy, _: &[u8]) -> Result<(), Error> {
//!         Err(Error::store(StoreErrorKind::Timeout, "no answer within 50ms"))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::new(Away);
//! let limit = || Algorithm::sliding_log(10, Duration::from_secs(60));
//! let search = Policy::new("search", limit()?)?.with_failure_mode(FailureMode::FailOpen);
//! let login = Policy::new("login", limit()?)?.with_failure_mode(FailureMode::FailClosed);
//! let api = Policy::new("api", limit()?)?
//!     .with_failure_mode(FailureMode::Local { instances: NonZeroU32::new(2).unwrap() });
//!
//! let open = engine.check(&search, "198.51.100.4", 1).await?;
//! assert_eq!(open.outcome(), Outcome::Degraded);
//! assert!(open.allowed());
//! assert_eq!(open.store_error().and_then(|e| e.class()), Some("timeout"));
//!
//! let closed = engine.check(&login, "alice", 1).await?;
//! assert_eq!(closed.outcome(), Outcome::Error);
//! assert!(!closed.allowed());
//!
//! // Two instances share the store, so each keeps half the limit locally: 5 of 10.
//! let mut passed = 0;
//! for _ in 0..8 {
//!     passed += u32::from(engine.check(&api, "tenant-7", 1).await?.allowed());
//! }
//! assert_eq!(passed, 5);
//! # Ok(()) }
//! ```
//!
//! ## Choosing a mode
//!
//! - A limit that protects *you* from overload wants `Local`: it keeps limiting through an
//!   outage, per instance, at the share of the limit you give it.
//! - A limit that protects *users* from attackers (passwords, one-time codes) wants
//!   `FailClosed`: a login form that is briefly unavailable beats one that can be brute-forced
//!   while Redis restarts.
//! - A limit that is a courtesy (fair sharing of a cheap endpoint) can be `FailOpen`.
//!
//! On the memory store the only failure is a full store (every key in the way limited or
//! blocked, see [`keys`](super::keys)); on Redis, see the `tollgate-redis` crate for the
//! deadline, the circuit breaker and the classes, and the repository's `docs/failure-modes.md`
//! for every class under every mode.
