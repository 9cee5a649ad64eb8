//! `Limits::resolve` gives the answers envoyproxy/ratelimit gives for the same files and
//! requests (the cases of its README and config tests, on fixtures of our own), and its store
//! keys and policy names are unique and stable.

mod common;

use std::sync::OnceLock;

use common::{describe, fixtures};
use proptest::prelude::*;
use tollgate_config::apply_replaces;
use tollgate_config::{Limits, Resolved};

fn limits() -> &'static Limits {
    static LIMITS: OnceLock<Limits> = OnceLock::new();
    LIMITS.get_or_init(|| tollgate_config::load(&fixtures().join("valid")).unwrap())
}

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn resolve(domain: &str, pairs: &[(&str, &str)]) -> Option<Resolved<'static>> {
    limits().resolve(domain, &entries(pairs))
}

/// The applicable limit in one line, `unlimited`, or `none`.
fn limit(domain: &str, pairs: &[(&str, &str)]) -> String {
    match resolve(domain, pairs) {
        None => "none".to_owned(),
        Some(r) if r.is_unlimited() => "unlimited".to_owned(),
        Some(r) => describe(r.policy().unwrap()),
    }
}

fn fixed(count: u64, secs: u64) -> String {
    format!("fixed_window {count} per {secs}s, Epoch; local (limit / 1)")
}

#[test]
fn a_plain_rate_limit_is_a_fixed_window_aligned_to_the_unit() {
    assert_eq!(limit("edge", &[("remote_address", "192.0.2.1")]), fixed(10, 1));
    assert_eq!(
        limit("messaging", &[("to_number", "2061111111")]),
        fixed(100, 86_400)
    );
}

#[test]
fn units_are_read_in_any_case_including_upstreams_newer_ones() {
    assert_eq!(limit("edge", &[("remote_address", "203.0.113.50")]), fixed(1, 1)); // SECOND
    assert_eq!(
        limit("catalog", &[("tenant", "other"), ("user", "u1")]),
        fixed(3, 30 * 86_400)
    ); // Month
    assert_eq!(
        limit("catalog", &[("tenant", "acme"), ("user", "u1"), ("path", "/")]),
        fixed(1000, 7 * 86_400)
    );
}

#[test]
fn an_exact_value_beats_the_value_less_default() {
    // README example 3: a default per address, and one address set apart.
    assert_eq!(limit("edge", &[("remote_address", "192.0.2.1")]), fixed(10, 1));
    assert_eq!(limit("edge", &[("remote_address", "203.0.113.50")]), fixed(1, 1));
    assert_eq!(limit("edge", &[("remote_address", "10.1.1.1")]), "unlimited");
}

#[test]
fn nested_descriptors_apply_at_the_depth_of_the_request() {
    // README example 2.
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    assert_eq!(limit("messaging", &marketing), fixed(5, 86_400));
    assert_eq!(
        limit("messaging", &[("to_number", "2061111111")]),
        fixed(100, 86_400)
    );
    // A placeholder without a rate limit limits nothing.
    assert_eq!(limit("messaging", &[("message_type", "marketing")]), "none");
    assert_eq!(
        limit(
            "messaging",
            &[("message_type", "transactional"), ("to_number", "1")]
        ),
        "none"
    );
}

#[test]
fn a_request_deeper_than_the_tree_matches_nothing() {
    // README example 4: the top-level limit does not apply to a two-entry descriptor.
    assert_eq!(
        limit("messaging", &[("to_number", "1"), ("message_type", "marketing")]),
        "none"
    );
    assert_eq!(
        limit("edge", &[("remote_address", "192.0.2.1"), ("path", "/")]),
        "none"
    );
    assert_eq!(
        limit("catalog", &[("tenant", "acme"), ("path", "/files/a"), ("x", "y")]),
        "none"
    );
}

#[test]
fn the_order_of_entries_matters() {
    assert_eq!(
        limit("messaging", &[("to_number", "1"), ("message_type", "marketing")]),
        "none"
    );
}

#[test]
fn wildcards_match_by_prefix_in_file_order_after_exact_values() {
    // README example 9, and upstream's wildcard tests.
    assert_eq!(limit("catalog", &[("path", "/api/v1/users")]), fixed(20, 60));
    assert_eq!(limit("catalog", &[("path", "/api/v1/")]), fixed(20, 60));
    assert_eq!(limit("catalog", &[("path", "/api/v2/users")]), fixed(40, 60));
    // The exact value wins over both wildcards that also match it.
    assert_eq!(limit("catalog", &[("path", "/api/v1/health")]), "unlimited");
    // No wildcard matches: the value-less default does.
    assert_eq!(limit("catalog", &[("path", "/other")]), fixed(60, 60));
    assert_eq!(limit("catalog", &[("path", "")]), fixed(60, 60));
}

#[test]
fn wildcards_are_tried_in_file_order_not_by_length() {
    let limits = tollgate_config::parse(
        "order.yaml",
        "domain: d\ndescriptors:\n  - key: p\n    value: /a*\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: p\n    value: /a/b*\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    )
    .unwrap();
    let resolved = limits.resolve("d", &entries(&[("p", "/a/b/c")])).unwrap();
    assert_eq!(resolved.policy().unwrap().max_cost(), 1);
}

#[test]
fn a_star_inside_a_value_matches_any_run_of_characters() {
    // Upstream's `midWild` case: `star*b` needs the prefix `star` and the suffix `b`.
    assert_eq!(limit("catalog", &[("path", "star*b")]), fixed(7, 60));
    assert_eq!(limit("catalog", &[("path", "starab")]), fixed(7, 60));
    assert_eq!(
        limit("catalog", &[("path", "starb")]),
        fixed(7, 60),
        "a star may match nothing"
    );
    assert_eq!(
        limit("catalog", &[("path", "stara")]),
        fixed(60, 60),
        "no suffix: the default"
    );
}

#[test]
fn wildcards_work_in_nested_levels() {
    // Upstream fixed this in its pull request 420; before, only the top level had wildcards.
    assert_eq!(
        limit("catalog", &[("tenant", "acme"), ("path", "/files/a.pdf")]),
        fixed(100, 3600)
    );
    assert_eq!(
        limit("catalog", &[("tenant", "acme"), ("path", "/search/q")]),
        fixed(30, 3600)
    );
    assert_eq!(
        limit("catalog", &[("tenant", "acme"), ("path", "/elsewhere")]),
        "none"
    );
}

#[test]
fn there_is_no_backtracking_once_a_value_matched() {
    // `tenant: acme` matched exactly, so the value-less `tenant` (whose `user` has a limit) is
    // not tried when `acme` has no limit for the rest of the request.
    assert_eq!(
        limit("catalog", &[("tenant", "other"), ("user", "u1")]),
        fixed(3, 30 * 86_400)
    );
    assert_eq!(limit("catalog", &[("tenant", "acme"), ("user", "u1")]), "none");
}

#[test]
fn unknown_domains_keys_and_empty_descriptors_match_nothing() {
    assert_eq!(limit("nowhere", &[("remote_address", "192.0.2.1")]), "none");
    assert_eq!(limit("edge", &[("user_agent", "curl")]), "none");
    assert_eq!(limit("edge", &[]), "none");
    // Domains and keys are case-sensitive.
    assert_eq!(limit("Edge", &[("remote_address", "192.0.2.1")]), "none");
    assert_eq!(limit("edge", &[("Remote_Address", "192.0.2.1")]), "none");
}

#[test]
fn keys_and_values_are_never_joined() {
    // Upstream stores both as `a_b` and calls them duplicates; they are different descriptors.
    assert_eq!(limit("users", &[("a_b", "anything")]), fixed(1, 1));
    assert_eq!(limit("users", &[("a", "b")]), fixed(2, 1));
    assert_eq!(limit("users", &[("a", "c")]), "none");
}

#[test]
fn scalar_values_and_empty_values_read_as_upstream() {
    assert_eq!(limit("users", &[("number", "42")]), fixed(42, 1));
    // `value: ""` is no value: it matches any.
    assert_eq!(limit("users", &[("empty_value", "zzz")]), fixed(3, 1));
}

#[test]
fn unlimited_has_no_policy() {
    // README example 5.
    let resolved = resolve("edge", &[("remote_address", "10.1.1.1")]).unwrap();
    assert!(resolved.is_unlimited());
    assert!(resolved.policy().is_none());
    assert!(!resolved.shadow_mode());
}

#[test]
fn shadow_mode_is_per_descriptor() {
    // README example 6.
    let bob = resolve("users", &[("service", "auth"), ("user", "bob")]).unwrap();
    assert!(bob.shadow_mode());
    assert_eq!(bob.policy().unwrap().max_cost(), 10);
    let carol = resolve("users", &[("service", "auth"), ("user", "carol")]).unwrap();
    assert!(!carol.shadow_mode());
    assert_eq!(carol.policy().unwrap().max_cost(), 20);
}

#[test]
fn replaces_drops_the_named_limit_when_both_match_one_request() {
    // README example 7.
    let reads = entries(&[("group", "readers"), ("user", "alice")]);
    let writes = entries(&[("group", "writers"), ("user", "alice")]);
    let limits = limits();

    let alone = limits.resolve("users", &reads).unwrap();
    assert_eq!(alone.name(), Some("alice_reads"));
    assert_eq!(alone.policy().unwrap().max_cost(), 5);

    let mut both = vec![limits.resolve("users", &reads), limits.resolve("users", &writes)];
    assert_eq!(both[1].as_ref().unwrap().replaces(), ["alice_reads"]);
    apply_replaces(&mut both);
    assert!(both[0].is_none(), "alice_reads is replaced");
    assert_eq!(both[1].as_ref().unwrap().policy().unwrap().max_cost(), 10);

    // Alone, each applies.
    let mut reads_only = vec![limits.resolve("users", &reads)];
    apply_replaces(&mut reads_only);
    assert!(reads_only[0].is_some());
}

#[test]
fn an_unlimited_rate_limit_also_replaces() {
    let limits = limits();
    let mut resolved = vec![
        limits.resolve("users", &entries(&[("beta", "x")])),
        limits.resolve("users", &entries(&[("group", "readers"), ("user", "alice")])),
    ];
    apply_replaces(&mut resolved);
    assert!(resolved[0].as_ref().unwrap().is_unlimited());
    assert_eq!(resolved[0].as_ref().unwrap().name(), Some("beta_unlimited"));
    assert!(resolved[1].is_none());
}

#[test]
fn stats_keys_follow_upstream() {
    let stats = |domain: &str, pairs: &[(&str, &str)]| resolve(domain, pairs).unwrap().stats_key().to_owned();
    // Upstream's name of the matched descriptor.
    assert_eq!(
        stats(
            "messaging",
            &[("message_type", "marketing"), ("to_number", "2061111111")]
        ),
        "messaging.message_type_marketing.to_number"
    );
    assert_eq!(stats("catalog", &[("path", "/api/v2/x")]), "catalog.path_/api/*");
    // README example 8: `detailed_metric` shows the request's values.
    let search = resolve("catalog", &[("tenant", "acme"), ("path", "/search/q")]).unwrap();
    assert!(search.detailed_metric());
    assert_eq!(search.stats_key(), "catalog.tenant_acme.path_/search/q");
    // `value_to_metric` shows the value of its own level only.
    assert_eq!(
        stats("catalog", &[("tenant", "acme"), ("user", "u1"), ("path", "/p")]),
        "catalog.tenant_acme.user_u1.path"
    );
    // With `share_threshold`, the values share a counter and are reported as the pattern,
    // even with `value_to_metric` (upstream's code and tests; its README's "prefix" is older).
    assert_eq!(
        stats("catalog", &[("tenant", "acme"), ("path", "/files/a.pdf")]),
        "catalog.tenant_acme.path_/files/*"
    );
}

#[test]
fn extensions_choose_the_algorithm_window_burst_penalty_and_failure_mode() {
    assert_eq!(
        limit("catalog", &[("api_key", "k1")]),
        "gcra 10 per 1s, burst 25; block_for 60s; local (limit / 3)"
    );
    assert_eq!(
        limit("catalog", &[("upload", "u")]),
        "token_bucket 6, refill 6 per 60s; local (limit / 1)"
    );
    assert_eq!(
        limit("catalog", &[("webhook", "w")]),
        "leaky_bucket 4, leak 2 per 1s; fail_closed"
    );
    assert_eq!(
        limit("catalog", &[("report", "r")]),
        "sliding_window 9 per 5400s; fail_open"
    );
    assert_eq!(
        limit("catalog", &[("login", "l")]),
        format!("sliding_log 50 per {}s; local (limit / 1)", 365 * 86_400)
    );
}

#[test]
fn each_value_of_a_default_or_wildcard_has_its_own_counter() {
    let a = resolve("edge", &[("remote_address", "192.0.2.1")]).unwrap();
    let b = resolve("edge", &[("remote_address", "192.0.2.2")]).unwrap();
    assert_eq!(a.policy(), b.policy());
    assert_ne!(a.key(), b.key());
    assert_eq!(a.key(), "4:edge,14:remote_address,1:?,9:192.0.2.1,");
    let v1 = resolve("catalog", &[("path", "/api/v1/a")]).unwrap();
    let v2 = resolve("catalog", &[("path", "/api/v1/b")]).unwrap();
    assert_ne!(v1.key(), v2.key());
    assert_eq!(v1.key(), "7:catalog,4:path,10:*/api/v1/*,9:/api/v1/a,");
}

#[test]
fn share_threshold_gives_all_matching_values_one_counter() {
    let a = resolve("catalog", &[("tenant", "acme"), ("path", "/files/a.pdf")]).unwrap();
    let b = resolve("catalog", &[("tenant", "acme"), ("path", "/files/b.csv")]).unwrap();
    assert_eq!(a.key(), b.key());
    assert_eq!(a.key(), "7:catalog,6:tenant,5:=acme,4:path,9:~/files/*,");
}

#[test]
fn policy_names_follow_upstreams_descriptor_names() {
    let name = |domain: &str, pairs: &[(&str, &str)]| {
        resolve(domain, pairs)
            .unwrap()
            .policy()
            .unwrap()
            .name()
            .to_owned()
    };
    assert_eq!(
        name("edge", &[("remote_address", "192.0.2.1")]),
        "envoy:edge.remote_address"
    );
    assert_eq!(
        name("edge", &[("remote_address", "203.0.113.50")]),
        "envoy:edge.remote_address_203.0.113.50"
    );
    assert_eq!(
        name("messaging", &[("message_type", "marketing"), ("to_number", "1")]),
        "envoy:messaging.message_type_marketing.to_number"
    );
}

#[test]
fn long_descriptor_paths_get_short_stable_policy_names() {
    let deep = "x".repeat(100);
    let yaml = format!(
        "domain: {deep}\ndescriptors:\n  - key: {deep}\n    value: {deep}\n    descriptors:\n      - key: {deep}\n        rate_limit: {{unit: second, requests_per_unit: 1}}\n"
    );
    let request = entries(&[(&deep, &deep), (&deep, "v")]);
    let first = tollgate_config::parse("deep.yaml", &yaml).unwrap();
    let again = tollgate_config::parse("deep.yaml", &yaml).unwrap();
    let name = first
        .resolve(&deep, &request)
        .unwrap()
        .policy()
        .unwrap()
        .name()
        .to_owned();
    assert_eq!(name.len(), 255);
    assert_eq!(
        name,
        again.resolve(&deep, &request).unwrap().policy().unwrap().name()
    );
}

#[test]
fn retuning_a_limit_keeps_its_policy_name_and_keys() {
    let before = tollgate_config::parse(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
    )
    .unwrap();
    let after = tollgate_config::parse(
        "a.yaml",
        "domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: day, requests_per_unit: 1}\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 99}\n",
    )
    .unwrap();
    let request = entries(&[("k", "v")]);
    let (before, after) = (
        before.resolve("d", &request).unwrap(),
        after.resolve("d", &request).unwrap(),
    );
    assert_eq!(before.policy().unwrap().name(), after.policy().unwrap().name());
    assert_eq!(before.key(), after.key());
    assert_ne!(
        before.policy().unwrap().max_cost(),
        after.policy().unwrap().max_cost()
    );
}

#[test]
fn resolved_limits_are_checked_in_a_store() {
    let clock = tollgate::ManualClock::new(0);
    let store = tollgate::MemoryStore::builder().clock(clock).build();
    let marketing = |number: &str| {
        resolve(
            "messaging",
            &[("message_type", "marketing"), ("to_number", number)],
        )
        .unwrap()
    };
    let first = marketing("2061111111");
    for _ in 0..5 {
        assert!(
            store
                .check(first.policy().unwrap(), first.key(), 1)
                .unwrap()
                .allowed
        );
    }
    assert!(
        !store
            .check(first.policy().unwrap(), first.key(), 1)
            .unwrap()
            .allowed
    );
    // Another number has its own five.
    let second = marketing("2062222222");
    assert!(
        store
            .check(second.policy().unwrap(), second.key(), 1)
            .unwrap()
            .allowed
    );
    // The top-level limit on the same number is a different counter.
    let any = resolve("messaging", &[("to_number", "2061111111")]).unwrap();
    assert!(store.check(any.policy().unwrap(), any.key(), 1).unwrap().allowed);
}

/// A tree with a default, an exact value and a wildcard at two levels, for the key properties.
fn key_tree() -> &'static Limits {
    static LIMITS: OnceLock<Limits> = OnceLock::new();
    LIMITS.get_or_init(|| {
        let level = |indent: &str, nested: &str| {
            ["", "    value: \"1\"\n", "    value: \"1*\"\n"]
                .iter()
                .map(|value| {
                    let value = value.replace("    ", &format!("{indent}    "));
                    format!(
                        "{indent}  - key: k\n{value}{indent}    rate_limit: {{unit: second, requests_per_unit: 1}}\n{nested}"
                    )
                })
                .collect::<String>()
        };
        let inner = level("      ", "");
        let outer = level("", &format!("    descriptors:\n{inner}"));
        tollgate_config::parse("keys.yaml", &format!("domain: d\ndescriptors:\n{outer}")).unwrap()
    })
}

proptest! {
    #[test]
    fn different_requests_never_share_a_key(
        a in prop::collection::vec("[k1:,=?*~]{0,4}", 1..3),
        b in prop::collection::vec("[k1:,=?*~]{0,4}", 1..3),
    ) {
        let request = |values: &[String]| values.iter().map(|v| ("k".to_owned(), v.clone())).collect::<Vec<_>>();
        let (ra, rb) = (request(&a), request(&b));
        if let (Some(x), Some(y)) = (key_tree().resolve("d", &ra), key_tree().resolve("d", &rb)) {
            prop_assert_eq!(x.key() == y.key(), a == b, "{:?} {:?} -> {} {}", a, b, x.key(), y.key());
        }
    }

    #[test]
    fn resolving_never_panics(domain in "\\PC{0,5}", pairs in prop::collection::vec(("\\PC{0,6}", "\\PC{0,6}"), 0..4)) {
        let _ = limits().resolve(&domain, &pairs);
        let _ = key_tree().resolve(&domain, &pairs);
    }
}
