//! Valid configurations: every option of the tollgate format, and loading directories.

mod common;

use std::fs;

use common::{describe, fixtures};

#[test]
fn reads_every_algorithm_and_option_of_the_tollgate_format() {
    let limits = tollgate_config::load(&fixtures().join("valid/policies.yaml")).unwrap();
    let described: Vec<(String, String, bool)> = limits
        .policies()
        .map(|(name, named)| (name.to_owned(), describe(named.policy()), named.shadow()))
        .collect();
    let expected = [
        (
            "archive",
            "fixed_window 1 per 34560000s, Epoch; block_for 500ms; local (limit / 1)",
            false,
        ),
        ("exports", "fixed_window 3 per 5400s, FirstHit; fail_open", false),
        (
            "login",
            "gcra 5 per 60s, burst 5; block_for 900s; fail_closed",
            false,
        ),
        ("movies", "sliding_log 20 per 60s; local (limit / 1)", false),
        (
            "reports",
            "fixed_window 100 per 86400s, Epoch; local (limit / 1)",
            false,
        ),
        ("search", "sliding_window 1000 per 3600s; local (limit / 4)", true),
        (
            "uploads",
            "token_bucket 10, refill 20 per 30s; local (limit / 1)",
            false,
        ),
        (
            "webhooks",
            "leaky_bucket 50, leak 100 per 60s; local (limit / 1)",
            false,
        ),
    ];
    let expected: Vec<(String, String, bool)> = expected
        .iter()
        .map(|(name, text, shadow)| ((*name).to_owned(), (*text).to_owned(), *shadow))
        .collect();
    assert_eq!(described, expected);
    assert!(limits.domains().is_empty());
}

#[test]
fn policies_keep_their_own_names() {
    let limits = tollgate_config::load(&fixtures().join("valid/policies.yaml")).unwrap();
    let login = limits.policy("login").unwrap();
    assert_eq!(login.policy().name(), "login");
    assert!(limits.policy("Login").is_none());
}

#[test]
fn loads_every_valid_fixture_as_one_directory() {
    let limits = tollgate_config::load(&fixtures().join("valid")).unwrap();
    assert_eq!(limits.domains(), ["catalog", "edge", "messaging", "users"]);
    assert_eq!(limits.policies().count(), 13);
}

#[test]
fn a_directory_mixes_both_formats_and_skips_what_is_not_config() {
    // `.hidden.yaml`, `notes.txt` and `nested/broken.yaml` are not valid YAML; reading any of
    // them would fail the load.
    let limits = tollgate_config::load(&fixtures().join("dirs/mixed")).unwrap();
    let names: Vec<&str> = limits.policies().map(|(name, _)| name).collect();
    assert_eq!(names, ["login", "search"]);
    assert_eq!(limits.domains(), ["edge"]);
}

#[test]
fn an_empty_directory_gives_empty_limits() {
    let dir = tempfile::tempdir().unwrap();
    assert!(tollgate_config::load(dir.path()).unwrap().is_empty());
}

#[test]
fn files_are_read_in_name_order_so_errors_are_repeatable() {
    let dir = tempfile::tempdir().unwrap();
    let login = "policies:\n  login:\n    algorithm: gcra\n    rate: 5/m\n    burst: 5\n";
    // Created in reverse order; the duplicate is reported in the later name either way.
    fs::write(dir.path().join("b.yaml"), login).unwrap();
    fs::write(dir.path().join("a.yaml"), login).unwrap();
    let err = tollgate_config::load(dir.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"b.yaml: policies.login: duplicate policy "login", first defined in a.yaml"#
    );
}

#[cfg(unix)]
#[test]
fn follows_symlinked_files_as_configmaps_mount_them() {
    // A ConfigMap volume: `..data` links to a timestamped directory, and each file name links
    // into `..data`.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("..2026_01_01_00_00_00.000000000");
    fs::create_dir(&data).unwrap();
    fs::write(
        data.join("limits.yaml"),
        "policies:\n  api:\n    algorithm: gcra\n    rate: 10/s\n    burst: 10\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&data, dir.path().join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/limits.yaml", dir.path().join("limits.yaml")).unwrap();
    // An editor's lock file (a dangling link whose name starts with `.`) is skipped.
    std::os::unix::fs::symlink("user@host.1234", dir.path().join(".#limits.yaml")).unwrap();
    let limits = tollgate_config::load(dir.path()).unwrap();
    assert!(limits.policy("api").is_some());
}

#[test]
fn a_single_file_is_named_by_its_file_name() {
    let err = tollgate_config::load(&fixtures().join("errors/bad_window.yaml")).unwrap_err();
    assert_eq!(err.file(), "bad_window.yaml");
}

#[test]
fn merge_keys_and_anchors_are_applied_as_upstream_does() {
    let limits = tollgate_config::parse(
        "anchors.yaml",
        r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: &per_second
      unit: second
      requests_per_unit: 10
  - key: user_agent
    rate_limit:
      <<: *per_second
      requests_per_unit: 3
"#,
    )
    .unwrap();
    let resolved = limits
        .resolve("edge", &[("user_agent".into(), "curl".into())])
        .unwrap();
    assert_eq!(
        describe(resolved.policy().unwrap()),
        "fixed_window 3 per 1s, Epoch; local (limit / 1)"
    );
}

#[test]
fn an_empty_policies_map_is_valid() {
    assert!(
        tollgate_config::parse("none.yaml", "policies: {}\n")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn hash_tag_key_places_a_policy_by_its_key_in_both_formats() {
    let ours = tollgate_config::parse(
        "tags.yaml",
        "policies:\n  user: {algorithm: gcra, rate: 1/s, burst: 1, hash_tag: key}\n  spread: {algorithm: gcra, rate: 1/s, burst: 1}\n",
    )
    .unwrap();
    let tag = |name: &str| ours.policy(name).unwrap().policy().hash_tag();
    assert_eq!(tag("user"), tollgate::HashTag::Key);
    assert_eq!(tag("spread"), tollgate::HashTag::PolicyAndKey);

    let envoy = tollgate_config::parse(
        "edge.yaml",
        "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5, hash_tag: key}\n",
    )
    .unwrap();
    let resolved = envoy.resolve("edge", &[("user".into(), "alice".into())]).unwrap();
    assert_eq!(resolved.policy().unwrap().hash_tag(), tollgate::HashTag::Key);
}

#[test]
fn a_policy_may_lease_its_hot_keys() {
    let limits = tollgate_config::parse(
        "lease.yaml",
        "policies:\n  api:\n    algorithm: fixed_window\n    limit: 1000\n    window: 1s\n    lease: {max_units: 50, hot_per_second: 20, hold: 250ms}\n  plain: {algorithm: gcra, rate: 1/s, burst: 1}\n",
    )
    .unwrap();
    let lease = *limits.policy("api").unwrap().policy().lease().unwrap();
    assert_eq!(lease.max_units(), 50);
    assert_eq!(lease.hot_per_second_value(), 20);
    assert_eq!(lease.hold_duration(), std::time::Duration::from_millis(250));
    assert!(limits.policy("plain").unwrap().policy().lease().is_none());
}

#[test]
fn a_policy_may_wait_for_replicas() {
    let limits = tollgate_config::parse(
        "replicas.yaml",
        "policies:\n  login:\n    algorithm: fixed_window\n    limit: 5\n    window: 15m\n    on_store_failure: fail_closed\n    replicas: 1\n    replica_wait: 1s\n  none: {algorithm: gcra, rate: 1/s, burst: 1, replicas: 0}\n  plain: {algorithm: gcra, rate: 1/s, burst: 1, replicas: 2}\n",
    )
    .unwrap();
    assert_eq!(limits.policy("login").unwrap().policy().replicas(), 1);
    let wait = |name: &str| limits.policy(name).unwrap().policy().replica_wait();
    assert_eq!(wait("login"), std::time::Duration::from_secs(1));
    assert_eq!(wait("plain"), tollgate::Policy::DEFAULT_REPLICA_WAIT);
    assert_eq!(limits.policy("none").unwrap().policy().replicas(), 0);
    assert_eq!(limits.policy("plain").unwrap().policy().replicas(), 2);
}

#[test]
fn a_concurrency_policy_loads_with_its_fields_and_apart_from_rate_policies() {
    let limits = tollgate_config::parse(
        "exports.yaml",
        "policies:
  exports:
    algorithm: concurrency
    max_in_flight: 5
    lease_timeout: 30s
    on_store_failure: local
    instances: 2
    hash_tag: key
  api:
    algorithm: gcra
    rate: 10/s
    burst: 10
",
    )
    .unwrap();
    let exports = limits.concurrency_policy("exports").expect("loaded");
    assert_eq!(exports.name(), "exports");
    assert_eq!(exports.max_in_flight(), 5);
    assert_eq!(exports.lease_timeout(), std::time::Duration::from_secs(30));
    assert_eq!(exports.hash_tag(), tollgate::HashTag::Key);
    assert_eq!(
        exports.failure_mode(),
        tollgate::FailureMode::Local {
            instances: std::num::NonZeroU32::new(2).unwrap()
        }
    );
    assert!(limits.policy("exports").is_none(), "not a rate policy");
    assert!(limits.concurrency_policy("api").is_none());
    assert_eq!(limits.policies().count(), 1);
}

#[test]
fn a_concurrency_policy_name_cannot_repeat_a_rate_policy_of_another_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("a.yaml"),
        "policies:\n  exports: {algorithm: gcra, rate: 1/s, burst: 1}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b.yaml"),
        "policies:\n  exports: {algorithm: concurrency, max_in_flight: 1, lease_timeout: 1s}\n",
    )
    .unwrap();
    let err = tollgate_config::load(dir.path()).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"b.yaml: policies.exports: duplicate policy "exports", first defined in a.yaml"#
    );
}

#[test]
fn access_lists_and_enforce_percent_load_from_any_file_of_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("api.yaml"),
        "policies:\n  login:\n    algorithm: gcra\n    rate: 5/1m\n    burst: 5\n    enforce_percent: 12.5\n    access:\n      deny:\n        prefixes: [\"bot-\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("blocklist.yaml"),
        "access:\n  allow:\n    cidrs: [192.0.2.0/24]\n  deny:\n    cidrs: [\"2001:DB8:bad::/48\"]\n    keys: [mallory]\n",
    )
    .unwrap();
    let limits = tollgate_config::load(dir.path()).unwrap();
    let login = limits.policy("login").unwrap().policy();
    assert_eq!(login.enforcement().map(|e| e.basis_points()), Some(1_250));
    let entries: Vec<String> = limits.access_entries().iter().map(ToString::to_string).collect();
    assert_eq!(
        entries,
        [
            "deny prefix bot- (policy login)",
            "allow cidr 192.0.2.0/24 (global)",
            "deny cidr 2001:db8:bad::/48 (global)",
            "deny key mallory (global)",
        ]
    );
    let lists = tollgate::access::AccessLists::new(limits.access_entries().iter().cloned());
    assert!(lists.lookup("login", b"bot-1").is_some());
    assert!(lists.lookup("other", b"bot-1").is_none());
}

#[test]
fn block_for_escalates_as_a_list_or_a_growth_rule() {
    use std::time::Duration;

    let limits = tollgate_config::load(&fixtures().join("valid/penalties.yaml")).unwrap();
    let penalty = |name: &str| {
        let penalty = limits.policy(name).unwrap().policy().penalty().unwrap().clone();
        let steps: Vec<u64> = penalty.steps().iter().map(Duration::as_secs).collect();
        (steps, penalty.memory().as_secs())
    };
    assert_eq!(penalty("signin"), (vec![60, 600, 3_600, 86_400], 86_400));
    // 30 s, x4 each time, up to 8 h; remembered for the longest block by default.
    assert_eq!(
        penalty("scraping"),
        (vec![30, 120, 480, 1_920, 7_680, 28_800], 28_800)
    );
}

#[test]
fn calendar_quotas_take_a_period_a_time_zone_and_a_week_start() {
    use tollgate::Algorithm;
    use tollgate::algorithm::calendar_quota::{Period, Weekday};

    let limits = tollgate_config::load(&fixtures().join("valid/calendar.yaml")).unwrap();
    let quota = |name: &str| match limits.policy(name).unwrap().policy().algorithm() {
        Algorithm::CalendarQuota(q) => (q.limit(), q.period(), q.time_zone().to_owned(), q.week_start()),
        other => panic!("{name} is {other:?}"),
    };
    assert_eq!(
        quota("monthly_calls"),
        (1_000, Period::Month, "Europe/Paris".to_owned(), Weekday::Monday)
    );
    assert_eq!(
        quota("weekly_reports"),
        (5, Period::Week, "America/New_York".to_owned(), Weekday::Sunday)
    );
    assert_eq!(
        quota("daily_utc"),
        (100, Period::Day, "UTC".to_owned(), Weekday::Monday)
    );
}

#[test]
fn a_unit_multiplier_makes_a_window_of_that_many_units() {
    let limits = tollgate_config::parse(
        "multiplier.yaml",
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 10}\n",
    )
    .unwrap();
    let resolved = limits
        .resolve("edge", &[("remote_address".into(), "192.0.2.1".into())])
        .unwrap();
    assert_eq!(
        describe(resolved.policy().unwrap()),
        "fixed_window 10 per 300s, Epoch; local (limit / 1)"
    );
}
