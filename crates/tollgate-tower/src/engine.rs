//! The engine behind a layer, with its store type erased, so `RateLimitLayer` and `RateLimit<S>`
//! carry no store type parameter. The core's `Engine::check_all` returns `impl Future`, which a
//! trait object cannot hold; [`SharedEngine`] boxes each call's future instead (one allocation
//! per request).

use std::future::Future;
use std::pin::Pin;

use tollgate::{Engine, Error, Rule, Store, Verdict};

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
