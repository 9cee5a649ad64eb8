//! Redis key names: one hash tag per (policy, key) or per key, escaped so different pairs never
//! meet, and the cluster slot a name lands on.
//!
//! Two layouts, chosen per policy with [`HashTag`]:
//!
//! - `PolicyAndKey` (the default): the state lives at `<prefix>{<policy>:<key>}`, and a sliding
//!   log's sorted set at `<prefix>{<policy>:<key>}:log`. Pairs spread evenly over a cluster.
//! - `Key`: the state lives at `<prefix>{<key>}<policy>`, and a sliding log's set at
//!   `<prefix>{<key>}<policy>:log`. Every policy on one key shares one slot, so a request
//!   limited by several of them is one script call even on a cluster.
//!
//! Everything between the braces is the hash tag, so both keys of one rule land on the same
//! cluster slot. The policy and the key are escaped wherever they appear (`\` `{` `}` `:` become
//! `\\` `\(` `\)` `\;`), and the prefix has no braces (the builder checks), so:
//!
//! - the hash tag always runs to the closing brace we wrote (a `}` in a user key cannot cut it
//!   short, nor a `{` in a policy name start another one);
//! - inside the braces, `PolicyAndKey` names have exactly one raw `:` (between policy and key),
//!   attempts counters (`<prefix>{:<key>}`, an empty policy, which no policy can have) too, and
//!   `Key` names none: the layouts can never meet, and `("a:b", "c")` and `("a", "b:c")` stay
//!   apart;
//! - after the braces, a state name has no raw `:`, a log name ends with the one raw `:` of
//!   `:log`, and a concurrency policy's leases with the one of `:leases`, so none meets
//!   another (a log never meets a state of a policy named `...:log`).
//!
//! Escaping is injective, so one name decodes to exactly one (layout, policy, key, kind).
//!
//! Each cluster slot's sequence (see `state_loss`) lives at `<prefix>{<n>}:seq`, where `<n>` is
//! the smallest decimal number whose hash tag lands on that slot ([`slot_tag`]): inside its
//! braces are digits alone (no raw `:`, so no `PolicyAndKey` or attempts name), and right after
//! them a raw `:` (no `Key` name has one there: a policy is never empty, and its `:` are escaped).
//!
//! Overrides (see `overrides`): a key's override hash is its state name plus `:ovr` (same hash
//! tag, so the decision script reads it in the same slot; like `:log`, the one raw `:` after the
//! braces). The lists of overrides live under the tag `{:}`, which no state or attempts name
//! can have (a policy name is never empty, nor is an attempts key):
//! `<prefix>{:}keys:<policy>` (a hash of the policy's key overrides) and
//! `<prefix>{:}prefixes` (one hash of every policy's prefix overrides, read whole by each
//! instance).

use tollgate::HashTag;

/// Builds key names under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct KeyNames {
    prefix: Vec<u8>,
}

impl KeyNames {
    /// `prefix` must not contain braces (checked by the builder).
    pub(crate) fn new(prefix: &str) -> Self {
        KeyNames {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// The state hash of `key` under the policy named `policy`, in the layout `tag`.
    pub(crate) fn state(&self, tag: HashTag, policy: &str, key: &[u8]) -> Vec<u8> {
        let mut name = Vec::with_capacity(self.prefix.len() + policy.len() + key.len() + 8);
        name.extend_from_slice(&self.prefix);
        name.push(b'{');
        match tag {
            HashTag::PolicyAndKey => {
                escape(&mut name, policy.as_bytes());
                name.push(b':');
                escape(&mut name, key);
                name.push(b'}');
            }
            HashTag::Key => {
                escape(&mut name, key);
                name.push(b'}');
                escape(&mut name, policy.as_bytes());
            }
        }
        name
    }

    /// The sliding log's sorted set, next to its state hash.
    pub(crate) fn log(state: &[u8]) -> Vec<u8> {
        let mut name = state.to_vec();
        name.extend_from_slice(b":log");
        name
    }

    /// The hash of the fleet's allow and deny list entries. Inside its braces there is no raw
    /// `:` and nothing after them, which no state name has (a `Key` name always has a policy
    /// after the braces), so it meets no rate limit state.
    pub(crate) fn access_lists(&self) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(b"{access-lists}");
        name
    }

    /// The override hash of the rule whose state is `state`, next to it.
    pub(crate) fn override_of(state: &[u8]) -> Vec<u8> {
        let mut name = state.to_vec();
        name.extend_from_slice(b":ovr");
        name
    }

    /// The hash listing the key overrides of the policy named `policy`.
    pub(crate) fn key_overrides(&self, policy: &str) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(b"{:}keys:");
        escape(&mut name, policy.as_bytes());
        name
    }

    /// The sorted set of the keys of `policy`'s key overrides, in byte order.
    pub(crate) fn key_override_order(&self, policy: &str) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(b"{:}key-order:");
        escape(&mut name, policy.as_bytes());
        name
    }

    /// The sorted set of the keys of `policy`'s key overrides that lapse, by when.
    pub(crate) fn key_override_expiry(&self, policy: &str) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(b"{:}key-expiry:");
        escape(&mut name, policy.as_bytes());
        name
    }

    /// The hash of every policy's prefix overrides.
    pub(crate) fn prefix_overrides(&self) -> Vec<u8> {
        let mut name = self.prefix.clone();
        name.extend_from_slice(b"{:}prefixes");
        name
    }

    /// The sorted set of a concurrency policy's leases of `key`, next to where a rate policy of
    /// the same name keeps its state: `:leases` after the braces, so it meets neither a state
    /// (no raw `:` there) nor a log (`:log`).
    pub(crate) fn leases(&self, tag: HashTag, policy: &str, key: &[u8]) -> Vec<u8> {
        let mut name = self.state(tag, policy, key);
        name.extend_from_slice(b":leases");
        name
    }

    /// The attempts counter of `key`.
    pub(crate) fn attempts(&self, key: &[u8]) -> Vec<u8> {
        self.state(HashTag::PolicyAndKey, "", key)
    }

    /// The sequence of cluster slot `slot` (see `state_loss`), a name on that slot.
    pub(crate) fn sequence(&self, slot: u16) -> Vec<u8> {
        let tag = slot_tag(slot);
        let mut name = Vec::with_capacity(self.prefix.len() + tag.len() + 6);
        name.extend_from_slice(&self.prefix);
        name.push(b'{');
        name.extend_from_slice(tag.as_bytes());
        name.extend_from_slice(b"}:seq");
        name
    }
}

/// The smallest decimal number whose text hashes to `slot` (taken modulo 16384), to name a key
/// on that slot. Found for every slot at once, on first use: about 110 000 numbers are tried
/// before the last slot has one (a few milliseconds), and the table takes about 200 KB.
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::OnceLock<Vec<Box<str>>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags: Vec<Option<Box<str>>> = vec![None; usize::from(SLOTS)];
        let mut missing = tags.len();
        // Bounded: CRC16 reaches every slot well within the first million numbers.
        for n in 0u32..10_000_000 {
            let text = n.to_string();
            let entry = &mut tags[usize::from(crc16(text.as_bytes()) % SLOTS)];
            if entry.is_none() {
                *entry = Some(text.into_boxed_str());
                missing -= 1;
                if missing == 0 {
                    break;
                }
            }
        }
        tags.into_iter().map(Option::unwrap_or_default).collect()
    });
    tags.get(usize::from(slot)).map_or("", |tag| tag)
}

fn escape(out: &mut Vec<u8>, part: &[u8]) {
    for &byte in part {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'{' => out.extend_from_slice(b"\\("),
            b'}' => out.extend_from_slice(b"\\)"),
            b':' => out.extend_from_slice(b"\\;"),
            _ => out.push(byte),
        }
    }
}

/// How many slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The Redis Cluster slot of a key name, as Redis computes it: CRC16 (XMODEM) of the hash tag
/// (the bytes between the first `{` and the first `}` after it, when not empty), else of the
/// whole name, modulo 16384.
pub(crate) fn slot(name: &[u8]) -> u16 {
    let tagged = name.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &name[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    crc16(tagged.unwrap_or(name)) % SLOTS
}

/// CRC16-XMODEM (polynomial 0x1021, initial value 0), bit by bit: names are short.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> KeyNames {
        KeyNames::new("tg:")
    }

    #[test]
    fn the_access_lists_hash_is_no_state_name() {
        let access = names().access_lists();
        assert_eq!(access, b"tg:{access-lists}".to_vec());
        // (No policy has an empty name, so `{access-lists}` alone is never a `Key` name.)
        for (policy, key) in [
            ("access-lists", &b"x"[..]),
            ("p", b"access-lists"),
            ("access-lists", b"p"),
        ] {
            for tag in [HashTag::PolicyAndKey, HashTag::Key] {
                assert_ne!(
                    names().state(tag, policy, key),
                    access,
                    "{policy:?} {key:?} {tag:?}"
                );
            }
        }
        assert_ne!(names().attempts(b"access-lists"), access);
    }

    #[test]
    fn the_hash_tag_covers_policy_and_key() {
        assert_eq!(
            names().state(HashTag::PolicyAndKey, "login", b"user:{1}"),
            b"tg:{login:user\\;\\(1\\)}".to_vec()
        );
        assert_eq!(KeyNames::log(b"tg:{a:b}"), b"tg:{a:b}:log".to_vec());
    }

    #[test]
    fn the_key_layout_tags_the_key_alone() {
        assert_eq!(
            names().state(HashTag::Key, "lo{g:in", b"user:{1}"),
            b"tg:{user\\;\\(1\\)}lo\\(g\\;in".to_vec()
        );
        let a = names().state(HashTag::Key, "api", b"u1");
        let b = names().state(HashTag::Key, "login", b"u1");
        assert_eq!(slot(&a), slot(&b));
        assert_eq!(slot(&KeyNames::log(&a)), slot(&a));
    }

    #[test]
    fn different_pairs_never_share_a_name_in_any_layout() {
        let n = names();
        let pairs: [(&str, &[u8]); 12] = [
            ("a:b", b"c"),
            ("a", b"b:c"),
            ("a", b"b\\;c"),
            ("a\\", b";b:c"),
            ("{a", b"b}"),
            ("a", b"}"),
            ("a}", b""),
            ("a", b"a:b"),
            ("log", b"a"),
            ("a:log", b"a"),
            ("a", b"log"),
            ("}a", b"{"),
        ];
        let mut seen = std::collections::HashSet::new();
        for tag in [HashTag::PolicyAndKey, HashTag::Key] {
            for (policy, key) in pairs {
                let state = n.state(tag, policy, key);
                assert!(seen.insert(state.clone()), "{tag:?} {policy:?} {key:?}");
                assert!(
                    seen.insert(KeyNames::log(&state)),
                    "log of {tag:?} {policy:?} {key:?}"
                );
                let leases = n.leases(tag, policy, key);
                if !key.is_empty() {
                    // An empty key is refused before any call; `{}` is no hash tag.
                    assert_eq!(slot(&leases), slot(&state));
                }
                assert!(seen.insert(leases), "leases of {tag:?} {policy:?} {key:?}");
            }
        }
        for tag in [HashTag::PolicyAndKey, HashTag::Key] {
            for (policy, key) in pairs {
                let state = n.state(tag, policy, key);
                assert!(
                    seen.insert(KeyNames::override_of(&state)),
                    "override of {tag:?} {policy:?} {key:?}"
                );
            }
        }
        let keys: std::collections::BTreeSet<&[u8]> = pairs.iter().map(|&(_, key)| key).collect();
        for key in keys {
            assert!(seen.insert(n.attempts(key)), "attempts {key:?}");
        }
        let policies: std::collections::BTreeSet<&str> = pairs.iter().map(|&(policy, _)| policy).collect();
        for policy in policies {
            assert!(
                seen.insert(n.key_overrides(policy)),
                "key overrides of {policy:?}"
            );
        }
        assert!(seen.insert(n.prefix_overrides()));
    }

    #[test]
    fn the_first_closing_brace_is_ours() {
        for tag in [HashTag::PolicyAndKey, HashTag::Key] {
            let name = names().state(tag, "p}{", b"}}{{");
            let open = name.iter().position(|&b| b == b'{').unwrap();
            let close = name.iter().position(|&b| b == b'}').unwrap();
            assert_eq!(name.iter().filter(|&&b| b == b'{' || b == b'}').count(), 2);
            assert!(open < close);
        }
    }

    #[test]
    fn every_slot_has_a_sequence_on_it_that_is_no_other_name() {
        let n = names();
        for slot in 0..SLOTS {
            let name = n.sequence(slot);
            assert!(!slot_tag(slot).is_empty(), "slot {slot}");
            assert_eq!(super::slot(&name), slot, "{}", String::from_utf8_lossy(&name));
        }
        assert_eq!(n.sequence(0), b"tg:{3560}:seq".to_vec());
        // Digits in the braces and a raw `:` right after them: no state, log, override, lease,
        // attempts or list name looks like that.
        let tag = slot_tag(0);
        for tag_layout in [HashTag::PolicyAndKey, HashTag::Key] {
            for (policy, key) in [(tag, tag.as_bytes()), (":seq", tag.as_bytes()), ("seq", b"")] {
                let state = n.state(tag_layout, policy, key);
                for other in [
                    state.clone(),
                    KeyNames::log(&state),
                    KeyNames::override_of(&state),
                    n.leases(tag_layout, policy, key),
                ] {
                    assert_ne!(other, n.sequence(0), "{policy:?} {key:?}");
                }
            }
        }
        assert_ne!(n.attempts(tag.as_bytes()), n.sequence(0));
    }

    #[test]
    fn slots_follow_redis() {
        // The reference values of the Redis Cluster specification and of CLUSTER KEYSLOT.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
        assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
    }
}
