//! What a new config changes for the keys already counted: policy by policy, between two loaded
//! configs. `tollgate check-config NEW --against OLD` prints it before a rollout, and a reload
//! logs it, so a change of limits is never silent (docs/changing-limits.md).
//!
//! A policy is compared by name (an Envoy descriptor by its policy name, `envoy:` and upstream's
//! name) and by its [`Fingerprint`]: the algorithm and the parameters its stored state depends
//! on. What happens to a changed policy's keys is what the new policy declares in `on_change`
//! ([`OnChange`]): the stores migrate each key's state at its first touch under the new numbers
//! (see [`tollgate::algorithm::migrate`]).

use std::collections::BTreeMap;
use std::fmt;

use tollgate::{Algorithm, Anchor, Fingerprint, OnChange, Policy};

use crate::Limits;
use crate::duration::{format_duration, format_rate};
use crate::limits::Quota;

/// One parameter's value, as a config file writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parameter {
    /// A count (`limit: 5`).
    Count(u64),
    /// Anything else (`window: 1m`, `refill: 10/s`, `anchor: epoch`).
    Text(String),
}

impl fmt::Display for Parameter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parameter::Count(n) => write!(f, "{n}"),
            Parameter::Text(text) => f.write_str(text),
        }
    }
}

/// An algorithm's parameters in the config's fields and units, in the order a file lists them.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Anchor};
/// use tollgate_config::changes::{Parameter, parameters};
///
/// let window = Algorithm::fixed_window(5, Duration::from_secs(60), Anchor::Epoch)?;
/// assert_eq!(parameters(&window)[..2], [("limit", Parameter::Count(5)), ("window", Parameter::Text("1m".into()))]);
/// # Ok::<(), tollgate::PolicyError>(())
/// ```
pub fn parameters(algorithm: &Algorithm) -> Vec<(&'static str, Parameter)> {
    use Parameter::{Count, Text};
    match algorithm {
        Algorithm::FixedWindow(p) => vec![
            ("limit", Count(p.limit())),
            ("window", Text(format_duration(p.window()))),
            (
                "anchor",
                Text(
                    match p.anchor() {
                        Anchor::Epoch => "epoch",
                        Anchor::FirstHit => "first_hit",
                    }
                    .into(),
                ),
            ),
        ],
        Algorithm::SlidingLog(p) => vec![
            ("limit", Count(p.limit())),
            ("window", Text(format_duration(p.window()))),
        ],
        Algorithm::SlidingWindow(p) => {
            vec![
                ("limit", Count(p.limit())),
                ("window", Text(format_duration(p.window()))),
            ]
        }
        Algorithm::TokenBucket(p) => vec![
            ("capacity", Count(p.capacity())),
            ("refill", Text(format_rate(p.refill()))),
        ],
        Algorithm::LeakyBucket(p) => vec![
            ("capacity", Count(p.capacity())),
            ("leak", Text(format_rate(p.leak()))),
        ],
        Algorithm::Gcra(p) => vec![("rate", Text(format_rate(p.rate()))), ("burst", Count(p.burst()))],
        Algorithm::CalendarQuota(p) => vec![
            ("limit", Count(p.limit())),
            ("period", Text(p.period().as_str().into())),
            ("time_zone", Text(p.time_zone().into())),
            (
                "week_starts",
                Text(format!("{:?}", p.week_start()).to_lowercase()),
            ),
        ],
    }
}

/// A policy as one line: its algorithm and parameters (`fixed_window limit: 5, window: 1m,
/// anchor: epoch`), or what a descriptor without a counted limit does.
fn described(limit: &Limit<'_>) -> String {
    match limit {
        Limit::Counted(policy) => {
            let algorithm = policy.algorithm();
            let parameters: Vec<String> = parameters(algorithm)
                .into_iter()
                .map(|(name, value)| format!("{name}: {value}"))
                .collect();
            format!("{} {}", algorithm.name(), parameters.join(", "))
        }
        Limit::Concurrency {
            max_in_flight,
            lease_timeout,
        } => {
            format!("concurrency max_in_flight: {max_in_flight}, lease_timeout: {lease_timeout}")
        }
        Limit::Unlimited => "unlimited".to_owned(),
        Limit::DenyAll => "requests_per_unit: 0 (deny all)".to_owned(),
    }
}

/// What a named policy of a config is, as far as its keys' state is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Limit<'a> {
    Counted(&'a Policy),
    Concurrency {
        max_in_flight: u64,
        lease_timeout: String,
    },
    Unlimited,
    DenyAll,
}

impl Limit<'_> {
    fn fingerprint(&self) -> Option<Fingerprint> {
        match self {
            Limit::Counted(policy) => Some(policy.fingerprint()),
            _ => None,
        }
    }
}

/// Every named limit of `limits`: tollgate policies, concurrency policies and Envoy descriptors
/// with a `rate_limit`.
fn named_limits(limits: &Limits) -> BTreeMap<String, Limit<'_>> {
    let mut named = BTreeMap::new();
    for (name, policy) in limits.policies() {
        named.insert(name.to_owned(), Limit::Counted(policy.policy()));
    }
    for (name, policy) in limits.concurrency_policies() {
        let limit = Limit::Concurrency {
            max_in_flight: policy.max_in_flight(),
            lease_timeout: format_duration(policy.lease_timeout()),
        };
        named.insert(name.to_owned(), limit);
    }
    for node in limits.descriptors() {
        let Some(limit) = &node.limit else { continue };
        let (name, limit) = match &limit.quota {
            Quota::Limited(policy) => (policy.name().to_owned(), Limit::Counted(policy)),
            Quota::DenyAll { policy_name, .. } => (policy_name.clone(), Limit::DenyAll),
            Quota::Unlimited => (
                crate::limits::descriptor_policy_name(&node.full_name),
                Limit::Unlimited,
            ),
        };
        named.insert(name, limit);
    }
    named
}

/// What happens to the keys of a policy that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// Another algorithm or other parameters: each key's state is migrated as the new policy's
    /// `on_change` declares.
    Migrated(OnChange),
    /// A concurrency policy: each key keeps its leases, counted against the new maximum.
    Kept,
    /// A limit that counted nothing before: each key starts with a whole budget.
    Fresh,
    /// Nothing is counted any more under this name.
    Dropped,
}

/// One policy that differs between two configs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyChange {
    /// The policy's name (`envoy:<domain>.<path>` for a descriptor).
    pub name: String,
    /// How it was, `None` when it is new.
    pub before: Option<String>,
    /// How it is, `None` when it is gone.
    pub after: Option<String>,
    /// Its fingerprints before and after, where it counted.
    pub fingerprints: (Option<Fingerprint>, Option<Fingerprint>),
    /// What happens to its keys.
    pub keys: Keys,
}

impl fmt::Display for PolicyChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match (&self.before, &self.after) {
            (None, Some(after)) => write!(f, "{name}: added: {after}"),
            (Some(before), None) => write!(
                f,
                "{name}: removed (was {before}); its keys are no longer counted"
            ),
            (Some(before), Some(after)) => {
                let keys = match self.keys {
                    Keys::Migrated(OnChange::Keep) => {
                        "on_change keep: its keys keep all they spent, past the new limit as debt"
                    }
                    Keys::Migrated(OnChange::Scale) => {
                        "on_change scale: its keys keep the same share of their budget"
                    }
                    Keys::Migrated(OnChange::Reset) => "on_change reset: its keys start with a whole budget",
                    Keys::Kept => "its keys keep their leases, counted against the new maximum",
                    Keys::Fresh => "its keys start with a whole budget",
                    Keys::Dropped => "its keys are no longer counted",
                };
                write!(f, "{name}: {before} -> {after}; {keys}")
            }
            (None, None) => write!(f, "{name}: unchanged"),
        }
    }
}

impl Limits {
    /// The policies that differ from `before` (added, removed, or with another fingerprint or
    /// limit), sorted by name; empty when the two configs count every key the same way.
    ///
    /// ```
    /// use tollgate_config::changes::Keys;
    ///
    /// let old = tollgate_config::parse("a.yaml", "policies:\n  api: {algorithm: fixed_window, limit: 5, window: 1m}\n")?;
    /// let new = tollgate_config::parse("a.yaml", "policies:\n  api: {algorithm: gcra, rate: 5/m, burst: 5}\n")?;
    /// let changes = new.changes_from(&old);
    /// assert_eq!(changes.len(), 1);
    /// assert_eq!(changes[0].keys, Keys::Migrated(tollgate::OnChange::Keep));
    /// assert_eq!(
    ///     changes[0].to_string(),
    ///     "api: fixed_window limit: 5, window: 1m, anchor: epoch -> gcra rate: 5/1m, burst: 5; on_change keep: its keys keep all they spent, past the new limit as debt"
    /// );
    /// assert!(new.changes_from(&new).is_empty());
    /// # Ok::<(), tollgate_config::ConfigError>(())
    /// ```
    pub fn changes_from(&self, before: &Limits) -> Vec<PolicyChange> {
        let (old, new) = (named_limits(before), named_limits(self));
        let mut names: Vec<&String> = old.keys().chain(new.keys()).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|name| {
                let (was, is) = (old.get(name), new.get(name));
                let keys = match (was, is) {
                    (Some(Limit::Counted(a)), Some(Limit::Counted(b)))
                        if a.fingerprint() == b.fingerprint() =>
                    {
                        return None;
                    }
                    _ if was == is => return None,
                    (_, None | Some(Limit::Unlimited | Limit::DenyAll)) => Keys::Dropped,
                    (Some(Limit::Counted(_)), Some(Limit::Counted(b))) => Keys::Migrated(b.on_change()),
                    (Some(Limit::Concurrency { .. }), Some(Limit::Concurrency { .. })) => Keys::Kept,
                    _ => Keys::Fresh,
                };
                Some(PolicyChange {
                    name: name.clone(),
                    before: was.map(described),
                    after: is.map(described),
                    fingerprints: (was.and_then(Limit::fingerprint), is.and_then(Limit::fingerprint)),
                    keys,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(yaml: &str) -> Limits {
        crate::parse("limits.yaml", yaml).expect("valid config")
    }

    fn lines(new: &str, old: &str) -> Vec<String> {
        limits(new)
            .changes_from(&limits(old))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn each_changed_policy_says_what_its_on_change_does_to_its_keys() {
        let old = "policies:\n  a: {algorithm: fixed_window, limit: 5, window: 1m}\n  b: {algorithm: sliding_log, limit: 5, window: 1m}\n  c: {algorithm: gcra, rate: 1/s, burst: 2}\n  e: {algorithm: gcra, rate: 1/s, burst: 2}\n";
        let new = "policies:\n  a: {algorithm: fixed_window, limit: 10, window: 1m, on_change: scale}\n  b: {algorithm: token_bucket, capacity: 5, refill: 5/m, on_change: reset}\n  c: {algorithm: gcra, rate: 1/s, burst: 2, block_for: 1m, on_change: reset}\n  d: {algorithm: sliding_window, limit: 3, window: 1s}\n  e: {algorithm: gcra, rate: 1/s, burst: 3}\n";
        assert_eq!(
            lines(new, old),
            [
                "a: fixed_window limit: 5, window: 1m, anchor: epoch -> fixed_window limit: 10, window: 1m, anchor: epoch; on_change scale: its keys keep the same share of their budget",
                "b: sliding_log limit: 5, window: 1m -> token_bucket capacity: 5, refill: 5/1m; on_change reset: its keys start with a whole budget",
                "d: added: sliding_window limit: 3, window: 1s",
                "e: gcra rate: 1/1s, burst: 2 -> gcra rate: 1/1s, burst: 3; on_change keep: its keys keep all they spent, past the new limit as debt",
            ],
            "a penalty or an on_change alone (c) changes no stored state"
        );
    }

    #[test]
    fn descriptors_and_concurrency_policies_are_compared_too() {
        let old = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: bot\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
        let new = "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: bot\n    rate_limit: {unlimited: true}\n";
        assert_eq!(
            lines(new, old),
            [
                "envoy:edge.bot: fixed_window limit: 1, window: 1m, anchor: epoch -> unlimited; its keys are no longer counted",
                "envoy:edge.ip: fixed_window limit: 5, window: 1m, anchor: epoch -> fixed_window limit: 5, window: 1h, anchor: epoch; on_change keep: its keys keep all they spent, past the new limit as debt",
            ]
        );
        let old = "policies:\n  exports: {algorithm: concurrency, max_in_flight: 2, lease_timeout: 30s}\n";
        let new = "policies:\n  exports: {algorithm: concurrency, max_in_flight: 4, lease_timeout: 30s}\n";
        assert_eq!(
            lines(new, old),
            [
                "exports: concurrency max_in_flight: 2, lease_timeout: 30s -> concurrency max_in_flight: 4, lease_timeout: 30s; its keys keep their leases, counted against the new maximum"
            ]
        );
        assert_eq!(
            lines("policies: {}\n", old),
            [
                "exports: removed (was concurrency max_in_flight: 2, lease_timeout: 30s); its keys are no longer counted"
            ]
        );
    }
}
