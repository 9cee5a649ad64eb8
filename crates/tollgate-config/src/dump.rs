//! [`Limits::dump`]: the loaded envoyproxy/ratelimit descriptors as text, one line per rate
//! limit, in the form upstream's `/rlconfig` debug endpoint prints, so the scripts and habits of
//! its operators carry over:
//!
//! ```text
//! messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false
//! ```
//!
//! The name before the colon is upstream's name for the descriptor (the domain, then each
//! level's `key` or `key_value`, joined by `.`). An `unlimited` limit prints `unit=UNKNOWN
//! requests_per_unit=0`, as upstream. A limit whose window is not one of upstream's units (a
//! tollgate extension: `window: 90s`, a bucket's rate) prints as the gRPC answer's
//! `current_limit` states it ([`reported_limit`]).
//!
//! Upstream prints in the random order of Go's maps; here lines are sorted by name, so two dumps
//! of one configuration are equal and a parent comes before its children.

use std::time::Duration;

use tollgate::{Algorithm, Policy};

use crate::limits::{Node, Quota};
use crate::{Limits, Unit};

impl Limits {
    /// Every envoyproxy/ratelimit rate limit, one line each, as upstream's `/rlconfig` prints
    /// them (see the module docs of `dump`); empty when no domain is loaded.
    ///
    /// ```
    /// let limits = tollgate_config::parse(
    ///     "messaging.yaml",
    ///     r#"
    /// domain: messaging
    /// descriptors:
    ///   - key: message_type
    ///     value: marketing
    ///     descriptors:
    ///       - key: to_number
    ///         rate_limit: {unit: day, requests_per_unit: 5}
    ///         shadow_mode: true
    ///   - key: to_number
    ///     rate_limit: {unlimited: true}
    /// "#,
    /// )?;
    /// assert_eq!(
    ///     limits.dump(),
    ///     "messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5, shadow_mode: true, quota_mode: false\n\
    ///      messaging.to_number: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
    /// );
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn dump(&self) -> String {
        let mut lines: Vec<String> = self.descriptors().into_iter().filter_map(line).collect();
        lines.sort_unstable();
        lines.concat()
    }
}

/// The line of one descriptor, `None` when it has no rate limit.
fn line(node: &Node) -> Option<String> {
    let limit = node.limit.as_ref()?;
    let (unit, requests_per_unit) = match &limit.quota {
        Quota::Unlimited => ("UNKNOWN", 0),
        Quota::DenyAll { period, .. } => (Unit::reported(1, *period, 1).1.name(), 0),
        Quota::Limited(policy) => {
            let (requests_per_unit, unit) = reported_limit(policy);
            (unit.name(), requests_per_unit)
        }
    };
    Some(format!(
        "{}: unit={unit} requests_per_unit={requests_per_unit}, shadow_mode: {}, quota_mode: {}\n",
        node.full_name, limit.shadow_mode, limit.quota_mode
    ))
}

/// The policy as upstream's `requests_per_unit` per `unit`, for `/rlconfig` and the gRPC
/// answer's `current_limit`: its rate ([`per_period`]) in the shortest unit that admits the most
/// a key can hold ([`Unit::reported`]), so the reported limit is never below a `limit_remaining`.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Anchor, Policy};
/// use tollgate_config::Unit;
///
/// let login = Policy::new("login", Algorithm::fixed_window(5, Duration::from_secs(900), Anchor::Epoch)?)?;
/// assert_eq!(tollgate_config::reported_limit(&login), (20, Unit::Hour));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn reported_limit(policy: &Policy) -> (u32, Unit) {
    let (count, period) = per_period(policy);
    Unit::reported(count, period, policy.max_cost())
}

/// What the policy admits per what period: a window's limit, a bucket's or GCRA's rate. The one
/// reading of a policy's rate, which [`reported_limit`] tells in upstream's units.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Policy, Rate};
///
/// let policy = Policy::new("api", Algorithm::gcra(Rate::per_second(10)?, 20)?)?;
/// assert_eq!(tollgate_config::per_period(&policy), (10, Duration::from_secs(1)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn per_period(policy: &Policy) -> (u64, Duration) {
    match policy.algorithm() {
        Algorithm::FixedWindow(p) => (p.limit(), p.window()),
        Algorithm::SlidingLog(p) => (p.limit(), p.window()),
        Algorithm::SlidingWindow(p) => (p.limit(), p.window()),
        Algorithm::TokenBucket(p) => (p.refill().count(), p.refill().period()),
        Algorithm::LeakyBucket(p) => (p.leak().count(), p.leak().period()),
        Algorithm::Gcra(p) => (p.rate().count(), p.rate().period()),
        // The nominal length, as envoyproxy/ratelimit's units have it (a month is 30 days).
        Algorithm::CalendarQuota(p) => {
            use tollgate::algorithm::calendar_quota::Period;
            let days = match p.period() {
                Period::Day => 1,
                Period::Week => 7,
                Period::Month => 30,
                Period::Year => 365,
            };
            (p.limit(), Duration::from_secs(days * 86_400))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::parse;

    #[test]
    fn every_limit_of_every_level_is_printed_sorted() {
        let limits = parse(
            "edge.yaml",
            r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: /login*
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: burst
    rate_limit: {window: 90s, requests_per_unit: 100}
"#,
        )
        .unwrap();
        assert_eq!(
            limits.dump(),
            "edge.burst: unit=HOUR requests_per_unit=4000, shadow_mode: false, quota_mode: false\n\
             edge.path_/login*: unit=MINUTE requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
             edge.remote_address: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false\n\
             edge.tenant_acme.user: unit=HOUR requests_per_unit=100, shadow_mode: false, quota_mode: false\n"
        );
    }

    #[test]
    fn tollgate_policies_alone_dump_nothing() {
        let limits = parse(
            "a.yaml",
            "policies:\n  api: {algorithm: gcra, rate: 10/s, burst: 20}\n",
        )
        .unwrap();
        assert_eq!(limits.dump(), "");
    }
}
