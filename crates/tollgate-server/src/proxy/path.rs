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
//! escape, and a path that does not start with `/`. So are a control character anywhere, raw or
//! encoded (`%00`, `%09`, `%0A`, `%7F`, `%C2%85`: C and Java servers end a name at NUL, others drop
//! line breaks), and whitespace at either end of a segment, raw or encoded (`%20`, `%C2%A0`):
//! servers that trim names would read `/v4/movies%20` as `/v4/movies`. Whitespace inside a
//! segment (`/search/a%20b`) is kept.
//!
//! Case is kept as sent: `/V4/movies` is forwarded as written. Whether it matches the route
//! `/v4/movies` is the route's choice (case-insensitive unless `case_sensitive: true`, see
//! [`tollgate_config::routes`]).

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
    /// A control character (`%00`, `%0A`, `%7F`, ...), raw or encoded.
    #[error(
        "the request path has a control character (such as `%00` or `%0A`), which servers read differently"
    )]
    ControlCharacter,
    /// Whitespace at the start or end of a segment (`%20`, `%09`, ...), raw or encoded.
    #[error(
        "a segment of the request path starts or ends with whitespace (such as `%20`), which some servers trim"
    )]
    EdgeWhitespace,
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
/// assert_eq!(normalize("/v4/movies%00"), Err(PathError::ControlCharacter));
/// assert_eq!(normalize("/v4/movies%20"), Err(PathError::EdgeWhitespace));
/// assert_eq!(normalize("/search/a%20b").unwrap(), "/search/a%20b");
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
    for segment in raw.split('/') {
        check_segment(segment)?;
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

/// Refuses a control character anywhere in `segment` and whitespace at either end of it, raw or
/// percent-encoded. Decoding the whole segment (unreserved escapes or not) is what a server that
/// truncates or trims would see; dot-segment removal never changes a segment, so checking the
/// segments as sent is checking the normal path's.
fn check_segment(segment: &str) -> Result<(), PathError> {
    // The common segment: printable ASCII with no escape, nothing to decode.
    if segment
        .bytes()
        .all(|byte| byte.is_ascii_graphic() && byte != b'%')
    {
        return Ok(());
    }
    let bytes = segment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            decoded.push(escape_at(bytes, i)?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    // Bytes that are not UTF-8 become U+FFFD, which is neither control nor whitespace; a NUL or
    // a C0 control is one byte in any encoding and is still seen.
    let text = String::from_utf8_lossy(&decoded);
    if text.chars().any(char::is_control) {
        return Err(PathError::ControlCharacter);
    }
    if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
        return Err(PathError::EdgeWhitespace);
    }
    Ok(())
}

/// The byte of the `%XX` escape at `bytes[at]`.
fn escape_at(bytes: &[u8], at: usize) -> Result<u8, PathError> {
    match (
        bytes.get(at + 1).and_then(|b| hex(*b)),
        bytes.get(at + 2).and_then(|b| hex(*b)),
    ) {
        (Some(high), Some(low)) => Ok(high * 16 + low),
        _ => Err(PathError::BadEscape),
    }
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
        match escape_at(bytes, i)? {
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

    #[test]
    fn control_characters_are_refused_raw_or_encoded() {
        for path in [
            "/v4/movies%00",
            "/v4/movies%00.json",
            "/v4/%00/movies",
            "/v4/movies%09x",
            "/v4/movies%0A",
            "/v4/movies%0d%0aX-Injected:%201",
            "/v4/movies%1F",
            "/v4/movies%7f",
            "/v4/movies%C2%85",
            "/v4/movies\0",
            "/v4/mo\tvies",
            "/v4/movies\u{7f}",
        ] {
            assert_eq!(normalize(path), Err(PathError::ControlCharacter), "{path:?}");
        }
    }

    #[test]
    fn whitespace_at_a_segments_ends_is_refused_and_inside_kept() {
        for path in [
            "/v4/movies%20",
            "/v4/movies%20/42",
            "/v4/%20movies",
            "/v4/%20/movies",
            "/v4/movies%C2%A0",
            "/v4/movies%E3%80%80",
            "/v4/movies ",
            "/v4/ movies",
        ] {
            assert_eq!(normalize(path), Err(PathError::EdgeWhitespace), "{path:?}");
        }
        assert_eq!(normalize("/search/a%20b").unwrap(), "/search/a%20b");
        assert_eq!(normalize("/search/a b").unwrap(), "/search/a b");
        assert_eq!(normalize("/x/%FF%FE").unwrap(), "/x/%FF%FE");
        assert_eq!(normalize("/v4/movies%"), Err(PathError::BadEscape));
    }
}
