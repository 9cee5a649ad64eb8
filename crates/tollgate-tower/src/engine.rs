//! The engine behind a layer, with its store type erased, so `RateLimitLayer` and `RateLimit<S>`
//! carry no store type parameter. The core's `Engine::check_all` returns `impl Future`, which a
//! trait object cannot hold; [`SharedEngine`] boxes each call's future instead (one allocation
//! per request).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::{Decisions, Engine, Error, Policy, Rule, Store, Verdict};

type VerdictFuture<'a> = Pin<Box<dyn Future<Output = Result<Verdict, Error>> + Send + 'a>>;

/// The one engine operation the layer needs, object safe.
pub(crate) trait SharedEngine: Send + Sync {
    fn check_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a>;
}

impl<S: Store> SharedEngine for Engine<S> {
    fn check_all<'a>(&'a self, rules: &'a [Rule<'a>]) -> VerdictFuture<'a> {
        Box::pin(Engine::check_all(self, rules))
    }
}

/// A store the application also holds, as a [`Store`] an [`Engine`] can own.
pub(crate) struct Shared<S>(pub(crate) Arc<S>);

impl<S: Store> Store for Shared<S> {
    fn decide(
        &self,
        rules: &[Rule<'_>],
        commit: bool,
    ) -> impl Future<Output = Result<Decisions, Error>> + Send {
        self.0.decide(rules, commit)
    }

    fn reset(&self, policy: &Policy, key: &[u8]) -> impl Future<Output = Result<(), Error>> + Send {
        self.0.reset(policy, key)
    }
}
