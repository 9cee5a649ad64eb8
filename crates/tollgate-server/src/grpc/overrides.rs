//! Limit overrides: a descriptor may carry its own limit (`RateLimitDescriptor.limit`, set by
//! Envoy from route metadata) instead of the one in the config. Upstream applies it, for any
//! descriptor of a known domain, as a fixed window of `requests_per_unit` per `unit` aligned to
//! the unit, never in shadow mode; 0 denies every request.
//!
//! Every distinct `(requests_per_unit, unit)` is its own policy. A policy is only a shared name
//! and its parameters (no registry holds it), so any number of overrides works; the policies of
//! recent ones are kept in a small cache so a repeated override is not built again. The cache is
//! bounded ([`CACHED_OVERRIDES`]): a client sending ever-new numbers gets answers as usual, and
//! the server's memory does not grow with them. Real deployments use a handful, written in
//! Envoy's route config.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate::{Algorithm, Anchor, Policy};

use super::UNITS;
use tollgate_config::ENVOY_POLICY_PREFIX;

/// How many distinct overrides the cache keeps; past that, it starts over.
pub(crate) const CACHED_OVERRIDES: usize = 1024;

/// What an override admits.
#[derive(Debug, Clone)]
pub(crate) enum Override {
    /// `requests_per_unit: 0`: nothing, per `period`.
    DenyAll { period: Duration, policy_name: String },
    /// A fixed window the store decides.
    Limited(Policy),
}

/// Why an override cannot be applied; the message is the gRPC status message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OverrideError {
    #[error("limit override unit must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR; got {0}")]
    Unit(i32),
    #[error("limit override of {requests} per {unit}: {source}")]
    Policy {
        requests: u32,
        unit: &'static str,
        source: tollgate::PolicyError,
    },
}

impl OverrideError {
    /// The status for descriptor `index`: the caller's mistake.
    pub(crate) fn status(&self, index: usize) -> tonic::Status {
        tonic::Status::invalid_argument(format!("descriptors[{index}]: {self}"))
    }
}

/// The policies of recent overrides.
#[derive(Debug, Default)]
pub(crate) struct OverridePolicies {
    seen: Mutex<HashMap<(u32, Unit), Override>>,
}

impl OverridePolicies {
    /// The override of `requests` per the wire `unit`.
    pub(crate) fn get(&self, requests: u32, unit: i32) -> Result<Override, OverrideError> {
        let (seconds, unit) = UNITS
            .iter()
            .copied()
            .find(|(_, u)| i32::from(*u) == unit)
            .ok_or(OverrideError::Unit(unit))?;
        // Nothing here can panic while the lock is held, but a poisoned map is still whole.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = seen.get(&(requests, unit)) {
            return Ok(found.clone());
        }
        let period = Duration::from_secs(seconds);
        // No `.` in the name, so it can never equal a configured descriptor's policy name
        // (`envoy:` then `domain.key...`).
        let policy_name = format!("{ENVOY_POLICY_PREFIX}override/{requests}/{}", unit.as_str_name());
        let made = if requests == 0 {
            Override::DenyAll { period, policy_name }
        } else {
            let policy_error = |source| OverrideError::Policy {
                requests,
                unit: unit.as_str_name(),
                source,
            };
            let algorithm =
                Algorithm::fixed_window(u64::from(requests), period, Anchor::Epoch).map_err(policy_error)?;
            Override::Limited(Policy::new(policy_name, algorithm).map_err(policy_error)?)
        };
        if seen.len() >= CACHED_OVERRIDES {
            // Simpler than LRU and as good here: the few overrides in real use are back in the
            // cache after one request each.
            seen.clear();
        }
        seen.insert((requests, unit), made.clone());
        Ok(made)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_overrides_share_one_policy() {
        let overrides = OverridePolicies::default();
        let Ok(Override::Limited(a)) = overrides.get(5, Unit::Minute.into()) else {
            panic!("a limited override")
        };
        let Ok(Override::Limited(b)) = overrides.get(5, Unit::Minute.into()) else {
            panic!("a limited override")
        };
        assert_eq!(a, b);
        assert_eq!(a.name(), "envoy:override/5/MINUTE");
        assert_eq!(a.max_cost(), 5);
    }

    #[test]
    fn zero_requests_deny_everything() {
        let overrides = OverridePolicies::default();
        assert!(matches!(
            overrides.get(0, Unit::Hour.into()),
            Ok(Override::DenyAll { period, .. }) if period == Duration::from_secs(3_600)
        ));
    }

    #[test]
    fn bad_units_and_limits_are_errors() {
        let overrides = OverridePolicies::default();
        assert_eq!(
            overrides.get(5, 0).unwrap_err().to_string(),
            "limit override unit must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR; got 0"
        );
        assert_eq!(
            overrides
                .get(u32::MAX, Unit::Second.into())
                .unwrap_err()
                .to_string(),
            "limit override of 4294967295 per SECOND: limit is 4294967295, above the maximum of 1000000000"
        );
    }

    #[test]
    fn overrides_past_the_cache_bound_still_work_and_keep_their_policy() {
        let overrides = OverridePolicies::default();
        let count = CACHED_OVERRIDES as u32 * 2;
        for requests in 1..=count {
            let Ok(Override::Limited(policy)) = overrides.get(requests, Unit::Day.into()) else {
                panic!("override {requests} is a limited override")
            };
            assert_eq!(policy.max_cost(), u64::from(requests));
        }
        let held = overrides
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert!(held <= CACHED_OVERRIDES, "the cache holds {held}");
        // Built again after being dropped from the cache, an override is the same policy: the
        // same name, so the same budget in the store.
        let Ok(Override::Limited(again)) = overrides.get(1, Unit::Day.into()) else {
            panic!("a limited override")
        };
        assert_eq!(again.name(), "envoy:override/1/DAY");
    }
}
