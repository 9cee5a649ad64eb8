//! Descriptor policy names and counter keys, which must never change between builds (they name
//! counters kept in Redis).

use tollgate::bounds::MAX_NAME_LEN;

use super::descriptors::{fnv1a64, push_part, push_tagged};
use super::*;

#[test]
fn limits_can_be_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Limits>();
    shared::<Resolved<'static>>();
}

#[test]
fn short_descriptor_names_are_kept_whole() {
    assert_eq!(descriptor_policy_name("d.k_v"), "envoy:d.k_v");
    let exactly = "x".repeat(MAX_NAME_LEN - ENVOY_POLICY_PREFIX.len());
    assert_eq!(descriptor_policy_name(&exactly).len(), MAX_NAME_LEN);
    assert!(descriptor_policy_name(&exactly).ends_with('x'));
}

#[test]
fn long_descriptor_names_are_cut_and_hashed_stably() {
    let long = "d.".to_owned() + &"k_v.".repeat(100);
    let name = descriptor_policy_name(&long);
    assert_eq!(name.len(), MAX_NAME_LEN);
    assert!(name.starts_with("envoy:d.k_v."));
    assert_eq!(name, descriptor_policy_name(&long), "same input, same name");
    let other = "d.".to_owned() + &"k_v.".repeat(101);
    assert_ne!(
        name,
        descriptor_policy_name(&other),
        "the hash tells apart a shared prefix"
    );
    // A fixed value, so a change of hash (which would orphan counters in Redis) is caught.
    assert_eq!(fnv1a64(b"envoy:d.k"), 0x2ed7_324c_bd77_7079);
}

#[test]
fn long_multibyte_names_are_cut_on_a_char_boundary() {
    let long = "é".repeat(300);
    let name = descriptor_policy_name(&long);
    assert!(name.len() <= MAX_NAME_LEN);
    assert!(
        tollgate::Policy::new(
            name,
            tollgate::Algorithm::sliding_log(1, std::time::Duration::from_secs(1)).unwrap()
        )
        .is_ok()
    );
}

#[test]
fn parts_are_length_prefixed_in_bytes() {
    let mut out = String::new();
    push_part(&mut out, "a,b");
    push_part(&mut out, "");
    push_part(&mut out, "é");
    push_tagged(&mut out, '=', "v");
    assert_eq!(out, "3:a,b,0:,2:é,2:=v,");
}
