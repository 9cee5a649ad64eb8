//! Limits on one HTTP request, checked before any handler runs: the URI's length (414), the
//! header section's size (431), its host (400, see [`super::host`]), a declared body
//! size (413), and a deadline and a size cap on reading the body, enforced while it streams
//! ([`LimitedBody`]).
//!
//! The HTTP parser has hard limits of its own, set above these (see the listener docs), so an
//! oversized request normally meets these first and gets a problem answer naming the limit.

use std::error::Error as StdError;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;

use crate::runtime::problem::problem;

/// The limits [`check`] applies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestLimits {
    pub(crate) listener: &'static str,
    pub(crate) max_uri_bytes: usize,
    pub(crate) max_header_bytes: usize,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_read_timeout: Duration,
}

/// Why a request body was cut off.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BodyLimitError {
    /// The body did not arrive within the body read timeout.
    #[error("the request body did not arrive within {0:?}")]
    TimedOut(Duration),
    /// The body is larger than allowed.
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
}

impl BodyLimitError {
    /// The answer's status: 408 or 413.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            BodyLimitError::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
            BodyLimitError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The [`BodyLimitError`] somewhere in `err`'s chain of sources, if the error came from a
    /// body this module cut off.
    pub(crate) fn find<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a BodyLimitError> {
        let mut next = Some(err);
        // Bounded: error chains are short, but a cycle must not hang a request.
        for _ in 0..16 {
            let current = next?;
            if let Some(found) = current.downcast_ref::<BodyLimitError>() {
                return Some(found);
            }
            next = current.source();
        }
        None
    }
}

/// Middleware: refuses a request whose URI, headers or declared body are too large, or whose
/// host breaks the rule, and wraps its body in a [`LimitedBody`].
pub(crate) async fn check(State(limits): State<RequestLimits>, request: Request, next: Next) -> Response {
    let uri_len = request.uri().path_and_query().map_or(0, |p| p.as_str().len())
        + request.uri().authority().map_or(0, |a| a.as_str().len());
    if uri_len > limits.max_uri_bytes {
        crate::ops::metrics::request_refused(limits.listener, StatusCode::URI_TOO_LONG);
        return problem(
            StatusCode::URI_TOO_LONG,
            format!(
                "the request target is {uri_len} bytes, above the maximum of {}",
                limits.max_uri_bytes
            ),
            None,
        );
    }
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if header_bytes > limits.max_header_bytes {
        crate::ops::metrics::request_refused(limits.listener, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        return problem(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!(
                "the request headers are {header_bytes} bytes, above the maximum of {}",
                limits.max_header_bytes
            ),
            None,
        );
    }
    if let Err(err) = super::host::check(request.version(), request.uri(), request.headers()) {
        crate::ops::metrics::request_refused(limits.listener, StatusCode::BAD_REQUEST);
        return problem(StatusCode::BAD_REQUEST, err.to_string(), None);
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limits.max_body_bytes as u64) {
        crate::ops::metrics::request_refused(limits.listener, StatusCode::PAYLOAD_TOO_LARGE);
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            BodyLimitError::TooLarge(limits.max_body_bytes).to_string(),
            None,
        );
    }
    let request = request.map(|body| {
        Body::new(LimitedBody {
            inner: body,
            left: limits.max_body_bytes,
            max: limits.max_body_bytes,
            timeout: limits.body_read_timeout,
            started: tokio::time::Instant::now(),
            deadline: None,
        })
    });
    next.run(request).await
}

/// A request body that fails with [`BodyLimitError`] when it is not complete by its deadline or
/// grows past its cap. The deadline runs from the moment the request head was read.
pub(crate) struct LimitedBody {
    inner: Body,
    left: usize,
    max: usize,
    timeout: Duration,
    /// When the head was read: the deadline counts from here.
    started: tokio::time::Instant,
    /// Armed only when the body is not all there on the first read, which for the API's small
    /// bodies is rare: most requests never touch the timer.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl http_body::Body for LimitedBody {
    type Data = Bytes;
    type Error = Box<dyn StdError + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if data.len() > this.left {
                        return Poll::Ready(Some(Err(Box::new(BodyLimitError::TooLarge(this.max)))));
                    }
                    this.left -= data.len();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => Poll::Ready(Some(Err(Box::new(err)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                let (started, timeout) = (this.started, this.timeout);
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(started + timeout)));
                if deadline.as_mut().poll(cx).is_ready() {
                    Poll::Ready(Some(Err(Box::new(BodyLimitError::TimedOut(this.timeout)))))
                } else {
                    Poll::Pending
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
