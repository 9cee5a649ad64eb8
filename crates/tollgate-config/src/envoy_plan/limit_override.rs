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

use tollgate::{Algorithm, Anchor, Policy};

use crate::{ENVOY_POLICY_PREFIX, Unit};

/// How many distinct overrides the cache keeps; past that, it starts over.
pub const CACHED_OVERRIDES: usize = 1024;

/// A request's own limit for one descriptor: `requests_per_unit` per `unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    /// What the unit admits; 0 denies every request.
    pub requests_per_unit: u32,
    /// The unit, aligned to the epoch.
    pub unit: Unit,
}

/// What an override admits.
#[derive(Debug, Clone)]
pub(crate) enum Admits {
    /// `requests_per_unit: 0`: nothing, per `period`.
    Nothing { unit: Unit, policy_name: String },
    /// A fixed window the store decides.
    Window(Policy),
}

/// Why an override cannot be applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OverrideError {
    /// The unit is not one of upstream's; the door names what it got.
    #[error("limit override unit must be one of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, YEAR; got {0}")]
    Unit(String),
    /// The numbers make no policy (a limit above the core's maximum).
    #[error("limit override of {requests} per {unit}: {source}")]
    Policy {
        /// `requests_per_unit`.
        requests: u32,
        /// The unit.
        unit: Unit,
        /// Why the policy was refused.
        source: tollgate::PolicyError,
    },
}

/// The policies of recent overrides.
#[derive(Debug, Default)]
pub(crate) struct OverridePolicies {
    seen: Mutex<HashMap<LimitOverrideKey, Admits>>,
}

type LimitOverrideKey = (u32, Unit);

impl OverridePolicies {
    /// What `limit` admits.
    pub(crate) fn get(&self, limit: LimitOverride) -> Result<Admits, OverrideError> {
        let LimitOverride {
            requests_per_unit: requests,
            unit,
        } = limit;
        // Nothing here can panic while the lock is held, but a poisoned map is still whole.
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = seen.get(&(requests, unit)) {
            return Ok(found.clone());
        }
        // No `.` in the name, so it can never equal a configured descriptor's policy name
        // (`envoy:` then `domain.key...`).
        let policy_name = format!("{ENVOY_POLICY_PREFIX}override/{requests}/{unit}");
        let made = if requests == 0 {
            Admits::Nothing { unit, policy_name }
        } else {
            let policy_error = |source| OverrideError::Policy {
                requests,
                unit,
                source,
            };
            let algorithm = Algorithm::fixed_window(u64::from(requests), unit.length(), Anchor::Epoch)
                .map_err(policy_error)?;
            Admits::Window(Policy::new(policy_name, algorithm).map_err(policy_error)?)
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

    fn per(requests_per_unit: u32, unit: Unit) -> LimitOverride {
        LimitOverride {
            requests_per_unit,
            unit,
        }
    }

    #[test]
    fn equal_overrides_share_one_policy() {
        let overrides = OverridePolicies::default();
        let Ok(Admits::Window(a)) = overrides.get(per(5, Unit::Minute)) else {
            panic!("a limited override")
        };
        let Ok(Admits::Window(b)) = overrides.get(per(5, Unit::Minute)) else {
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
            overrides.get(per(0, Unit::Hour)),
            Ok(Admits::Nothing { unit: Unit::Hour, .. })
        ));
    }

    #[test]
    fn limits_past_the_maximum_are_errors() {
        let overrides = OverridePolicies::default();
        assert_eq!(
            overrides
                .get(per(u32::MAX, Unit::Second))
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
            let Ok(Admits::Window(policy)) = overrides.get(per(requests, Unit::Day)) else {
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
        let Ok(Admits::Window(again)) = overrides.get(per(1, Unit::Day)) else {
            panic!("a limited override")
        };
        assert_eq!(again.name(), "envoy:override/1/DAY");
    }
}
