//! The engine behind a layer, with its store type erased, so `RateLimitLayer` and `RateLimit<S>`
//! carry no store type parameter.
//!
//! The core's `Engine::check_all` returns `impl Future`, which a trait object cannot hold, so
//! [`SharedEngine::check_all`] boxes each call's future (one allocation per request). That is
//! noise next to a network round trip, but most of the cost of a decision in memory. The memory
//! store never waits: its futures, and so the engine's over it, are ready at their first poll.
//! [`SharedEngine::check_all_now`] uses that: for an engine over a `MemoryStore` it polls the
//! future once, in place, and returns the verdict with nothing allocated. The store is
//! recognised by its type (the layer's store is `'static`); any other store returns `None` and
//! is awaited through the boxed future.

use std::any::TypeId;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tollgate::{
    Charges, Clock, Decision, Engine, Error, ManualClock, MemoryStore, Policy, Rule, Store, StoreErrorKind,
    SystemClock, Verdict,
};

type VerdictFuture<'a> = Pin<Box<dyn Future<Output = Result<Verdict, Error>> + Send + 'a>>;
type RefundFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>;
type ChargeFuture<'a> = Pin<Box<dyn Future<Output = Result<Charges, Error>> + Send + 'a>>;

/// The engine operations the layer needs, object safe.
pub(crate) trait SharedEngine: Send + Sync {
    /// Whether the store decides without waiting, so that
    /// [`check_all_now`](Self::check_all_now) can be used.
    fn decides_at_once(&self) -> bool;

    /// The verdict for `rules`, decided now, for a store that [decides at
    /// once](Self::decides_at_once). Any other store is refused with an error, nothing done.
    fn check_all_now(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error>;

    /// The verdict for `rules`, as a boxed future.
    fn check_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a>;

    /// [`Engine::refund`], without waiting: for an engine that [decides at
    /// once](Self::decides_at_once).
    fn refund_now(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error>;

    /// [`Engine::refund`], boxed.
    fn refund<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> RefundFuture<'a>;

    /// [`Engine::peek_all`], boxed.
    fn peek_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a>;

    /// [`Engine::charge_all`], boxed.
    fn charge_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> ChargeFuture<'a>;
}

impl<S: Store + 'static> SharedEngine for Engine<S> {
    fn decides_at_once(&self) -> bool {
        decides_at_once::<S>()
    }

    fn check_all_now(&self, rules: &[Rule<'_>]) -> Result<Verdict, Error> {
        if !decides_at_once::<S>() {
            return Err(not_at_once("this store has to be waited for"));
        }
        let future = pin!(Engine::check_all(self, rules));
        match future.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(verdict) => verdict,
            // Not reached: the memory store has nothing to wait for. Should that change, the
            // request is refused (the future is dropped undecided) rather than let through.
            Poll::Pending => Err(not_at_once(
                "the memory store's decision was not ready at its first poll",
            )),
        }
    }

    fn check_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a> {
        Box::pin(Engine::check_all(self, rules))
    }

    fn refund_now(&self, policy: &Policy, key: &[u8], cost: u64) -> Result<Decision, Error> {
        if !decides_at_once::<S>() {
            return Err(not_at_once("this store has to be waited for"));
        }
        let future = pin!(Engine::refund(self, policy, key, cost));
        match future.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(decision) => decision,
            Poll::Pending => Err(not_at_once(
                "the memory store's refund was not ready at its first poll",
            )),
        }
    }

    fn refund<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> RefundFuture<'a> {
        Box::pin(Engine::refund(self, policy, key, cost))
    }

    fn peek_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a> {
        Box::pin(Engine::peek_all(self, rules))
    }

    fn charge_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> ChargeFuture<'a> {
        Box::pin(Engine::charge_all(self, rules))
    }
}

fn not_at_once(what: &'static str) -> Error {
    Error::store(StoreErrorKind::Timeout, what)
}

/// Whether `S` is a memory store (with one of the core's clocks), alone or in an `Arc`: a store
/// whose `decide` future is ready at its first poll.
pub(crate) fn decides_at_once<S: 'static>() -> bool {
    fn memory<C: Clock + 'static>(id: TypeId) -> bool {
        id == TypeId::of::<MemoryStore<C>>() || id == TypeId::of::<Arc<MemoryStore<C>>>()
    }
    let id = TypeId::of::<S>();
    memory::<SystemClock>(id) || memory::<ManualClock>(id) || memory::<Arc<dyn Clock>>(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{Algorithm, Outcome, Policy, Rate};

    #[test]
    fn memory_stores_decide_at_once_and_others_do_not() {
        assert!(decides_at_once::<MemoryStore>());
        assert!(decides_at_once::<Arc<MemoryStore>>());
        assert!(decides_at_once::<MemoryStore<ManualClock>>());
        assert!(decides_at_once::<Arc<MemoryStore<Arc<dyn Clock>>>>());
        assert!(!decides_at_once::<Arc<Arc<MemoryStore>>>());
        assert!(!decides_at_once::<String>());
    }

    #[test]
    fn an_engine_over_memory_answers_now_and_spends_once() -> Result<(), Box<dyn std::error::Error>> {
        let policy = Policy::new("p", Algorithm::gcra(Rate::per_minute(1)?, 1)?)?;
        let engine: Arc<dyn SharedEngine> = Arc::new(Engine::new(MemoryStore::new()));
        let rules = [Rule::new(&policy, b"k", 1)];
        assert!(engine.decides_at_once());
        let first = engine.check_all_now(&rules)?;
        assert_eq!(first.outcome(), Outcome::Allowed);
        let second = engine.check_all_now(&rules)?;
        assert_eq!(second.outcome(), Outcome::Denied);
        Ok(())
    }
}
