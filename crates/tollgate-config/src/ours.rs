//! The tollgate format: a `policies` map from a name to one algorithm and its parameters.
//!
//! ```yaml
//! policies:
//!   login:                       # checked as POST /v1/check {"policy": "login", "key": ...}
//!     algorithm: gcra
//!     rate: 5/1m
//!     burst: 5
//!     block_for: 15m
//!     on_store_failure: fail_closed
//!   search:
//!     algorithm: sliding_window
//!     limit: 1000
//!     window: 1h
//!     on_store_failure: local
//!     instances: 4
//!     shadow: true
//! ```
//!
//! Each algorithm takes exactly its own fields, and a field another algorithm would use is an
//! error rather than silently ignored: `window` on a token bucket almost always means the author
//! meant a different algorithm.
//!
//! | algorithm | fields |
//! |---|---|
//! | `fixed_window` | `limit`, `window`, `anchor` (`epoch`, the default, or `first_hit`) |
//! | `sliding_log`, `sliding_window` | `limit`, `window` |
//! | `token_bucket` | `capacity`, `refill` (a rate) |
//! | `leaky_bucket` | `capacity`, `leak` (a rate) |
//! | `gcra` | `rate`, `burst` |
//! | `concurrency` | `max_in_flight`, `lease_timeout` (see below) |
//!
//! `algorithm: concurrency` is not a rate but a bound on requests in flight per key, acquired
//! and released through `POST /v1/concurrency/{policy}/{key}/acquire` and `.../release` (see
//! `docs/concurrency.md` and [`tollgate::concurrency`]). It takes `max_in_flight` (1 to
//! 100 000) and `lease_timeout` (how long a lease that is never released lives, whole
//! milliseconds), and `on_store_failure`, `instances` and `hash_tag`; `block_for`, `shadow` and
//! `lease` mean nothing for it and are refused. It cannot be used in `/v1/check`, in a route or
//! in an envoyproxy/ratelimit descriptor.
//!
//! ```yaml
//! policies:
//!   exports:
//!     algorithm: concurrency
//!     max_in_flight: 5
//!     lease_timeout: 30s
//! ```
//!
//! A file may also list `routes` for `tollgate proxy`: see [`crate::routes`].
//!
//! Every policy may also set `hash_tag: key` (its Redis keys are placed on a cluster by the key
//! alone, so every policy with `hash_tag: key` on one user or tenant shares a slot and a request
//! limited by several of them is one script call; the default `policy_and_key` spreads them),
//! `block_for` (a penalty after a denial), `on_store_failure`
//! (`fail_open`, `fail_closed` or `local`, with `instances` for `local`, default 1) and `shadow`
//! (check and count, but never deny; default false).
//!
//! A `fixed_window`, `token_bucket` or `gcra` policy may also lease its hot keys' budget to the
//! instance that sees them hot (on a Redis store; see `docs/leases.md` and
//! [`tollgate::lease`]):
//!
//! ```yaml
//! policies:
//!   api:
//!     algorithm: fixed_window
//!     limit: 100000
//!     window: 1s
//!     lease:
//!       max_units: 1000        # required: the most units one lease takes
//!       hot_per_second: 100    # optional, default 100: decisions per second that make a key hot
//!       hold: 100ms            # optional, default 100ms: how long a lease is held at most
//! ```

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::Deserialize;
use tollgate::concurrency::ConcurrencyPolicy;
use tollgate::{Algorithm, Anchor, LeaseOptions, Policy, PolicyError};

use crate::fields::{
    AlgorithmName, AnchorName, FailureName, HashTagName, Scalar, failure_mode, join, policy_error_field,
};
use crate::limits::{ENVOY_POLICY_PREFIX, NamedPolicy};
use crate::routes::{Route, RouteKey};
use crate::{ConfigError, ConfigErrorKind};

/// A file in the tollgate format.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with `policies`")]
pub(crate) struct OursFile {
    policies: BTreeMap<String, PolicySpec>,
    /// For `tollgate proxy`; see [`crate::routes`].
    #[serde(default)]
    routes: Vec<RouteSpec>,
}

/// One entry of `routes`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a route: a map with `prefix`, `policies` and optionally `key`"
)]
struct RouteSpec {
    prefix: String,
    policies: Vec<String>,
    key: Option<String>,
}

/// One entry of `policies`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a policy: a map with `algorithm` and its parameters"
)]
struct PolicySpec {
    algorithm: AlgorithmName,
    limit: Option<u64>,
    window: Option<Scalar>,
    anchor: Option<AnchorName>,
    capacity: Option<u64>,
    refill: Option<Scalar>,
    leak: Option<Scalar>,
    rate: Option<Scalar>,
    burst: Option<u64>,
    block_for: Option<Scalar>,
    on_store_failure: Option<FailureName>,
    instances: Option<NonZeroU32>,
    hash_tag: Option<HashTagName>,
    #[serde(default)]
    shadow: bool,
    lease: Option<LeaseSpec>,
    /// `concurrency` only.
    max_in_flight: Option<u64>,
    /// `concurrency` only.
    lease_timeout: Option<Scalar>,
}

/// The `lease` map of a policy, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a lease: a map with `max_units` and optionally `hot_per_second` and `hold`"
)]
struct LeaseSpec {
    max_units: u64,
    hot_per_second: Option<u64>,
    hold: Option<Scalar>,
}

impl LeaseSpec {
    /// The lease options; errors name the field of `lease` they are about.
    fn compile(self, file: &str, at: &str) -> Result<LeaseOptions, ConfigError> {
        let at = join(at, "lease");
        let err = |field: &str, kind| ConfigError::new(file, Some(join(&at, field)), kind);
        let policy = |field: &'static str| move |e: PolicyError| err(field, ConfigErrorKind::Policy(e));
        let mut lease = LeaseOptions::new(self.max_units).map_err(policy("max_units"))?;
        if let Some(decisions) = self.hot_per_second {
            lease = lease
                .hot_per_second(decisions)
                .map_err(policy("hot_per_second"))?;
        }
        if let Some(hold) = &self.hold {
            let hold = hold.duration().map_err(|kind| err("hold", kind))?;
            lease = lease.hold(hold).map_err(policy("hold"))?;
        }
        Ok(lease)
    }
}

/// The algorithm-specific fields, in the order the table in the module docs lists them.
const SPECIFIC_FIELDS: [&str; 8] = [
    "limit", "window", "anchor", "capacity", "refill", "leak", "rate", "burst",
];

/// A compiled file: its policies in name order, and its routes in file order.
pub(crate) struct Compiled {
    pub(crate) policies: Vec<(String, NamedPolicy)>,
    /// The `algorithm: concurrency` policies, in name order.
    pub(crate) concurrency: Vec<(String, ConcurrencyPolicy)>,
    pub(crate) routes: Vec<Route>,
}

/// One compiled entry of `policies`: a rate limit or a concurrency limit.
enum Kind {
    Rate(NamedPolicy),
    Concurrency(ConcurrencyPolicy),
}

impl OursFile {
    /// Builds every policy and route of the file. Route policy names are checked later, against
    /// every file of the config.
    pub(crate) fn compile(self, file: &str) -> Result<Compiled, ConfigError> {
        let mut policies = Vec::with_capacity(self.policies.len());
        let mut concurrency = Vec::new();
        for (name, spec) in self.policies {
            let at = format!("policies.{name}");
            match spec.compile(file, &at, &name)? {
                Kind::Rate(policy) => policies.push((name, policy)),
                Kind::Concurrency(policy) => concurrency.push((name, policy)),
            }
        }
        let mut routes: Vec<Route> = Vec::with_capacity(self.routes.len());
        for (i, spec) in self.routes.into_iter().enumerate() {
            let at = format!("routes[{i}]");
            let err = |field: &str, kind| ConfigError::new(file, Some(join(&at, field)), kind);
            if !spec.prefix.starts_with('/') {
                return Err(err(
                    "prefix",
                    ConfigErrorKind::Value(format!("a path prefix starts with `/`, got \"{}\"", spec.prefix)),
                ));
            }
            if let Some(first) = routes.iter().position(|r| r.prefix == spec.prefix) {
                return Err(err(
                    "prefix",
                    ConfigErrorKind::Duplicate {
                        what: "route prefix",
                        name: spec.prefix,
                        first: format!("at routes[{first}]"),
                    },
                ));
            }
            let key = match spec.key.as_deref() {
                None | Some("client_ip") => RouteKey::ClientIp,
                Some(text) => match text.strip_prefix("header:") {
                    Some(name) if is_header_name(name) => RouteKey::Header(name.to_ascii_lowercase()),
                    _ => {
                        return Err(err(
                            "key",
                            ConfigErrorKind::Value(format!(
                                "expected `client_ip` or `header:NAME` with a valid header name, got \"{text}\""
                            )),
                        ));
                    }
                },
            };
            routes.push(Route {
                prefix: spec.prefix,
                policies: spec.policies,
                key,
            });
        }
        Ok(Compiled {
            policies,
            concurrency,
            routes,
        })
    }
}

/// An HTTP header name: one or more token characters (RFC 9110).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl PolicySpec {
    fn compile(self, file: &str, at: &str, name: &str) -> Result<Kind, ConfigError> {
        let err = |field: Option<&str>, kind| {
            ConfigError::new(
                file,
                Some(field.map_or_else(|| at.to_owned(), |f| join(at, f))),
                kind,
            )
        };
        if name.starts_with(ENVOY_POLICY_PREFIX) {
            return Err(err(
                None,
                ConfigErrorKind::ReservedName {
                    prefix: ENVOY_POLICY_PREFIX,
                },
            ));
        }
        let algorithm_name = self.algorithm;
        if algorithm_name == AlgorithmName::Concurrency {
            return self.compile_concurrency(file, at, name).map(Kind::Concurrency);
        }
        for (field, present) in [
            ("max_in_flight", self.max_in_flight.is_some()),
            ("lease_timeout", self.lease_timeout.is_some()),
        ] {
            if present {
                return Err(err(
                    Some(field),
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: format!(
                            "is not used by {}; only `algorithm: concurrency` takes it",
                            algorithm_name.as_str()
                        ),
                    },
                ));
            }
        }
        let (takes, needed): (&[&str], &str) = match algorithm_name {
            AlgorithmName::FixedWindow => (&["limit", "window", "anchor"], "`limit` and `window`"),
            AlgorithmName::SlidingLog | AlgorithmName::SlidingWindow => {
                (&["limit", "window"], "`limit` and `window`")
            }
            AlgorithmName::TokenBucket => (&["capacity", "refill"], "`capacity` and `refill`"),
            AlgorithmName::LeakyBucket => (&["capacity", "leak"], "`capacity` and `leak`"),
            AlgorithmName::Gcra => (&["rate", "burst"], "`rate` and `burst`"),
            AlgorithmName::Concurrency => (&[], "`max_in_flight` and `lease_timeout`"),
        };
        let present = [
            self.limit.is_some(),
            self.window.is_some(),
            self.anchor.is_some(),
            self.capacity.is_some(),
            self.refill.is_some(),
            self.leak.is_some(),
            self.rate.is_some(),
            self.burst.is_some(),
        ];
        for (field, present) in SPECIFIC_FIELDS.into_iter().zip(present) {
            if present && !takes.contains(&field) {
                return Err(err(
                    Some(field),
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: format!("is not used by {}, which takes {needed}", algorithm_name.as_str()),
                    },
                ));
            }
        }
        let missing = |field: &'static str| {
            err(
                None,
                ConfigErrorKind::MissingField {
                    field,
                    why: format!("{} takes {needed}", algorithm_name.as_str()),
                },
            )
        };
        // Parse the raw durations and rates first, each reported at its own field.
        let duration = |field: &'static str, value: &Option<Scalar>| {
            value
                .as_ref()
                .map(|v| v.duration().map_err(|kind| err(Some(field), kind)))
                .transpose()
        };
        let rate = |field: &'static str, value: &Option<Scalar>| {
            value
                .as_ref()
                .ok_or_else(|| missing(field))?
                .rate()
                .map_err(|kind| err(Some(field), kind))
        };
        let window = duration("window", &self.window)?;
        let block_for = duration("block_for", &self.block_for)?;

        // A core error names its parameter; place it at the field that supplied it.
        let policy_err = |e: PolicyError| {
            let field = match policy_error_field(&e) {
                Some("limit") => Some("limit"),
                Some("window") => Some("window"),
                Some("capacity") => Some("capacity"),
                Some("burst") => Some("burst"),
                _ => None,
            };
            err(field, ConfigErrorKind::Policy(e))
        };
        let algorithm = match algorithm_name {
            AlgorithmName::FixedWindow | AlgorithmName::SlidingLog | AlgorithmName::SlidingWindow => {
                let limit = self.limit.ok_or_else(|| missing("limit"))?;
                let window = window.ok_or_else(|| missing("window"))?;
                match algorithm_name {
                    AlgorithmName::FixedWindow => {
                        let anchor = match self.anchor {
                            Some(AnchorName::FirstHit) => Anchor::FirstHit,
                            Some(AnchorName::Epoch) | None => Anchor::Epoch,
                        };
                        Algorithm::fixed_window(limit, window, anchor)
                    }
                    AlgorithmName::SlidingLog => Algorithm::sliding_log(limit, window),
                    _ => Algorithm::sliding_window(limit, window),
                }
            }
            AlgorithmName::TokenBucket => {
                let capacity = self.capacity.ok_or_else(|| missing("capacity"))?;
                Algorithm::token_bucket(capacity, rate("refill", &self.refill)?)
            }
            AlgorithmName::LeakyBucket => {
                let capacity = self.capacity.ok_or_else(|| missing("capacity"))?;
                Algorithm::leaky_bucket(capacity, rate("leak", &self.leak)?)
            }
            AlgorithmName::Gcra => {
                let rate = rate("rate", &self.rate)?;
                Algorithm::gcra(rate, self.burst.ok_or_else(|| missing("burst"))?)
            }
            AlgorithmName::Concurrency => {
                return self.compile_concurrency(file, at, name).map(Kind::Concurrency);
            }
        }
        .map_err(policy_err)?;

        let mut policy = Policy::new(name, algorithm).map_err(|e| err(None, ConfigErrorKind::Policy(e)))?;
        if let Some(block_for) = block_for {
            policy = policy
                .with_block_for(block_for)
                .map_err(|e| err(Some("block_for"), ConfigErrorKind::Policy(e)))?;
        }
        if let Some(mode) = failure_mode(file, at, self.on_store_failure, self.instances)? {
            policy = policy.with_failure_mode(mode);
        }
        if let Some(tag) = self.hash_tag {
            policy = policy.with_hash_tag(tag.into());
        }
        if let Some(lease) = self.lease {
            let lease = lease.compile(file, at)?;
            policy = policy.with_lease(lease).map_err(|e| {
                // Too many units is about `max_units`; an algorithm that cannot lease is about
                // the whole `lease` field.
                let field = match e {
                    PolicyError::TooLarge { .. } => "lease.max_units",
                    _ => "lease",
                };
                err(Some(field), ConfigErrorKind::Policy(e))
            })?;
        }
        Ok(Kind::Rate(NamedPolicy::new(policy, self.shadow)))
    }

    /// An `algorithm: concurrency` entry: `max_in_flight` and `lease_timeout`, plus the fields
    /// every policy takes that mean something for it (`on_store_failure`, `instances`,
    /// `hash_tag`).
    fn compile_concurrency(self, file: &str, at: &str, name: &str) -> Result<ConcurrencyPolicy, ConfigError> {
        let err = |field: Option<&str>, kind| {
            ConfigError::new(
                file,
                Some(field.map_or_else(|| at.to_owned(), |f| join(at, f))),
                kind,
            )
        };
        let needed = "`max_in_flight` and `lease_timeout`";
        let present = [
            self.limit.is_some(),
            self.window.is_some(),
            self.anchor.is_some(),
            self.capacity.is_some(),
            self.refill.is_some(),
            self.leak.is_some(),
            self.rate.is_some(),
            self.burst.is_some(),
        ];
        for (field, present) in SPECIFIC_FIELDS.into_iter().zip(present) {
            if present {
                return Err(err(
                    Some(field),
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: format!("is not used by concurrency, which takes {needed}"),
                    },
                ));
            }
        }
        let refused: [(&'static str, bool, &str); 3] = [
            (
                "block_for",
                self.block_for.is_some(),
                "is not used by concurrency: a lease frees its slot when the request ends, there is no penalty",
            ),
            (
                "shadow",
                self.shadow,
                "is not used by concurrency: a lease is held or it is not, so it cannot be shadowed",
            ),
            (
                "lease",
                self.lease.is_some(),
                "is not used by concurrency: hot-key leases are for rate limits (a concurrency limit sets `lease_timeout`)",
            ),
        ];
        for (field, present, why) in refused {
            if present {
                return Err(err(
                    Some(field),
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: why.to_owned(),
                    },
                ));
            }
        }
        let missing = |field: &'static str| {
            err(
                None,
                ConfigErrorKind::MissingField {
                    field,
                    why: format!("concurrency takes {needed}"),
                },
            )
        };
        let max_in_flight = self.max_in_flight.ok_or_else(|| missing("max_in_flight"))?;
        let lease_timeout = self
            .lease_timeout
            .as_ref()
            .ok_or_else(|| missing("lease_timeout"))?
            .duration()
            .map_err(|kind| err(Some("lease_timeout"), kind))?;
        let mut policy = ConcurrencyPolicy::new(name, max_in_flight, lease_timeout).map_err(|e| {
            let field = match policy_error_field(&e) {
                Some("max_in_flight") => Some("max_in_flight"),
                Some("lease_timeout") => Some("lease_timeout"),
                _ => None,
            };
            err(field, ConfigErrorKind::Policy(e))
        })?;
        if let Some(mode) = failure_mode(file, at, self.on_store_failure, self.instances)? {
            policy = policy.with_failure_mode(mode);
        }
        if let Some(tag) = self.hash_tag {
            policy = policy.with_hash_tag(tag.into());
        }
        Ok(policy)
    }
}
