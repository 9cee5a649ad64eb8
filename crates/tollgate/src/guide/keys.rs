//! # Keys
//!
//! A key says *whose* budget a request spends: a client address, a user id, an API key, a
//! tenant, or several of them through several rules. The policy says how much budget there is;
//! the key picks the bucket.
//!
//! ## One key type everywhere
//!
//! Every call that takes a key takes anything that is bytes (`impl AsRef<[u8]>`): `&str`,
//! `String`, `&[u8]`, `[u8; N]`, `Vec<u8>`. The same bytes are the same key, whichever type
//! carried them, on the memory store, the [`Engine`](crate::Engine), a [`Rule`](crate::Rule)
//! and the Redis store (`tollgate_redis::RedisStore` has the same `check`, `peek`, `reset` and
//! attempts calls, awaited). The [`Store`](crate::Store) trait itself takes `&[u8]`, which keeps
//! generic code over any store simple.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rule};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! let api = Policy::new("api", Algorithm::sliding_log(4, Duration::from_secs(60))?)?;
//! let user = String::from("user:42");
//!
//! store.check(&api, "user:42", 1)?;
//! store.check(&api, &user, 1)?;
//! store.check(&api, b"user:42", 1)?;
//! assert_eq!(store.check(&api, user.as_bytes().to_vec(), 1)?.remaining, 0); // one key, 4 spent
//!
//! let engine = Engine::new(store);
//! assert!(!engine.check(&api, &user, 1).await?.allowed());
//! assert!(!engine.check_all(&[Rule::new(&api, "user:42", 1)]).await?.allowed());
//! # Ok(()) }
//! ```
//!
//! ## Policies keep keys apart
//!
//! A key lives inside its policy: the same key under two policies is two budgets, so a login
//! policy and an API policy can both key on the user id without sharing anything. Budgets are
//! filed under the [`Policy`](crate::Policy)'s *name*, so give each limit its own name: two
//! policies sharing a name would meet in one budget.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, MemoryStore, Policy};
//!
//! let store = MemoryStore::new();
//! let minute = Duration::from_secs(60);
//! let login = Policy::new("login", Algorithm::sliding_log(1, minute)?)?;
//! let search = Policy::new("search", Algorithm::sliding_log(1, minute)?)?;
//! assert!(store.check(&login, "alice", 1)?.allowed);
//! assert!(store.check(&search, "alice", 1)?.allowed); // another budget
//! assert!(!store.check(&login, "alice", 1)?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What makes a good key
//!
//! - **Whose abuse you want to stop.** An address stops anonymous floods but lumps together
//!   everyone behind one NAT; an account or API key is fair per customer but lets one attacker
//!   with many accounts through. Real limits often use both: one rule per address, one per user,
//!   decided together with [`Engine::check_all`](crate::Engine::check_all).
//! - **Something the client cannot choose freely.** A header the client sets is a key it can
//!   change on every request; an address read from `X-Forwarded-For` is one it can forge unless
//!   the peer is a proxy you trust (the tower layer's `ClientIp` walks the header only from
//!   trusted proxies). IPv6 clients usually hold a whole /64: group by prefix.
//! - **Bounded in length.** Any bytes are accepted, from 1 to
//!   [`MAX_KEY_LEN`](crate::bounds::MAX_KEY_LEN) (8 KiB); an empty key or a longer one is
//!   refused as bad input, never truncated (two long keys must not collide).
//! - **Not secret.** Keys end up in Redis and, through the top-keys panel, on the dashboard.
//!   Hash a credential before using it as a key.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Error, MemoryStore, Policy};
//!
//! let store = MemoryStore::new();
//! let api = Policy::new("api", Algorithm::sliding_log(5, Duration::from_secs(60))?)?;
//! assert!(matches!(store.check(&api, "", 1), Err(Error::EmptyKey)));
//! let huge = vec![b'k'; tollgate::bounds::MAX_KEY_LEN + 1];
//! assert!(matches!(store.check(&api, &huge, 1), Err(Error::KeyTooLong { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Many keys, bounded memory
//!
//! A flood of fresh keys (every request from a new address) must not grow memory without end.
//! [`MemoryStore`](crate::MemoryStore) holds at most `max_keys` keys and, when full, forgets
//! idle and expired keys first and never one that is limited or blocked, so a flood cannot hand
//! an attacker a fresh budget; if only such keys are left, the check fails with
//! [`Error::StoreFull`](crate::Error::StoreFull) and the policy's failure mode decides (see
//! [`failure_modes`](super::failure_modes)). On Redis every key has a TTL instead.
