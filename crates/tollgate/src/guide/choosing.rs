//! # Choosing an algorithm
//!
//! Every algorithm answers the same question (may this key spend `cost` now?) with an exact
//! `retry_after`, and runs the same on every store. They differ in what "20 per minute" means,
//! what they remember per key, and how they treat a client that was quiet and comes back in a
//! hurry.
//!
//! | you want | use |
//! |---|---|
//! | exactly N in *any* span of the window: logins, password resets, anything an attacker probes | [`Algorithm::sliding_log`](crate::Algorithm::sliding_log) |
//! | about N per window for a large N, two counters per key: per-user or per-tenant quotas | [`Algorithm::sliding_window`](crate::Algorithm::sliding_window) |
//! | a quota per calendar period ("1 000 an hour, reset on the hour") | [`Algorithm::fixed_window`](crate::Algorithm::fixed_window) |
//! | a steady pace with room for bursts: smoothing traffic to a backend | [`Algorithm::gcra`](crate::Algorithm::gcra) |
//! | the same, pictured as tokens or as a draining bucket | [`Algorithm::token_bucket`](crate::Algorithm::token_bucket), [`Algorithm::leaky_bucket`](crate::Algorithm::leaky_bucket) |
//!
//! ## In plain words
//!
//! - **Fixed window**: a counter per key and window; the counter starts again at zero with
//!   each window. The cheapest, and a client can spend the limit at the end of one window and
//!   again at the start of the next: `2 × limit` within moments.
//! - **Sliding log**: the time of every admitted request; a new one passes if fewer than `limit`
//!   are younger than the window. Exact in every span, at one entry per admitted request.
//! - **Sliding window counter**: this window's and the previous window's counters, the previous
//!   one weighted by how much of it still overlaps the last `window`. Two counters, the boundary
//!   burst closed, an estimate otherwise.
//! - **Token bucket**: a bucket of `capacity` tokens, full at the start, refilled at a rate; a
//!   request takes `cost` tokens. **Leaky bucket** is its mirror (requests fill it, it drains)
//!   and admits the same traffic. **GCRA** admits the same again with one timestamp per key.
//!
//! ## Burst versus rate
//!
//! The window algorithms have one number, the limit per window. The buckets and GCRA have two:
//! the **rate**, what a client gets in the long run, and the **burst**, how far ahead of that
//! pace it may run after a quiet spell. So "20 a minute, burst 20" allows `20 + 20 × minutes`
//! since the client was last quiet, not "20 in any minute". A polite bot sending one request
//! every 2 s (30 a minute) shows the difference: the sliding log passes 20 in every minute from
//! the start, while GCRA passes the bot's first 58 requests (the burst plus the refill) before
//! settling at exactly 20 a minute.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, ManualClock, MemoryStore, Policy, Rate};
//!
//! let minute = Duration::from_secs(60);
//! let log = Policy::new("log", Algorithm::sliding_log(20, minute)?)?;
//! let gcra = Policy::new("gcra", Algorithm::gcra(Rate::per_minute(20)?, 20)?)?;
//!
//! // One request every 2 s for 10 minutes, on a simulated clock; admitted per minute.
//! let per_minute = |policy: &Policy| -> Result<Vec<u32>, tollgate::Error> {
//!     let clock = ManualClock::new(1_000_000_000);
//!     let store = MemoryStore::builder().clock(clock.clone()).build();
//!     let mut minutes = vec![0; 10];
//!     for i in 0..300 {
//!         if store.check(policy, "bot", 1)?.allowed {
//!             minutes[i / 30] += 1;
//!         }
//!         clock.advance(Duration::from_secs(2));
//!     }
//!     Ok(minutes)
//! };
//!
//! assert_eq!(per_minute(&log)?, [20; 10]);
//! // The burst of 20 and one refill every 3 s cover the bot's first two minutes almost whole;
//! // then only the refill is left: the rate.
//! assert_eq!(per_minute(&gcra)?, [30, 29, 20, 20, 20, 20, 20, 20, 20, 20]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The boundary attack is the opposite case: a fresh client with everything at once. There
//! the burst is all a bucket gives, and only the fixed window lets twice the limit through.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, Policy, Rate};
//!
//! let minute = Duration::from_secs(60);
//! let contenders = [
//!     (Algorithm::fixed_window(100, minute, Anchor::Epoch)?, 200),
//!     (Algorithm::sliding_log(100, minute)?, 100),
//!     (Algorithm::sliding_window(100, minute)?, 100),
//!     (Algorithm::gcra(Rate::per_minute(100)?, 100)?, 100),
//! ];
//! for (algorithm, expected) in contenders {
//!     let policy = Policy::new("api", algorithm)?;
//!     // 100 requests at 0:59.9 and 100 at 1:00.0, windows aligned to the epoch.
//!     let clock = ManualClock::new(59_900_000);
//!     let store = MemoryStore::builder().clock(clock.clone()).build();
//!     let mut admitted = 0;
//!     for at_us in [59_900_000, 60_000_000] {
//!         clock.set_us(at_us);
//!         for _ in 0..100 {
//!             admitted += u32::from(store.check(&policy, "client", 1)?.allowed);
//!         }
//!     }
//!     assert_eq!(admitted, expected);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Choose the burst for what a well-behaved client does at once (a page load's parallel calls)
//! and the rate for its sustained pace. When the rule is "never more than N in any minute",
//! that is a window limit: a sliding log (or sliding window for large N), or a bucket with a
//! small burst. Limits combine, too: give a request a GCRA rule and a long sliding window rule,
//! and [`Engine::check_all`](crate::Engine::check_all) decides both together, all or nothing.
//!
//! Measured speed, accuracy under several traffic shapes and memory per key of each algorithm,
//! on memory, Redis and Redis Cluster: the repository's `docs/compare.md`; the charts of these
//! two scenarios explained: `docs/algorithms.md`.
