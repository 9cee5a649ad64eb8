//! An xDS push's resources as config files: each `RateLimitConfig` becomes the text of one
//! envoyproxy/ratelimit YAML file (JSON, which YAML reads), named after the resource, so a push
//! goes through exactly the loading, validation and error messages a config directory does, and
//! `MERGE_DOMAIN_CONFIG` merges domains across resources as it does across files.

use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::{Message, Name};
use serde_json::{Map, Value, json};

use crate::envoy::grpc::json::struct_json;

/// The type of the resources asked for: envoyproxy/ratelimit's config.
pub(crate) fn type_url() -> String {
    RateLimitConfig::type_url()
}

/// The resources of a push, decoded; the error names the resource that is not a
/// `RateLimitConfig`.
pub(crate) fn decode(resources: &[Any]) -> Result<Vec<RateLimitConfig>, String> {
    let expected = type_url();
    resources
        .iter()
        .enumerate()
        .map(|(i, any)| {
            if any.type_url != expected {
                return Err(format!(
                    "resources[{i}]: expected type {expected}, got {:?}",
                    any.type_url
                ));
            }
            RateLimitConfig::decode(any.value.as_slice())
                .map_err(|err| format!("resources[{i}]: not a RateLimitConfig: {err}"))
        })
        .collect()
}

/// Each resource as a `(name, text)` config file; a resource without a name is named by its
/// place in the push.
pub(crate) fn files(configs: &[RateLimitConfig]) -> Vec<(String, String)> {
    configs
        .iter()
        .enumerate()
        .map(|(i, config)| {
            let name = if config.name.is_empty() {
                format!("xds resource {i}")
            } else {
                config.name.clone()
            };
            let file = json!({
                "domain": config.domain,
                "descriptors": config.descriptors.iter().map(descriptor).collect::<Vec<_>>(),
            });
            (name, file.to_string())
        })
        .collect()
}

/// A descriptor as the YAML dialect writes it; fields at their default are left out, as a
/// file would leave them out.
fn descriptor(descriptor: &RateLimitDescriptor) -> Value {
    let mut out = Map::new();
    out.insert("key".into(), descriptor.key.clone().into());
    if !descriptor.value.is_empty() {
        out.insert("value".into(), descriptor.value.clone().into());
    }
    if let Some(policy) = &descriptor.rate_limit {
        out.insert("rate_limit".into(), rate_limit(policy));
    }
    if !descriptor.descriptors.is_empty() {
        let children = descriptor.descriptors.iter().map(self::descriptor).collect();
        out.insert("descriptors".into(), Value::Array(children));
    }
    for (name, on) in [
        ("shadow_mode", descriptor.shadow_mode),
        ("detailed_metric", descriptor.detailed_metric),
        ("quota_mode", descriptor.quota_mode),
    ] {
        if on {
            out.insert(name.into(), true.into());
        }
    }
    if let Some(metadata) = &descriptor.metadata {
        out.insert("metadata".into(), struct_json(metadata));
    }
    Value::Object(out)
}

/// A rate limit; the unit by name, as upstream maps it (`UNKNOWN` where the wire left it unset,
/// which loading refuses unless the limit is unlimited).
fn rate_limit(policy: &RateLimitPolicy) -> Value {
    let mut out = Map::new();
    let unit = RateLimitUnit::try_from(policy.unit)
        .map_or_else(|_| policy.unit.to_string(), |u| u.as_str_name().to_owned());
    if policy.unlimited {
        out.insert("unlimited".into(), true.into());
        if policy.unit != RateLimitUnit::Unknown as i32 {
            out.insert("unit".into(), unit.into());
        }
    } else {
        out.insert("unit".into(), unit.into());
        out.insert("requests_per_unit".into(), policy.requests_per_unit.into());
    }
    if !policy.name.is_empty() {
        out.insert("name".into(), policy.name.clone().into());
    }
    if !policy.replaces.is_empty() {
        let replaces = policy.replaces.iter().map(|r| json!({"name": r.name})).collect();
        out.insert("replaces".into(), Value::Array(replaces));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;
    use tollgate_config::LoadOptions;

    fn limited(key: &str, value: &str, unit: RateLimitUnit, requests_per_unit: u32) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            value: value.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn config(name: &str, domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitConfig {
        RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    fn load(configs: &[RateLimitConfig]) -> Result<tollgate_config::Limits, tollgate_config::ConfigError> {
        tollgate_config::parse_files(&files(configs), &LoadOptions::default())
    }

    #[test]
    fn nested_descriptors_modes_units_and_replaces_load_as_a_file_would() {
        let mut outer = limited("k1", "v1", RateLimitUnit::Minute, 10);
        let mut unlimited = RateLimitDescriptor {
            key: "k2".into(),
            rate_limit: Some(RateLimitPolicy {
                unlimited: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        unlimited.shadow_mode = false;
        let mut weekly = limited("k2", "v2", RateLimitUnit::Week, 15);
        weekly.shadow_mode = true;
        weekly.quota_mode = true;
        if let Some(policy) = weekly.rate_limit.as_mut() {
            policy.name = "weekly".into();
        }
        let mut replacing = limited("k3", "", RateLimitUnit::Hour, 5);
        if let Some(policy) = replacing.rate_limit.as_mut() {
            policy.replaces = vec![RateLimitReplace {
                name: "weekly".into(),
            }];
        }
        outer.descriptors = vec![unlimited, weekly, replacing];
        let limits = load(&[config("foo", "foo", vec![outer]), config("bar", "bar", vec![])]).expect("loads");
        assert_eq!(limits.domains(), ["bar", "foo"]);
        let dump = limits.dump();
        assert!(
            dump.contains(
                "foo.k1_v1.k2_v2: unit=WEEK requests_per_unit=15, shadow_mode: true, quota_mode: true"
            ),
            "{dump}"
        );
        assert!(
            dump.contains("foo.k1_v1: unit=MINUTE requests_per_unit=10"),
            "{dump}"
        );
    }

    #[test]
    fn a_push_is_refused_with_the_resource_named_as_a_file_is() {
        let unset_unit = limited("k1", "", RateLimitUnit::Unknown, 1);
        let err = load(&[config("edge-limits", "edge", vec![unset_unit])]).unwrap_err();
        assert!(err.to_string().starts_with("edge-limits: "), "{err}");
        let err = load(&[config("a", "edge", vec![]), config("b", "edge", vec![])]).unwrap_err();
        assert!(err.to_string().contains("edge"), "{err}");
        let err = load(&[config("nameless", "", vec![])]).unwrap_err();
        assert!(err.to_string().starts_with("nameless: "), "{err}");
    }

    #[test]
    fn with_merging_on_one_domain_may_come_in_several_resources() {
        let pushed = [
            config(
                "foo-1",
                "foo",
                vec![limited("k1", "v1", RateLimitUnit::Minute, 10)],
            ),
            config(
                "foo-2",
                "foo",
                vec![limited("k1", "v2", RateLimitUnit::Minute, 100)],
            ),
        ];
        assert!(
            load(&pushed).is_err(),
            "one domain twice is refused without merging"
        );
        let merge = LoadOptions::default().with_merge_domains(true);
        let limits = tollgate_config::parse_files(&files(&pushed), &merge).expect("merged");
        let dump = limits.dump();
        assert!(
            dump.contains("foo.k1_v1: unit=MINUTE requests_per_unit=10"),
            "{dump}"
        );
        assert!(
            dump.contains("foo.k1_v2: unit=MINUTE requests_per_unit=100"),
            "{dump}"
        );
    }

    #[test]
    fn resources_of_another_type_are_named() {
        let wrong = Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: Vec::new(),
        };
        let err = decode(&[wrong]).unwrap_err();
        assert!(
            err.starts_with("resources[0]: expected type type.googleapis.com/ratelimit"),
            "{err}"
        );
        let corrupt = Any {
            type_url: type_url(),
            value: vec![0xff, 0xff, 0xff],
        };
        assert!(decode(&[corrupt]).unwrap_err().contains("not a RateLimitConfig"));
    }
}
