//! The allow and deny lists' tests: entries, lookups of every kind against a plain scan,
//! entries added and removed one at a time, and IPv4-mapped addresses.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::lists::parse_ip;
use super::*;

#[test]
fn keys_with_a_port_or_brackets_are_read_as_their_address() {
    let v4: IpAddr = "203.0.113.9".parse().unwrap();
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    for (key, ip) in [
        ("203.0.113.9", Some(v4)),
        ("203.0.113.9:443", Some(v4)),
        ("::ffff:203.0.113.9", Some(v4)),
        ("[::ffff:203.0.113.9]:80", Some(v4)),
        ("2001:db8::1", Some(v6)),
        ("[2001:db8::1]", Some(v6)),
        ("[2001:db8::1]:443", Some(v6)),
        ("203.0.113.9:", None),
        ("[203.0.113.9", None),
        ("user:203.0.113.9", None),
    ] {
        assert_eq!(parse_ip(key.as_bytes()), ip, "{key}");
    }
}

fn entry(policy: Option<&str>, list: Listed, kind: EntryKind, value: &str) -> AccessEntry {
    AccessEntry::new(policy, list, kind, value).unwrap()
}

#[test]
fn cidr_ranges_match_their_addresses_only() {
    let lists = AccessLists::new([
        entry(None, Listed::Deny, EntryKind::Cidr, "203.0.113.0/24"),
        entry(None, Listed::Deny, EntryKind::Cidr, "2001:db8:1::/48"),
    ]);
    let denied = |key: &str| lists.lookup("p", key.as_bytes()).is_some();
    assert!(denied("203.0.113.0") && denied("203.0.113.255"));
    assert!(!denied("203.0.112.255") && !denied("203.0.114.0"));
    assert!(denied("2001:db8:1::7") && denied("2001:db8:1:ffff::1"));
    assert!(!denied("2001:db8:2::1"));
    assert!(
        denied("::ffff:203.0.113.9"),
        "an IPv4-mapped address is its IPv4 address"
    );
    assert!(!denied("203.0.113.9x") && !denied("user-203.0.113.9"));
}

#[test]
fn nested_ranges_and_prefixes_keep_matching() {
    let lists = AccessLists::new([
        entry(None, Listed::Deny, EntryKind::Cidr, "10.0.0.0/8"),
        entry(None, Listed::Deny, EntryKind::Cidr, "10.1.2.0/24"),
        entry(None, Listed::Deny, EntryKind::Cidr, "10.200.0.0/16"),
        entry(None, Listed::Deny, EntryKind::Prefix, "a"),
        entry(None, Listed::Deny, EntryKind::Prefix, "ab1"),
        entry(None, Listed::Deny, EntryKind::Prefix, "zz"),
    ]);
    let found = |key: &str| lists.lookup("p", key.as_bytes()).map(|e| e.value().to_owned());
    assert_eq!(found("10.1.2.3").as_deref(), Some("10.0.0.0/8"));
    assert_eq!(found("10.255.0.1").as_deref(), Some("10.0.0.0/8"));
    assert_eq!(
        found("ab2").as_deref(),
        Some("a"),
        "not only the predecessor `ab1`"
    );
    assert_eq!(found("zzz").as_deref(), Some("zz"));
    assert_eq!(found("z"), None);
    assert_eq!(found("b"), None);
}

#[test]
fn deny_wins_over_allow_in_any_scope() {
    let lists = AccessLists::new([
        entry(Some("api"), Listed::Allow, EntryKind::Key, "office"),
        entry(None, Listed::Deny, EntryKind::Prefix, "off"),
        entry(None, Listed::Allow, EntryKind::Key, "partner"),
        entry(Some("api"), Listed::Deny, EntryKind::Key, "partner"),
    ]);
    let list = |policy: &str, key: &str| lists.lookup(policy, key.as_bytes()).map(|e| e.list());
    assert_eq!(list("api", "office"), Some(Listed::Deny));
    assert_eq!(list("api", "partner"), Some(Listed::Deny));
    assert_eq!(list("login", "partner"), Some(Listed::Allow));
}

#[test]
fn bad_values_are_refused_with_a_reason() {
    let err = |kind, value: &str| {
        AccessEntry::new(None, Listed::Deny, kind, value)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(err(EntryKind::Key, ""), "the value must not be empty");
    assert_eq!(
        err(EntryKind::Cidr, "203.0.113.0/33"),
        "expected an IP address or a CIDR range like 203.0.113.0/24 or 2001:db8::/32, got \"203.0.113.0/33\""
    );
    assert!(err(EntryKind::Cidr, "203.0.113.0/+8").starts_with("expected an IP"));
    assert!(err(EntryKind::Cidr, "example.com").starts_with("expected an IP"));
    assert_eq!(
        err(EntryKind::Cidr, "2001:db8::1/32"),
        "\"2001:db8::1/32\" has bits set after the /32; the range is 2001:db8::/32"
    );
    assert!(AccessEntry::new(Some(""), Listed::Deny, EntryKind::Key, "k").is_err());
    assert_eq!(
        AccessEntry::decode("deny:key:99:x").unwrap_err(),
        AccessError::BadEncoding("deny:key:99:x".into())
    );
    assert!(AccessEntry::decode("maybe:key:0:x").is_err());
}

#[test]
fn a_zero_length_range_matches_everything_of_its_family() {
    let lists = AccessLists::new([entry(None, Listed::Allow, EntryKind::Cidr, "0.0.0.0/0")]);
    assert!(lists.lookup("p", b"198.51.100.1").is_some());
    assert!(lists.lookup("p", b"2001:db8::1").is_none());
}

proptest! {
    /// The compiled lookup agrees with checking every entry one by one.
    #[test]
    fn lookup_agrees_with_a_scan(
        prefixes in proptest::collection::vec("[ab]{1,4}", 0..12),
        nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 0..12),
        keys in proptest::collection::vec("[ab]{0,6}", 1..20),
        addresses in proptest::collection::vec(any::<u32>(), 1..20),
    ) {
        let mut entries = Vec::new();
        for p in &prefixes {
            entries.push(entry(None, Listed::Deny, EntryKind::Prefix, p));
        }
        for (bits, len) in &nets {
            let net = crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(*bits)), *len);
            entries.push(entry(None, Listed::Deny, EntryKind::Cidr, &format!("{net}/{len}")));
        }
        let lists = AccessLists::new(entries);
        for key in keys.iter().filter(|k| !k.is_empty()) {
            let scan = prefixes.iter().any(|p| key.starts_with(p.as_str()));
            prop_assert_eq!(lists.lookup("p", key.as_bytes()).is_some(), scan, "{}", key);
        }
        for address in addresses {
            let block = |bits: u32, len: u8| crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(bits)), len);
            let scan = nets.iter().any(|&(bits, len)| block(address, len) == block(bits, len));
            let text = Ipv4Addr::from(address).to_string();
            prop_assert_eq!(lists.lookup("p", text.as_bytes()).is_some(), scan, "{}", text);
        }
    }
}

mod changes {
    use super::*;

    fn entry(kind: EntryKind, value: &str) -> AccessEntry {
        AccessEntry::new(None, Listed::Deny, kind, value).unwrap()
    }

    #[test]
    fn removing_an_outer_entry_brings_back_what_it_covered() {
        let mut lists = AccessLists::default();
        for (kind, value) in [
            (EntryKind::Prefix, "ab"),
            (EntryKind::Prefix, "abc"),
            (EntryKind::Prefix, "abd"),
            (EntryKind::Prefix, "a"),
            (EntryKind::Cidr, "10.1.0.0/16"),
            (EntryKind::Cidr, "10.1.2.0/24"),
            (EntryKind::Cidr, "10.0.0.0/8"),
        ] {
            assert!(lists.insert(entry(kind, value)));
        }
        assert!(!lists.insert(entry(EntryKind::Prefix, "a")), "once");
        let found =
            |lists: &AccessLists, key: &str| lists.lookup("p", key.as_bytes()).map(|e| e.value().to_owned());
        assert_eq!(found(&lists, "abcd").as_deref(), Some("a"));
        assert_eq!(found(&lists, "10.1.2.3").as_deref(), Some("10.0.0.0/8"));
        assert!(lists.remove(&entry(EntryKind::Prefix, "a")));
        assert!(lists.remove(&entry(EntryKind::Cidr, "10.0.0.0/8")));
        assert!(!lists.remove(&entry(EntryKind::Cidr, "10.0.0.0/8")));
        assert_eq!(found(&lists, "abcd").as_deref(), Some("ab"));
        assert_eq!(found(&lists, "b"), None);
        assert_eq!(found(&lists, "10.1.2.3").as_deref(), Some("10.1.0.0/16"));
        assert_eq!(found(&lists, "10.2.0.1"), None);
        assert!(lists.remove(&entry(EntryKind::Prefix, "ab")));
        assert_eq!(found(&lists, "abcd").as_deref(), Some("abc"));
        assert_eq!(found(&lists, "abd!").as_deref(), Some("abd"));
        assert_eq!(found(&lists, "abe"), None);
        assert_eq!(lists.len(), 4);
    }

    #[test]
    fn twenty_thousand_entries_are_added_one_at_a_time() {
        let mut lists = AccessLists::default();
        for i in 0..20_000u32 {
            let kind = [EntryKind::Key, EntryKind::Prefix, EntryKind::Cidr][i as usize % 3];
            let value = match kind {
                EntryKind::Cidr => Ipv4Addr::from(0x0a00_0000 + i).to_string(),
                _ => format!("user-{i}:"),
            };
            assert!(lists.insert(entry(kind, &value)));
        }
        assert_eq!(lists.len(), 20_000);
        assert!(lists.lookup("p", b"user-19998:").is_some(), "a key");
        assert!(
            lists.lookup("p", b"user-19998:x").is_none(),
            "a key, not a prefix"
        );
        assert!(lists.lookup("p", b"user-19999:x").is_some(), "a prefix");
        assert!(
            lists.lookup("p", b"10.0.78.29").is_some(),
            "an address: 19 997 is 78 × 256 + 29"
        );
        assert!(lists.lookup("p", b"10.0.78.30").is_none());
    }

    #[derive(Debug, Clone)]
    enum Change {
        Add(usize),
        Remove(usize),
    }

    proptest! {
        /// After any sequence of additions and removals, the lookup agrees with checking every
        /// entry left one by one.
        #[test]
        fn changes_agree_with_a_scan(
            prefixes in proptest::collection::vec("[ab]{1,4}", 1..10),
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32), 1..10),
            changes in proptest::collection::vec(
                prop_oneof![(0usize..20).prop_map(Change::Add), (0usize..20).prop_map(Change::Remove)],
                0..40,
            ),
            keys in proptest::collection::vec("[ab]{1,6}", 1..20),
            addresses in proptest::collection::vec(any::<u32>(), 1..20),
        ) {
            let block = |bits: u32, len: u8| crate::cidr::masked(IpAddr::V4(Ipv4Addr::from(bits)), len);
            let candidates: Vec<AccessEntry> = prefixes
                .iter()
                .map(|p| entry(EntryKind::Prefix, p))
                .chain(nets.iter().map(|&(bits, len)| entry(EntryKind::Cidr, &format!("{}/{len}", block(bits, len)))))
                .collect();
            let mut lists = AccessLists::default();
            let mut held: BTreeSet<AccessEntry> = BTreeSet::new();
            for change in changes {
                match change {
                    Change::Add(i) => {
                        let e = &candidates[i % candidates.len()];
                        prop_assert_eq!(lists.insert(e.clone()), held.insert(e.clone()));
                    }
                    Change::Remove(i) => {
                        let e = &candidates[i % candidates.len()];
                        prop_assert_eq!(lists.remove(e), held.remove(e));
                    }
                }
            }
            prop_assert_eq!(lists.len(), held.len());
            for key in &keys {
                let scan = held.iter().any(|e| e.kind() == EntryKind::Prefix && key.starts_with(e.value()));
                prop_assert_eq!(lists.lookup("p", key.as_bytes()).is_some(), scan, "{}", key);
            }
            for &address in &addresses {
                let scan = held.iter().filter(|e| e.kind() == EntryKind::Cidr).any(|e| {
                    let cidr: Cidr = e.value().parse().unwrap();
                    cidr.contains(IpAddr::V4(Ipv4Addr::from(address)))
                });
                let text = Ipv4Addr::from(address).to_string();
                prop_assert_eq!(lists.lookup("p", text.as_bytes()).is_some(), scan, "{}", text);
            }
        }
    }
}

mod mapped {
    use super::*;

    #[test]
    fn an_ipv4_mapped_range_blocks_both_spellings_of_its_addresses() {
        let entry = AccessEntry::new(None, Listed::Deny, EntryKind::Cidr, "::ffff:198.51.100.0/120").unwrap();
        assert_eq!(entry.value(), "198.51.100.0/24");
        let lists = AccessLists::new([entry]);
        assert!(lists.lookup("p", b"198.51.100.7").is_some());
        assert!(lists.lookup("p", b"::ffff:198.51.100.7").is_some());
        assert!(lists.lookup("p", b"198.51.101.7").is_none());
    }
}
