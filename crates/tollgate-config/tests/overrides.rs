//! Runtime override bodies are validated like policies in a file: each error names its field.

use tollgate::{Algorithm, Anchor, Policy, Rate};
use tollgate_config::ours::parse_override;

fn gcra() -> Policy {
    Policy::new("api", Algorithm::gcra(Rate::per_second(10).unwrap(), 10).unwrap()).unwrap()
}

fn message(policy: &Policy, text: &str) -> String {
    parse_override("body", text, policy).unwrap_err().to_string()
}

#[test]
fn each_bad_override_names_its_field() {
    let api = gcra();
    assert_eq!(
        message(&api, r#"{"rate": "100/s"}"#),
        "body: missing field `burst`, gcra takes `rate` and `burst`"
    );
    assert_eq!(
        message(&api, r#"{"rate": "100/s", "burst": 0}"#),
        "body: burst: burst must be at least 1"
    );
    assert_eq!(
        message(&api, r#"{"rate": "fast", "burst": 5}"#),
        "body: rate: expected a rate like \"10/s\", got \"fast\""
    );
    assert_eq!(
        message(&api, r#"{"rate": "1/s", "burst": 5, "ttl": "soon"}"#),
        "body: ttl: expected a duration like \"1m\", got \"soon\""
    );
    let unknown = message(&api, r#"{"rate": "1/s", "burst": 5, "algorithm": "gcra"}"#);
    assert!(
        unknown.starts_with("body: algorithm: unknown field `algorithm`"),
        "{unknown}"
    );
    assert!(message(&api, "[").starts_with("body: "));
}

#[test]
fn a_fixed_window_override_keeps_the_policy_anchor_unless_given() {
    let policy = Policy::new(
        "daily",
        Algorithm::fixed_window(5, std::time::Duration::from_secs(60), Anchor::FirstHit).unwrap(),
    )
    .unwrap();
    let parsed = parse_override("body", "limit: 9\nwindow: 2m\n", &policy).unwrap();
    assert_eq!(
        parsed.algorithm,
        Algorithm::fixed_window(9, std::time::Duration::from_secs(120), Anchor::FirstHit).unwrap()
    );
    assert_eq!(parsed.ttl, None);
    let epoch = parse_override("body", "{limit: 9, window: 2m, anchor: epoch}", &policy).unwrap();
    assert_eq!(
        epoch.algorithm,
        Algorithm::fixed_window(9, std::time::Duration::from_secs(120), Anchor::Epoch).unwrap()
    );
}

#[test]
fn every_override_field_has_a_row_in_the_reference_and_every_row_a_field() {
    let api = gcra();
    let err = message(&api, "{zzz: 1}");
    let (_, expected) = err.split_once("expected ").expect("the refusal names the fields");
    let accepted: std::collections::BTreeSet<&str> = expected.split('`').skip(1).step_by(2).collect();
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md"),
    )
    .unwrap();
    let section = doc
        .split_once("\n## Runtime overrides (admin API body)\n")
        .expect("the section")
        .1
        .split("\n## ")
        .next()
        .unwrap();
    let documented: std::collections::BTreeSet<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with("| field |"))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(field, _)| field))
        .collect();
    assert_eq!(documented, accepted);
}
