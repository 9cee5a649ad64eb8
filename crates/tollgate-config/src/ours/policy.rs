//! One entry of `policies`, as written, and how it compiles into a policy: each algorithm's own
//! fields (the table in the [module docs](super)), the penalty, the failure mode, a lease, gradual
//! enforcement, access lists, or a concurrency limit.

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
use crate::{ConfigError, ConfigErrorKind};

/// One entry of `policies`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a policy: a map with `algorithm` and its parameters"
)]
pub(super) struct PolicySpec {
    pub(super) algorithm: AlgorithmName,
    pub(super) limit: Option<u64>,
    pub(super) window: Option<Scalar>,
    pub(super) anchor: Option<AnchorName>,
    pub(super) capacity: Option<u64>,
    pub(super) refill: Option<Scalar>,
    pub(super) leak: Option<Scalar>,
    pub(super) rate: Option<Scalar>,
    pub(super) burst: Option<u64>,
    pub(super) period: Option<PeriodName>,
    pub(super) time_zone: Option<String>,
    pub(super) week_starts: Option<WeekdayName>,
    pub(super) block_for: Option<PenaltySpec>,
    pub(super) block_memory: Option<Scalar>,
    pub(super) on_store_failure: Option<FailureName>,
    pub(super) instances: Option<NonZeroU32>,
    pub(super) hash_tag: Option<HashTagName>,
    pub(super) on_change: Option<OnChangeName>,
    #[serde(default)]
    pub(super) shadow: bool,
    pub(super) lease: Option<LeaseSpec>,
    /// Replicas each admission waits for (see the module docs).
    pub(super) replicas: Option<u32>,
    /// How long an admission waits for them (see the module docs).
    pub(super) replica_wait: Option<Scalar>,
    pub(super) enforce_percent: Option<Scalar>,
    pub(super) access: Option<AccessSpec>,
    /// `concurrency` only.
    pub(super) max_in_flight: Option<u64>,
    /// `concurrency` only.
    pub(super) lease_timeout: Option<Scalar>,
}

/// The `lease` map of a policy, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a lease: a map with `max_units` and optionally `hot_per_second` and `hold`"
)]
pub(super) struct LeaseSpec {
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
pub(super) struct AccessSpec {
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
    pub(super) fn compile(
        self,
        file: &str,
        at: &str,
        policy: Option<&str>,
    ) -> Result<Vec<AccessEntry>, ConfigError> {
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

/// One compiled entry of `policies`: a rate limit or a concurrency limit.
pub(super) enum Kind {
    Rate(NamedPolicy),
    Concurrency(ConcurrencyPolicy),
}

impl PolicySpec {
    pub(super) fn compile(self, file: &str, at: &str, name: &str) -> Result<Kind, ConfigError> {
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
