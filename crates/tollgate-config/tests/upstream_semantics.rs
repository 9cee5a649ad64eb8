//! envoyproxy/ratelimit's config semantics, case by case, on configs of our own: wildcards
//! anywhere in a value and their precedence, `share_threshold`, `quota_mode`, `metadata`, and the
//! stats keys of `detailed_metric` and `value_to_metric`. Each case states upstream's answer
//! (from its README, its `config_impl.go` and its config tests).

use tollgate_config::{Limits, MetadataValue, Resolved};

fn parse(yaml: &str) -> Limits {
    tollgate_config::parse("case.yaml", yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn resolve<'a>(limits: &'a Limits, pairs: &[(&str, &str)]) -> Option<Resolved<'a>> {
    limits.resolve("d", &entries(pairs))
}

/// The limit's requests, or 0 for none.
fn max(limits: &Limits, pairs: &[(&str, &str)]) -> u64 {
    resolve(limits, pairs)
        .and_then(|r| r.policy().map(tollgate::Policy::max_cost))
        .unwrap_or(0)
}

fn stats(limits: &Limits, pairs: &[(&str, &str)]) -> String {
    resolve(limits, pairs)
        .expect("a rate limit applies")
        .stats_key()
        .to_owned()
}

const PRECEDENCE: &str = r#"
domain: d
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: "*/admin"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /v1/admin
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: a*b*c
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

#[test]
fn an_exact_value_beats_every_wildcard() {
    let limits = parse(PRECEDENCE);
    // Upstream: `path_/v1/admin` is in the map, found before any wildcard is tried.
    assert_eq!(max(&limits, &[("path", "/v1/admin")]), 3);
}

#[test]
fn wildcards_are_tried_in_file_order_before_the_key_alone() {
    let limits = parse(PRECEDENCE);
    // Both `/v1/*` and `*/admin` match; the first in the file wins.
    assert_eq!(max(&limits, &[("path", "/v1/x/admin")]), 1);
    assert_eq!(max(&limits, &[("path", "/v2/admin")]), 2);
    assert_eq!(max(&limits, &[("path", "abxc")]), 5);
    // No wildcard matches: the descriptor without a value.
    assert_eq!(max(&limits, &[("path", "acb")]), 4);
    assert_eq!(max(&limits, &[("path", "")]), 4);
}

#[test]
fn a_value_spelled_like_a_pattern_matches_that_pattern_first() {
    let limits = parse(PRECEDENCE);
    // Upstream finds `path_*/admin` in its exact map before trying `/v1/*` in order.
    assert_eq!(max(&limits, &[("path", "*/admin")]), 2);
}

#[test]
fn wildcards_in_the_middle_and_several_times_match_at_any_depth() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: tenant
    value: t*prod
    descriptors:
      - key: route
        value: /api/*/resource/*/action
        rate_limit: {unit: minute, requests_per_unit: 20}
"#,
    );
    let at = |tenant: &str, route: &str| max(&limits, &[("tenant", tenant), ("route", route)]);
    assert_eq!(at("t1prod", "/api/v1/resource/123/action"), 20);
    assert_eq!(
        at("tprod", "/api//resource//action"),
        20,
        "each star may match nothing"
    );
    assert_eq!(at("t1prod", "/api/v1/resource/123/other"), 0);
    assert_eq!(at("t1dev", "/api/v1/resource/123/action"), 0);
    assert_eq!(at("t1prod", "/api/v1/action"), 0, "a piece is missing");
}

#[test]
fn share_threshold_on_a_middle_wildcard_gives_one_counter_and_the_pattern_as_stats_key() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: midpath
    value: /api*v1
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    rate_limit: {unit: minute, requests_per_unit: 50}
"#,
    );
    let a = resolve(&limits, &[("midpath", "/api/users/v1")]).unwrap();
    let b = resolve(&limits, &[("midpath", "/apiv1")]).unwrap();
    assert_eq!(a.key(), b.key(), "one counter for every matching value");
    // share_threshold takes priority over value_to_metric: the pattern, star included.
    assert_eq!(a.stats_key(), "d.midpath_/api*v1");
    assert!(resolve(&limits, &[("midpath", "/api/v2")]).is_none());
    // Without share_threshold each value has its own counter, reported under the pattern.
    let x = resolve(&limits, &[("multiroute", "svcAepBrpc")]).unwrap();
    let y = resolve(&limits, &[("multiroute", "svcXepYrpc")]).unwrap();
    assert_ne!(x.key(), y.key());
    assert_eq!(x.stats_key(), "d.multiroute_svc*ep*rpc");
    assert_eq!(x.stats_key(), y.stats_key());
}

#[test]
fn share_threshold_works_at_any_level_whether_or_not_the_limit_is_there() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit: {unit: minute, requests_per_unit: 150}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 120}
"#,
    );
    let a = resolve(
        &limits,
        &[("user", "user/alice"), ("resource", "res/a"), ("action", "read")],
    )
    .unwrap();
    let b = resolve(
        &limits,
        &[("user", "user/bob"), ("resource", "res/b"), ("action", "read")],
    )
    .unwrap();
    assert_eq!(a.key(), b.key());
    assert_eq!(a.stats_key(), "d.user_user/*.resource_res/*.action");
    // The parent shares, the child wildcard does not: distinct counters per file.
    let p = resolve(
        &limits,
        &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
    )
    .unwrap();
    let q = resolve(
        &limits,
        &[("path", "path/bar"), ("file", "file/doc2"), ("type", "pdf")],
    )
    .unwrap();
    assert_ne!(p.key(), q.key());
    assert_eq!(p.stats_key(), "d.path_path/*.file_file/*.type");
}

#[test]
fn value_to_metric_shows_the_request_value_on_its_own_level() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k1
    value: A
    descriptors:
      - key: k2
        rate_limit: {unit: minute, requests_per_unit: 1}
"#,
    );
    // README example 10.
    assert_eq!(
        stats(
            &limits,
            &[("route", "api"), ("http_method", "GET"), ("subject_id", "123")]
        ),
        "d.route_api.http_method_GET.subject_id"
    );
    // With a wildcard, the whole request value, not the pattern.
    assert_eq!(
        stats(
            &limits,
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents")
            ]
        ),
        "d.user_alice.action_readfile.resource"
    );
    // A wildcard level without the flag keeps its pattern.
    assert_eq!(
        stats(&limits, &[("wild", "foo1"), ("other", "bar"), ("limit", "X")]),
        "d.wild_foo*.other_bar.limit"
    );
    // No flag anywhere: upstream's descriptor name.
    assert_eq!(stats(&limits, &[("k1", "A"), ("k2", "B")]), "d.k1_A.k2");
}

#[test]
fn detailed_metric_shows_every_value_and_wins_over_value_to_metric() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    rate_limit: {unit: minute, requests_per_unit: 5000}
    detailed_metric: true
    descriptors:
      - key: key_3
        value: requested
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: deeper
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
"#,
    );
    assert_eq!(stats(&limits, &[("key_1", "v")]), "d.key_1_v");
    // Upstream writes `key_value` even for an empty value.
    assert_eq!(stats(&limits, &[("key_1", "")]), "d.key_1_");
    assert_eq!(
        stats(&limits, &[("key_2", "x"), ("key_3", "requested")]),
        "d.key_2_x.key_3_requested"
    );
    // The flag is the matched descriptor's: the parent without it reports its name.
    assert_eq!(stats(&limits, &[("plain", "p")]), "d.plain");
    assert_eq!(
        stats(&limits, &[("plain", "p"), ("deeper", "q")]),
        "d.plain_p.deeper_q"
    );
    // A level sharing its counter shows the pattern even with detailed_metric.
    assert_eq!(
        stats(&limits, &[("service", "svc/user"), ("endpoint", "get")]),
        "d.service_svc/*.endpoint_get"
    );
}

#[test]
fn quota_mode_and_metadata_are_kept_for_the_answer() {
    let limits = parse(
        r#"
domain: d
descriptors:
  - key: service
    value: one
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota: {name: one, weight: 1.5, tags: [a, b], on: true, none: null}
  - key: service
    rate_limit: {unit: minute, requests_per_unit: 2}
"#,
    );
    let one = resolve(&limits, &[("service", "one")]).unwrap();
    assert!(one.quota_mode());
    let metadata = one.metadata().expect("metadata");
    let Some(MetadataValue::Map(inner)) = metadata.get("service_with_quota") else {
        panic!("a map: {metadata:?}")
    };
    assert_eq!(inner.get("name"), Some(&MetadataValue::String("one".into())));
    assert_eq!(inner.get("weight"), Some(&MetadataValue::Number(1.5)));
    assert_eq!(
        inner.get("tags"),
        Some(&MetadataValue::List(vec![
            MetadataValue::String("a".into()),
            MetadataValue::String("b".into())
        ]))
    );
    assert_eq!(inner.get("on"), Some(&MetadataValue::Bool(true)));
    assert_eq!(inner.get("none"), Some(&MetadataValue::Null));
    let other = resolve(&limits, &[("service", "two")]).unwrap();
    assert!(!other.quota_mode() && other.metadata().is_none());
}

/// A config with every feature of upstream's `examples/ratelimit/config/example.yaml` (replaces
/// with several names, nested descriptors, a deny-all limit, shadow mode, unlimited, detailed
/// metrics, quota mode with metadata), written for these tests.
const EXAMPLE_LIKE: &str = r#"
---
domain: shop
descriptors:
  - key: plan
    value: premium
    rate_limit:
      replaces:
        - name: per_customer
        - name: per_region
      unit: minute
      requests_per_unit: 40
  - key: region
    value: eu
    descriptors:
      - key: customer
        value: acme
        rate_limit:
          replaces:
            - name: per_customer
          unit: minute
          requests_per_unit: 20
      - key: customer
        value: blocked-override
        rate_limit:
          replaces:
            - name: blocked
          unit: minute
          requests_per_unit: 5
      - key: customer
        value: other
        rate_limit:
          name: per_region
          unit: hour
          requests_per_unit: 7
  - key: cart
    rate_limit:
      unit: minute
      requests_per_unit: 6
    descriptors:
      - key: item
        rate_limit:
          unit: minute
          requests_per_unit: 9
      - key: item
        value: gift
        rate_limit:
          name: per_customer
          unit: minute
          requests_per_unit: 1
      - key: item
        value: banned
        rate_limit:
          name: blocked
          unit: minute
          requests_per_unit: 0
      - key: coupon
        value: trial
        shadow_mode: true
        rate_limit:
          unit: minute
          requests_per_unit: 2
      - key: wishlist
        rate_limit:
          unlimited: true
  - key: session
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: health
    rate_limit:
      unlimited: true
  - key: backend
    value: search
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
    metadata:
      backend_with_quota:
        name: "search"
  - key: backend
    value: checkout
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
    metadata:
      backend_with_quota:
        name: "checkout"
"#;

#[test]
fn a_config_with_every_feature_of_upstreams_example_loads_and_resolves() {
    let limits = tollgate_config::parse("example.yaml", EXAMPLE_LIKE).unwrap_or_else(|e| panic!("{e}"));
    let at = |pairs: &[(&str, &str)]| limits.resolve("shop", &entries(pairs));
    let premium = at(&[("plan", "premium")]).unwrap();
    assert_eq!(premium.replaces(), ["per_customer", "per_region"]);
    assert_eq!(
        at(&[("cart", "c1"), ("item", "gift")]).unwrap().name(),
        Some("per_customer")
    );
    assert!(
        at(&[("cart", "c1"), ("item", "banned")])
            .unwrap()
            .deny_all()
            .is_some()
    );
    assert!(at(&[("cart", "c1"), ("coupon", "trial")]).unwrap().shadow_mode());
    assert!(at(&[("cart", "c1"), ("wishlist", "w")]).unwrap().is_unlimited());
    assert_eq!(at(&[("session", "s9")]).unwrap().stats_key(), "shop.session_s9");
    let search = at(&[("backend", "search")]).unwrap();
    assert!(search.quota_mode() && search.metadata().is_some());
    assert_eq!(search.stats_key(), "shop.backend_search");
    assert!(at(&[("health", "h")]).unwrap().is_unlimited());
    assert_eq!(
        at(&[("region", "eu"), ("customer", "other")])
            .unwrap()
            .stats_key(),
        "shop.region_eu.customer_other"
    );
}
