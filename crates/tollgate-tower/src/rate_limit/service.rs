//! [`RateLimit`]: the service that decides each request before the inner service sees it.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{Request, Response};
use tower::Service;

use super::future::ResponseFuture;
use super::limiter::{Action, Limiter};

/// Wraps a service with a [`RateLimitLayer`](super::RateLimitLayer)'s rules. Made by the layer;
/// every clone shares the layer's limiter.
///
/// An allowed request goes to the inner service and its response gets the rate limit headers; a
/// denied one is answered here (see [`problem`](crate::problem)) and never reaches it. The
/// response body is axum's [`Body`], so the service fits axum, tower and hyper alike.
///
/// ```
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use axum::body::Body;
/// use axum::http::{Request, Response};
/// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
/// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_minute(1)?, 1)?)?;
/// let service = ServiceBuilder::new()
///     .layer(RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(policy, KeyExtractor::peer_ip())))
///     .service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) });
/// let request = || Request::builder().extension("192.0.2.1:1".parse::<SocketAddr>().unwrap()).body(Body::empty());
/// assert_eq!(service.clone().oneshot(request()?).await?.status(), 200);
/// assert_eq!(service.oneshot(request()?).await?.status(), 429);
/// # Ok(()) }
/// ```
pub struct RateLimit<S> {
    inner: S,
    limiter: Arc<Limiter>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, limiter: Arc<Limiter>) -> Self {
        RateLimit { inner, limiter }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policies", &self.limiter.policies)
            .finish_non_exhaustive()
    }
}

impl<S, B, ResBody> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if self.limiter.decides_at_once() {
            // Decided here, in memory: the inner service, polled ready, is called directly, or
            // not at all.
            let (parts, body) = request.into_parts();
            return match self.limiter.decide_now(&parts) {
                Action::Answer(response) => ResponseFuture::answer(response),
                Action::Pass(headers, spent) => ResponseFuture::inner(
                    self.inner.call(Request::from_parts(parts, body)),
                    headers,
                    spent.map(|spent| (self.limiter.clone(), spent)),
                ),
            };
        }
        self.call_boxed(request)
    }
}

impl<S> RateLimit<S> {
    /// [`call`](Service::call) over a store that has to be waited for: the decision and the inner
    /// call in one boxed future. Out of line, so the road of a store that decides at once stays
    /// short.
    #[inline(never)]
    fn call_boxed<B, ResBody>(&mut self, request: Request<B>) -> ResponseFuture<S::Future, S::Error>
    where
        S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        B: Send + 'static,
        ResBody: HttpBody<Data = Bytes> + Send + 'static,
        ResBody::Error: Into<BoxError>,
    {
        // The service that was polled ready goes into the future; `self` keeps a fresh clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        ResponseFuture::boxed(async move {
            let (parts, body) = request.into_parts();
            match limiter.decide(&parts).await {
                Action::Answer(response) => Ok(response),
                Action::Pass(headers, spent) => {
                    let response = inner.call(Request::from_parts(parts, body)).await?;
                    if let Some(spent) = spent
                        && response.status().is_server_error()
                    {
                        limiter.refund(&spent).await;
                    }
                    let (mut head, body) = response.into_parts();
                    if let Some(headers) = headers {
                        headers.append_to(&mut head.headers);
                    }
                    Ok(Response::from_parts(head, Body::new(body)))
                }
            }
        })
    }
}
