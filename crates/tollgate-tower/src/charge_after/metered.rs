//! [`Metered`]: a response body that counts its data bytes and charges them once, when the body
//! ends, fails, or is dropped, whichever comes first.
//!
//! At the end the charge is made inside the body: its end reaches the client only once the
//! charge is recorded, so a client that reads a whole answer and asks again at once finds its
//! budget already charged. A body dropped before its end (a client that went away) or failing
//! cannot wait: its charge is made at once when the store answers at its first poll (the memory
//! store), else on the current tokio runtime, and logged, sampled, when there is none.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker, ready};

use axum::BoxError;
use axum::body::{Bytes, HttpBody};
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use super::{Shared, charge, lost};

type Charging = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The charge still to make: to whom, once; `counted` as in [`charge`].
struct Owed {
    shared: Arc<Shared>,
    key: Vec<u8>,
    counted: bool,
}

impl Owed {
    fn charging(self, bytes: u64) -> Charging {
        Box::pin(charge(self.shared, self.key, bytes, self.counted))
    }

    /// Charges without a reader to hold back: inline when it is ready at once, else spawned.
    fn detach(self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let shared = self.shared.clone();
        let mut charging = self.charging(bytes);
        if pin!(&mut charging)
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
        {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(charging)),
            Err(_) => lost(&shared, bytes),
        }
    }
}

pin_project! {
    /// The inner service's response body, its data bytes counted and charged once. Frames pass
    /// through unchanged.
    pub struct Metered<B> {
        #[pin]
        inner: B,
        bytes: u64,
        owed: Option<Owed>,
        charging: Option<Charging>,
    }

    impl<B> PinnedDrop for Metered<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(owed) = this.owed.take() {
                owed.detach(*this.bytes);
            }
        }
    }
}

impl<B> Metered<B> {
    pub(super) fn new(inner: B, shared: Arc<Shared>, key: Vec<u8>, counted: bool) -> Self {
        Metered {
            inner,
            bytes: 0,
            owed: Some(Owed { shared, key, counted }),
            charging: None,
        }
    }
}

impl<B> HttpBody for Metered<B>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        loop {
            if let Some(charging) = this.charging.as_mut() {
                ready!(charging.as_mut().poll(cx));
                *this.charging = None;
                return Poll::Ready(None);
            }
            match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        *this.bytes = this.bytes.saturating_add(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
                Some(Err(err)) => {
                    if let Some(owed) = this.owed.take() {
                        owed.detach(*this.bytes);
                    }
                    return Poll::Ready(Some(Err(err.into())));
                }
                None => match this.owed.take() {
                    Some(owed) if *this.bytes > 0 => *this.charging = Some(owed.charging(*this.bytes)),
                    _ => return Poll::Ready(None),
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // Ended only once charged: until then the end is still to be polled.
        self.inner.is_end_stream() && self.charging.is_none() && (self.owed.is_none() || self.bytes == 0)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for Metered<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metered")
            .field("bytes", &self.bytes)
            .field("charged", &self.owed.is_none())
            .finish_non_exhaustive()
    }
}
