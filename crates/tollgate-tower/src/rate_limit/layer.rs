//! [`RateLimitLayer`], its builder, and the `Layer` impl.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tollgate::Store;
use tower::Layer;

use super::limiter::Limiter;
use super::service::RateLimit;
use crate::problem::Problems;
use crate::store::SharedStore;
use crate::{Error, Rule, Stats};

/// Rate limits the requests of the services it wraps, by one or more [`Rule`]s over any
/// tollgate [`Store`].
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
/// use tollgate_tower::{KeyExtractor, RateLimitLayer, Rule};
///
/// let policy = Policy::new("api", Algorithm::sliding_window(100, Duration::from_secs(60))?)?;
/// let layer = RateLimitLayer::new(MemoryStore::new(), Rule::new(policy, KeyExtractor::peer_ip()));
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
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, Rule};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let layer = RateLimitLayer::new(MemoryStore::new(), Rule::new(policy, KeyExtractor::peer_ip()));
    /// assert_eq!(layer.rules().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<S: Store + 'static>(store: S, rule: Rule) -> Self {
        RateLimitLayer {
            limiter: Arc::new(Limiter {
                store: Box::new(Arc::new(store)),
                rules: vec![rule],
                stats: Stats::default(),
                problems: Problems::default(),
            }),
        }
    }

    /// Starts a layer over `store`, for several rules or other options.
    ///
    /// ```
    /// use std::time::Duration;
    /// use axum::http::HeaderName;
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, Rule};
    ///
    /// let burst = Policy::new("burst", Algorithm::gcra(Rate::per_second(5)?, 10)?)?;
    /// let daily = Policy::new("daily", Algorithm::sliding_window(10_000, Duration::from_secs(86_400))?)?;
    /// let api_key = KeyExtractor::header(HeaderName::from_static("x-api-key"));
    /// let layer = RateLimitLayer::builder(MemoryStore::new())
    ///     .rule(Rule::new(burst, KeyExtractor::peer_ip()))
    ///     .rule(Rule::new(daily, api_key))
    ///     .problem_type_base("https://api.example.com/problems/")
    ///     .build()?;
    /// assert_eq!(layer.rules().len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder<S: Store + 'static>(store: S) -> RateLimitLayerBuilder {
        Self::builder_shared(Arc::new(store))
    }

    /// Starts a layer over a store the application also uses elsewhere (say, to reset a key
    /// after a successful login).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, Rule};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let policy = Policy::new("login", Algorithm::gcra(Rate::per_minute(5)?, 5)?)?;
    /// let layer = RateLimitLayer::builder_shared(store.clone())
    ///     .rule(Rule::new(policy.clone(), KeyExtractor::peer_ip()))
    ///     .build()?;
    /// store.reset(&policy, "192.0.2.1")?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder_shared<S: Store + 'static>(store: Arc<S>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            store: Box::new(store),
            rules: Vec::new(),
            problems: Problems::default(),
        }
    }

    /// The counters, shared by every clone of this layer and its services.
    ///
    /// ```
    /// use tollgate::{Algorithm, MemoryStore, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, RateLimitLayer, Rule};
    ///
    /// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
    /// let layer = RateLimitLayer::new(MemoryStore::new(), Rule::new(policy, KeyExtractor::peer_ip()));
    /// assert_eq!(layer.stats().snapshot().denied, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.limiter.stats.clone()
    }

    /// The rules, in the order they are applied.
    pub fn rules(&self) -> &[Rule] {
        &self.limiter.rules
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.limiter.rules)
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
    store: Box<dyn SharedStore>,
    rules: Vec<Rule>,
    problems: Problems,
}

impl RateLimitLayerBuilder {
    /// Adds a rule. Rules apply in the order added; a request passes only if every enforced
    /// rule allows it.
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Makes problem `type`s `base` followed by a slug (`rate-limited`, ...; see
    /// [`problem`](crate::problem)) instead of `about:blank`.
    pub fn problem_type_base(mut self, base: impl Into<String>) -> Self {
        self.problems.type_base = Some(base.into());
        self
    }

    /// Builds the layer. Fails without rules, or when two rules use the same policy name (they
    /// would count into the same state).
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate_tower::{Error, RateLimitLayer};
    ///
    /// assert_eq!(RateLimitLayer::builder(MemoryStore::new()).build().unwrap_err(), Error::NoRules);
    /// ```
    pub fn build(self) -> Result<RateLimitLayer, Error> {
        if self.rules.is_empty() {
            return Err(Error::NoRules);
        }
        let mut names = HashSet::new();
        for rule in &self.rules {
            if !names.insert(rule.policy.name()) {
                return Err(Error::DuplicatePolicy(rule.policy.name().to_owned()));
            }
        }
        Ok(RateLimitLayer {
            limiter: Arc::new(Limiter {
                store: self.store,
                rules: self.rules,
                stats: Stats::default(),
                problems: self.problems,
            }),
        })
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}
