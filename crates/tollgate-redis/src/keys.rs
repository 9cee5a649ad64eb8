//! Redis key names: one hash tag per (policy, key), escaped so different pairs never meet.
//!
//! A decision's state lives at `<prefix>{<policy>:<key>}` and, for the sliding log, its sorted
//! set at `<prefix>{<policy>:<key>}:log`. Everything between the braces is the hash tag, so both
//! keys of one decision land on the same cluster slot and a script touching them never gets
//! CROSSSLOT. Inside the braces `\`, `{`, `}` and `:` are escaped (`\\`, `\(`, `\)`, `\;`), so:
//!
//! - the tag always runs to the closing brace we wrote (a `}` in a user key cannot cut it short);
//! - the first raw `:` always separates policy from key, so `("a:b", "c")` and `("a", "b:c")`
//!   are different names;
//! - attempts counters live at `<prefix>{:<key>}`: an empty policy, which no policy can have.

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

    /// The state hash of `key` under `policy`.
    pub(crate) fn state(&self, policy: &str, key: &[u8]) -> Vec<u8> {
        let mut name = Vec::with_capacity(self.prefix.len() + policy.len() + key.len() + 8);
        name.extend_from_slice(&self.prefix);
        name.push(b'{');
        escape(&mut name, policy.as_bytes());
        name.push(b':');
        escape(&mut name, key);
        name.push(b'}');
        name
    }

    /// The sliding log's sorted set, next to its state hash.
    pub(crate) fn log(state: &[u8]) -> Vec<u8> {
        let mut name = state.to_vec();
        name.extend_from_slice(b":log");
        name
    }

    /// The attempts counter of `key`.
    pub(crate) fn attempts(&self, key: &[u8]) -> Vec<u8> {
        self.state("", key)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> KeyNames {
        KeyNames::new("tg:")
    }

    #[test]
    fn the_hash_tag_covers_policy_and_key() {
        assert_eq!(
            names().state("login", b"user:{1}"),
            b"tg:{login:user\\;\\(1\\)}".to_vec()
        );
        assert_eq!(KeyNames::log(b"tg:{a:b}"), b"tg:{a:b}:log".to_vec());
    }

    #[test]
    fn different_pairs_never_share_a_name() {
        let n = names();
        let pairs: [(&str, &[u8]); 8] = [
            ("a:b", b"c"),
            ("a", b"b:c"),
            ("a", b"b\\;c"),
            ("a\\", b";b:c"),
            ("{a", b"b}"),
            ("a", b"}"),
            ("a}", b""),
            ("", b"a:b"),
        ];
        let mut seen = std::collections::HashSet::new();
        for (policy, key) in pairs {
            assert!(seen.insert(n.state(policy, key)), "{policy:?} {key:?}");
        }
        assert_eq!(n.attempts(b"a:b"), n.state("", b"a:b"));
    }

    #[test]
    fn the_first_closing_brace_is_ours() {
        let name = names().state("p", b"}}{{");
        let open = name.iter().position(|&b| b == b'{').unwrap();
        let close = name.iter().position(|&b| b == b'}').unwrap();
        assert_eq!(close, name.len() - 1);
        assert!(open < close);
    }
}
