//! [`ResponseFuture`]: the future a [`RateLimit`](super::RateLimit) service returns.
//!
//! When the store decides at once (the memory store), the service decides in `call` and the
//! future is either the inner service's own future, which it wraps to add the rate limit headers,
//! or the layer's answer, ready: nothing is boxed. A store that has to be waited for (Redis) gets
//! one boxed future holding the decision and the inner call; a box is noise next to its round
//! trip.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::Response;
use pin_project_lite::pin_project;

use std::sync::Arc;

use super::limiter::{Limiter, Spent};
use crate::problem::RateLimitHeaders;

type Boxed<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

pin_project! {
    /// The response of a rate limited service: the inner service's, with the rate limit headers
    /// added, or the layer's own answer (429, 400 or 503). `F` is the inner service's future,
    /// `E` its error type.
    pub struct ResponseFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        /// Allowed: the inner call, and the headers for its response.
        Inner {
            #[pin]
            future: F,
            headers: Option<RateLimitHeaders>,
            refund: Option<(Arc<Limiter>, Spent)>,
        },
        /// Answered by the layer; `None` once taken.
        Answer {
            response: Option<Response<Body>>,
        },
        /// Decided by a store that has to be waited for, and the inner call after it.
        Boxed {
            future: Boxed<E>,
        },
    }
}

impl<F, E> ResponseFuture<F, E> {
    pub(crate) fn inner(
        future: F,
        headers: Option<RateLimitHeaders>,
        refund: Option<(Arc<Limiter>, Spent)>,
    ) -> Self {
        ResponseFuture {
            kind: Kind::Inner {
                future,
                headers,
                refund,
            },
        }
    }

    pub(crate) fn answer(response: Response<Body>) -> Self {
        ResponseFuture {
            kind: Kind::Answer {
                response: Some(response),
            },
        }
    }

    pub(crate) fn boxed(future: impl Future<Output = Result<Response<Body>, E>> + Send + 'static) -> Self {
        ResponseFuture {
            kind: Kind::Boxed {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, E, ResBody> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner {
                future,
                headers,
                refund,
            } => {
                let mut response = match future.poll(cx) {
                    Poll::Ready(Ok(response)) => response,
                    Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                    Poll::Pending => return Poll::Pending,
                };
                // Only a store that decides at once takes this road, so the refund is done now.
                if let Some((limiter, spent)) = refund.take()
                    && response.status().is_server_error()
                {
                    limiter.refund_now(&spent);
                }
                if let Some(headers) = headers.take() {
                    headers.append_to(response.headers_mut());
                }
                Poll::Ready(Ok(response.map(Body::new)))
            }
            KindProj::Answer { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => panic!("`ResponseFuture` polled after completion"),
            },
            KindProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, E> fmt::Debug for ResponseFuture<F, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
