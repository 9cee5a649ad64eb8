//! One spelling for each request path, so the path a route is matched on is the path the
//! upstream serves.
//!
//! Upstreams (and the frameworks behind them) resolve `//`, `.` and `..`, and decode `%6D` to
//! `m`; if the proxy matched the raw path, `/v4//movies`, `/v4/./movies`, `/v4/x/../movies` and
//! `/v4/%6Dovies` would all reach `/v4/movies` upstream while skipping its limit. So the proxy
//! [`normalize`]s the path first and uses the result for both matching and forwarding:
//!
//! - percent-encoded *unreserved* characters (letters, digits, `-`, `.`, `_`, `~`) are decoded;
//!   other escapes are kept, with upper-case hex digits;
//! - empty segments are dropped (`//` becomes `/`);
//! - `.` segments are removed and `..` removes the segment before it (RFC 3986 §5.2.4); a
//!   trailing slash is kept.
//!
//! Paths whose meaning differs between servers are refused with 400 instead of guessed at:
//! an encoded `/` or `\` (`%2F`, `%5C`), a raw `\`, a `;` raw or encoded (matrix parameters, which
//! some servers strip before routing and others do not), a `..` that would climb above the root, a bad
//! escape, and a path that does not start with `/`. Matching stays case-sensitive: `/V4/movies`
//! is a different path from `/v4/movies`, and is forwarded as written.

use std::borrow::Cow;

/// Why a path is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Not an absolute path (`*`, or an empty path).
    #[error("the request path must start with `/`")]
    NotAbsolute,
    /// `%` not followed by two hex digits.
    #[error("the request path has a malformed percent escape")]
    BadEscape,
    /// `%2F` or `%5C`, or a raw `\`: a separator some servers decode and others do not.
    #[error("the request path has an encoded `/` or a `\\`, which servers read differently")]
    AmbiguousSeparator,
    /// `;` parameters, which some servers strip before routing.
    #[error("the request path has `;` parameters, which servers read differently")]
    Parameters,
    /// `..` above the root.
    #[error("the request path climbs above the root with `..`")]
    AboveRoot,
}

/// The path as matched and forwarded; borrowed when it is already normal.
///
/// ```
/// use tollgate_server::proxy::path::{PathError, normalize};
///
/// assert_eq!(normalize("/v4/movies").unwrap(), "/v4/movies");
/// assert_eq!(normalize("/v4//movies").unwrap(), "/v4/movies");
/// assert_eq!(normalize("/v4/x/../movies").unwrap(), "/v4/movies");
/// assert_eq!(normalize("/v4/%6Dovies").unwrap(), "/v4/movies");
/// assert_eq!(normalize("/V4/movies").unwrap(), "/V4/movies");
/// assert_eq!(normalize("/v4/movies;x=1"), Err(PathError::Parameters));
/// assert_eq!(normalize("/v4%2Fmovies"), Err(PathError::AmbiguousSeparator));
/// assert_eq!(normalize("/../etc"), Err(PathError::AboveRoot));
/// ```
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if raw.contains(';') {
        return Err(PathError::Parameters);
    }
    if raw.contains('\\') {
        return Err(PathError::AmbiguousSeparator);
    }
    if !raw.contains('%') && !raw.contains("//") && !has_dot_segment(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    let decoded = decode_unreserved(raw)?;
    let ends_with_slash = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            other => segments.push(other),
        }
    }
    let mut path = String::with_capacity(decoded.len());
    for segment in &segments {
        path.push('/');
        path.push_str(segment);
    }
    if path.is_empty() || ends_with_slash {
        path.push('/');
    }
    Ok(Cow::Owned(path))
}

/// Whether a segment is `.` or `..`.
fn has_dot_segment(path: &str) -> bool {
    path.split('/').any(|segment| segment == "." || segment == "..")
}

/// Decodes `%XX` escapes of unreserved characters; keeps the others (upper-case hex); refuses
/// encoded separators and malformed escapes.
fn decode_unreserved(raw: &str) -> Result<String, PathError> {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if byte != b'%' {
            // `raw` is a `&str` and '%' is ASCII, so runs between escapes are whole characters.
            let next = raw[i..].find('%').map_or(raw.len(), |at| i + at);
            out.push_str(&raw[i..next]);
            i = next;
            continue;
        }
        let (Some(high), Some(low)) = (
            bytes.get(i + 1).and_then(|b| hex(*b)),
            bytes.get(i + 2).and_then(|b| hex(*b)),
        ) else {
            return Err(PathError::BadEscape);
        };
        let value = high * 16 + low;
        match value {
            b'/' | b'\\' => return Err(PathError::AmbiguousSeparator),
            b';' => return Err(PathError::Parameters),
            v if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') => {
                out.push(char::from(v));
            }
            v => {
                out.push('%');
                out.push(char::from(HEX[usize::from(v >> 4)]));
                out.push(char::from(HEX[usize::from(v & 0x0f)]));
            }
        }
        i += 3;
    }
    Ok(out)
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_one_path_normalizes_to_it() {
        for path in [
            "/v4/movies",
            "/v4//movies",
            "//v4/movies",
            "/v4/./movies",
            "/./v4/movies",
            "/v4/x/../movies",
            "/v4/%6Dovies",
            "/v4/%6dovies",
            "/%76%34/movies",
            "/v4/movies/.",
            "/v4/movies/x/..",
            "/v4/%2E/movies",
            "/v4/x/%2E%2E/movies",
        ] {
            let normal = normalize(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(normal.trim_end_matches('/'), "/v4/movies", "{path}");
        }
    }

    #[test]
    fn trailing_slashes_and_other_escapes_are_kept() {
        assert_eq!(normalize("/v4/movies/").unwrap(), "/v4/movies/");
        assert_eq!(normalize("/").unwrap(), "/");
        assert_eq!(normalize("//").unwrap(), "/");
        assert_eq!(normalize("/a/..").unwrap(), "/");
        assert_eq!(normalize("/search/a%20b").unwrap(), "/search/a%20b");
        assert_eq!(normalize("/search/a%2fb"), Err(PathError::AmbiguousSeparator));
        assert_eq!(normalize("/x/%c3%a9").unwrap(), "/x/%C3%A9");
        assert_eq!(normalize("/caf\u{e9}/%41").unwrap(), "/caf\u{e9}/A");
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        assert_eq!(normalize("*"), Err(PathError::NotAbsolute));
        assert_eq!(normalize(""), Err(PathError::NotAbsolute));
        assert_eq!(normalize("/a%"), Err(PathError::BadEscape));
        assert_eq!(normalize("/a%4"), Err(PathError::BadEscape));
        assert_eq!(normalize("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(normalize("/a\\b"), Err(PathError::AmbiguousSeparator));
        assert_eq!(normalize("/a%5cb"), Err(PathError::AmbiguousSeparator));
        assert_eq!(normalize("/a%3Bb"), Err(PathError::Parameters));
        assert_eq!(normalize("/a;b"), Err(PathError::Parameters));
        assert_eq!(normalize("/.."), Err(PathError::AboveRoot));
        assert_eq!(normalize("/a/../../b"), Err(PathError::AboveRoot));
        assert_eq!(normalize("/a/%2e%2e/%2E%2E/b"), Err(PathError::AboveRoot));
    }
}
