//! [`ResponseFuture`]: the future a [`RateLimit`](super::RateLimit) service returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::Response;

type Boxed<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

/// The response of a rate limited service: the inner service's, or the layer's own answer
/// (429, 400 or 503). `E` is the inner service's error type.
pub struct ResponseFuture<E> {
    inner: Boxed<E>,
}

impl<E> ResponseFuture<E> {
    pub(crate) fn new(inner: impl Future<Output = Result<Response<Body>, E>> + Send + 'static) -> Self {
        ResponseFuture {
            inner: Box::pin(inner),
        }
    }
}

impl<E> Future for ResponseFuture<E> {
    type Output = Result<Response<Body>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<E> fmt::Debug for ResponseFuture<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
