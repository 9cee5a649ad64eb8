//! Wildcard values of envoyproxy/ratelimit descriptors: a `value` with `*` anywhere in it, any
//! number of times, each `*` standing for zero or more characters (`/api/*/action`, `a*b*c`,
//! `files/*`). The pattern is split on `*` once, at load, so matching a request allocates
//! nothing.
//!
//! A value matches when it starts with the text before the first `*`, ends with the text after
//! the last one, and holds the texts between them in order, none overlapping: taking the
//! earliest place for each middle piece leaves the most room for the next, so that greedy scan
//! finds a match whenever there is one.

/// A descriptor value with at least one `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    /// The value as written, stars included: what upstream shows in stats keys.
    text: String,
    /// `text` split on `*`: at least two pieces, the first and last possibly empty.
    pieces: Vec<String>,
}

impl Pattern {
    /// The pattern of `value`, or `None` when it has no `*` (an exact value).
    pub(crate) fn new(value: &str) -> Option<Pattern> {
        if !value.contains('*') {
            return None;
        }
        Some(Pattern {
            text: value.to_owned(),
            pieces: value.split('*').map(str::to_owned).collect(),
        })
    }

    /// The value as written.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let (Some((first, rest)), Some(last)) = (self.pieces.split_first(), self.pieces.last()) else {
            return false;
        };
        let fixed: usize = self.pieces.iter().map(String::len).sum();
        if value.len() < fixed || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
            return false;
        }
        // The length check above keeps the prefix and the suffix from overlapping.
        let mut between = &value[first.len()..value.len() - last.len()];
        let middle = &rest[..rest.len().saturating_sub(1)];
        for piece in middle {
            match between.find(piece.as_str()) {
                Some(at) => between = &between[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    fn matches(pattern: &str, value: &str) -> bool {
        Pattern::new(pattern).expect("a pattern").matches(value)
    }

    #[test]
    fn values_without_a_star_are_not_patterns() {
        assert!(Pattern::new("plain").is_none());
        assert_eq!(
            Pattern::new("a*").map(|p| p.text().to_owned()),
            Some("a*".to_owned())
        );
    }

    #[test]
    fn a_trailing_star_matches_by_prefix() {
        assert!(matches("foo*", "foo"));
        assert!(matches("foo*", "foo1"));
        assert!(!matches("foo*", "fo"));
        assert!(!matches("foo*", "xfoo"));
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
    }

    #[test]
    fn a_middle_star_needs_the_prefix_and_the_suffix() {
        assert!(matches("bar*b", "barab"));
        assert!(matches("bar*b", "barb"), "a star may match nothing");
        assert!(!matches("bar*b", "bara"));
        assert!(!matches("bar*b", "xbarb"));
        assert!(
            !matches("ab*ba", "aba"),
            "prefix and suffix may not share characters"
        );
        assert!(matches("/api/*/action", "/api/123/action"));
        assert!(!matches("/api/*/action", "/api/123/other"));
    }

    #[test]
    fn several_stars_match_their_pieces_in_order() {
        assert!(matches("foo*bar*baz", "foo123bar456baz"));
        assert!(matches("foo*bar*baz", "foobarbaz"));
        assert!(!matches("foo*bar*baz", "foo123baz"));
        assert!(!matches("foo*bar*baz", "bar456baz"));
        assert!(!matches("a*b*c", "acb"));
        assert!(matches("*a*", "xay"));
        assert!(matches("a**b", "ab"));
        assert!(matches("svc*ep*rpc", "svcXepYrpc"));
        assert!(!matches("svc*ep*rpc", "svcABCrpc"));
    }

    #[test]
    fn multibyte_values_are_matched_on_whole_characters() {
        assert!(matches("é*é", "éxé"));
        assert!(!matches("é*é", "é"));
    }
}
