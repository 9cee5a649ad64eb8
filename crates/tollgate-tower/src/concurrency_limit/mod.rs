//! The concurrency limit middleware: at most `max_in_flight` requests of one key inside the
//! inner service at once, across every clone, connection and (with a Redis store) instance.
//!
//! [`ConcurrencyLimitLayer`] (configuration, `Clone`) makes [`ConcurrencyLimit`] services. For
//! each request the service:
//!
//! 1. extracts the key (a request without one answers 400, or passes unlimited with
//!    [`MissingKey::Skip`]);
//! 2. acquires a lease through the [`Engine`], whose failure modes answer when the store fails;
//! 3. when every slot is taken, answers 429 (`concurrency-limited` problem, `Retry-After`: the
//!    time until the oldest lease expires); when the store failed under `fail_closed`, 503;
//! 4. otherwise calls the inner service and hands the lease to the response's body.
//!
//! The lease is released when the *body* ends, not when the response head is sent: a streamed
//! export holds its slot until its last byte. Precisely, the release happens on the first of:
//! the body's last frame, an error from the body, the body dropped (the client went away, or an
//! empty body that is never polled), an error from the inner service, or the request's future
//! dropped before the inner service answered. Each lease is released at most once. A release
//! that fails is logged (sampled) and the lease ends at the policy's `lease_timeout`.
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::get};
//! use axum::http::HeaderName;
//! use tollgate::MemoryStore;
//! use tollgate::concurrency::ConcurrencyPolicy;
//! use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor};
//!
//! // At most 5 exports in flight per API key.
//! let exports = ConcurrencyPolicy::new("exports", 5, Duration::from_secs(30))?;
//! let app: Router = Router::new()
//!     .route("/export", get(|| async { "a long body" }))
//!     .layer(ConcurrencyLimitLayer::new(
//!         MemoryStore::new(),
//!         exports,
//!         KeyExtractor::header(HeaderName::from_static("x-api-key")),
//!     ));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod body;
mod engine;

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, Request, Response, StatusCode};
use serde_json::json;
use tollgate::concurrency::{Acquire, ConcurrencyPolicy, ConcurrencyStore, Full};
use tollgate::{Engine, FailureMode, headers};
use tower::{Layer, Service};

use self::body::Guard;
pub use self::body::LeaseBody;
use self::engine::LeaseEngine;
use crate::problem::{Problems, STORE_UNAVAILABLE, object};
use crate::{KeyExtractor, MissingKey};
use tollgate::headers::millis_up;

static STORE_FAILURE_LOG: crate::LogSampler = crate::LogSampler::new(std::time::Duration::from_secs(1));

/// Slug of a 429: every slot of the key is taken.
pub const CONCURRENCY_LIMITED: &str = "concurrency-limited";

/// Makes [`ConcurrencyLimit`] services that share one engine and store.
///
/// ```
/// use std::time::Duration;
/// use tollgate::MemoryStore;
/// use tollgate::concurrency::ConcurrencyPolicy;
/// use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor, MissingKey};
///
/// let policy = ConcurrencyPolicy::new("uploads", 2, Duration::from_secs(60))?;
/// let layer = ConcurrencyLimitLayer::new(MemoryStore::new(), policy, KeyExtractor::peer_ip())
///     .on_missing_key(MissingKey::Skip);
/// assert_eq!(layer.policy().max_in_flight(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ConcurrencyLimitLayer {
    shared: Arc<Shared>,
}

struct Shared {
    engine: Arc<dyn LeaseEngine>,
    policy: ConcurrencyPolicy,
    key: KeyExtractor,
    missing: MissingKey,
    problems: Problems,
}

impl ConcurrencyLimitLayer {
    /// A layer limiting `policy` per `key` over `store` (a `MemoryStore`, a `RedisStore`, or an
    /// `Arc` of one shared with the rest of the application).
    pub fn new<S: ConcurrencyStore + 'static>(
        store: S,
        policy: ConcurrencyPolicy,
        key: KeyExtractor,
    ) -> Self {
        Self::with_engine(Arc::new(Engine::new(store)), policy, key)
    }

    /// A layer over an engine shared with other layers or code, so the `local` failure mode's
    /// limiter is shared too.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{Engine, MemoryStore};
    /// use tollgate::concurrency::ConcurrencyPolicy;
    /// use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor};
    ///
    /// let engine = Arc::new(Engine::new(MemoryStore::new()));
    /// let policy = ConcurrencyPolicy::new("uploads", 2, Duration::from_secs(60))?;
    /// let _layer = ConcurrencyLimitLayer::with_engine(engine, policy, KeyExtractor::peer_ip());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_engine<S: ConcurrencyStore + 'static>(
        engine: Arc<Engine<S>>,
        policy: ConcurrencyPolicy,
        key: KeyExtractor,
    ) -> Self {
        ConcurrencyLimitLayer {
            shared: Arc::new(Shared {
                engine,
                policy,
                key,
                missing: MissingKey::default(),
                problems: Problems::default(),
            }),
        }
    }

    /// What a request without a key gets: 400 ([`MissingKey::Reject`], the default) or no limit
    /// ([`MissingKey::Skip`]).
    pub fn on_missing_key(self, missing: MissingKey) -> Self {
        self.rebuild(|shared| shared.missing = missing)
    }

    /// The `type` of the problem bodies: `base` followed by the slug (`concurrency-limited`,
    /// `missing-key`, `key-too-long`, `store-unavailable`) instead of `about:blank`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::concurrency::ConcurrencyPolicy;
    /// use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor};
    ///
    /// let policy = ConcurrencyPolicy::new("uploads", 2, Duration::from_secs(60))?;
    /// let _layer = ConcurrencyLimitLayer::new(MemoryStore::new(), policy, KeyExtractor::peer_ip())
    ///     .problem_type_base("https://api.example.com/problems/");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn problem_type_base(self, base: impl Into<String>) -> Self {
        let base = base.into();
        self.rebuild(|shared| shared.problems.type_base = Some(base))
    }

    /// The policy.
    pub fn policy(&self) -> &ConcurrencyPolicy {
        &self.shared.policy
    }

    fn rebuild(self, change: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared {
            engine: self.shared.engine.clone(),
            policy: self.shared.policy.clone(),
            key: self.shared.key.clone(),
            missing: self.shared.missing,
            problems: self.shared.problems.clone(),
        };
        change(&mut shared);
        ConcurrencyLimitLayer {
            shared: Arc::new(shared),
        }
    }
}

impl fmt::Debug for ConcurrencyLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("policy", &self.shared.policy)
            .field("key", &self.shared.key)
            .field("missing", &self.shared.missing)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for ConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Wraps a service with a [`ConcurrencyLimitLayer`]'s policy; see the [module docs](self).
///
/// ```
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use std::time::Duration;
/// use axum::body::Body;
/// use axum::http::{Request, Response};
/// use tollgate::MemoryStore;
/// use tollgate::concurrency::ConcurrencyPolicy;
/// use tollgate_tower::{ConcurrencyLimitLayer, KeyExtractor};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let policy = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30))?;
/// let service = ServiceBuilder::new()
///     .layer(ConcurrencyLimitLayer::new(MemoryStore::new(), policy, KeyExtractor::peer_ip()))
///     .service_fn(|_: Request<Body>| async { Ok::<_, Infallible>(Response::new(Body::from("ok"))) });
/// let request = || Request::builder().extension("192.0.2.1:1".parse::<SocketAddr>().unwrap()).body(Body::empty());
/// let first = service.clone().oneshot(request()?).await?;
/// // The first response's body holds the lease until it ends or is dropped.
/// assert_eq!(service.clone().oneshot(request()?).await?.status(), 429);
/// drop(first);
/// assert_eq!(service.oneshot(request()?).await?.status(), 200);
/// # Ok(()) }
/// ```
pub struct ConcurrencyLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: Clone> Clone for ConcurrencyLimit<S> {
    fn clone(&self) -> Self {
        ConcurrencyLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for ConcurrencyLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

type BoxedFuture<E> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response<Body>, E>> + Send>>;

impl<S, B, ResBody> Service<Request<B>> for ConcurrencyLimit<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: HttpBody<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxedFuture<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service that was polled ready goes into the future; `self` keeps a fresh clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let policy = &shared.policy;
            let key = match shared.key.extract(&parts) {
                Some(key) => key,
                None => {
                    return match shared.missing {
                        MissingKey::Skip => {
                            let response = inner.call(Request::from_parts(parts, body)).await?;
                            Ok(response.map(Body::new))
                        }
                        _ => Ok(shared.problems.response(
                            StatusCode::BAD_REQUEST,
                            crate::problem::MISSING_KEY,
                            format!(
                                "concurrency limit `{}` needs {}, and this request has none",
                                policy.name(),
                                shared.key.describe()
                            ),
                            object(json!({ "policy": policy.name() })),
                        )),
                    };
                }
            };
            if key.len() > tollgate::bounds::MAX_KEY_LEN {
                let max = tollgate::bounds::MAX_KEY_LEN;
                return Ok(shared.problems.response(
                    StatusCode::BAD_REQUEST,
                    crate::problem::KEY_TOO_LONG,
                    format!(
                        "concurrency limit `{}` keys on {}, which is {} bytes here, above the maximum of {max}",
                        policy.name(),
                        shared.key.describe(),
                        key.len()
                    ),
                    object(json!({ "policy": policy.name(), "key_len": key.len(), "max_key_len": max })),
                ));
            }
            let acquisition = match shared.engine.acquire(policy, &key).await {
                Ok(acquisition) => acquisition,
                Err(err) => {
                    // Only bad input comes back as an error, and the key was checked above.
                    return Ok(shared.problems.response(
                        StatusCode::BAD_REQUEST,
                        crate::problem::KEY_TOO_LONG,
                        err.to_string(),
                        object(json!({ "policy": policy.name() })),
                    ));
                }
            };
            if let Some(err) = &acquisition.store_error
                && STORE_FAILURE_LOG.due()
            {
                tracing::warn!(
                    policy = policy.name(),
                    class = err.class().unwrap_or("input"),
                    error = %err,
                    "concurrency store failed; the failure mode decided (sampled: at most one line a second)"
                );
            }
            let lease = match acquisition.acquire {
                Acquire::Granted(lease) => lease,
                Acquire::Denied(full) => return Ok(denied(&shared, &full)),
            };
            // From here the guard releases the lease whatever happens: dropped with this future,
            // with an error of the inner service, or moved into the body and released at its end.
            let guard = Guard::new(shared.engine.clone(), policy.clone(), key, lease.id);
            let response = inner.call(Request::from_parts(parts, body)).await?;
            Ok(response.map(|body| Body::new(LeaseBody::new(body, guard))))
        })
    }
}

/// The answer to a denied acquisition: 429, or 503 when the store failed under `fail_closed`.
fn denied(shared: &Shared, full: &Full) -> Response<Body> {
    let policy = &shared.policy;
    let closed = full.degraded && policy.failure_mode() == FailureMode::FailClosed;
    let mut response = if closed {
        shared.problems.response(
            StatusCode::SERVICE_UNAVAILABLE,
            STORE_UNAVAILABLE,
            format!(
                "the concurrency store failed, and concurrency limit `{}` denies requests while it cannot decide",
                policy.name()
            ),
            object(json!({ "policy": policy.name() })),
        )
    } else {
        shared.problems.response(
            StatusCode::TOO_MANY_REQUESTS,
            CONCURRENCY_LIMITED,
            format!(
                "concurrency limit `{}` reached: {} of {} requests in flight",
                policy.name(),
                full.in_flight,
                full.limit
            ),
            object(json!({
                "policy": policy.name(),
                "in_flight": full.in_flight,
                "limit": full.limit,
                "retry_after_ms": millis_up(full.retry_after),
            })),
        )
    };
    response.headers_mut().insert(
        RETRY_AFTER,
        HeaderValue::from(headers::seconds_up(full.retry_after).max(1)),
    );
    response
}
