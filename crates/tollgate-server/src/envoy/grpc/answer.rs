//! Writing a planned answer on the wire: a descriptor's status, upstream's rate limit headers
//! and the dynamic metadata.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as WireUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as WireLimit,
};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, ListValue, Struct, Value, value::Kind};
use tollgate_config::envoy_plan::{CurrentLimit, DescriptorAnswer};
use tollgate_config::{Metadata, MetadataValue, Unit};

use super::ResponseHeaders;

/// One descriptor's status.
pub(crate) fn status(answer: &DescriptorAnswer<'_>) -> DescriptorStatus {
    DescriptorStatus {
        code: if answer.over { Code::OverLimit } else { Code::Ok }.into(),
        current_limit: answer.current_limit.map(wire_limit),
        limit_remaining: u32::try_from(answer.remaining).unwrap_or(u32::MAX),
        duration_until_reset: answer.reset.map(whole_seconds),
        quota: None,
    }
}

fn wire_limit(limit: CurrentLimit<'_>) -> WireLimit {
    WireLimit {
        name: limit.name.to_owned(),
        requests_per_unit: limit.requests_per_unit,
        unit: wire_unit(limit.unit).into(),
    }
}

fn wire_unit(unit: Unit) -> WireUnit {
    WireUnit::from_str_name(unit.name()).unwrap_or(WireUnit::Unknown)
}

/// `duration`, rounded up to whole seconds.
fn whole_seconds(duration: Duration) -> ProtoDuration {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    ProtoDuration {
        seconds: i64::try_from(seconds).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

/// The rate limit headers of the `headline` descriptor (the planner picks it as upstream does);
/// empty without one. A descriptor with no reset time is given the end of its unit.
pub(crate) fn headers(
    names: &ResponseHeaders,
    headline: Option<&DescriptorAnswer<'_>>,
    since_epoch: Duration,
) -> Vec<HeaderValue> {
    let Some((answer, limit)) = headline.and_then(|d| Some((d, d.current_limit?))) else {
        return Vec::new();
    };
    let reset = answer.reset.unwrap_or_else(|| limit.unit.until_end(since_epoch));
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        header(&names.limit, limit.requests_per_unit.to_string()),
        header(&names.remaining, status(answer).limit_remaining.to_string()),
        header(&names.reset, whole_seconds(reset).seconds.to_string()),
    ]
}

/// `Retry-After` of an `OVER_LIMIT` answer: the wait of the descriptor the headers report (the
/// engine's retry time, else its reset), in whole seconds, at least 1; `None` when the answer
/// is `OK` or no descriptor has a limit.
pub(crate) fn retry_after(answer: &tollgate_config::envoy_plan::Answer<'_>) -> Option<HeaderValue> {
    if !answer.over {
        return None;
    }
    let headline = answer.headline()?;
    let seconds = headline
        .verdict
        .as_ref()
        .and_then(|verdict| tollgate::headers::retry_after_seconds(&verdict.decision))
        .or_else(|| headline.reset.map(tollgate::headers::seconds_up))?;
    Some(HeaderValue {
        key: "Retry-After".to_owned(),
        value: seconds.max(1).to_string(),
        raw_value: Vec::new(),
    })
}

/// The IETF draft's `RateLimit-Policy` and `RateLimit` fields of the descriptor the headers
/// report, rendered by the core as the HTTP API renders them; empty when it has no policy.
pub(crate) fn ratelimit_fields(headline: Option<&DescriptorAnswer<'_>>) -> Vec<HeaderValue> {
    let Some((policy, verdict)) = headline.and_then(|d| Some((d.policy?, d.verdict.as_ref()?))) else {
        return Vec::new();
    };
    let field = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        field("RateLimit-Policy", tollgate::headers::ratelimit_policy(policy)),
        field(
            "RateLimit",
            tollgate::headers::ratelimit(policy, &verdict.decision),
        ),
    ]
}

/// Upstream's dynamic metadata: the domain, each descriptor (its entries as `key=value`, its
/// limit override, its `hits_addend`), the request's `hits_addend` when set, and the merged
/// `metadata` of the descriptors that passed (on a clash of keys the first descriptor's value
/// stays; maps are merged key by key).
pub(crate) fn dynamic_metadata<'a>(
    domain: &str,
    descriptors: &[RateLimitDescriptor],
    hits_addend: u32,
    passed: impl Iterator<Item = &'a Metadata>,
) -> Struct {
    let mut fields = HashMap::new();
    fields.insert("domain".to_owned(), string(domain));
    let described = descriptors
        .iter()
        .map(|descriptor| {
            let mut fields = HashMap::new();
            let entries = descriptor
                .entries
                .iter()
                .map(|e| string(&format!("{}={}", e.key, e.value)))
                .collect();
            fields.insert("entries".to_owned(), list(entries));
            if let Some(limit) = &descriptor.limit {
                let unit = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::try_from(limit.unit)
                    .map_or("UNKNOWN", |u| u.as_str_name());
                fields.insert(
                    "limit".to_owned(),
                    string(&format!("requests_per_unit:{} unit:{unit}", limit.requests_per_unit)),
                );
            }
            if let Some(addend) = &descriptor.hits_addend {
                fields.insert("hitsAddend".to_owned(), number(addend.value as f64));
            }
            structure(fields)
        })
        .collect();
    fields.insert("descriptors".to_owned(), list(described));
    if hits_addend != 0 {
        fields.insert("hitsAddend".to_owned(), number(f64::from(hits_addend)));
    }
    let mut merged: BTreeMap<String, MetadataValue> = BTreeMap::new();
    for metadata in passed {
        merge(&mut merged, metadata);
    }
    if !merged.is_empty() {
        fields.insert("metadata".to_owned(), to_value(&MetadataValue::Map(merged)));
    }
    Struct { fields }
}

/// Adds `src` to `dest`: new keys are added, maps present in both are merged, any other value
/// already in `dest` stays.
fn merge(dest: &mut BTreeMap<String, MetadataValue>, src: &Metadata) {
    for (key, value) in src {
        match (dest.get_mut(key), value) {
            (Some(MetadataValue::Map(into)), MetadataValue::Map(from)) => merge(into, from),
            (Some(_), _) => {}
            (None, _) => {
                dest.insert(key.clone(), value.clone());
            }
        }
    }
}

fn to_value(value: &MetadataValue) -> Value {
    match value {
        MetadataValue::Bool(b) => Value {
            kind: Some(Kind::BoolValue(*b)),
        },
        MetadataValue::Number(n) => number(*n),
        MetadataValue::String(s) => string(s),
        MetadataValue::List(items) => list(items.iter().map(to_value).collect()),
        MetadataValue::Map(map) => structure(map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect()),
        // `Null` and any kind added later.
        _ => Value {
            kind: Some(Kind::NullValue(0)),
        },
    }
}

fn string(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.to_owned())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn structure(fields: HashMap<String, Value>) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_is_rounded_up_to_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_millis(1)).seconds, 1);
        assert_eq!(whole_seconds(Duration::from_secs(2)).seconds, 2);
        assert_eq!(whole_seconds(Duration::ZERO).seconds, 0);
    }

    #[test]
    fn every_unit_has_its_wire_value() {
        for unit in Unit::LONGEST_FIRST {
            assert_eq!(wire_unit(unit).as_str_name(), unit.name());
        }
    }

    #[test]
    fn metadata_of_passed_descriptors_is_merged_first_value_kept() {
        let a: Metadata = [(
            "svc".to_owned(),
            MetadataValue::Map([("name".to_owned(), MetadataValue::String("a".into()))].into()),
        )]
        .into();
        let b: Metadata = [
            (
                "svc".to_owned(),
                MetadataValue::Map(
                    [
                        ("name".to_owned(), MetadataValue::String("b".into())),
                        ("tier".to_owned(), MetadataValue::Number(2.0)),
                    ]
                    .into(),
                ),
            ),
            ("flag".to_owned(), MetadataValue::Bool(true)),
        ]
        .into();
        let out = dynamic_metadata("d", &[], 3, [&a, &b].into_iter());
        assert_eq!(out.fields["domain"], string("d"));
        assert_eq!(out.fields["hitsAddend"], number(3.0));
        let Some(Kind::StructValue(metadata)) = &out.fields["metadata"].kind else {
            panic!("a struct")
        };
        let Some(Kind::StructValue(svc)) = &metadata.fields["svc"].kind else {
            panic!("a struct")
        };
        assert_eq!(svc.fields["name"], string("a"));
        assert_eq!(svc.fields["tier"], number(2.0));
        assert_eq!(metadata.fields["flag"].kind, Some(Kind::BoolValue(true)));
    }
}
