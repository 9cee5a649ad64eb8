//! [`Inline`]: an HTTP/2 connection whose request handlers run inside the connection's own
//! task instead of one spawned task each.
//!
//! hyper runs every HTTP/2 stream as a future handed to an executor. With tokio's, each stream
//! is a task of its own: the connection task reads a batch of requests, spawns one task per
//! request, and every answer that comes back wakes the connection task again, which writes it
//! out with a syscall of its own. A rate limit answer is ready in a microsecond (memory store)
//! or after one store round trip, so a connection carrying many concurrent calls (Envoy
//! multiplexes all its calls over a few connections) paid a task spawn, a cross-task wake-up
//! and a `writev` per call. Here the streams of a connection are polled by the connection's
//! task: after reading a batch of requests it runs their handlers, and the answers that are
//! ready go out together in one write. A handler that waits (a store call) is woken on its own,
//! as any future inside a task is; the connection keeps serving its other streams meanwhile.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;

type Stream = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor hyper's HTTP/2 server hands its streams to; [`Inline::drive`] runs them.
/// Clones share the queue.
#[derive(Clone, Default)]
pub(crate) struct Inline {
    queue: Arc<Queue>,
}

#[derive(Default)]
struct Queue {
    new: Mutex<Vec<Stream>>,
    /// The connection task, woken when a stream is queued from outside it.
    waker: AtomicWaker,
}

impl<F> hyper::rt::Executor<F> for Inline
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        self.queue
            .new
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::pin(stream));
        self.queue.waker.wake();
    }
}

/// How many times one poll of the connection goes round (read, run handlers, write) before
/// yielding to the runtime, so a busy connection cannot starve the others on its worker.
const ROUNDS_PER_POLL: usize = 8;

impl Inline {
    /// Runs `connection` and the streams it hands to this executor until the connection ends.
    /// Streams still running then are dropped with it (hyper only ends a connection once its
    /// streams are done, or when the peer is gone). Dropping this future drops them too, so it
    /// must not be raced against a shutdown signal: watch the signal inside `connection`.
    pub(crate) async fn drive<C: Future + ?Sized>(&self, mut connection: Pin<&mut C>) -> C::Output {
        let mut streams: FuturesUnordered<Stream> = FuturesUnordered::new();
        std::future::poll_fn(|cx| {
            self.queue.waker.register(cx.waker());
            for _ in 0..ROUNDS_PER_POLL {
                if let Poll::Ready(done) = connection.as_mut().poll(cx) {
                    return Poll::Ready(done);
                }
                let mut progressed = false;
                {
                    let mut new = self.queue.new.lock().unwrap_or_else(PoisonError::into_inner);
                    progressed |= !new.is_empty();
                    streams.extend(new.drain(..));
                }
                while let Poll::Ready(Some(())) = streams.poll_next_unpin(cx) {
                    progressed = true;
                }
                // Nothing new and no handler finished: everything waits on I/O or a store.
                if !progressed {
                    return Poll::Pending;
                }
            }
            // Out of rounds with work left: come back after the other tasks had a turn.
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn streams_queued_by_the_connection_run_in_its_task() {
        let inline = Inline::default();
        let ran = Arc::new(AtomicUsize::new(0));
        // A "connection" that queues three streams, then waits for them to finish.
        let connection = {
            let inline = inline.clone();
            let ran = Arc::clone(&ran);
            async move {
                for _ in 0..3 {
                    let ran = Arc::clone(&ran);
                    inline.execute(async move {
                        tokio::task::yield_now().await;
                        ran.fetch_add(1, Ordering::SeqCst);
                    });
                }
                while ran.load(Ordering::SeqCst) < 3 {
                    tokio::task::yield_now().await;
                }
                "done"
            }
        };
        let mut connection = std::pin::pin!(connection);
        assert_eq!(inline.drive(connection.as_mut()).await, "done");
        assert_eq!(ran.load(Ordering::SeqCst), 3);
    }
}
