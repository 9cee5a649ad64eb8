//! One tiny fixture per config error, each asserting the exact message a person fixing the file
//! would read, file name and field path included.

use std::path::{Path, PathBuf};

use tollgate_config::ConfigErrorKind;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

fn load_error(relative: &str) -> tollgate_config::ConfigError {
    match tollgate_config::load(&fixtures().join(relative)) {
        Ok(limits) => panic!("{relative} loaded, but should fail: {limits:?}"),
        Err(err) => err,
    }
}

/// One test per fixture `errors/<name>.yaml`, asserting its message; `ALL` lists the names so
/// a fixture without a test is caught.
macro_rules! error_fixtures {
    ($($name:ident => $expected:expr,)*) => {
        const ALL: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                let file = concat!(stringify!($name), ".yaml");
                let err = load_error(&format!("errors/{file}"));
                assert_eq!(err.to_string(), $expected);
                assert_eq!(err.file(), file);
            }
        )*
    };
}

error_fixtures! {
    // tollgate's format: concurrency limits
    concurrency_missing_max_in_flight => "concurrency_missing_max_in_flight.yaml: policies.exports: missing field `max_in_flight`, concurrency takes `max_in_flight` and `lease_timeout`",
    concurrency_missing_lease_timeout => "concurrency_missing_lease_timeout.yaml: policies.exports: missing field `lease_timeout`, concurrency takes `max_in_flight` and `lease_timeout`",
    concurrency_zero_max_in_flight => "concurrency_zero_max_in_flight.yaml: policies.exports.max_in_flight: max_in_flight must be at least 1",
    concurrency_oversized_max_in_flight => "concurrency_oversized_max_in_flight.yaml: policies.exports.max_in_flight: max_in_flight is 100001, above the maximum of 100000",
    concurrency_bad_lease_timeout => r#"concurrency_bad_lease_timeout.yaml: policies.exports.lease_timeout: expected a duration like "1m", got "a while""#,
    concurrency_lease_timeout_too_long => "concurrency_lease_timeout_too_long.yaml: policies.exports.lease_timeout: lease_timeout is 86400000s, outside the supported range 1ms to 86400s",
    concurrency_with_limit => "concurrency_with_limit.yaml: policies.exports.limit: `limit` is not used by concurrency, which takes `max_in_flight` and `lease_timeout`",
    concurrency_with_block_for => "concurrency_with_block_for.yaml: policies.exports.block_for: `block_for` is not used by concurrency: a lease frees its slot when the request ends, there is no penalty",
    concurrency_shadow => "concurrency_shadow.yaml: policies.exports.shadow: `shadow` is not used by concurrency: a lease is held or it is not, so it cannot be shadowed",
    max_in_flight_on_gcra => "max_in_flight_on_gcra.yaml: policies.api.max_in_flight: `max_in_flight` is not used by gcra; only `algorithm: concurrency` takes it",
    route_concurrency_policy => "route_concurrency_policy.yaml: routes[0].policies[0]: `exports` is a concurrency policy: a route applies rate limits only",
    envoy_concurrency_algorithm => "envoy_concurrency_algorithm.yaml: descriptors[0].rate_limit.algorithm: concurrency is not a rate limit: declare it under `policies:` in tollgate's format and use the acquire and release endpoints",
    // tollgate's format: routes of `tollgate proxy`
    route_bad_prefix => r#"route_bad_prefix.yaml: routes[0].prefix: a path prefix starts with `/`, got "movies""#,
    route_duplicate_prefix => r#"route_duplicate_prefix.yaml: routes[1].prefix: duplicate route prefix "/v4", first defined at routes[0]"#,
    route_bad_key => r#"route_bad_key.yaml: routes[0].key: expected `client_ip` or `header:NAME` with a valid header name, got "header:X Api Key""#,
    route_unknown_policy => r#"route_unknown_policy.yaml: routes[0].policies[1]: unknown policy "moviez""#,
    route_unknown_field => "route_unknown_field.yaml: routes[0].policy: unknown field `policy`, expected one of `prefix`, `policies`, `key`, `case_sensitive`",
    route_prefix_differs_in_case => r#"route_prefix_differs_in_case.yaml: routes[1].prefix: duplicate route prefix "/V4/Movies", first defined at routes[0] as "/v4/movies" (prefixes match in any case unless both routes set `case_sensitive: true`)"#,
    route_bad_case_sensitive => r#"route_bad_case_sensitive.yaml: routes[0].case_sensitive: invalid type: string "sometimes", expected a boolean"#,
    // tollgate's format: values
    bad_window => r#"bad_window.yaml: policies.login.window: expected a duration like "1m", got "fortnight""#,
    window_without_unit => r#"window_without_unit.yaml: policies.login.window: expected a duration like "1m", got 90 (add a unit, such as "90s")"#,
    zero_window => r#"zero_window.yaml: policies.login.window: a duration must be more than zero, got "0s""#,
    overflow_window => r#"overflow_window.yaml: policies.login.window: duration "99999999999999999999d" is too long"#,
    window_too_long => "window_too_long.yaml: policies.yearly.window: window is 86486400s, outside the supported range 1ms to 86400000s",
    zero_limit => "zero_limit.yaml: policies.api.limit: limit must be at least 1",
    oversized_limit => "oversized_limit.yaml: policies.api.limit: limit is 100001, above the maximum of 100000",
    negative_limit => "negative_limit.yaml: policies.api.limit: invalid value: integer `-5`, expected u64",
    bad_rate => r#"bad_rate.yaml: policies.login.rate: expected a rate like "10/s", got "ten per second""#,
    zero_rate => "zero_rate.yaml: policies.uploads.refill: rate must be at least 1",
    capacity_horizon => "capacity_horizon.yaml: policies.uploads.capacity: capacity of 1000000 at this rate takes 86400000000s to refill, above the maximum of 86400000s",
    block_for_too_long => "block_for_too_long.yaml: policies.login.block_for: block_for is 86486400s, outside the supported range 1ms to 86400000s",
    block_for_shrinks => "block_for_shrinks.yaml: policies.login.block_for[1]: block_for step 2 (60s) is shorter than the step before it (600s)",
    block_for_bad_step => r#"block_for_bad_step.yaml: policies.login.block_for[1]: expected a duration like "1m", got "forever""#,
    block_for_bad_factor => "block_for_bad_factor.yaml: policies.login.block_for.factor: block_for.factor is 1, outside the accepted range 2 to 1000",
    block_for_bad_shape => r#"block_for_bad_shape.yaml: policies.login.block_for: expected a duration like "15m", a list of durations like [1m, 10m, 1h], or a map with `initial`, `factor` and `max`"#,
    block_memory_one_step => "block_memory_one_step.yaml: policies.login.block_memory: is only used by an escalating `block_for` (a list or a growth rule)",
    block_memory_without_block_for => "block_memory_without_block_for.yaml: policies.login.block_memory: is only used with `block_for`",
    calendar_unknown_zone => r#"calendar_unknown_zone.yaml: policies.q.time_zone: unknown time zone "Europe/Pariss": expected an IANA name like "Europe/Paris""#,
    calendar_bad_period => "calendar_bad_period.yaml: policies.q.period: unknown variant `fortnight`, expected one of `day`, `week`, `month`, `year`",
    calendar_week_starts_not_weekly => "calendar_week_starts_not_weekly.yaml: policies.q.week_starts: `week_starts` is only used with `period: week`",
    calendar_missing_period => "calendar_missing_period.yaml: policies.q: missing field `period`, calendar_quota takes `limit` and `period`",
    calendar_window => "calendar_window.yaml: policies.q.window: `window` is not used by calendar_quota, which takes `limit` and `period`",
    envoy_calendar_quota => "envoy_calendar_quota.yaml: descriptors[0].rate_limit.algorithm: calendar_quota needs a period and a time zone: use tollgate's format (`policies`)",
    bad_anchor => "bad_anchor.yaml: policies.api.anchor: unknown variant `midnight`, expected `epoch` or `first_hit`",
    bad_hash_tag => "bad_hash_tag.yaml: policies.api.hash_tag: unknown variant `tenant`, expected `policy_and_key` or `key`",
    bad_failure_mode => "bad_failure_mode.yaml: policies.api.on_store_failure: unknown variant `retry`, expected one of `fail_open`, `fail_closed`, `local`",
    zero_instances => "zero_instances.yaml: policies.api.instances: invalid value: integer `0`, expected a nonzero u32",
    // tollgate's format: allow and deny lists, gradual enforcement
    access_bad_cidr => r#"access_bad_cidr.yaml: access.deny.cidrs[1]: expected an IP address or a CIDR range like 203.0.113.0/24 or 2001:db8::/32, got "203.0.113.300""#,
    access_host_bits => r#"access_host_bits.yaml: policies.login.access.allow.cidrs[0]: "2001:db8::1/32" has bits set after the /32; the range is 2001:db8::/32"#,
    access_unknown_field => "access_unknown_field.yaml: access.deny.ranges: unknown field `ranges`, expected one of `cidrs`, `keys`, `prefixes`",
    access_empty_key => "access_empty_key.yaml: policies.login.access.deny.keys[0]: the value must not be empty",
    enforce_percent_too_large => r#"enforce_percent_too_large.yaml: policies.api.enforce_percent: expected a percentage from 0 to 100 with at most two decimals, like 10 or 12.5, got "110""#,
    enforce_percent_three_decimals => r#"enforce_percent_three_decimals.yaml: policies.api.enforce_percent: expected a percentage from 0 to 100 with at most two decimals, like 10 or 12.5, got "12.345""#,
    shadow_not_bool => r#"shadow_not_bool.yaml: policies.api.shadow: invalid type: string "maybe", expected a boolean"#,
    lease_on_sliding_log => "lease_on_sliding_log.yaml: policies.search.lease: lease is not supported by sliding_log: only fixed_window, token_bucket and gcra can lease units",
    lease_above_limit => "lease_above_limit.yaml: policies.api.lease.max_units: lease.max_units is 101, above the maximum of 100",
    lease_zero_units => "lease_zero_units.yaml: policies.api.lease.max_units: lease.max_units must be at least 1",
    lease_hold_too_long => "lease_hold_too_long.yaml: policies.api.lease.hold: lease.hold is 120s, outside the supported range 1ms to 60s",
    replicas_too_many => "replicas_too_many.yaml: policies.login.replicas: replicas is 17, outside the accepted range 0 to 16",
    replicas_with_lease => "replicas_with_lease.yaml: policies.api.replicas: replicas cannot be combined with lease: an instance admits from its leased units without a store call that could wait for replicas",
    replicas_not_a_number => r#"replicas_not_a_number.yaml: policies.login.replicas: invalid type: string "all", expected u32"#,
    concurrency_replicas => "concurrency_replicas.yaml: policies.exports.replicas: `replicas` is not used by concurrency: waiting for replicas is for rate limits (a lease lost in a failover ends at its `lease_timeout`)",
    replica_wait_without_replicas => "replica_wait_without_replicas.yaml: policies.login.replica_wait: is only used with `replicas` of 1 or more",
    replica_wait_too_long => "replica_wait_too_long.yaml: policies.login.replica_wait: replica_wait is 10s, outside the supported range 1ms to 5s",
    replica_wait_not_a_duration => r#"replica_wait_not_a_duration.yaml: policies.login.replica_wait: expected a duration like "1m", got "soon""#,
    concurrency_replica_wait => "concurrency_replica_wait.yaml: policies.exports.replica_wait: `replica_wait` is not used by concurrency: waiting for replicas is for rate limits (a lease lost in a failover ends at its `lease_timeout`)",
    lease_unknown_field => "lease_unknown_field.yaml: policies.api.lease.units: unknown field `units`, expected one of `max_units`, `hot_per_second`, `hold`",
    // tollgate's format: fields
    unknown_field => "unknown_field.yaml: policies.login.windw: unknown field `windw`, expected one of `algorithm`, `limit`, `window`, `anchor`, `capacity`, `refill`, `leak`, `rate`, `burst`, `period`, `time_zone`, `week_starts`, `block_for`, `block_memory`, `on_store_failure`, `instances`, `hash_tag`, `on_change`, `shadow`, `lease`, `replicas`, `replica_wait`, `enforce_percent`, `access`, `max_in_flight`, `lease_timeout`",
    unknown_algorithm => "unknown_algorithm.yaml: policies.login.algorithm: unknown variant `gcr`, expected one of `fixed_window`, `sliding_log`, `sliding_window`, `token_bucket`, `leaky_bucket`, `gcra`, `concurrency`, `calendar_quota`",
    missing_algorithm => "missing_algorithm.yaml: policies.login: missing field `algorithm`",
    field_not_used => "field_not_used.yaml: policies.login.window: `window` is not used by gcra, which takes `rate` and `burst`",
    missing_burst => "missing_burst.yaml: policies.login: missing field `burst`, gcra takes `rate` and `burst`",
    missing_window => "missing_window.yaml: policies.api: missing field `window`, fixed_window takes `limit` and `window`",
    instances_without_local => "instances_without_local.yaml: policies.api.instances: `instances` is only used with `on_store_failure: local`",
    reserved_name => r#"reserved_name.yaml: policies.envoy:edge.remote_address: policy names starting with "envoy:" are reserved for envoyproxy/ratelimit descriptors"#,
    long_name => format!("long_name.yaml: policies.{}: policy name must be 1 to 255 bytes, got 256", "n".repeat(256)),
    policies_not_a_map => "policies_not_a_map.yaml: policies: invalid type: sequence, expected a map",
    // Both formats: the file as a whole
    syntax_error => "syntax_error.yaml: did not find expected key at line 4 column 4, while parsing a block mapping at line 2 column 3",
    duplicate_key => r#"duplicate_key.yaml: policies: duplicate entry with key "login" at line 2 column 3"#,
    empty => "empty.yaml: the file is empty: expected tollgate `policies` or an envoyproxy/ratelimit `domain`",
    neither_format => "neither_format.yaml: expected a map with tollgate `policies` or an envoyproxy/ratelimit `domain`",
    not_a_map => "not_a_map.yaml: expected a map with tollgate `policies` or an envoyproxy/ratelimit `domain`",
    both_formats => "both_formats.yaml: a file holds either tollgate `policies` or an envoyproxy/ratelimit `domain`, not both",
    // envoyproxy/ratelimit's format: upstream's checks
    envoy_bad_yaml => "envoy_bad_yaml.yaml: did not find expected node content at line 3 column 1, while parsing a flow node",
    envoy_empty_domain => "envoy_empty_domain.yaml: domain: must not be empty",
    envoy_missing_domain => "envoy_missing_domain.yaml: domain: must not be empty",
    envoy_empty_key => "envoy_empty_key.yaml: descriptors[0].key: must not be empty",
    envoy_duplicate_descriptor => r#"envoy_duplicate_descriptor.yaml: descriptors[1]: duplicate descriptor "database: users", first defined at descriptors[0]"#,
    envoy_nested_duplicate => r#"envoy_nested_duplicate.yaml: descriptors[0].descriptors[1]: duplicate descriptor "to_number", first defined at descriptors[0].descriptors[0]"#,
    envoy_duplicate_wildcard => r#"envoy_duplicate_wildcard.yaml: descriptors[1]: duplicate descriptor "path: /api/*", first defined at descriptors[0]"#,
    envoy_bad_unit => r#"envoy_bad_unit.yaml: descriptors[1].descriptors[0].rate_limit.unit: unknown unit "fortnite", expected second, minute, hour, day, week, month or year"#,
    envoy_missing_unit => "envoy_missing_unit.yaml: descriptors[0].rate_limit: missing field `unit`, needed unless `window` is set or `unlimited` is true",
    envoy_missing_requests => "envoy_missing_requests.yaml: descriptors[0].rate_limit: missing field `requests_per_unit`, needed unless `unlimited` is true",
    envoy_unlimited_with_unit => "envoy_unlimited_with_unit.yaml: descriptors[0].rate_limit.unit: `unit` must not be set when `unlimited` is true",
    envoy_replaces_empty => "envoy_replaces_empty.yaml: descriptors[0].rate_limit.replaces[0].name: must not be empty",
    envoy_replaces_self => r#"envoy_replaces_self.yaml: descriptors[0].rate_limit.replaces[1].name: a rate limit cannot replace itself ("per_user")"#,
    envoy_bad_metadata => "envoy_bad_metadata.yaml: descriptors[0].metadata: expected a map",
    envoy_unknown_key => "envoy_unknown_key.yaml: descriptors[0].ratelimit: unknown field `ratelimit`, expected one of `key`, `value`, `rate_limit`, `descriptors`, `shadow_mode`, `quota_mode`, `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata`",
    envoy_unknown_rate_limit_key => "envoy_unknown_rate_limit_key.yaml: descriptors[0].rate_limit.requestsperunit: unknown field `requestsperunit`, expected one of `unit`, `requests_per_unit`, `unit_multiplier`, `unlimited`, `name`, `replaces`, `algorithm`, `window`, `burst`, `block_for`, `block_memory`, `on_store_failure`, `instances`, `hash_tag`, `on_change`",
    envoy_non_map_list => r#"envoy_non_map_list.yaml: descriptors[0]: invalid type: string "a", expected a descriptor: a map with `key` and optionally `value`, `rate_limit` and `descriptors`"#,
    envoy_rate_limit_list => "envoy_rate_limit_list.yaml: descriptors[0].rate_limit: invalid type: sequence, expected a rate limit: a map with `unit` and `requests_per_unit`, or `unlimited: true`",
    envoy_share_threshold_without_wildcard => "envoy_share_threshold_without_wildcard.yaml: descriptors[0].share_threshold: `share_threshold` applies only to a wildcard value (one with a `*`)",
    // envoyproxy/ratelimit's format: the core's limits, and tollgate's extensions
    envoy_zero_requests_with_algorithm => "envoy_zero_requests_with_algorithm.yaml: descriptors[0].rate_limit.algorithm: `algorithm` must not be set when `requests_per_unit` is 0 (every request is denied)",
    envoy_oversized_requests => "envoy_oversized_requests.yaml: descriptors[0].rate_limit.requests_per_unit: limit is 4294967295, above the maximum of 1000000000",
    envoy_unlimited_with_algorithm => "envoy_unlimited_with_algorithm.yaml: descriptors[0].rate_limit.algorithm: `algorithm` must not be set when `unlimited` is true",
    envoy_unit_and_window => "envoy_unit_and_window.yaml: descriptors[0].rate_limit.window: `window` cannot be set together with `unit`",
    envoy_zero_unit_multiplier => "envoy_zero_unit_multiplier.yaml: descriptors[0].rate_limit.unit_multiplier: `unit_multiplier` must be at least 1 (the window is that many units)",
    envoy_unit_multiplier_with_window => "envoy_unit_multiplier_with_window.yaml: descriptors[0].rate_limit.unit_multiplier: `unit_multiplier` multiplies `unit`; with `window`, write the whole duration there",
    deep_nesting => "deep_nesting.yaml: nested deeper than 64 levels at line 4 column 76",
    envoy_bad_window => r#"envoy_bad_window.yaml: descriptors[0].rate_limit.window: expected a duration like "1m", got "soon""#,
    envoy_burst_on_fixed_window => "envoy_burst_on_fixed_window.yaml: descriptors[0].rate_limit.burst: `burst` is not used by fixed_window; only token_bucket, leaky_bucket and gcra take a burst",
    envoy_burst_horizon => "envoy_burst_horizon.yaml: descriptors[0].rate_limit.burst: burst of 1001 at this rate takes 86486400s to refill, above the maximum of 86400000s",
    envoy_instances_without_local => "envoy_instances_without_local.yaml: descriptors[0].rate_limit.instances: `instances` is only used with `on_store_failure: local`",
}

#[test]
fn every_error_fixture_has_a_test() {
    let mut on_disk: Vec<String> = std::fs::read_dir(fixtures().join("errors"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    on_disk.sort();
    let mut tested: Vec<String> = ALL.iter().map(|name| format!("{name}.yaml")).collect();
    tested.sort();
    assert_eq!(on_disk, tested);
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let err = load_error("errors/syntax_error.yaml");
    assert!(
        matches!(
            err.kind(),
            ConfigErrorKind::Syntax {
                line: Some(4),
                column: Some(4),
                ..
            }
        ),
        "{:?}",
        err.kind()
    );
    assert_eq!(err.path(), None);
}

#[test]
fn core_errors_keep_the_policy_error() {
    let err = load_error("errors/envoy_oversized_requests.yaml");
    assert_eq!(err.path(), Some("descriptors[0].rate_limit.requests_per_unit"));
    assert!(matches!(
        err.kind(),
        ConfigErrorKind::Policy(tollgate::PolicyError::TooLarge { field: "limit", .. })
    ));
}

#[test]
fn a_duplicate_policy_across_files_names_both_files() {
    let err = load_error("dirs/duplicate_policy");
    assert_eq!(
        err.to_string(),
        r#"b.yaml: policies.login: duplicate policy "login", first defined in a.yaml"#
    );
}

#[test]
fn a_duplicate_domain_across_files_names_both_files() {
    let err = load_error("dirs/duplicate_domain");
    assert_eq!(
        err.to_string(),
        r#"b.yml: domain: duplicate domain "edge", first defined in a.yaml"#
    );
}

#[test]
fn merged_domains_are_put_together_across_files() {
    use tollgate_config::LoadOptions;
    let merge = LoadOptions::default().with_merge_domains(true);
    let limits =
        tollgate_config::load_with(&fixtures().join("dirs/duplicate_domain"), &merge).expect("merging is on");
    assert_eq!(limits.domains(), ["edge"]);
    let limit = |key: &str| {
        limits
            .resolve("edge", &[(key.to_owned(), "x".to_owned())])
            .and_then(|r| r.policy().map(tollgate::Policy::max_cost))
    };
    assert_eq!(limit("remote_address"), Some(10), "from a.yaml");
    assert_eq!(limit("user_agent"), Some(1), "from b.yml");
}

#[test]
fn a_descriptor_defined_in_two_merged_files_names_the_first_file() {
    let merge = tollgate_config::LoadOptions::default().with_merge_domains(true);
    let err = tollgate_config::load_with(&fixtures().join("dirs/merge_duplicate"), &merge).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"b.yaml: descriptors[1]: duplicate descriptor "edge.remote_address", first defined in a.yaml"#
    );
    // Without merging, the second file is refused for its domain, as before.
    assert_eq!(
        load_error("dirs/merge_duplicate").to_string(),
        r#"b.yaml: domain: duplicate domain "edge", first defined in a.yaml"#
    );
}

#[test]
fn an_error_in_a_directory_names_the_file_alone() {
    let err = load_error("dirs/bad_file");
    assert_eq!(
        err.to_string(),
        r#"b.yaml: descriptors[0].rate_limit.unit: unknown unit "fortnight", expected second, minute, hour, day, week, month or year"#
    );
}

#[test]
fn a_missing_path_is_an_io_error_naming_it() {
    let missing = fixtures().join("does-not-exist");
    let err = tollgate_config::load(&missing).unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::Io(_)));
    assert_eq!(err.file(), missing.display().to_string());
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read: ", missing.display())),
        "{err}"
    );
}

#[test]
fn parse_names_the_file_it_is_given() {
    let err = tollgate_config::parse(
        "inline.yaml",
        "policies:\n  x:\n    algorithm: gcra\n    rate: 1/s\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "inline.yaml: policies.x: missing field `burst`, gcra takes `rate` and `burst`"
    );
}

#[test]
fn yaml_with_many_documents_is_refused() {
    let err = tollgate_config::parse("multi.yaml", "policies: {}\n---\npolicies: {}\n").unwrap_err();
    assert!(matches!(err.kind(), ConfigErrorKind::Syntax { .. }), "{err}");
}

#[test]
fn a_number_where_a_rate_belongs_is_refused() {
    let err = tollgate_config::parse(
        "n.yaml",
        "policies:\n  x:\n    algorithm: gcra\n    rate: 10\n    burst: 1\n",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"n.yaml: policies.x.rate: expected a rate like "10/s", got "10""#
    );
}

/// A link named like a config file that leads nowhere: the file it stood for would silently not
/// be read, so loading stops and names the link and where it points.
#[cfg(unix)]
#[test]
fn a_dangling_link_or_a_link_loop_in_a_directory_is_named() {
    use std::os::unix::fs::symlink;

    /// (what, the links as (name, target), the start of the message after the link's path)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case<'_>; 3] = [
        (
            "dangling",
            &[("edge.yaml", "../gone/edge.yaml")],
            r#"broken link to "../gone/edge.yaml": "#,
        ),
        (
            "loop",
            &[("a.yaml", "b.yaml"), ("b.yaml", "a.yaml")],
            r#"broken link to "b.yaml": "#,
        ),
        (
            "self",
            &[("self.yml", "self.yml")],
            r#"broken link to "self.yml": "#,
        ),
    ];
    for (what, links, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("api.yaml"),
            "policies:\n  api: {algorithm: gcra, rate: 10/s, burst: 10}\n",
        )
        .unwrap();
        for (link, target) in links {
            symlink(target, dir.path().join(link)).unwrap();
        }
        let err = tollgate_config::load(dir.path()).expect_err(what);
        let link = dir.path().join(links[0].0);
        assert_eq!(err.file(), link.display().to_string(), "{what}");
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!("{}: {message}", link.display())),
            "{what}: {shown}"
        );
        assert!(
            matches!(err.kind(), ConfigErrorKind::BrokenLink { .. }),
            "{what}: {shown}"
        );
    }
}
