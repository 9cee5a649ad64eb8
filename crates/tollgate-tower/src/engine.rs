//! The engine behind a layer, with its store type erased, so `RateLimitLayer` and `RateLimit<S>`
//! carry no store type parameter.
//!
//! The core's `Engine::run` returns `impl Future`, which a trait object cannot hold, so
//! [`SharedEngine::run`] boxes each call's future (one allocation per request). That is noise
//! next to a network round trip, but most of the cost of a decision in memory. A store that
//! never waits says so ([`Store::ANSWERS_AT_ONCE`], the memory store): its futures, and so the
//! engine's over it, are ready at their first poll. [`SharedEngine::run_now`] uses that: it
//! polls the future once, in place, and returns what was settled with nothing allocated.

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use tollgate::{Engine, Error, Request, Settled, Store, StoreErrorKind};

type SettledFuture<'a> = Pin<Box<dyn Future<Output = Result<Settled, Error>> + Send + 'a>>;

/// The engine operations the layer needs, object safe.
pub(crate) trait SharedEngine: Send + Sync {
    /// Whether the store decides without waiting, so that [`run_now`](Self::run_now) can be
    /// used.
    fn decides_at_once(&self) -> bool;

    /// [`Engine::run`], now, for a store that [decides at once](Self::decides_at_once). Any
    /// other store is refused with an error, nothing done.
    fn run_now(&self, request: &Request<'_>) -> Result<Settled, Error>;

    /// [`Engine::run`], as a boxed future.
    fn run<'a>(&'a self, request: &'a Request<'a>) -> SettledFuture<'a>;
}

impl<S: Store + 'static> SharedEngine for Engine<S> {
    fn decides_at_once(&self) -> bool {
        S::ANSWERS_AT_ONCE
    }

    fn run_now(&self, request: &Request<'_>) -> Result<Settled, Error> {
        if !S::ANSWERS_AT_ONCE {
            return Err(not_at_once("this store has to be waited for"));
        }
        let future = pin!(Engine::run(self, request));
        match future.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(settled) => settled,
            // Not reached: the store has nothing to wait for. Should that change, the request
            // is refused (the future is dropped undecided) rather than let through.
            Poll::Pending => Err(not_at_once("the store's answer was not ready at its first poll")),
        }
    }

    fn run<'a>(&'a self, request: &'a Request<'a>) -> SettledFuture<'a> {
        Box::pin(Engine::run(self, request))
    }
}

fn not_at_once(what: &'static str) -> Error {
    Error::store(StoreErrorKind::Timeout, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use tollgate::{Algorithm, MemoryStore, Op, Outcome, Policy, Rate, Rule};

    #[test]
    fn an_engine_over_memory_answers_now_and_spends_once() -> Result<(), Box<dyn std::error::Error>> {
        let policy = Policy::new("p", Algorithm::gcra(Rate::per_minute(1)?, 1)?)?;
        let engine: Arc<dyn SharedEngine> = Arc::new(Engine::new(MemoryStore::new()));
        let request = Request::one(Op::Check(Rule::new(&policy, b"k", 1)));
        assert!(engine.decides_at_once());
        let outcome = |settled: Settled| settled.verdict.map(|v| v.outcome());
        assert_eq!(outcome(engine.run_now(&request)?), Some(Outcome::Allowed));
        assert_eq!(outcome(engine.run_now(&request)?), Some(Outcome::Denied));
        Ok(())
    }
}
