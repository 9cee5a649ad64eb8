//! The envoyproxy/ratelimit format, read unchanged: a `domain` and a tree of `descriptors`.
//!
//! ```yaml
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number                  # no value: each number has its own counter
//!         rate_limit: {unit: day, requests_per_unit: 5}
//!   - key: to_number
//!     rate_limit: {unit: day, requests_per_unit: 100}
//! ```
//!
//! Fields, with upstream's meaning (its README and `src/config/config_impl.go`):
//!
//! - `key` (required, non-empty) and `value` (optional; absent or `""` matches any value; a `*`
//!   anywhere in it, any number of times, stands for zero or more characters). Two descriptors of
//!   one level with the same key and value are an error.
//! - `rate_limit`: `unit` (`second`, `minute`, `hour`, `day`, and the `week`, `month` (30 days)
//!   and `year` (365 days) of upstream's newer versions; any case) and `requests_per_unit`; or
//!   `unlimited: true` without a unit. `name` names the limit, and `replaces: [{name: ..}]` drops
//!   the named limits matched by the same request (a non-empty name, not the limit's own).
//! - `shadow_mode`, `quota_mode` (the descriptor only denies the request when every quota-mode
//!   descriptor of the request is over its limit), `detailed_metric`, `value_to_metric` and
//!   `share_threshold` (on a wildcard: all matching values share one counter).
//! - `metadata`: any map, returned to Envoy in the response's dynamic metadata when the server
//!   enables it.
//! - `descriptors`: the next level.
//!
//! A plain rate limit is a fixed window aligned to the unit, like upstream's:
//! `Algorithm::fixed_window(requests_per_unit, unit, Anchor::Epoch)`.
//!
//! # Extensions
//!
//! A `rate_limit` may also set, for tollgate only:
//!
//! - `algorithm`: any of tollgate's (default `fixed_window`). `requests_per_unit` per `unit` (or
//!   `window`) is the limit of a window for `fixed_window`, `sliding_log` and `sliding_window`, and
//!   the rate for `token_bucket` (refill), `leaky_bucket` (leak) and `gcra`;
//! - `window`: any duration (`"90s"`, `"1h30m"`) instead of `unit`;
//! - `unit_multiplier`: a window of that many units (`unit: minute, unit_multiplier: 5` is a
//!   five-minute window, aligned to multiples of five minutes since the epoch), as proposed for
//!   upstream; at least 1, and only with `unit`;
//! - `burst`: the capacity of a `token_bucket` or `leaky_bucket`, the burst of `gcra` (default
//!   `requests_per_unit`);
//! - `block_for`: a penalty after a denial;
//! - `on_store_failure`: `fail_open`, `fail_closed` or `local`, with `instances`;
//! - `hash_tag`: `key` places the counter on a Redis Cluster by the request's values alone
//!   (default `policy_and_key`);
//! - `on_change`: `keep`, `scale` or `reset` (default `keep`), what a later change of this
//!   limit does to the counters it already holds (docs/changing-limits.md).
//!
//! They sit in `rate_limit`, next to the fields they modify, rather than on the descriptor.
//!
//! # Where tollgate differs
//!
//! - A missing `requests_per_unit` is an error rather than 0. An explicit `requests_per_unit: 0`
//!   denies every request, as upstream; the extensions are refused on such a limit, since
//!   nothing is counted.
//! - Keys and values are never joined with `_`, so key `a_b` and key `a` with value `b` are
//!   distinct (upstream calls them duplicates) and a wildcard only matches values of its own key.
//! - A domain may be defined in one file only unless [`LoadOptions::merge_domains`](crate::LoadOptions)
//!   is set (upstream's `MERGE_DOMAIN_CONFIG`); then the top-level descriptors of every file of
//!   the domain are put together, and the same descriptor in two files is an error.
//! - An unquoted number as a `key` or `value` is read as YAML 1.2 reads it and written back in
//!   canonical form (`value: 1.50` is `1.5`, `0x1F` is `31`); Go's parser keeps the text as
//!   written. Quote such values.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Deserialize;
use tollgate::{Algorithm, Anchor, Policy, PolicyError, Rate};

use crate::fields::{
    AlgorithmName, FailureName, HashTagName, OnChangeName, PenaltySpec, Scalar, failure_mode, join,
    policy_error_field,
};
use crate::limits::{DescriptorLimit, Domain, Level, Node, Quota, descriptor_policy_name};
use crate::{ConfigError, ConfigErrorKind, Unit};

/// A file in the envoyproxy/ratelimit format.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with `domain` and `descriptors`")]
pub(crate) struct EnvoyFile {
    domain: Option<Scalar>,
    descriptors: Option<Vec<DescriptorSpec>>,
}

/// One descriptor, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a descriptor: a map with `key` and optionally `value`, `rate_limit` and `descriptors`"
)]
struct DescriptorSpec {
    key: Option<Scalar>,
    value: Option<Scalar>,
    rate_limit: Option<RateLimitSpec>,
    descriptors: Option<Vec<DescriptorSpec>>,
    shadow_mode: Option<bool>,
    quota_mode: Option<bool>,
    detailed_metric: Option<bool>,
    value_to_metric: Option<bool>,
    share_threshold: Option<bool>,
    metadata: Option<yaml_serde::Value>,
}

/// A descriptor's `rate_limit`, as written: upstream's fields, then tollgate's extensions.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a rate limit: a map with `unit` and `requests_per_unit`, or `unlimited: true`"
)]
struct RateLimitSpec {
    unit: Option<Scalar>,
    requests_per_unit: Option<u64>,
    unit_multiplier: Option<u32>,
    unlimited: Option<bool>,
    name: Option<Scalar>,
    replaces: Option<Vec<ReplacesSpec>>,
    algorithm: Option<AlgorithmName>,
    window: Option<Scalar>,
    burst: Option<u64>,
    block_for: Option<PenaltySpec>,
    block_memory: Option<Scalar>,
    on_store_failure: Option<FailureName>,
    instances: Option<NonZeroU32>,
    hash_tag: Option<HashTagName>,
    on_change: Option<OnChangeName>,
}

/// One entry of `replaces`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with the `name` of a rate limit")]
struct ReplacesSpec {
    name: Option<Scalar>,
}

/// Where a config error is: the file, and a way to build errors at paths in it.
struct At<'a> {
    file: &'a str,
}

impl At<'_> {
    fn err(&self, path: String, kind: ConfigErrorKind) -> ConfigError {
        ConfigError::new(self.file, Some(path), kind)
    }
}

impl EnvoyFile {
    /// The domain's name; an error when empty.
    pub(crate) fn domain(&self, file: &str) -> Result<String, ConfigError> {
        let domain = self
            .domain
            .as_ref()
            .map(|d| d.text().into_owned())
            .unwrap_or_default();
        if domain.is_empty() {
            return Err(At { file }.err("domain".to_owned(), ConfigErrorKind::Empty));
        }
        Ok(domain)
    }

    /// Builds the domain's descriptor tree.
    pub(crate) fn compile(self, file: &str) -> Result<Domain, ConfigError> {
        let name = self.domain(file)?;
        let mut domain = Domain {
            name,
            root: Level::default(),
        };
        self.compile_into(file, &mut domain, None)?;
        Ok(domain)
    }

    /// Adds the file's descriptors to the top level of `domain`, which `earlier` (a file name)
    /// already filled when merging domains across files.
    pub(crate) fn compile_into(
        self,
        file: &str,
        domain: &mut Domain,
        earlier: Option<&str>,
    ) -> Result<(), ConfigError> {
        let at = At { file };
        let name = domain.name.clone();
        compile_level(
            &at,
            &name,
            "",
            self.descriptors.unwrap_or_default(),
            &mut domain.root,
            earlier,
        )
    }
}

/// Builds one level. `parent_name` is upstream's name of the parent (the domain at the top),
/// `at` the path of the parent (empty at the top).
fn compile_level(
    at: &At<'_>,
    parent_name: &str,
    parent_path: &str,
    descriptors: Vec<DescriptorSpec>,
    level: &mut Level,
    earlier: Option<&str>,
) -> Result<(), ConfigError> {
    // (key, value) -> path of the first descriptor, for duplicate errors.
    let mut seen: Vec<(String, Option<String>, String)> = Vec::with_capacity(descriptors.len());
    for (i, spec) in descriptors.into_iter().enumerate() {
        let path = join(parent_path, &format!("descriptors[{i}]"));
        let key = spec
            .key
            .as_ref()
            .map(|k| k.text().into_owned())
            .unwrap_or_default();
        if key.is_empty() {
            return Err(at.err(join(&path, "key"), ConfigErrorKind::Empty));
        }
        // Upstream treats `value: ""` as no value.
        let value = spec
            .value
            .as_ref()
            .map(|v| v.text().into_owned())
            .filter(|v| !v.is_empty());
        if let Some((_, _, first)) = seen.iter().find(|(k, v, _)| *k == key && *v == value) {
            return Err(at.err(
                path,
                ConfigErrorKind::Duplicate {
                    what: "descriptor",
                    name: match &value {
                        Some(value) => format!("{key}: {value}"),
                        None => key,
                    },
                    first: format!("at {first}"),
                },
            ));
        }
        let wildcard = value.as_ref().is_some_and(|v| v.contains('*'));
        let share_threshold = spec.share_threshold.unwrap_or(false);
        if share_threshold && !wildcard {
            return Err(at.err(
                join(&path, "share_threshold"),
                ConfigErrorKind::FieldNotAllowed {
                    field: "share_threshold",
                    why: "applies only to a wildcard value (one with a `*`)".to_owned(),
                },
            ));
        }
        let full_name = match &value {
            Some(value) => format!("{parent_name}.{key}_{value}"),
            None => format!("{parent_name}.{key}"),
        };
        let flags = Flags {
            shadow_mode: spec.shadow_mode.unwrap_or(false),
            quota_mode: spec.quota_mode.unwrap_or(false),
        };
        let metadata = match spec.metadata {
            Some(value) => Some(
                crate::metadata::read(value)
                    .map_err(|why| at.err(join(&path, "metadata"), ConfigErrorKind::Value(why)))?,
            )
            .filter(|m| !m.is_empty()),
            None => None,
        };
        let limit = spec
            .rate_limit
            .map(|rate_limit| rate_limit.compile(at, &join(&path, "rate_limit"), &full_name, flags, metadata))
            .transpose()?;
        let mut children = Level::default();
        compile_level(
            at,
            &full_name,
            &path,
            spec.descriptors.unwrap_or_default(),
            &mut children,
            None,
        )?;
        let node = Node {
            full_name,
            limit,
            children,
            detailed_metric: spec.detailed_metric.unwrap_or(false),
            value_to_metric: spec.value_to_metric.unwrap_or(false),
            share_threshold,
        };
        // `seen` caught every duplicate of this file above; one left is from an earlier file
        // of the same domain.
        if !level.insert(key.clone(), value.clone(), node) {
            // Named by upstream's composite key, domain first (`edge.key1_value1`), as
            // upstream names it: across merged files the domain is what the files share.
            let composite = match &value {
                Some(value) => format!("{parent_name}.{key}_{value}"),
                None => format!("{parent_name}.{key}"),
            };
            return Err(at.err(
                path,
                ConfigErrorKind::Duplicate {
                    what: "descriptor",
                    name: composite,
                    first: format!("in {}", earlier.unwrap_or("an earlier file")),
                },
            ));
        }
        seen.push((key, value, path));
    }
    Ok(())
}

/// A descriptor's flags that its rate limit carries.
#[derive(Debug, Clone, Copy)]
struct Flags {
    shadow_mode: bool,
    quota_mode: bool,
}

impl RateLimitSpec {
    fn compile(
        mut self,
        at: &At<'_>,
        path: &str,
        full_name: &str,
        flags: Flags,
        metadata: Option<crate::metadata::Metadata>,
    ) -> Result<DescriptorLimit, ConfigError> {
        let name = self
            .name
            .take()
            .map(|n| n.text().into_owned())
            .filter(|n| !n.is_empty());
        let mut replaces = Vec::new();
        for (i, entry) in self.replaces.take().unwrap_or_default().into_iter().enumerate() {
            let entry_path = join(path, &format!("replaces[{i}].name"));
            let replaced = entry.name.map(|n| n.text().into_owned()).unwrap_or_default();
            if replaced.is_empty() {
                return Err(at.err(entry_path, ConfigErrorKind::Empty));
            }
            if name.as_deref() == Some(replaced.as_str()) {
                return Err(at.err(entry_path, ConfigErrorKind::ReplacesItself { name: replaced }));
            }
            replaces.push(replaced);
        }
        let quota = if self.unlimited.unwrap_or(false) {
            // Upstream refuses a unit with `unlimited`; the extensions would be as meaningless.
            // `requests_per_unit` is accepted and ignored, as upstream does.
            let set = [
                ("unit", self.unit.is_some()),
                ("unit_multiplier", self.unit_multiplier.is_some()),
                ("algorithm", self.algorithm.is_some()),
                ("window", self.window.is_some()),
                ("burst", self.burst.is_some()),
                ("block_for", self.block_for.is_some()),
                ("block_memory", self.block_memory.is_some()),
                ("on_store_failure", self.on_store_failure.is_some()),
                ("instances", self.instances.is_some()),
                ("hash_tag", self.hash_tag.is_some()),
                ("on_change", self.on_change.is_some()),
            ];
            if let Some((field, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(at.err(
                    join(path, field),
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: "must not be set when `unlimited` is true".to_owned(),
                    },
                ));
            }
            Quota::Unlimited
        } else {
            self.quota(at, path, full_name)?
        };
        Ok(DescriptorLimit {
            quota,
            name,
            replaces,
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            metadata,
        })
    }

    /// Builds the quota of a rate limit that is not `unlimited`: deny-all for a
    /// `requests_per_unit` of 0, else a policy.
    fn quota(self, at: &At<'_>, path: &str, full_name: &str) -> Result<Quota, ConfigError> {
        let field_err = |field: &str, kind| at.err(join(path, field), kind);
        let (period, period_field) = match (&self.unit, &self.window) {
            (Some(_), Some(_)) => {
                return Err(field_err(
                    "window",
                    ConfigErrorKind::FieldNotAllowed {
                        field: "window",
                        why: "cannot be set together with `unit`".to_owned(),
                    },
                ));
            }
            (Some(unit), None) => {
                let length = parse_unit(unit).map_err(|kind| field_err("unit", kind))?;
                match self.unit_multiplier {
                    None => (length, "unit"),
                    Some(0) => {
                        return Err(field_err(
                            "unit_multiplier",
                            ConfigErrorKind::FieldNotAllowed {
                                field: "unit_multiplier",
                                why: "must be at least 1 (the window is that many units)".to_owned(),
                            },
                        ));
                    }
                    Some(n) => match length.checked_mul(n) {
                        Some(window) => (window, "unit_multiplier"),
                        None => {
                            let got = format!("{n} x {}", unit.text());
                            return Err(field_err(
                                "unit_multiplier",
                                ConfigErrorKind::DurationOverflow { got },
                            ));
                        }
                    },
                }
            }
            (None, Some(_)) if self.unit_multiplier.is_some() => {
                return Err(field_err(
                    "unit_multiplier",
                    ConfigErrorKind::FieldNotAllowed {
                        field: "unit_multiplier",
                        why: "multiplies `unit`; with `window`, write the whole duration there".to_owned(),
                    },
                ));
            }
            (None, Some(window)) => (
                window.duration().map_err(|kind| field_err("window", kind))?,
                "window",
            ),
            (None, None) => {
                return Err(at.err(
                    path.to_owned(),
                    ConfigErrorKind::MissingField {
                        field: "unit",
                        why: "needed unless `window` is set or `unlimited` is true".to_owned(),
                    },
                ));
            }
        };
        let requests = self.requests_per_unit.ok_or_else(|| {
            at.err(
                path.to_owned(),
                ConfigErrorKind::MissingField {
                    field: "requests_per_unit",
                    why: "needed unless `unlimited` is true".to_owned(),
                },
            )
        })?;
        if requests == 0 {
            // Upstream's way to block a descriptor outright. Nothing is counted, so the
            // extensions that shape counting have nothing to act on.
            let set = [
                ("algorithm", self.algorithm.is_some()),
                ("burst", self.burst.is_some()),
                ("block_for", self.block_for.is_some()),
                ("block_memory", self.block_memory.is_some()),
                ("on_store_failure", self.on_store_failure.is_some()),
                ("instances", self.instances.is_some()),
                ("hash_tag", self.hash_tag.is_some()),
                ("on_change", self.on_change.is_some()),
            ];
            if let Some((field, _)) = set.into_iter().find(|(_, set)| *set) {
                return Err(field_err(
                    field,
                    ConfigErrorKind::FieldNotAllowed {
                        field,
                        why: "must not be set when `requests_per_unit` is 0 (every request is denied)"
                            .to_owned(),
                    },
                ));
            }
            return Ok(Quota::DenyAll {
                period,
                policy_name: descriptor_policy_name(full_name),
            });
        }
        let algorithm_name = self.algorithm.unwrap_or(AlgorithmName::FixedWindow);

        let burst_field = if self.burst.is_some() {
            "burst"
        } else {
            "requests_per_unit"
        };
        // Place a core error at the field that supplied the parameter it names.
        let policy_err = |e: PolicyError| {
            let field = match policy_error_field(&e) {
                Some("limit" | "rate") => Some("requests_per_unit"),
                Some("window" | "rate period") => Some(period_field),
                Some("capacity" | "burst") => Some(burst_field),
                _ => None,
            };
            at.err(
                field.map_or_else(|| path.to_owned(), |f| join(path, f)),
                ConfigErrorKind::Policy(e),
            )
        };
        let burst = self.burst.unwrap_or(requests);
        let rate = || Rate::new(requests, period);
        let algorithm = match algorithm_name {
            AlgorithmName::FixedWindow | AlgorithmName::SlidingLog | AlgorithmName::SlidingWindow
                if self.burst.is_some() =>
            {
                return Err(field_err(
                    "burst",
                    ConfigErrorKind::FieldNotAllowed {
                        field: "burst",
                        why: format!(
                            "is not used by {}; only token_bucket, leaky_bucket and gcra take a burst",
                            algorithm_name.as_str()
                        ),
                    },
                ));
            }
            AlgorithmName::FixedWindow => Algorithm::fixed_window(requests, period, Anchor::Epoch),
            AlgorithmName::SlidingLog => Algorithm::sliding_log(requests, period),
            AlgorithmName::SlidingWindow => Algorithm::sliding_window(requests, period),
            AlgorithmName::TokenBucket => rate().and_then(|rate| Algorithm::token_bucket(burst, rate)),
            AlgorithmName::LeakyBucket => rate().and_then(|rate| Algorithm::leaky_bucket(burst, rate)),
            AlgorithmName::Gcra => rate().and_then(|rate| Algorithm::gcra(rate, burst)),
            AlgorithmName::Concurrency => {
                // A descriptor is decided by a check, which spends and forgets; a concurrency
                // limit needs an acquire and a release.
                return Err(field_err(
                    "algorithm",
                    ConfigErrorKind::Value(
                        "concurrency is not a rate limit: declare it under `policies:` in tollgate's format and use the acquire and release endpoints".to_owned(),
                    ),
                ));
            }
            AlgorithmName::CalendarQuota => {
                return Err(field_err(
                    "algorithm",
                    ConfigErrorKind::Value(
                        "calendar_quota needs a period and a time zone: use tollgate's format (`policies`)"
                            .to_owned(),
                    ),
                ));
            }
        }
        .map_err(policy_err)?;
        let mut policy = Policy::new(descriptor_policy_name(full_name), algorithm)
            .map_err(|e| at.err(path.to_owned(), ConfigErrorKind::Policy(e)))?
            .with_generation(crate::load_generation());
        match (&self.block_for, &self.block_memory) {
            (Some(block_for), memory) => {
                let penalty = block_for
                    .compile(memory.as_ref())
                    .map_err(|(field, kind)| field_err(&field, kind))?;
                policy = policy.with_penalty(penalty);
            }
            (None, Some(_)) => {
                return Err(field_err(
                    "block_memory",
                    ConfigErrorKind::Value("is only used with `block_for`".to_owned()),
                ));
            }
            (None, None) => {}
        }
        if let Some(mode) = failure_mode(at.file, path, self.on_store_failure, self.instances)? {
            policy = policy.with_failure_mode(mode);
        }
        if let Some(tag) = self.hash_tag {
            policy = policy.with_hash_tag(tag.into());
        }
        if let Some(on_change) = self.on_change {
            policy = policy.with_on_change(on_change.into());
        }
        Ok(Quota::Limited(policy))
    }
}

/// Parses a `unit` as upstream does: the name of a unit in any case.
fn parse_unit(unit: &Scalar) -> Result<Duration, ConfigErrorKind> {
    let text = unit.text();
    Unit::from_name(&text)
        .map(Unit::length)
        .ok_or_else(|| ConfigErrorKind::BadUnit {
            got: text.into_owned(),
        })
}
