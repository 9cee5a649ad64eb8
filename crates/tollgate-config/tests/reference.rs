//! docs/config.md documents every field of both dialects, and nothing else.
//!
//! The list of fields comes from the parser itself: a file with an unknown field at each level
//! is refused with "expected one of ...", naming every field that level accepts. A field added to
//! the parser without a row in the reference, or a row left behind by a removed field, fails here.

use std::collections::BTreeSet;
use std::path::Path;

/// Each level of both dialects: the heading of its section in docs/config.md, and a file with an
/// unknown field `zzz` at that level.
const LEVELS: [(&str, &str); 9] = [
    ("## tollgate's format > ### Top level", "zzz: 1\npolicies: {}\n"),
    (
        "## tollgate's format > ### A policy",
        "policies:\n  a:\n    algorithm: gcra\n    zzz: 1\n",
    ),
    (
        "## tollgate's format > ### Access lists (`access`, at the top or in a policy)",
        "access:\n  zzz: 1\n",
    ),
    (
        "## tollgate's format > ### A list (`access.allow`, `access.deny`)",
        "access:\n  deny:\n    zzz: 1\n",
    ),
    (
        "## tollgate's format > ### A route",
        "policies: {}\nroutes:\n  - zzz: 1\n",
    ),
    (
        "## envoyproxy/ratelimit's format > ### Top level",
        "domain: d\nzzz: 1\n",
    ),
    (
        "## envoyproxy/ratelimit's format > ### A descriptor",
        "domain: d\ndescriptors:\n  - key: k\n    zzz: 1\n",
    ),
    (
        "## envoyproxy/ratelimit's format > ### A rate limit",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      zzz: 1\n",
    ),
    (
        "## envoyproxy/ratelimit's format > ### An entry of `replaces`",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - zzz: 1\n",
    ),
];

/// The fields the parser accepts at one level, read from its refusal of `zzz`.
fn accepted_fields(yaml: &str) -> BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probe.yaml");
    std::fs::write(&file, yaml).unwrap();
    let err = tollgate_config::load(&file)
        .expect_err("an unknown field is refused")
        .to_string();
    let (_, expected) = err
        .split_once("expected ")
        .unwrap_or_else(|| panic!("the refusal names the accepted fields: {err}"));
    let fields: BTreeSet<String> = expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    assert!(!fields.is_empty(), "no fields in: {err}");
    fields
}

/// The first column of the section's field table (the table whose header starts `| field |`) in
/// the section under `heading` (`## part > ### section`).
fn documented_fields(doc: &str, heading: &str) -> BTreeSet<String> {
    let (part, section) = heading.split_once(" > ").unwrap();
    let after_part = doc
        .split_once(&format!("\n{part}\n"))
        .unwrap_or_else(|| panic!("no {part}"))
        .1;
    let after_part = after_part.split("\n## ").next().unwrap();
    let start = after_part
        .lines()
        .position(|line| line.starts_with(section))
        .unwrap_or_else(|| panic!("no {section} under {part}"));
    after_part
        .lines()
        .skip(start + 1)
        .take_while(|line| !line.starts_with('#'))
        .skip_while(|line| !line.starts_with("| field |"))
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_owned())
        .collect()
}

#[test]
fn every_field_of_every_level_has_a_row_in_the_reference_and_every_row_a_field() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap();
    for (heading, probe) in LEVELS {
        let accepted = accepted_fields(probe);
        let documented = documented_fields(&doc, heading);
        let missing: Vec<_> = accepted.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&accepted).collect();
        assert!(
            missing.is_empty(),
            "docs/config.md, {heading}: fields without a row: {missing:?}"
        );
        assert!(
            stale.is_empty(),
            "docs/config.md, {heading}: rows for no field: {stale:?}"
        );
    }
}
