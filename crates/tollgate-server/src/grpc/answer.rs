//! The parts of a `ShouldRateLimit` answer that look at all its descriptors at once, as
//! envoyproxy/ratelimit builds them: the overall code (with quota mode), the rate limit headers
//! of the descriptor closest to its limit, and the dynamic metadata.

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use tollgate_config::{Metadata, MetadataValue};

use super::{ResponseHeaders, UNITS};

/// What the answer needs to know about one descriptor besides its status.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Role {
    /// `unlimited: true`: left out of the overall code, as upstream leaves it out.
    pub(crate) unlimited: bool,
    /// In quota mode (its own `quota_mode` or the global setting).
    pub(crate) quota: bool,
}

/// Upstream's overall code: `OVER_LIMIT` when a descriptor not in quota mode is over its limit,
/// or when the request has quota-mode descriptors and every one of them is over.
pub(crate) fn overall(statuses: &[DescriptorStatus], roles: &[Role]) -> Code {
    let (mut failed, mut quota, mut quota_failed) = (0, 0, 0);
    for (status, role) in statuses.iter().zip(roles) {
        if role.unlimited {
            continue;
        }
        let over = status.code == i32::from(Code::OverLimit);
        if role.quota {
            quota += 1;
            quota_failed += usize::from(over);
        } else {
            failed += usize::from(over);
        }
    }
    if failed > 0 || (quota > 0 && quota == quota_failed) {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// The rate limit headers, for the descriptor upstream picks: the last one over its limit that
/// is not in quota mode, else the first with the least budget left among those with a limit.
/// Empty when no descriptor has a limit.
pub(crate) fn headers(
    names: &ResponseHeaders,
    statuses: &[DescriptorStatus],
    roles: &[Role],
) -> Vec<HeaderValue> {
    let mut least = u32::MAX;
    let mut chosen: Option<&DescriptorStatus> = None;
    for (status, role) in statuses.iter().zip(roles) {
        if status.current_limit.is_some() && status.limit_remaining < least {
            chosen = Some(status);
            least = status.limit_remaining;
        }
        if !role.unlimited && !role.quota && status.code == i32::from(Code::OverLimit) {
            chosen = Some(status);
            least = 0;
        }
    }
    let Some(status) = chosen else {
        return Vec::new();
    };
    let Some(limit) = status.current_limit.as_ref() else {
        return Vec::new();
    };
    let reset = match &status.duration_until_reset {
        Some(reset) => reset.seconds,
        None => until_unit_ends(limit.unit),
    };
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        header(&names.limit, limit.requests_per_unit.to_string()),
        header(&names.remaining, status.limit_remaining.to_string()),
        header(&names.reset, reset.to_string()),
    ]
}

/// Seconds to the end of the current `unit` (a wire value), counted from the epoch.
fn until_unit_ends(unit: i32) -> i64 {
    let seconds = UNITS
        .iter()
        .find(|(_, u)| i32::from(*u) == unit)
        .map_or(1, |(seconds, _)| *seconds);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    i64::try_from(seconds - now % seconds).unwrap_or(i64::MAX)
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
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;

    fn status(over: bool, remaining: u32, limit: Option<u32>) -> DescriptorStatus {
        DescriptorStatus {
            code: if over { Code::OverLimit } else { Code::Ok }.into(),
            current_limit: limit.map(|requests_per_unit| RateLimit {
                requests_per_unit,
                unit: 2,
                name: String::new(),
            }),
            limit_remaining: remaining,
            ..Default::default()
        }
    }

    const PLAIN: Role = Role {
        unlimited: false,
        quota: false,
    };
    const QUOTA: Role = Role {
        unlimited: false,
        quota: true,
    };

    #[test]
    fn one_plain_descriptor_over_is_enough() {
        let statuses = [status(false, 3, Some(5)), status(true, 0, Some(5))];
        assert_eq!(overall(&statuses, &[PLAIN, PLAIN]), Code::OverLimit);
    }

    #[test]
    fn quota_descriptors_deny_only_all_together() {
        let statuses = [status(true, 0, Some(1)), status(false, 1, Some(2))];
        assert_eq!(overall(&statuses, &[QUOTA, QUOTA]), Code::Ok);
        let statuses = [status(true, 0, Some(1)), status(true, 0, Some(2))];
        assert_eq!(overall(&statuses, &[QUOTA, QUOTA]), Code::OverLimit);
        // A plain descriptor over still denies on its own.
        let statuses = [status(false, 1, Some(1)), status(true, 0, Some(2))];
        assert_eq!(overall(&statuses, &[QUOTA, PLAIN]), Code::OverLimit);
    }

    #[test]
    fn headers_follow_the_descriptor_closest_to_its_limit() {
        let names = ResponseHeaders::default();
        let statuses = [
            status(false, 7, Some(10)),
            status(false, 2, Some(5)),
            status(false, 2, Some(9)),
        ];
        let headers = headers(&names, &statuses, &[PLAIN; 3]);
        let values: Vec<(&str, &str)> = headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect();
        assert_eq!(
            values[..2],
            [("RateLimit-Limit", "5"), ("RateLimit-Remaining", "2")]
        );
        assert_eq!(values[2].0, "RateLimit-Reset");
    }

    #[test]
    fn headers_follow_the_last_plain_descriptor_over_its_limit() {
        let names = ResponseHeaders::default();
        let statuses = [
            status(true, 0, Some(3)),
            status(true, 0, Some(4)),
            status(false, 0, Some(6)),
        ];
        let headers = headers(&names, &statuses, &[PLAIN; 3]);
        assert_eq!(headers[0].value, "4");
        assert!(super::headers(&names, &[status(false, 0, None)], &[PLAIN]).is_empty());
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
