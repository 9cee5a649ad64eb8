//! [`LeaseBody`]: a response body that holds a concurrency lease and gives it back when the body
//! ends, fails, or is dropped, whichever comes first, exactly once.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::HttpBody;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;
use tollgate::concurrency::{ConcurrencyPolicy, LeaseId};

use super::engine::{LeaseEngine, release_detached};

/// A lease to give back once. Dropping it releases.
pub(crate) struct Guard {
    held: Option<Held>,
}

struct Held {
    engine: Arc<dyn LeaseEngine>,
    policy: ConcurrencyPolicy,
    key: Vec<u8>,
    lease: LeaseId,
}

impl Guard {
    pub(crate) fn new(
        engine: Arc<dyn LeaseEngine>,
        policy: ConcurrencyPolicy,
        key: Vec<u8>,
        lease: LeaseId,
    ) -> Self {
        Guard {
            held: Some(Held {
                engine,
                policy,
                key,
                lease,
            }),
        }
    }

    /// Releases now, if not done yet.
    fn release(&mut self) {
        if let Some(held) = self.held.take() {
            release_detached(held.engine, held.policy, held.key, held.lease);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.release();
    }
}

pin_project! {
    /// The inner service's response body, holding the request's concurrency lease until the
    /// body's last frame, its first error, or its drop. Frames pass through unchanged.
    pub struct LeaseBody<B> {
        #[pin]
        inner: B,
        guard: Guard,
    }
}

impl<B> LeaseBody<B> {
    pub(crate) fn new(inner: B, guard: Guard) -> Self {
        LeaseBody { inner, guard }
    }
}

impl<B: HttpBody> HttpBody for LeaseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            // The end, or an error that ends it.
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.guard.release(),
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for LeaseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseBody")
            .field("held", &self.guard.held.is_some())
            .finish_non_exhaustive()
    }
}
