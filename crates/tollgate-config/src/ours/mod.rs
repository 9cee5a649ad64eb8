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
//! | `calendar_quota` | `limit`, `period` (`day`, `week`, `month`, `year`), `time_zone` (an IANA name, default `UTC`), `week_starts` (`monday`, the default, to `sunday`; `period: week` only) |
//! | `concurrency` | `max_in_flight`, `lease_timeout` (see below) |
//!
//! `algorithm: concurrency` is not a rate but a bound on requests in flight per key, acquired
//! and released through `POST /v1/concurrency/{policy}/{key}/acquire` and `.../release` (see
//! `docs/concurrency.md` and [`tollgate::concurrency`]). It takes `max_in_flight` (1 to
//! 100 000) and `lease_timeout` (how long a lease that is never released lives, whole
//! milliseconds, at most a day), and `on_store_failure`, `instances` and `hash_tag`;
//! `block_for`, `shadow` and `lease` mean nothing for it and are refused. It cannot be used in `/v1/check`, in a route or
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
//! `block_for` (a penalty after a denial: one duration, a list like `[1m, 10m, 1h, 1d]` for
//! repeat offenses in a row, or a growth rule `{initial: 1m, factor: 10, max: 1d}`; with
//! `block_memory`, how long after a block ends a new offense still counts as a repeat, by default
//! the longest block; see `docs/penalties.md`), `on_store_failure`
//! (`fail_open`, `fail_closed` or `local`, with `instances` for `local`, default 1) and `shadow`
//! (check and count, but never deny; default false), and `on_change` (`keep`, `scale` or
//! `reset`, default `keep`: what a later change of the policy's algorithm or parameters does to
//! the keys it already counts; see [`tollgate::OnChange`] and `docs/changing-limits.md`).
//!
//! A policy that must not overshoot across a Redis failover (a login form's brute-force limit)
//! sets `replicas: N` (1 to 16): each decision that admits waits until `N` replicas of the Redis
//! node that decided hold its write (`WAIT`), for at most `replica_wait` (1 ms to 5 s, default
//! 250 ms) on top of the store's deadline, and an admission they do not acknowledge in time is a
//! store failure (class `unreplicated`) that `on_store_failure` answers. See
//! [`tollgate::Policy::with_replicas`], [`tollgate::Policy::with_replica_wait`] and
//! `docs/redis.md`. A leasing policy cannot wait for replicas (it admits from its leased units
//! without a store call).
//!
//! ```yaml
//! policies:
//!   login:
//!     algorithm: fixed_window
//!     limit: 5
//!     window: 15m
//!     on_store_failure: fail_closed
//!     replicas: 1
//!     replica_wait: 250ms
//! ```
//!
//! A policy may be enforced for a share of its keys only, and run in shadow mode for the rest
//! (`docs/gradual-enforcement.md`, [`tollgate::enforcement`]): `enforce_percent: 10` (0 to 100,
//! two decimals at most). The share is chosen by a fixed hash of the policy name and the key,
//! the same on every instance.
//!
//! Allow and deny lists (`docs/access-lists.md`, [`tollgate::access`]) are given globally at
//! the top of a file and per policy, each list by CIDR range, exact key and key prefix; a deny
//! entry wins over an allow entry:
//!
//! ```yaml
//! access:                      # every policy
//!   allow:
//!     cidrs: [192.0.2.0/24]
//!   deny:
//!     cidrs: [203.0.113.0/24, "2001:db8:bad::/48"]
//! policies:
//!   login:
//!     algorithm: gcra
//!     rate: 5/1m
//!     burst: 5
//!     access:                  # this policy only
//!       deny:
//!         keys: [mallory]
//!         prefixes: ["bot-"]
//! ```
//!
//! A file may hold `access` without `policies` (a block list kept in its own file).
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

mod overrides;
mod policy;

use std::collections::BTreeMap;

use serde::Deserialize;
use tollgate::access::AccessEntry;
use tollgate::concurrency::ConcurrencyPolicy;

use crate::fields::{AlgorithmName, join};
use crate::limits::NamedPolicy;
use crate::routes::{Route, RouteKey};
use crate::{ConfigError, ConfigErrorKind};
use policy::{AccessSpec, Kind, PolicySpec};

pub use overrides::{ParsedOverride, parse_override};

/// A file in the tollgate format.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with `policies`")]
pub(crate) struct OursFile {
    #[serde(default)]
    policies: BTreeMap<String, PolicySpec>,
    /// Global allow and deny lists; see [`crate::access`].
    #[serde(default)]
    access: Option<AccessSpec>,
    /// For `tollgate proxy`; see [`crate::routes`].
    #[serde(default)]
    routes: Vec<RouteSpec>,
}

/// One entry of `routes`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a route: a map with `prefix`, `policies` and optionally `key` and `case_sensitive`"
)]
struct RouteSpec {
    prefix: String,
    policies: Vec<String>,
    key: Option<String>,
    #[serde(default)]
    case_sensitive: bool,
}

/// A compiled file: its policies in name order, and its routes in file order.
pub(crate) struct Compiled {
    pub(crate) policies: Vec<(String, NamedPolicy)>,
    /// The `algorithm: concurrency` policies, in name order.
    pub(crate) concurrency: Vec<(String, ConcurrencyPolicy)>,
    pub(crate) routes: Vec<Route>,
    /// Allow and deny list entries, global and per policy.
    pub(crate) access: Vec<AccessEntry>,
}

impl OursFile {
    /// Builds every policy and route of the file. Route policy names are checked later, against
    /// every file of the config.
    pub(crate) fn compile(self, file: &str) -> Result<Compiled, ConfigError> {
        let mut access = match self.access {
            Some(spec) => spec.compile(file, "access", None)?,
            None => Vec::new(),
        };
        let mut policies = Vec::with_capacity(self.policies.len());
        let mut concurrency = Vec::new();
        for (name, mut spec) in self.policies {
            let at = format!("policies.{name}");
            if let Some(lists) = spec.access.take() {
                if spec.algorithm == AlgorithmName::Concurrency {
                    return Err(ConfigError::new(
                        file,
                        Some(join(&at, "access")),
                        ConfigErrorKind::FieldNotAllowed {
                            field: "access",
                            why: "is not used by concurrency: give allow and deny lists at the top level or on a rate policy".to_owned(),
                        },
                    ));
                }
                access.extend(lists.compile(file, &join(&at, "access"), Some(&name))?);
            }
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
            let route = Route {
                prefix: spec.prefix,
                policies: spec.policies,
                key,
                case_sensitive: spec.case_sensitive,
            };
            if let Some((first, note)) = routes
                .iter()
                .enumerate()
                .find_map(|(j, earlier)| route.collision(earlier).map(|note| (j, note)))
            {
                return Err(err(
                    "prefix",
                    ConfigErrorKind::Duplicate {
                        what: "route prefix",
                        name: route.prefix,
                        first: format!("at routes[{first}]{note}"),
                    },
                ));
            }
            routes.push(route);
        }
        Ok(Compiled {
            policies,
            concurrency,
            routes,
            access,
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
