//! Runtime overrides read as a policy's own fields: [`parse_override`].

use serde::Deserialize;
use tollgate::{Algorithm, Anchor, Policy};

use super::policy::{Kind, PolicySpec};
use crate::fields::{AlgorithmName, AnchorName, Scalar};
use crate::{ConfigError, ConfigErrorKind};

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
