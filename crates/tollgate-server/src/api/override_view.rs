//! How a runtime override is shown: its target, algorithm, parameters in the config's fields
//! and time left. Shared by the override routes and explain, which shows the override in force
//! for a key; kept apart so that neither imports the other.

use serde::Serialize;
use serde_json::{Value, json};
use tollgate::headers::millis_up;
use tollgate::overrides::{Override, OverrideTarget};
use tollgate::{Algorithm, Policy};
use tollgate_config::changes::Parameter;

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

/// An algorithm's parameters as a config file writes them, counts as numbers.
pub(crate) fn parameters(algorithm: &Algorithm) -> Value {
    let fields = tollgate_config::changes::parameters(algorithm)
        .into_iter()
        .map(|(name, value)| {
            let value = match value {
                Parameter::Count(n) => json!(n),
                Parameter::Text(text) => json!(text),
            };
            (name.to_owned(), value)
        })
        .collect();
    Value::Object(fields)
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
