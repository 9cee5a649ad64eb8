//! Descriptor `metadata`: free-form YAML that envoyproxy/ratelimit attaches to a rate limit and
//! returns to Envoy in the response's dynamic metadata (for the descriptors that passed). It is
//! kept as a plain tree of values so the server can turn it into a protobuf `Struct` without this
//! crate knowing about protobuf.

use std::collections::BTreeMap;

use yaml_serde::Value;

/// One value of a descriptor's `metadata`: what a protobuf `Value` can hold.
///
/// ```
/// use tollgate_config::MetadataValue;
///
/// let limits = tollgate_config::parse(
///     "a.yaml",
///     "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: search, tier: 2}\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
/// )?;
/// let resolved = limits.resolve("d", &[("k".into(), "v".into())]).unwrap();
/// let metadata = resolved.metadata().expect("set above");
/// assert_eq!(metadata.get("team"), Some(&MetadataValue::String("search".into())));
/// assert_eq!(metadata.get("tier"), Some(&MetadataValue::Number(2.0)));
/// # Ok::<(), tollgate_config::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MetadataValue {
    /// `~` or `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// Any number; protobuf holds numbers as `f64`.
    Number(f64),
    /// Text.
    String(String),
    /// A sequence.
    List(Vec<MetadataValue>),
    /// A map; keys that are not text (numbers, booleans) are written as text, as upstream does.
    Map(BTreeMap<String, MetadataValue>),
}

/// A descriptor's `metadata`: a map.
pub type Metadata = BTreeMap<String, MetadataValue>;

/// Reads `metadata`; `Err` names what is not representable.
pub(crate) fn read(value: Value) -> Result<Metadata, String> {
    match convert(value)? {
        MetadataValue::Map(map) => Ok(map),
        MetadataValue::Null => Ok(Metadata::new()),
        _ => Err("expected a map".to_owned()),
    }
}

fn convert(value: Value) -> Result<MetadataValue, String> {
    Ok(match value {
        Value::Null => MetadataValue::Null,
        Value::Bool(b) => MetadataValue::Bool(b),
        Value::Number(n) => {
            MetadataValue::Number(n.as_f64().ok_or_else(|| format!("number {n} out of range"))?)
        }
        Value::String(s) => MetadataValue::String(s),
        Value::Sequence(items) => {
            MetadataValue::List(items.into_iter().map(convert).collect::<Result<_, _>>()?)
        }
        Value::Mapping(map) => {
            let mut out = BTreeMap::new();
            for (key, value) in map {
                let key = match key {
                    Value::String(s) => s,
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    Value::Null => "null".to_owned(),
                    _ => return Err("a map key must be text, a number or a boolean".to_owned()),
                };
                out.insert(key, convert(value)?);
            }
            MetadataValue::Map(out)
        }
        Value::Tagged(tagged) => return Err(format!("tagged values ({}) are not supported", tagged.tag)),
    })
}
