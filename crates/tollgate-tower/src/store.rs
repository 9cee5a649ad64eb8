//! The store behind a layer, with its type erased, so `RateLimitLayer` and `RateLimit<S>` carry
//! no store type parameter. The core's `Store` returns `impl Future`, which a trait object cannot
//! hold; [`SharedStore`] boxes each call's future instead (one allocation per store call).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tollgate::{Decision, Error, Policy, Store};

type DecisionFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>;

/// The two store operations the layer needs, object safe.
pub(crate) trait SharedStore: Send + Sync {
    fn check<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> DecisionFuture<'a>;
    fn peek<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> DecisionFuture<'a>;
}

impl<S: Store> SharedStore for Arc<S> {
    fn check<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> DecisionFuture<'a> {
        Box::pin(Store::check(&**self, policy, key, cost))
    }

    fn peek<'a>(&'a self, policy: &'a Policy, key: &'a [u8], cost: u64) -> DecisionFuture<'a> {
        Box::pin(Store::peek(&**self, policy, key, cost))
    }
}
