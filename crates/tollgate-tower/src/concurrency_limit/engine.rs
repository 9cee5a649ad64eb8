//! The engine behind a concurrency layer, with its store type erased, and releases that run
//! where they can: inline for a memory store (its futures are ready at their first poll), on the
//! current tokio runtime otherwise.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tollgate::concurrency::{Acquisition, ConcurrencyPolicy, ConcurrencyStore, LeaseId, Release};
use tollgate::{Engine, Error};

use crate::LogSampler;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

static RELEASE_FAILURE_LOG: LogSampler = LogSampler::new(Duration::from_secs(1));

/// The engine operations the layer needs, object safe.
pub(crate) trait LeaseEngine: Send + Sync {
    fn acquire<'a>(&'a self, policy: &'a ConcurrencyPolicy, key: &'a [u8]) -> Boxed<'a, Acquisition>;

    fn release<'a>(
        &'a self,
        policy: &'a ConcurrencyPolicy,
        key: &'a [u8],
        lease: LeaseId,
    ) -> Boxed<'a, Release>;

    /// Whether a release is done by the time its future is first polled.
    fn releases_at_once(&self) -> bool;
}

impl<S: ConcurrencyStore + 'static> LeaseEngine for Engine<S> {
    fn acquire<'a>(&'a self, policy: &'a ConcurrencyPolicy, key: &'a [u8]) -> Boxed<'a, Acquisition> {
        Box::pin(Engine::acquire(self, policy, key))
    }

    fn release<'a>(
        &'a self,
        policy: &'a ConcurrencyPolicy,
        key: &'a [u8],
        lease: LeaseId,
    ) -> Boxed<'a, Release> {
        Box::pin(Engine::release(self, policy, key, lease))
    }

    fn releases_at_once(&self) -> bool {
        S::ANSWERS_AT_ONCE
    }
}

/// Releases `lease` without a caller to wait for it (from a body's `poll` or `drop`): inline
/// when the store answers at once, else on the current tokio runtime. A release that fails, or
/// finds no runtime to run on, is logged (sampled); the lease then ends at its timeout.
pub(crate) fn release_detached(
    engine: Arc<dyn LeaseEngine>,
    policy: ConcurrencyPolicy,
    key: Vec<u8>,
    lease: LeaseId,
) {
    if engine.releases_at_once() {
        let result = {
            let future = pin!(engine.release(&policy, &key, lease));
            match future.poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(result) => result,
                Poll::Pending => Err(Error::store(
                    tollgate::StoreErrorKind::Timeout,
                    "the memory store's release was not ready at its first poll",
                )),
            }
        };
        log_failure(&policy, result);
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                let result = engine.release(&policy, &key, lease).await;
                log_failure(&policy, result);
            });
        }
        Err(_) => log_failure(
            &policy,
            Err(Error::store(
                tollgate::StoreErrorKind::Connection,
                "no tokio runtime to release on",
            )),
        ),
    }
}

fn log_failure(policy: &ConcurrencyPolicy, result: Result<Release, Error>) {
    if let Err(err) = result
        && RELEASE_FAILURE_LOG.due()
    {
        tracing::warn!(
            policy = policy.name(),
            class = err.class().unwrap_or("input"),
            error = %err,
            "concurrency release failed; the lease ends at its lease_timeout (sampled: at most one line a second)"
        );
    }
}
