//! Limit overrides: a descriptor may carry its own limit (`RateLimitDescriptor.limit`, set by
//! Envoy from route metadata) instead of the one in the config. Upstream applies it, for any
//! descriptor of a known domain, as a fixed window of `requests_per_unit` per `unit` aligned to
//! the unit, never in shadow mode; 0 denies every request.
//!
//! Every distinct `(requests_per_unit, unit)` needs its own policy, and the core interns policy
//! names for the life of the process. So the number of distinct overrides a server accepts is
//! capped at [`MAX_OVERRIDES`]: a client sending ever-new numbers gets an error, not a server
//! that grows without bound. Real deployments use a handful, written in Envoy's route config.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use tollgate::{Algorithm, Anchor, Policy};

use super::UNITS;
use tollgate_config::ENVOY_POLICY_PREFIX;

/// How many distinct overrides one server accepts.
pub(crate) const MAX_OVERRIDES: usize = 1024;

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
    #[error("more than {MAX_OVERRIDES} distinct limit overrides; put the limits in the rate limit config")]
    TooMany,
}

impl OverrideError {
    /// The status for descriptor `index`: the caller's mistake, or a cap the caller hit.
    pub(crate) fn status(&self, index: usize) -> tonic::Status {
        let message = format!("descriptors[{index}]: {self}");
        match self {
            OverrideError::Unit(_) | OverrideError::Policy { .. } => tonic::Status::invalid_argument(message),
            OverrideError::TooMany => tonic::Status::resource_exhausted(message),
        }
    }
}

/// The policies of the overrides seen so far.
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
        if seen.len() >= MAX_OVERRIDES {
            return Err(OverrideError::TooMany);
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
    fn distinct_overrides_are_capped() {
        let overrides = OverridePolicies::default();
        for requests in 1..=MAX_OVERRIDES as u32 {
            assert!(overrides.get(requests, Unit::Day.into()).is_ok());
        }
        assert!(
            overrides.get(1, Unit::Day.into()).is_ok(),
            "a known one still works"
        );
        assert!(matches!(
            overrides.get(MAX_OVERRIDES as u32 + 1, Unit::Day.into()),
            Err(OverrideError::TooMany)
        ));
    }
}
