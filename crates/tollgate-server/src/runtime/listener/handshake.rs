//! The TLS handshake of an accepted connection, bounded by the first-byte timeout.
//!
//! [`Guarded`] closes a connection that sends nothing within the first-byte timeout, but from its
//! first byte on only the idle timeout applies: a client sending its handshake a byte a minute
//! would hold its connection slot for as long as it liked. No request can come before the
//! handshake ends, so on a TLS listener the whole handshake must end within the first-byte
//! timeout, as the first byte must on a plaintext one. A shutdown abandons handshakes under way:
//! they have no call in flight to finish.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::Guarded;
use crate::ops::metrics;

/// An accepted connection once TLS is set up on it.
pub(super) type TlsStream = tokio_rustls::server::TlsStream<Guarded<TcpStream>>;

/// The handshake on `io`, within `deadline`; `None` (counted, and the connection dropped) when
/// it fails, times out or the server stops meanwhile.
pub(super) async fn handshake(
    listener: &'static str,
    acceptor: TlsAcceptor,
    io: Guarded<TcpStream>,
    deadline: Duration,
    stopping: &CancellationToken,
) -> Option<TlsStream> {
    tokio::select! {
        shaken = tokio::time::timeout(deadline, acceptor.accept(io)) => match shaken {
            Ok(Ok(stream)) => Some(stream),
            Ok(Err(err)) => {
                metrics::tls_handshake_failed(listener, &err);
                None
            }
            Err(_) => {
                metrics::connection_timed_out(listener, "tls_handshake");
                None
            }
        },
        () = stopping.cancelled() => None,
    }
}
