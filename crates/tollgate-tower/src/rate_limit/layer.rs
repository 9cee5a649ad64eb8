//! [`RateLimitLayer`], its builder, and the `Layer` impl.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tollgate::{Engine, Store};
use tower::Layer;

use super::limiter::{Limiter, VerdictHook};
use super::service::RateLimit;
use crate::engine::SharedEngine;
use crate::problem::Problems;
use crate::{Error, KeyedPolicy, Stats};

/// Rate limits the requests of the services it wraps, by one or more [`KeyedPolicy`]s over any
/// tollgate [`Store`], decided by a tollgate [`Engine`].
///
/// Cloning is cheap and every clone, and every [`RateLimit`] service made from any of them,
/// shares one limiter: the limit holds across axum's per-request clones, connections and
/// threads. Two layers built separately over one Redis store (two app instances) share the
/// limit through Redis.
///
/// ```
/// use std::time::Duration;
/// use axum::{Router, routing::get};
/// use tollgate::{Algorithm, MemoryStore, Policy};
/// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
///
/// let policy = Policy::new("api", Algorithm::sliding_window(100, Duration::from_secs(60))?)?;
/// let layer = RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(policy, KeyExtractor::peer_ip()));
/// let app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
/// # let _ = app;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
}

impl RateLimitLayer {
    /// A layer applying one rule over `store`.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let layer = RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(policy, KeyExtractor::peer_ip()));
    /// assert_eq!(layer.policies().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<S: Store + 'static>(store: S, rule: KeyedPolicy) -> Self {
        Self::with_engine(Engine::new(store), rule)
    }

    /// A layer applying one rule, decided by `engine`: one configured for the `Local` failure
    /// mode's limiter, say, or one the application also uses to reset keys. Takes an `Engine`
    /// or an `Arc` of one.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Arc::new(Engine::builder(MemoryStore::new()).fallback_max_keys(10_000).build());
    /// let policy = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?;
    /// let layer = RateLimitLayer::with_engine(engine.clone(), KeyedPolicy::new(policy.clone(), KeyExtractor::peer_ip()));
    /// // After a successful login, say:
    /// engine.reset(&policy, b"192.0.2.1").await?;
    /// # let _ = layer;
    /// # Ok(()) }
    /// ```
    pub fn with_engine<S: Store + 'static>(engine: impl Into<Arc<Engine<S>>>, rule: KeyedPolicy) -> Self {
        RateLimitLayer {
            limiter: Arc::new(Limiter {
                engine: engine.into(),
                policies: vec![rule],
                stats: Stats::default(),
                problems: Problems::default(),
                told_no_peer: AtomicBool::new(false),
                refund_on_server_error: false,
                on_verdict: None,
            }),
        }
    }

    /// Starts a layer over `store`, for several keyed policies or other options.
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::http::HeaderName;
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let burst = Policy::new("burst", Algorithm::gcra(Rate::per_second(5)?, 10)?)?;
    /// let daily = Policy::new("daily", Algorithm::sliding_window(10_000, Duration::from_secs(86_400))?)?;
    /// let api_key = KeyExtractor::header(HeaderName::from_static("x-api-key"));
    /// let layer = RateLimitLayer::builder(MemoryStore::new())
    ///     .policy(KeyedPolicy::new(burst, KeyExtractor::peer_ip()))
    ///     .policy(KeyedPolicy::new(daily, api_key))
    ///     .problem_type_base("https://api.example.com/problems/")
    ///     .build()?;
    /// assert_eq!(layer.policies().len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder<S: Store + 'static>(store: S) -> RateLimitLayerBuilder {
        Self::builder_engine(Engine::new(store))
    }

    /// Starts a layer over a store the application also uses elsewhere (say, to reset a key
    /// after a successful login).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let policy = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?;
    /// let layer = RateLimitLayer::builder_shared(store.clone())
    ///     .policy(KeyedPolicy::new(policy.clone(), KeyExtractor::peer_ip()))
    ///     .build()?;
    /// store.reset(&policy, "192.0.2.1")?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder_shared<S: Store + 'static>(store: Arc<S>) -> RateLimitLayerBuilder {
        Self::builder_engine(Engine::new(store))
    }

    /// Starts a layer decided by `engine` (an `Engine` or an `Arc` of one), for several keyed policies:
    /// several layers can share one engine, and with it one `Local` failure mode limiter.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Engine, MemoryStore, Policy};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let engine = Arc::new(Engine::builder(MemoryStore::new()).fallback_max_keys(10_000).build());
    /// let search = Policy::new("search", Algorithm::sliding_window(60, Duration::from_secs(60))?)?;
    /// let export = Policy::new("export", Algorithm::sliding_window(5, Duration::from_secs(3600))?)?;
    /// let searches = RateLimitLayer::builder_engine(engine.clone())
    ///     .policy(KeyedPolicy::new(search, KeyExtractor::peer_ip()))
    ///     .build()?;
    /// let exports = RateLimitLayer::builder_engine(engine)
    ///     .policy(KeyedPolicy::new(export, KeyExtractor::peer_ip()))
    ///     .build()?;
    /// # let _ = (searches, exports);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder_engine<S: Store + 'static>(engine: impl Into<Arc<Engine<S>>>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            engine: engine.into(),
            policies: Vec::new(),
            problems: Problems::default(),
            stats: Stats::default(),
            refund_on_server_error: false,
            on_verdict: None,
        }
    }

    /// The counters, shared by every clone of this layer and its services.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let layer = RateLimitLayer::new(MemoryStore::new(), KeyedPolicy::new(policy, KeyExtractor::peer_ip()));
    /// assert_eq!(layer.stats().snapshot().denied, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.limiter.stats.clone()
    }

    /// The keyed policies, in the order they are applied.
    pub fn policies(&self) -> &[KeyedPolicy] {
        &self.limiter.policies
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policies", &self.limiter.policies)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.limiter.clone())
    }
}

/// Configures a [`RateLimitLayer`]: start with [`RateLimitLayer::builder`].
pub struct RateLimitLayerBuilder {
    engine: Arc<dyn SharedEngine>,
    policies: Vec<KeyedPolicy>,
    problems: Problems,
    stats: Stats,
    refund_on_server_error: bool,
    on_verdict: Option<VerdictHook>,
}

impl RateLimitLayerBuilder {
    /// Adds a keyed policy. A request passes only if every enforced one allows it; headers list
    /// them in the order added. Two with the same policy that find the same key spend from one
    /// budget, the sum of their costs.
    pub fn policy(mut self, policy: KeyedPolicy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Makes problem `type`s `base` followed by a slug (`rate-limited`, ...; see
    /// [`problem`](crate::problem)) instead of `about:blank`.
    pub fn problem_type_base(mut self, base: impl Into<String>) -> Self {
        self.problems.type_base = Some(base.into());
        self
    }

    /// Counts into `stats` instead of counters of its own, so several layers (one per route, or
    /// the layers rebuilt on a config reload) add up to one set of counts.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy, Stats};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let shared = Stats::default();
    /// let layer = RateLimitLayer::builder(MemoryStore::new())
    ///     .policy(KeyedPolicy::new(policy, KeyExtractor::peer_ip()))
    ///     .stats(shared.clone())
    ///     .build()?;
    /// assert_eq!(layer.stats().snapshot(), shared.snapshot());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(mut self, stats: Stats) -> Self {
        self.stats = stats;
        self
    }

    /// Gives an admitted request's cost back (see [`tollgate::Store::refund`]) when the inner
    /// service answers with a 5xx status: the failure was on this side, so it should not use up
    /// the client's budget. Off by default. Every rule the request spent on is refunded, once
    /// the response head is known and before it is returned, through
    /// [`Engine::refund`](tollgate::Engine::refund) as at every door: a rule a failure mode
    /// admitted while the store was away gets its cost back in the `Local` limiter. A refund
    /// that fails (the store still away) is counted
    /// ([`StatsSnapshot::refund_failures`](crate::StatsSnapshot::refund_failures)) and logged,
    /// and the response goes out unchanged.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, KeyedPolicy};
    ///
    /// let policy = Policy::new("exports", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?;
    /// let layer = RateLimitLayer::builder(MemoryStore::new())
    ///     .policy(KeyedPolicy::new(policy, KeyExtractor::peer_ip()))
    ///     .refund_on_server_error(true)
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_on_server_error(mut self, refund: bool) -> Self {
        self.refund_on_server_error = refund;
        self
    }

    /// Calls `hook` with every verdict the engine gives, and the rules it is for (a request
    /// answered before the engine is asked, for a missing key say, has none): for an
    /// application that counts decisions its own way, as the tollgate server does for its
    /// metrics and dashboard.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, KeyedPolicy, RateLimitLayer};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let denied = Arc::new(AtomicU64::new(0));
    /// let counted = Arc::clone(&denied);
    /// let layer = RateLimitLayer::builder(MemoryStore::new())
    ///     .policy(KeyedPolicy::new(policy, KeyExtractor::peer_ip()))
    ///     .on_verdict(move |_rules, verdict| {
    ///         if !verdict.allowed() {
    ///             counted.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///     })
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_verdict(
        mut self,
        hook: impl Fn(&[tollgate::Rule<'_>], &tollgate::Verdict) + Send + Sync + 'static,
    ) -> Self {
        self.on_verdict = Some(Arc::new(hook));
        self
    }

    /// Builds the layer. Fails without keyed policies, or when two use one policy name for two
    /// different policies (they would count into the same state by different settings).
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate_tower::{Error, RateLimitLayer};
    ///
    /// assert_eq!(RateLimitLayer::builder(MemoryStore::new()).build().unwrap_err(), Error::NoRules);
    /// ```
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        if self.policies.is_empty() {
            return Err(Error::NoRules);
        }
        for (i, rule) in self.policies.iter().enumerate() {
            let clash = self.policies[..i]
                .iter()
                .any(|earlier| earlier.policy.name() == rule.policy.name() && earlier.policy != rule.policy);
            if clash {
                return Err(Error::DuplicatePolicy(rule.policy.name().to_owned()));
            }
        }
        Ok(RateLimitLayer {
            limiter: Arc::new(Limiter {
                engine: self.engine,
                policies: self.policies,
                stats: self.stats,
                problems: self.problems,
                told_no_peer: AtomicBool::new(false),
                refund_on_server_error: self.refund_on_server_error,
                on_verdict: self.on_verdict,
            }),
        })
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}
