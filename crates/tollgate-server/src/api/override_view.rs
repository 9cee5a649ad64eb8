//! How a runtime override is shown: its target, algorithm, parameters in the config's fields
//! and time left. Shared by the override routes and explain, which shows the override in force
//! for a key; kept apart so that neither imports the other.

use serde::Serialize;
use serde_json::{Value, json};
use tollgate::headers::millis_up;
use tollgate::overrides::{Override, OverrideTarget};
use tollgate::{Algorithm, Anchor, Policy};
use tollgate_config::duration::{format_duration, format_rate};

/// One override, as stored.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OverrideAnswer {
    /// The policy.
    pub policy: String,
    /// `key` (this key only) or `prefix` (every key starting with it).
    pub kind: &'static str,
    /// The key, for a key override.
    pub key: Option<String>,
    /// The prefix, for a prefix override.
    pub prefix: Option<String>,
    /// The policy's algorithm.
    pub algorithm: &'static str,
    /// The parameters in force for the keys it covers, in the config's fields and units.
    #[schema(value_type = Object)]
    pub parameters: Value,
    /// Milliseconds until it lapses; null when it lasts until removed.
    pub expires_in_ms: Option<u64>,
}

/// An algorithm's parameters as a config file writes them.
pub(crate) fn parameters(algorithm: &Algorithm) -> Value {
    match algorithm {
        Algorithm::FixedWindow(p) => json!({
            "limit": p.limit(),
            "window": format_duration(p.window()),
            "anchor": match p.anchor() {
                Anchor::Epoch => "epoch",
                Anchor::FirstHit => "first_hit",
            },
        }),
        Algorithm::SlidingLog(p) => json!({"limit": p.limit(), "window": format_duration(p.window())}),
        Algorithm::SlidingWindow(p) => json!({"limit": p.limit(), "window": format_duration(p.window())}),
        Algorithm::TokenBucket(p) => json!({"capacity": p.capacity(), "refill": format_rate(p.refill())}),
        Algorithm::LeakyBucket(p) => json!({"capacity": p.capacity(), "leak": format_rate(p.leak())}),
        Algorithm::Gcra(p) => json!({"rate": format_rate(p.rate()), "burst": p.burst()}),
        Algorithm::CalendarQuota(p) => json!({
            "limit": p.limit(),
            "period": p.period().as_str(),
            "time_zone": p.time_zone(),
            "week_starts": format!("{:?}", p.week_start()).to_lowercase(),
        }),
    }
}

pub(crate) fn answer(policy: &Policy, value: &Override) -> OverrideAnswer {
    let text = String::from_utf8_lossy(value.target.bytes()).into_owned();
    let (key, prefix) = match value.target {
        OverrideTarget::Key(_) => (Some(text), None),
        OverrideTarget::Prefix(_) => (None, Some(text)),
    };
    OverrideAnswer {
        policy: policy.name().to_owned(),
        kind: value.target.kind(),
        key,
        prefix,
        algorithm: value.algorithm.name(),
        parameters: parameters(&value.algorithm),
        expires_in_ms: value.expires_in.map(millis_up),
    }
}
