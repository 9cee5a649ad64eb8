//! # Costs known after the response
//!
//! Some budgets are spent in units known only once the work is done: the tokens of a model's
//! answer, the rows of a report, the bytes of a download. A check cannot ask for them up front,
//! and a check that refuses what does not fit would let such a budget leak: the answer that
//! crosses the budget was already served. The pattern is two operations:
//!
//! 1. **Before**, ask whether the key is past its limit: a [question](crate::Rule::as_question)
//!    of cost 0, [`Engine::peek_all`](crate::Engine::peek_all). A budget exactly spent is not
//!    past it; a key in debt is.
//! 2. **After**, [charge](crate::Engine::charge) what it really cost. A charge is never refused
//!    for budget: it records its cost whatever is left, and past the limit the key goes into
//!    debt, which the algorithm pays back the way it forgets spending (a window's end, a log's
//!    entries leaving it, a bucket's refill, GCRA's rate). Until then the key is past its limit.
//!
//! A client can so use at most its budget plus the cost of the responses it had in flight when
//! it crossed it. In an axum or tower app, `tollgate_tower::ChargeAfterLayer` does both steps
//! around a handler, reading the cost off the response (an `x-tokens-used` header, say) or
//! counting a streamed body's bytes until it ends; over
//! HTTP the server offers `POST /v1/charge`; behind Envoy, a descriptor asked with a
//! `hits_addend` of 0 and debited with the real one after the response is this same pattern.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rule};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::new(MemoryStore::new());
//! let tokens = Policy::new("tokens", Algorithm::sliding_log(1_000, Duration::from_secs(3_600))?)?;
//! let mut served = 0;
//! for _ in 0..10 {
//!     // Before: is the tenant past its budget?
//!     let past = engine.peek_all(&[Rule::new(&tokens, "tenant-a", 0).as_question()]).await?;
//!     if !past.allowed() {
//!         continue;
//!     }
//!     served += 1;
//!     // ... call the model; its answer used 600 tokens ...
//!     let charged = engine.charge(&tokens, "tenant-a", 600).await?;
//!     // The second answer took the tenant to 1,200 of 1,000: 200 owed.
//!     assert_eq!(charged.rules[0].debt, if served == 2 { 200 } else { 0 });
//! }
//! assert_eq!(served, 2);
//! # Ok(())
//! # }
//! ```
//!
//! **Reserve, then settle**, when an estimate is known up front: check the estimate, then give
//! back what was not used ([`Engine::refund`](crate::Engine::refund)) or charge what was used
//! beyond it. Either way the key ends where a check of the actual cost would have left it.
