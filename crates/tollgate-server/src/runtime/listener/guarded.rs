//! [`Guarded`]: an accepted connection that holds its slot of the listener's connection limit,
//! closes itself after a stretch with no bytes in either direction, and closes at once when the
//! server gives up draining.
//!
//! Doing this at the byte level, under the protocol, covers what the protocol libraries leave
//! open: an HTTP/2 or gRPC client that connects and never sends its preface, or a client that
//! stops reading an answer. Any byte read or written counts as activity, so a long download
//! and an HTTP/2 connection kept alive by pings stay up.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A connection with an inactivity deadline and a slot of the connection limit (given back on
/// drop); counted in `tollgate_open_connections` while it lives.
pub(crate) struct Guarded<IO> {
    io: IO,
    _slot: OwnedSemaphorePermit,
    listener: &'static str,
    idle: Duration,
    last_active: Instant,
    timer: Pin<Box<Sleep>>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(
        io: IO,
        slot: OwnedSemaphorePermit,
        listener: &'static str,
        idle: Duration,
        close: &CancellationToken,
    ) -> Self {
        let now = Instant::now();
        crate::ops::metrics::connection_opened(listener);
        Guarded {
            io,
            _slot: slot,
            listener,
            idle,
            last_active: now,
            timer: Box::pin(tokio::time::sleep_until(now + idle)),
            // A child token of its own: waiting on the shared token would take the lock every
            // connection shares on each poll that finds no bytes.
            closed: Box::pin(close.child_token().cancelled_owned()),
        }
    }

    /// Called when the connection waits: an error once it has been idle too long or the server
    /// closes every connection. The timer is re-armed lazily, not on every byte.
    fn expired(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed: the shutdown drain timeout passed",
            ));
        }
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = self.last_active + self.idle;
            if Instant::now() >= due {
                crate::ops::metrics::connection_timed_out(self.listener, "idle");
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "closed: no bytes in either direction within the idle timeout",
                ));
            }
            self.timer.as_mut().reset(due);
        }
    }

    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.expired(cx) {
            Poll::Ready(err) => Poll::Ready(Err(err)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<IO> Drop for Guarded<IO> {
    fn drop(&mut self) {
        crate::ops::metrics::connection_closed(self.listener);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.last_active = Instant::now();
                }
                Poll::Ready(result)
            }
            Poll::Pending => this.waiting(cx),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, data) {
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if n > 0) {
                    this.last_active = Instant::now();
                }
                Poll::Ready(result)
            }
            Poll::Pending => this.waiting(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if n > 0) {
                    this.last_active = Instant::now();
                }
                Poll::Ready(result)
            }
            Poll::Pending => this.waiting(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => this.waiting(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_shutdown(cx) {
            Poll::Ready(result) => Poll::Ready(result),
            Poll::Pending => this.waiting(cx),
        }
    }
}
