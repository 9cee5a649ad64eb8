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
//! Windows servers (IIS, and the file servers behind it) read other spellings as the same file:
//! a segment ending in `.` (`/v4/movies.`, `/v4/movies%2E`) loses its dots, and an NTFS data
//! stream (`/v4/movies::$DATA`, `/v4/movies:$DATA`) is the file's contents. Both are refused; a
//! `:` that names no stream type (`/v1/things:batchGet`) is kept. Escapes must decode to UTF-8:
//! the overlong `%C0%AF` is a `/` to some decoders and an error to others, so any escape run
//! that is not UTF-8 is refused.
//!
//! Outside ASCII, servers that normalize Unicode or fold case read fullwidth `ｍｏｖｉｅｓ`, the
//! long s in `movieſ` and `mo\u{200B}vies` (a zero-width space) as `movies`: a segment that
//! folds to ASCII is refused, and so is a character that folds to a separator or a dot
//! (`／`, `．`). Text that keeps a non-ASCII character after folding (`café`, `東京（駅）`) is
//! kept; the private `folding` module says which foldings and why. An ASCII segment never pays
//! for these checks.
//!
//! Case is kept as sent: `/V4/movies` is forwarded as written. Whether it matches the route
//! `/v4/movies` is the route's choice (case-insensitive unless `case_sensitive: true`, see
//! [`tollgate_config::routes`]).

mod folding;

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
    /// A segment ending in `.` (other than `.` and `..`), raw or encoded.
    #[error("a segment of the request path ends with `.` (such as `movies.`), which Windows servers drop")]
    TrailingDot,
    /// An NTFS alternate data stream type (`::$DATA`, `:$DATA`).
    #[error(
        "the request path names an NTFS data stream (such as `::$DATA`), which Windows servers read as the file itself"
    )]
    DataStream,
    /// Escapes that do not decode to UTF-8 (the overlong `%C0%AF`, a lone `%FF`).
    #[error(
        "the request path has escapes that are not UTF-8 (such as the overlong `%C0%AF`), which servers decode differently"
    )]
    NotUtf8,
    /// A character Unicode folds to ASCII (NFKC or simple case mapping), in a segment that
    /// becomes ASCII, or folding to a separator or another character with a meaning in a path.
    #[error(
        "the request path has `{found}` (U+{code:04X}), which servers that normalize Unicode or fold case read as `{reads_as}`",
        code = u32::from(*.found)
    )]
    FoldsToAscii {
        /// The character sent.
        found: char,
        /// What it folds to.
        reads_as: String,
    },
    /// A default-ignorable code point (U+200B, U+00AD, U+FEFF, ...) in a segment that is ASCII
    /// without it.
    #[error(
        "the request path has the invisible character U+{code:04X}, which servers that normalize Unicode drop",
        code = u32::from(*.0)
    )]
    Invisible(char),
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
/// assert_eq!(normalize("/v4/movies."), Err(PathError::TrailingDot));
/// assert_eq!(normalize("/v4/movies::$DATA"), Err(PathError::DataStream));
/// assert_eq!(normalize("/v4/%C0%AFmovies"), Err(PathError::NotUtf8));
/// assert!(matches!(normalize("/v4/movie\u{17f}"), Err(PathError::FoldsToAscii { found: '\u{17f}', .. })));
/// assert_eq!(normalize("/v4/mo\u{200b}vies"), Err(PathError::Invisible('\u{200b}')));
/// assert_eq!(normalize("/search/caf\u{e9}").unwrap(), "/search/caf\u{e9}");
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

/// Refuses what a server would read as another segment: a control character anywhere, raw or
/// percent-encoded; whitespace at either end; trailing dots; an NTFS stream type; escapes that
/// are not UTF-8; and text that folds to ASCII ([`folding`]). Decoding the whole segment
/// (unreserved escapes or not) is what a server that truncates, trims or folds would see;
/// dot-segment removal never changes a segment, so checking the segments as sent is checking the
/// normal path's.
fn check_segment(segment: &str) -> Result<(), PathError> {
    // The common segment: printable ASCII with no escape, nothing to decode.
    let plain = segment
        .bytes()
        .all(|byte| byte.is_ascii_graphic() && byte != b'%');
    let decoded;
    let text = if plain {
        segment
    } else {
        decoded = decode_all(segment)?;
        if decoded.chars().any(char::is_control) {
            return Err(PathError::ControlCharacter);
        }
        if decoded.starts_with(char::is_whitespace) || decoded.ends_with(char::is_whitespace) {
            return Err(PathError::EdgeWhitespace);
        }
        decoded.as_str()
    };
    if text.ends_with('.') && text != "." && text != ".." {
        return Err(PathError::TrailingDot);
    }
    if text.contains(":$") {
        return Err(PathError::DataStream);
    }
    if plain || text.is_ascii() {
        return Ok(());
    }
    folding::check(text)
}

/// `segment` with every `%XX` escape decoded; refuses malformed escapes, and bytes that are not
/// UTF-8 (an overlong or lone byte, which every decoder reads its own way).
fn decode_all(segment: &str) -> Result<String, PathError> {
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
    String::from_utf8(decoded).map_err(|_| PathError::NotUtf8)
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
        assert_eq!(normalize("/v4/movies%"), Err(PathError::BadEscape));
    }

    /// Every spelling of `/v4/movies` that some upstream folds back to it, and what the proxy
    /// does with it: refused (and why), or normalized to a path under the route.
    #[test]
    fn spellings_that_servers_fold_back_are_refused_or_normalized() {
        use PathError::*;
        let folds = |found, reads_as: &str| FoldsToAscii {
            found,
            reads_as: reads_as.to_owned(),
        };
        let refused: Vec<(&str, PathError)> = vec![
            // Windows drops trailing dots, in any segment, raw or encoded.
            ("/v4/movies.", TrailingDot),
            ("/v4/movies..", TrailingDot),
            ("/v4/movies...", TrailingDot),
            ("/v4/movies%2e", TrailingDot),
            ("/v4/movies%2E", TrailingDot),
            ("/v4/movies.%2e", TrailingDot),
            ("/v4./movies", TrailingDot),
            ("/v4/movies./", TrailingDot),
            ("/v4/movies./42", TrailingDot),
            ("/V4/MOVIES.", TrailingDot),
            // NTFS data streams are the file.
            ("/v4/movies::$DATA", DataStream),
            ("/v4/movies:$DATA", DataStream),
            ("/v4/movies::$data", DataStream),
            ("/v4/movies%3A%3A%24DATA", DataStream),
            ("/v4/movies%3a$DATA", DataStream),
            ("/v4/movies:stream:$DATA", DataStream),
            ("/v4:$I30:$INDEX_ALLOCATION/movies", DataStream),
            // Escapes that are not UTF-8: the overlong `/`, lone bytes, a surrogate.
            ("/v4/%C0%AFmovies", NotUtf8),
            ("/v4%C0%AFmovies", NotUtf8),
            ("/v4/movies%C0%AE", NotUtf8),
            ("/v4/movies%FF", NotUtf8),
            ("/x/%FF%FE", NotUtf8),
            ("/v4/movies%ED%A0%80", NotUtf8),
            ("/v4/movies%E2%80", NotUtf8),
            // Characters Unicode folds to ASCII, raw or encoded.
            ("/v4/movie\u{17f}", folds('\u{17f}', "s")),
            ("/v4/movie%C5%BF", folds('\u{17f}', "s")),
            (
                "/v4/\u{ff4d}\u{ff4f}\u{ff56}\u{ff49}\u{ff45}\u{ff53}",
                folds('\u{ff4d}', "m"),
            ),
            ("/v4/%EF%BD%8Dovies", folds('\u{ff4d}', "m")),
            ("/\u{ff36}4/movies", folds('\u{ff36}', "V")),
            ("/v\u{2074}/movies", folds('\u{2074}', "4")),
            ("/v4/movies\u{ff0f}42", folds('\u{ff0f}', "/")),
            ("/v4\u{ff0f}movies", folds('\u{ff0f}', "/")),
            ("/v4/movies\u{ff0e}", folds('\u{ff0e}', ".")),
            ("/v4/movies\u{2026}", folds('\u{2026}', "...")),
            ("/v4/movies\u{ff1a}$DATA", folds('\u{ff1a}', ":")),
            ("/v4/movies\u{ff1b}x=1", folds('\u{ff1b}', ";")),
            ("/v4/movies\u{ff0f}\u{6771}\u{4eac}", folds('\u{ff0f}', "/")),
            ("/v4/\u{fb01}lms", folds('\u{fb01}', "fi")),
            ("/v4/mov\u{131}es", folds('\u{131}', "I")),
            ("/v4/mov\u{130}es", folds('\u{130}', "i")),
            ("/v4/\u{212a}eys", folds('\u{212a}', "K")),
            // Invisible characters some pipelines drop, raw or encoded.
            ("/v4/mo\u{200b}vies", Invisible('\u{200b}')),
            ("/v4/movies%E2%80%8B", Invisible('\u{200b}')),
            ("/v4/movies%E2%80%8C", Invisible('\u{200c}')),
            ("/v4/movies%E2%80%8D", Invisible('\u{200d}')),
            ("/v4/movies%E2%81%A0", Invisible('\u{2060}')),
            ("/v4/%EF%BB%BFmovies", Invisible('\u{feff}')),
            ("/v4/mo%C2%ADvies", Invisible('\u{ad}')),
            ("/v4/movies\u{34f}", Invisible('\u{34f}')),
            ("/v4/movies\u{fe0f}", Invisible('\u{fe0f}')),
            ("/v4/movies\u{e0041}", Invisible('\u{e0041}')),
            ("/v4/mo\u{200b}vie\u{17f}", Invisible('\u{200b}')),
        ];
        for (path, why) in refused {
            assert_eq!(normalize(path), Err(why), "{path:?}");
        }
        for (path, normal) in [
            ("/v4/movies%2ejson", "/v4/movies.json"),
            ("/v4/%2e%2e/v4/movies", "/v4/movies"),
            ("/v4/movies/%2E", "/v4/movies/"),
            ("/v1/things:batchGet", "/v1/things:batchGet"),
            ("/v4/movies:42", "/v4/movies:42"),
            ("/search/caf\u{e9}", "/search/caf\u{e9}"),
            ("/search/caf%C3%A9", "/search/caf%C3%A9"),
            ("/search/cafe\u{301}", "/search/cafe\u{301}"),
            ("/search/stra\u{df}e", "/search/stra\u{df}e"),
            ("/search/\u{131}\u{15f}\u{131}k", "/search/\u{131}\u{15f}\u{131}k"),
            (
                "/search/\u{6771}\u{4eac}\u{ff08}\u{99c5}\u{ff09}",
                "/search/\u{6771}\u{4eac}\u{ff08}\u{99c5}\u{ff09}",
            ),
            ("/search/\u{2764}\u{fe0f}", "/search/\u{2764}\u{fe0f}"),
            ("/search/%E2%9D%A4%EF%B8%8F", "/search/%E2%9D%A4%EF%B8%8F"),
            (
                "/search/\u{645}\u{6cc}\u{200c}\u{62e}\u{648}",
                "/search/\u{645}\u{6cc}\u{200c}\u{62e}\u{648}",
            ),
        ] {
            assert_eq!(normalize(path).as_deref(), Ok(normal), "{path:?}");
        }
    }

    #[test]
    fn refusals_name_the_character() {
        assert_eq!(
            normalize("/v4/movie\u{17f}").unwrap_err().to_string(),
            "the request path has `\u{17f}` (U+017F), which servers that normalize Unicode or fold case read as `s`"
        );
        assert_eq!(
            normalize("/v4/mo%E2%80%8Bvies").unwrap_err().to_string(),
            "the request path has the invisible character U+200B, which servers that normalize Unicode drop"
        );
    }
}
