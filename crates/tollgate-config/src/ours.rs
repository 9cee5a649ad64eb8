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

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::Deserialize;
use tollgate::access::{AccessEntry, EntryKind, Listed};
use tollgate::concurrency::ConcurrencyPolicy;
use tollgate::{Algorithm, Anchor, Enforcement, LeaseOptions, Policy, PolicyError};

use crate::fields::{
    AlgorithmName, AnchorName, FailureName, HashTagName, OnChangeName, PenaltySpec, PeriodName, Scalar,
    WeekdayName, failure_mode, join, policy_error_field,
};
use crate::limits::{ENVOY_POLICY_PREFIX, NamedPolicy};
use crate::routes::{Route, RouteKey};
use crate::{ConfigError, ConfigErrorKind};

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
    period: Option<PeriodName>,
    time_zone: Option<String>,
    week_starts: Option<WeekdayName>,
    block_for: Option<PenaltySpec>,
    block_memory: Option<Scalar>,
    on_store_failure: Option<FailureName>,
    instances: Option<NonZeroU32>,
    hash_tag: Option<HashTagName>,
    on_change: Option<OnChangeName>,
    #[serde(default)]
    shadow: bool,
    lease: Option<LeaseSpec>,
    /// Replicas each admission waits for (see the module docs).
    replicas: Option<u32>,
    /// How long an admission waits for them (see the module docs).
    replica_wait: Option<Scalar>,
    enforce_percent: Option<Scalar>,
    access: Option<AccessSpec>,
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

/// `access`: allow and deny lists, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "access lists: a map with `allow` and/or `deny`"
)]
struct AccessSpec {
    allow: Option<ListSpec>,
    deny: Option<ListSpec>,
}

/// One list: CIDR ranges, exact keys and key prefixes.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a list: a map with `cidrs`, `keys` and/or `prefixes`, each a list of strings"
)]
struct ListSpec {
    #[serde(default)]
    cidrs: Vec<String>,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    prefixes: Vec<String>,
}

impl AccessSpec {
    /// The entries; an error names the item (`access.deny.cidrs[2]`).
    fn compile(self, file: &str, at: &str, policy: Option<&str>) -> Result<Vec<AccessEntry>, ConfigError> {
        let mut entries = Vec::new();
        for (list, spec) in [(Listed::Allow, self.allow), (Listed::Deny, self.deny)] {
            let Some(spec) = spec else { continue };
            for (kind, field, values) in [
                (EntryKind::Cidr, "cidrs", spec.cidrs),
                (EntryKind::Key, "keys", spec.keys),
                (EntryKind::Prefix, "prefixes", spec.prefixes),
            ] {
                for (i, value) in values.iter().enumerate() {
                    let entry = AccessEntry::new(policy, list, kind, value).map_err(|e| {
                        ConfigError::new(
                            file,
                            Some(format!("{at}.{}.{field}[{i}]", list.as_str())),
                            ConfigErrorKind::Value(e.to_string()),
                        )
                    })?;
                    entries.push(entry);
                }
            }
        }
        Ok(entries)
    }
}

/// `enforce_percent`: 0 to 100, with at most two decimals (`12.5`, `0.25`), an optional `%`.
fn enforce_share(text: &str) -> Result<Enforcement, String> {
    let bad = || {
        format!(
            "expected a percentage from 0 to 100 with at most two decimals, like 10 or 12.5, got \"{text}\""
        )
    };
    let number = text.trim().trim_end_matches('%');
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 3 || fraction.len() > 2 || !digits(whole) || !digits(fraction) {
        return Err(bad());
    }
    let whole: u16 = whole.parse().map_err(|_| bad())?;
    let fraction: u16 = format!("{fraction:0<2}").parse().map_err(|_| bad())?;
    let basis_points = whole
        .checked_mul(100)
        .and_then(|w| w.checked_add(fraction))
        .ok_or_else(bad)?;
    Enforcement::from_basis_points(basis_points).map_err(|_| bad())
}

/// The algorithm-specific fields, in the order the table in the module docs lists them.
const SPECIFIC_FIELDS: [&str; 11] = [
    "limit",
    "window",
    "anchor",
    "capacity",
    "refill",
    "leak",
    "rate",
    "burst",
    "period",
    "time_zone",
    "week_starts",
];

/// A compiled file: its policies in name order, and its routes in file order.
pub(crate) struct Compiled {
    pub(crate) policies: Vec<(String, NamedPolicy)>,
    /// The `algorithm: concurrency` policies, in name order.
    pub(crate) concurrency: Vec<(String, ConcurrencyPolicy)>,
    pub(crate) routes: Vec<Route>,
    /// Allow and deny list entries, global and per policy.
    pub(crate) access: Vec<AccessEntry>,
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
            AlgorithmName::CalendarQuota => (
                &["limit", "period", "time_zone", "week_starts"],
                "`limit` and `period`",
            ),
            AlgorithmName::Concurrency => (&[], "`max_in_flight` and `lease_timeout`"),
        };
        let present = self.specific_fields_present();
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
            AlgorithmName::CalendarQuota => {
                let limit = self.limit.ok_or_else(|| missing("limit"))?;
                let period = self.period.ok_or_else(|| missing("period"))?;
                if self.week_starts.is_some() && period != PeriodName::Week {
                    return Err(err(
                        Some("week_starts"),
                        ConfigErrorKind::FieldNotAllowed {
                            field: "week_starts",
                            why: "is only used with `period: week`".to_owned(),
                        },
                    ));
                }
                let zone = self.time_zone.as_deref().unwrap_or("UTC");
                match tollgate::algorithm::calendar_quota::CalendarQuota::new(limit, period.into(), zone) {
                    Ok(quota) => Ok(Algorithm::CalendarQuota(match self.week_starts {
                        Some(day) => quota.week_starts(day.into()),
                        None => quota,
                    })),
                    Err(e @ PolicyError::UnknownTimeZone { .. }) => {
                        return Err(err(Some("time_zone"), ConfigErrorKind::Policy(e)));
                    }
                    Err(e) => Err(e),
                }
            }
            AlgorithmName::Concurrency => {
                return self.compile_concurrency(file, at, name).map(Kind::Concurrency);
            }
        }
        .map_err(policy_err)?;

        let mut policy = Policy::new(name, algorithm)
            .map_err(|e| err(None, ConfigErrorKind::Policy(e)))?
            .with_generation(crate::load_generation());
        match (&self.block_for, &self.block_memory) {
            (Some(block_for), memory) => {
                let penalty = block_for
                    .compile(memory.as_ref())
                    .map_err(|(field, kind)| err(Some(&field), kind))?;
                policy = policy.with_penalty(penalty);
            }
            (None, Some(_)) => {
                return Err(err(
                    Some("block_memory"),
                    ConfigErrorKind::Value("is only used with `block_for`".to_owned()),
                ));
            }
            (None, None) => {}
        }
        if let Some(mode) = failure_mode(file, at, self.on_store_failure, self.instances)? {
            policy = policy.with_failure_mode(mode);
        }
        if let Some(tag) = self.hash_tag {
            policy = policy.with_hash_tag(tag.into());
        }
        if let Some(on_change) = self.on_change {
            policy = policy.with_on_change(on_change.into());
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
        if let Some(replicas) = self.replicas {
            policy = policy
                .with_replicas(replicas)
                .map_err(|e| err(Some("replicas"), ConfigErrorKind::Policy(e)))?;
        }
        if let Some(wait) = &self.replica_wait {
            if policy.replicas() == 0 {
                return Err(err(
                    Some("replica_wait"),
                    ConfigErrorKind::Value("is only used with `replicas` of 1 or more".to_owned()),
                ));
            }
            let wait = wait.duration().map_err(|kind| err(Some("replica_wait"), kind))?;
            policy = policy
                .with_replica_wait(wait)
                .map_err(|e| err(Some("replica_wait"), ConfigErrorKind::Policy(e)))?;
        }
        if let Some(share) = &self.enforce_percent {
            let share = enforce_share(share.text().as_ref())
                .map_err(|message| err(Some("enforce_percent"), ConfigErrorKind::Value(message)))?;
            policy = policy.with_enforcement(share);
        }
        Ok(Kind::Rate(NamedPolicy::new(policy, self.shadow)))
    }

    /// Which of [`SPECIFIC_FIELDS`] this entry gives, in that order.
    fn specific_fields_present(&self) -> [bool; SPECIFIC_FIELDS.len()] {
        [
            self.limit.is_some(),
            self.window.is_some(),
            self.anchor.is_some(),
            self.capacity.is_some(),
            self.refill.is_some(),
            self.leak.is_some(),
            self.rate.is_some(),
            self.burst.is_some(),
            self.period.is_some(),
            self.time_zone.is_some(),
            self.week_starts.is_some(),
        ]
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
        let present = self.specific_fields_present();
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
        let refused: [(&'static str, bool, &str); 8] = [
            (
                "on_change",
                self.on_change.is_some(),
                "is not used by concurrency: its leases are kept across a change, each until it ends",
            ),
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
                "block_memory",
                self.block_memory.is_some(),
                "is not used by concurrency: there is no penalty to remember",
            ),
            (
                "enforce_percent",
                self.enforce_percent.is_some(),
                "is not used by concurrency: a lease is held or it is not, so it cannot be enforced for a share of keys",
            ),
            (
                "lease",
                self.lease.is_some(),
                "is not used by concurrency: hot-key leases are for rate limits (a concurrency limit sets `lease_timeout`)",
            ),
            (
                "replicas",
                self.replicas.is_some(),
                "is not used by concurrency: waiting for replicas is for rate limits (a lease lost in a failover ends at its `lease_timeout`)",
            ),
            (
                "replica_wait",
                self.replica_wait.is_some(),
                "is not used by concurrency: waiting for replicas is for rate limits (a lease lost in a failover ends at its `lease_timeout`)",
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

/// The parameters of a runtime override, as written: the policy's algorithm fields (its
/// algorithm is the policy's, so `algorithm` is not given) and an optional `ttl`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an override: a map with the policy's algorithm parameters and optionally `ttl`"
)]
struct OverrideSpec {
    limit: Option<u64>,
    window: Option<Scalar>,
    anchor: Option<AnchorName>,
    capacity: Option<u64>,
    refill: Option<Scalar>,
    leak: Option<Scalar>,
    rate: Option<Scalar>,
    burst: Option<u64>,
    ttl: Option<Scalar>,
}

/// A runtime override read by [`parse_override`]: the parameters and how long they last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOverride {
    /// The policy's algorithm with the override's parameters.
    pub algorithm: Algorithm,
    /// `ttl`, when given.
    pub ttl: Option<std::time::Duration>,
}

/// Reads a runtime override of `policy` from YAML or JSON text (the admin API's body): the
/// fields its algorithm takes in a policy (`limit` and `window`, `capacity` and `refill`, ...;
/// a fixed window keeps the policy's `anchor` unless given), validated exactly as in a config
/// file, and an optional `ttl`. Errors read `<file>: <field>: <message>`.
///
/// ```
/// use tollgate::{Algorithm, Policy, Rate};
///
/// let api = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 10)?)?;
/// let parsed = tollgate_config::ours::parse_override("body", r#"{"rate": "100/s", "burst": 50, "ttl": "1h"}"#, &api)?;
/// assert_eq!(parsed.algorithm.limit(), 50);
/// assert_eq!(parsed.ttl, Some(std::time::Duration::from_secs(3600)));
///
/// let err = tollgate_config::ours::parse_override("body", r#"{"limit": 5, "window": "1m"}"#, &api).unwrap_err();
/// assert_eq!(err.to_string(), "body: limit: `limit` is not used by gcra, which takes `rate` and `burst`");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_override(file: &str, text: &str, policy: &Policy) -> Result<ParsedOverride, ConfigError> {
    let value: yaml_serde::Value = crate::yaml::parse(file, text)?;
    let spec: OverrideSpec = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = (path != ".").then_some(path);
        ConfigError::new(file, path, ConfigErrorKind::Schema(e.into_inner().to_string()))
    })?;
    let ttl = spec
        .ttl
        .as_ref()
        .map(|t| {
            t.duration()
                .map_err(|kind| ConfigError::new(file, Some("ttl".into()), kind))
        })
        .transpose()?;
    let algorithm = match policy.algorithm() {
        Algorithm::FixedWindow(_) => AlgorithmName::FixedWindow,
        Algorithm::SlidingLog(_) => AlgorithmName::SlidingLog,
        Algorithm::SlidingWindow(_) => AlgorithmName::SlidingWindow,
        Algorithm::TokenBucket(_) => AlgorithmName::TokenBucket,
        Algorithm::LeakyBucket(_) => AlgorithmName::LeakyBucket,
        Algorithm::Gcra(_) => AlgorithmName::Gcra,
        Algorithm::CalendarQuota(_) => {
            return Err(ConfigError::new(
                file,
                None,
                ConfigErrorKind::Schema(format!(
                    "policy `{}` is a calendar quota, which takes no runtime overrides",
                    policy.name()
                )),
            ));
        }
    };
    let anchor = match (spec.anchor, policy.algorithm()) {
        (Some(anchor), _) => Some(anchor),
        (None, Algorithm::FixedWindow(p)) => Some(match p.anchor() {
            Anchor::Epoch => AnchorName::Epoch,
            Anchor::FirstHit => AnchorName::FirstHit,
        }),
        (None, _) => None,
    };
    let as_policy = PolicySpec {
        algorithm,
        limit: spec.limit,
        window: spec.window,
        anchor,
        capacity: spec.capacity,
        refill: spec.refill,
        leak: spec.leak,
        rate: spec.rate,
        burst: spec.burst,
        period: None,
        time_zone: None,
        week_starts: None,
        block_for: None,
        block_memory: None,
        on_store_failure: None,
        instances: None,
        hash_tag: None,
        on_change: None,
        shadow: false,
        lease: None,
        replicas: None,
        replica_wait: None,
        enforce_percent: None,
        access: None,
        max_in_flight: None,
        lease_timeout: None,
    };
    // Compiled as a policy at the top level, so errors name the field alone. The algorithm is
    // the rate policy's own, so this is a rate policy.
    let Kind::Rate(compiled) = as_policy.compile(file, "", "override")? else {
        return Err(ConfigError::new(
            file,
            None,
            ConfigErrorKind::Schema("a concurrency policy takes no runtime overrides".to_owned()),
        ));
    };
    Ok(ParsedOverride {
        algorithm: compiled.policy().algorithm().clone(),
        ttl,
    })
}
