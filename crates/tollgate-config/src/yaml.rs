//! Reading a YAML text, with a bound on how deep it nests checked first, in one pass.
//!
//! The YAML parser stops at a recursion limit, but only after work that grows with the square of
//! the nesting: a file of `[[[[...]]]]` 40,000 deep took half a minute to refuse, and a config
//! reload (or an xDS push, or a policy test) would wait that long. Real configs nest a few
//! levels (a descriptor tree is rarely ten deep); [`MAX_NESTING`] leaves ample room and the scan
//! below refuses anything deeper in time linear in the text, before the parser sees it.
//!
//! The scan is conservative about what counts as a level: each indentation step of a block,
//! each `- ` of a sequence entry, and each `[` or `{` that opens a flow collection (outside
//! quotes and comments, where a collection can start) is one. A text it passes may still be
//! refused by the parser; a text it refuses nests too deep by any reading.

use yaml_serde::Value;

use crate::{ConfigError, ConfigErrorKind};

/// The deepest nesting a config, policy test or pushed config may have.
pub const MAX_NESTING: usize = 64;

/// `text` parsed, or an error naming `file` and where the nesting went past [`MAX_NESTING`].
pub(crate) fn parse(file: &str, text: &str) -> Result<Value, ConfigError> {
    if let Some((line, column)) = too_deep(text, MAX_NESTING) {
        return Err(ConfigError::new(
            file,
            None,
            ConfigErrorKind::Syntax {
                message: format!("nested deeper than {MAX_NESTING} levels at line {line} column {column}"),
                line: Some(line),
                column: Some(column),
            },
        ));
    }
    yaml_serde::from_str(text).map_err(|e| ConfigError::syntax(file, &e))
}

/// Where (line and column, from 1) `text` first nests deeper than `max`, if it does.
fn too_deep(text: &str, max: usize) -> Option<(usize, usize)> {
    // The indentation of each open block.
    let mut blocks: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    for (index, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|b| **b == b' ').count();
        let rest = &bytes[indent..];
        let blank = rest.is_empty() || rest[0] == b'#';
        if quote.is_none() && flow == 0 && !blank {
            while blocks.last().is_some_and(|open| *open >= indent) {
                blocks.pop();
            }
            blocks.push(indent);
        }
        let mut depth = blocks.len() + flow;
        let mut previous = b' ';
        let mut at_entry = quote.is_none() && flow == 0;
        for (column, &byte) in rest.iter().enumerate() {
            match quote {
                Some(b'"') if byte == b'\\' && previous != b'\\' => {
                    previous = b'\\';
                    continue;
                }
                Some(open) if byte == open && !(open == b'"' && previous == b'\\') => quote = None,
                Some(_) => {}
                None => match byte {
                    b'#' if previous == b' ' || column == 0 => break,
                    b'"' | b'\'' if opens_token(previous) => quote = Some(byte),
                    // `- - - x` nests one sequence in another on one line.
                    b'-' if at_entry && rest.get(column + 1).is_none_or(|b| *b == b' ') => depth += 1,
                    b'[' | b'{' if opens_token(previous) => {
                        flow += 1;
                        depth += 1;
                    }
                    b']' | b'}' if flow > 0 => {
                        flow -= 1;
                        depth -= 1;
                    }
                    _ => {}
                },
            }
            if byte != b' ' && byte != b'-' {
                at_entry = false;
            }
            if depth > max {
                return Some((index + 1, indent + column + 1));
            }
            previous = if quote.is_some() && byte == b'\\' && previous == b'\\' {
                b' '
            } else {
                byte
            };
        }
    }
    None
}

/// Whether a flow collection or a quoted scalar may start after `previous`.
fn opens_token(previous: u8) -> bool {
    matches!(previous, b' ' | b':' | b',' | b'[' | b'{' | b'-' | b'?')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_configs_pass() {
        let config = "domain: edge\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: minute, requests_per_unit: 5}\n        metadata: {tags: [x, 'y[', \"z{\"], n: {m: 1}}\n";
        assert_eq!(too_deep(config, 8), None);
        assert_eq!(too_deep("key: foo[bar\nother: {a: [1, 2]}\n", 3), None);
        assert_eq!(too_deep("# [[[[[[[[\nkey: x # {{{{{{{\n", 2), None);
    }

    #[test]
    fn deep_flow_block_and_sequence_nesting_are_found_where_they_go_past() {
        let flow = format!("a: {}{}\n", "[".repeat(10), "]".repeat(10));
        assert_eq!(too_deep(&flow, 5), Some((1, 8)));
        let mut block = String::new();
        for level in 0..10 {
            block.push_str(&format!("{}k{level}:\n", "  ".repeat(level)));
        }
        assert_eq!(too_deep(&block, 5), Some((6, 11)));
        assert!(too_deep(&"- ".repeat(20), 5).is_some());
    }

    #[test]
    fn a_deep_text_is_refused_quickly_with_its_place() {
        let n = 200_000;
        let text = format!(
            "domain: d\ndescriptors:\n  - key: k\n    metadata: {}{}\n",
            "[".repeat(n),
            "]".repeat(n)
        );
        let err = parse("deep.yaml", &text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "deep.yaml: nested deeper than 64 levels at line 4 column 76"
        );
    }
}
