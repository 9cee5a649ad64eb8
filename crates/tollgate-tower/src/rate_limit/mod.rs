//! The rate limit middleware, laid out as tower lays out its own: [`RateLimitLayer`] (the
//! configuration, cheap to clone) makes [`RateLimit`] services, whose calls return a
//! [`ResponseFuture`]. `limiter` (private) holds the decision procedure all of them share.
//!
//! # Order of work
//!
//! 1. Every rule's key is extracted. A rule without a key is skipped or answers 400, as its
//!    [`MissingKey`](crate::MissingKey) says; a key past
//!    [`MAX_KEY_LEN`](tollgate::bounds::MAX_KEY_LEN) answers 400. A rule keyed on the client
//!    address meeting a request with no peer address at all answers 500 with the fix in its
//!    detail, logged once per layer: the app was served without connect info, which no client
//!    can cause. Nothing is spent yet.
//! 2. The rules that apply go to [`Engine::check_all`](tollgate::Engine::check_all) together, in
//!    one call, which decides them all or nothing in one atomic step of the store: either every
//!    enforced rule allows and every rule spends its cost (a shadow rule too, unless it would
//!    deny), or one enforced rule denies and nothing is spent on any rule: a denied request
//!    spends nothing. The `block_for`
//!    penalty starts on every rule that denied, not only on the one that speaks for the 429. No
//!    other request sees the rules half applied, so two racing requests cannot both take a
//!    budget's last unit. Two rules naming the same policy and key spend from one budget: they
//!    count as one rule costing the sum.
//! 3. The engine's [`Verdict`](tollgate::Verdict) becomes the answer, by its
//!    [`Outcome`](tollgate::Outcome):
//!    - `Allowed`, `ShadowDenied`, `Degraded`: the request goes to the inner service, and its
//!      response gets `RateLimit-Policy` / `RateLimit` with an entry per enforced rule;
//!    - `Denied`: 429, with the problem body and `Retry-After` of
//!      [`Verdict::deciding`](tollgate::Verdict::deciding) (the denial with the longest wait) and
//!      the rate limit headers of every enforced rule; rules that would have allowed report their
//!      budget as it stands, untouched by the denied request;
//!    - `Error`: 503 with `Retry-After` (a `FailClosed` rule met a store failure).
//!
//! Shadow rules are decided and recorded like the others but never deny and never show in
//! headers; their would-be denials are counted and logged, on every request they apply to.
//!
//! With [`refund_on_server_error`](RateLimitLayerBuilder::refund_on_server_error), a request
//! that passed and then got a 5xx from the inner service gives back what each rule spent
//! ([`Engine::refund`](tollgate::Engine::refund)), once the response head is known: a failure on
//! this side does not use up the client's budget.
//!
//! # When the decision is made
//!
//! Over a memory store, whose decisions are ready at once, all of this happens in
//! [`RateLimit::call`](tower::Service::call): the returned [`ResponseFuture`] is then the inner
//! service's future wrapped to add the headers, or the answer, and nothing is boxed per request.
//! Over a store that has to be waited for (Redis), it happens when the future is first polled,
//! inside one boxed future. Both ways give the same answers.
//!
//! # Store failures
//!
//! The layer has no failure handling of its own: whatever the store and whatever the class of
//! failure (a Redis timeout, a full memory store), the engine decides every rule of the request
//! by its policy's [`FailureMode`](tollgate::FailureMode): `FailOpen` passes (degraded, with no
//! header entry: there is no budget to report), `FailClosed` answers 503 (a shadow rule is never
//! closed), `Local` limits on the engine's own in-memory limiter with the policy's local share
//! (and reports that budget). Every store failure is counted and logged at `warn` with its class.

mod future;
mod layer;
mod limiter;
mod service;

pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use service::RateLimit;
