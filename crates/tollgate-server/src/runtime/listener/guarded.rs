//! [`Guarded`]: an accepted connection that holds its slots of the listener's connection limits
//! (the listener's and its client address's), closes itself when the client sends nothing
//! within the first-byte timeout or after a stretch with no bytes in either direction, and
//! closes at once when the server gives up draining.
//!
//! Doing this at the byte level, under the protocol, covers what the protocol libraries leave
//! open: a client that connects and never sends a byte (no protocol timeout has started yet:
//! HTTP/1's header timeout starts with the first byte of a request, and HTTP/2 and gRPC have
//! none), or a client that stops reading an answer. Until the client's opening has arrived only
//! the first-byte timeout applies, which is shorter than the idle one: a connection that sends
//! nothing costs a slot for seconds, not minutes. The opening is its first byte, or, for a
//! connection that starts as HTTP/2 does (`P`, the first byte of `PRI * HTTP/2.0`), the whole
//! 24-byte connection preface: HTTP/2 has no timeout of its own before its first frame, so a
//! client sending part of the preface and stopping would otherwise hold its slot for the idle
//! timeout. After the opening, any byte read or written counts as activity, so a long download
//! and an HTTP/2 connection kept alive by pings stay up.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::per_address::AddressSlot;

/// The slots a connection holds while it is open: one of the listener's, one of its client
/// address's. Both are given back when it is dropped.
pub(crate) struct Slots {
    _listener: OwnedSemaphorePermit,
    _address: AddressSlot,
}

impl Slots {
    pub(crate) fn new(listener: OwnedSemaphorePermit, address: AddressSlot) -> Self {
        Slots {
            _listener: listener,
            _address: address,
        }
    }
}

/// How long a connection may stay silent: before its first byte, and once it has spoken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadlines {
    pub(crate) first_byte: Duration,
    pub(crate) idle: Duration,
}

/// A connection with inactivity deadlines and its slots of the connection limits; counted in
/// `tollgate_open_connections` while it lives.
pub(crate) struct Guarded<IO> {
    io: IO,
    _slots: Slots,
    listener: &'static str,
    deadlines: Deadlines,
    opened: Instant,
    /// How much of the client's opening has arrived; until all of it, the first-byte deadline
    /// applies.
    opening: Opening,
    last_active: Instant,
    timer: Pin<Box<Sleep>>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl<IO> Guarded<IO> {
    pub(crate) fn new(
        io: IO,
        slots: Slots,
        listener: &'static str,
        deadlines: Deadlines,
        close: &CancellationToken,
    ) -> Self {
        let now = Instant::now();
        crate::ops::metrics::connection_opened(listener);
        Guarded {
            io,
            _slots: slots,
            listener,
            deadlines,
            opened: now,
            opening: Opening::Silent,
            last_active: now,
            timer: Box::pin(tokio::time::sleep_until(now + deadlines.first_byte)),
            // A child token of its own: waiting on the shared token would take the lock every
            // connection shares on each poll that finds no bytes.
            closed: Box::pin(close.child_token().cancelled_owned()),
        }
    }

    /// Called when the connection waits: an error once the client stayed silent too long (its
    /// first byte, or any byte since) or the server closes every connection. The timer is
    /// re-armed lazily, not on every byte: it only ever moves later, as the first-byte timeout
    /// is never longer than the idle one.
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
            if self.opening != Opening::Heard {
                let due = self.opened + self.deadlines.first_byte;
                if Instant::now() >= due {
                    crate::ops::metrics::connection_timed_out(self.listener, "first_byte");
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "closed: the client did not open (a first byte, or an HTTP/2 preface) within the first-byte timeout",
                    ));
                }
                self.timer.as_mut().reset(due);
                continue;
            }
            let due = self.last_active + self.deadlines.idle;
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

/// HTTP/2's connection preface: `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`.
const HTTP2_PREFACE_LEN: usize = 24;

/// How much of a client's opening has arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// Nothing yet.
    Silent,
    /// Part of an HTTP/2 preface: this many bytes are still due.
    Preface { due: usize },
    /// The first byte (or the whole preface): the idle timeout applies from now on.
    Heard,
}

impl Opening {
    /// The opening once `read` (a non-empty read) has arrived.
    fn after(self, read: &[u8]) -> Opening {
        let due = match self {
            Opening::Heard => return Opening::Heard,
            Opening::Silent if read.first() == Some(&b'P') => HTTP2_PREFACE_LEN,
            Opening::Silent => 1,
            Opening::Preface { due } => due,
        };
        match due.saturating_sub(read.len()) {
            0 => Opening::Heard,
            due => Opening::Preface { due },
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
                    this.opening = this.opening.after(&buf.filled()[before..]);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_opening_is_a_first_byte_or_a_whole_http2_preface() {
        assert_eq!(Opening::Silent.after(b"G"), Opening::Heard);
        assert_eq!(Opening::Silent.after(b"GET / HTTP/1.1\r\n"), Opening::Heard);
        let partial = Opening::Silent.after(b"PRI * HTTP/2.0\r\n");
        assert_eq!(partial, Opening::Preface { due: 8 });
        assert_eq!(partial.after(b"\r\nSM"), Opening::Preface { due: 4 });
        assert_eq!(partial.after(b"\r\nSM\r\n\r\n"), Opening::Heard);
        assert_eq!(Opening::Heard.after(b"P"), Opening::Heard);
    }
}
