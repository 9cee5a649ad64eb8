//! The rate limit middleware, laid out as tower lays out its own: [`RateLimitLayer`] (the
//! configuration, cheap to clone) makes [`RateLimit`] services, whose calls return a
//! [`ResponseFuture`]. `limiter` holds the decision procedure all of them share.

mod future;
mod layer;
mod limiter;
mod service;

pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use service::RateLimit;
