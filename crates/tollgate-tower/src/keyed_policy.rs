//! [`KeyedPolicy`]: one policy applied to requests, with the key it counts against and how it
//! behaves. Each request it applies to becomes one core [`Rule`](tollgate::Rule).

use axum::http::HeaderValue;
use tollgate::{Decision, Policy, headers};

use crate::{Error, KeyExtractor};

/// What a rule does with a request its extractor finds no key for (a missing header, an unknown
/// peer address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer `400 Bad Request` with a problem body naming what was missing. The default, so a
    /// misconfigured app (served without connection info, say) fails loudly instead of silently
    /// not limiting.
    #[default]
    Reject,
    /// Let the request through without this rule, as if it did not exist. Other rules still
    /// apply. For optional keys: limit by API key only when one is sent, say.
    Skip,
}

/// A policy, the key it counts against, and options: the cost of a request, shadow mode and the
/// missing-key choice.
///
/// ```
/// use std::time::Duration;
/// use axum::http::HeaderName;
/// use tollgate::{Algorithm, Policy};
/// use tollgate_tower::{KeyExtractor, MissingKey, KeyedPolicy};
///
/// let policy = Policy::new("per-key", Algorithm::sliding_window(1_000, Duration::from_secs(60))?)?;
/// let rule = KeyedPolicy::new(policy, KeyExtractor::header(HeaderName::from_static("x-api-key")))
///     .on_missing_key(MissingKey::Skip)
///     .shadow(true);
/// assert!(rule.is_shadow());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct KeyedPolicy {
    pub(crate) policy: Policy,
    pub(crate) key: KeyExtractor,
    pub(crate) cost: u64,
    pub(crate) shadow: bool,
    pub(crate) on_missing_key: MissingKey,
    /// This rule's `RateLimit-Policy` entry and its start of `RateLimit` entries, rendered
    /// once: they never change.
    pub(crate) headers: PolicyHeaders,
}

impl KeyedPolicy {
    /// Applies `policy` to the key `key` finds, at a cost of 1 per request, enforced, rejecting
    /// requests without a key.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, KeyedPolicy};
    ///
    /// let rule = KeyedPolicy::new(Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?, KeyExtractor::peer_ip());
    /// assert_eq!(rule.policy().name(), "api");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(policy: Policy, key: KeyExtractor) -> Self {
        KeyedPolicy {
            headers: PolicyHeaders::new(&policy),
            policy,
            key,
            cost: 1,
            shadow: false,
            on_missing_key: MissingKey::default(),
        }
    }

    /// What each request costs: 1 to the policy's [`max_cost`](Policy::max_cost).
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, KeyedPolicy};
    ///
    /// let policy = Policy::new("exports", Algorithm::token_bucket(10, Rate::per_minute(10)?)?)?;
    /// let rule = KeyedPolicy::new(policy.clone(), KeyExtractor::peer_ip()).cost(5)?;
    /// assert_eq!(rule.request_cost(), 5);
    /// assert!(KeyedPolicy::new(policy, KeyExtractor::peer_ip()).cost(11).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(mut self, cost: u64) -> Result<Self, Error> {
        let max = self.policy.max_cost();
        if cost == 0 || cost > max {
            return Err(Error::BadCost {
                cost,
                max,
                policy: self.policy.name().to_owned(),
            });
        }
        self.cost = cost;
        Ok(self)
    }

    /// Shadow mode: the rule is checked and counted (would-be denials are logged with `tracing`
    /// and counted as [`shadow_denied`](crate::StatsSnapshot::shadow_denied)), but it never
    /// denies and adds no headers: clients cannot see it.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, KeyedPolicy};
    ///
    /// let rule = KeyedPolicy::new(Policy::new("trial", Algorithm::gcra(Rate::per_second(1)?, 1)?)?, KeyExtractor::peer_ip());
    /// assert!(!rule.is_shadow());
    /// assert!(rule.shadow(true).is_shadow());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// What to do with a request that has no key; see [`MissingKey`].
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Rate};
    /// use tollgate_tower::{KeyExtractor, MissingKey, KeyedPolicy};
    ///
    /// let rule = KeyedPolicy::new(Policy::new("api", Algorithm::gcra(Rate::per_second(1)?, 1)?)?, KeyExtractor::peer_ip())
    ///     .on_missing_key(MissingKey::Skip);
    /// assert_eq!(rule.missing_key(), MissingKey::Skip);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_missing_key(mut self, choice: MissingKey) -> Self {
        self.on_missing_key = choice;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The key extractor.
    pub fn key(&self) -> &KeyExtractor {
        &self.key
    }

    /// The cost of one request.
    pub fn request_cost(&self) -> u64 {
        self.cost
    }

    /// Whether the rule is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The missing-key choice.
    pub fn missing_key(&self) -> MissingKey {
        self.on_missing_key
    }

    /// This rule for one request, as the engine takes it.
    #[inline]
    pub(crate) fn bind<'a>(&'a self, key: &'a [u8]) -> tollgate::Rule<'a> {
        let rule = tollgate::Rule::new(&self.policy, key, self.cost);
        if self.shadow { rule.as_shadow() } else { rule }
    }
}

/// A rule's constant parts of the rate limit headers, rendered when the rule is made.
#[derive(Debug, Clone)]
pub(crate) struct PolicyHeaders {
    /// The `RateLimit-Policy` entry, e.g. `"movies";q=20;w=60`.
    pub(crate) policy: String,
    /// The same as a field value, for a response that reports this rule alone.
    pub(crate) policy_value: Option<HeaderValue>,
    /// The start of every `RateLimit` entry, up to its numbers: `"movies";r=`.
    limit_prefix: String,
}

impl PolicyHeaders {
    pub(crate) fn new(policy: &Policy) -> Self {
        let rendered = headers::ratelimit_policy(policy);
        // The core renders an entry as the quoted name and its parameters; the name part is
        // what a decision with zero everywhere renders before `;r=0;t=0`.
        let zero = headers::ratelimit(policy, &Decision::default());
        let name = zero.strip_suffix(";r=0;t=0").unwrap_or(&zero);
        PolicyHeaders {
            policy_value: HeaderValue::try_from(rendered.as_str()).ok(),
            policy: rendered,
            limit_prefix: format!("{name};r="),
        }
    }

    /// Appends this rule's `RateLimit` entry for `decision`: the same text as
    /// [`headers::ratelimit`], with the numbers written by `itoa` instead of the formatter.
    pub(crate) fn push_limit(&self, out: &mut Vec<u8>, decision: &Decision) {
        let (mut remaining, mut reset) = (itoa::Buffer::new(), itoa::Buffer::new());
        let remaining = remaining.format(decision.remaining).as_bytes();
        let reset = reset.format(headers::seconds_up(decision.reset_after)).as_bytes();
        out.reserve_exact(self.limit_prefix.len() + remaining.len() + 3 + reset.len());
        out.extend_from_slice(self.limit_prefix.as_bytes());
        out.extend_from_slice(remaining);
        out.extend_from_slice(b";t=");
        out.extend_from_slice(reset);
    }
}
