//! Reading the proxy chain from `X-Forwarded-For` or RFC 7239 `Forwarded`.
//!
//! Both headers list the addresses a request passed through, client first; each proxy appends
//! the address it received the request from. Several header lines are one list, in order. The
//! parsers here never fail: an entry that names no usable address (garbage, `unknown`, an
//! obfuscated `_name`, a `Forwarded` element without `for=`, a line that is not ASCII) becomes
//! [`Hop::Unusable`], and the caller decides what that means. Empty list elements are ignored,
//! as RFC 9110 asks of list recipients.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use axum::http::header::{FORWARDED, HeaderName};

/// One entry of a proxy chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// The entry names this address.
    Addr(IpAddr),
    /// The entry names no usable address.
    Unusable,
}

/// The `X-Forwarded-For` header's name.
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Every hop listed in `X-Forwarded-For`, client first.
pub(crate) fn x_forwarded_for(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for line in headers.get_all(X_FORWARDED_FOR) {
        let Ok(line) = line.to_str() else {
            hops.push(Hop::Unusable);
            continue;
        };
        hops.extend(
            line.split(',')
                .map(str::trim)
                .filter(|entry| !entry.is_empty())
                .map(|entry| node(entry).map_or(Hop::Unusable, Hop::Addr)),
        );
    }
    hops
}

/// Every hop listed in `Forwarded` (its `for=` parameters), client first.
pub(crate) fn forwarded(headers: &HeaderMap) -> Vec<Hop> {
    let mut hops = Vec::new();
    for line in headers.get_all(FORWARDED) {
        let Ok(line) = line.to_str() else {
            hops.push(Hop::Unusable);
            continue;
        };
        for element in split_outside_quotes(line, ',') {
            if element.trim().is_empty() {
                continue;
            }
            let address = split_outside_quotes(element, ';')
                .filter_map(|pair| pair.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                .and_then(|(_, value)| unquote(value.trim()))
                .and_then(|value| node(&value));
            hops.push(address.map_or(Hop::Unusable, Hop::Addr));
        }
    }
    hops
}

/// An address with an optional port: `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`
/// or `[2001:db8::1]:80`. Anything else (`unknown`, `_hidden`, a zone id) is `None`.
fn node(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Some(socket.ip());
    }
    text.strip_prefix('[')?.strip_suffix(']')?.parse::<IpAddr>().ok()
}

/// Splits on `separator` except inside double quotes (where `\` escapes the next character).
fn split_outside_quotes(text: &str, separator: char) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in current.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                c if c == separator && !quoted => {
                    rest = Some(&current[i + 1..]);
                    return Some(&current[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(current)
    })
}

/// A token as is, or a quoted string without its quotes and escapes. `None` for an unterminated
/// quoted string.
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return Some(value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            c => out.push(c),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(name: HeaderName, lines: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(&name, HeaderValue::from_bytes(line).expect("test header"));
        }
        map
    }

    fn addr(text: &str) -> Hop {
        Hop::Addr(text.parse().expect("test address"))
    }

    #[test]
    fn x_forwarded_for_lists_every_line_in_order() {
        let map = headers(
            X_FORWARDED_FOR,
            &[b"192.0.2.1, 2001:db8::1", b" [2001:db8::2]:443 ,198.51.100.7:80"],
        );
        assert_eq!(
            x_forwarded_for(&map),
            [
                addr("192.0.2.1"),
                addr("2001:db8::1"),
                addr("2001:db8::2"),
                addr("198.51.100.7")
            ]
        );
    }

    #[test]
    fn x_forwarded_for_marks_garbage_and_skips_empty_elements() {
        let map = headers(
            X_FORWARDED_FOR,
            &[b"not-an-ip,, 192.0.2.1,", b"\xff\xfe", b"unknown"],
        );
        assert_eq!(
            x_forwarded_for(&map),
            [Hop::Unusable, addr("192.0.2.1"), Hop::Unusable, Hop::Unusable]
        );
    }

    #[test]
    fn forwarded_reads_for_parameters_quoted_or_not() {
        let map = headers(
            FORWARDED,
            &[
                br#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#,
                br#"proto=https;for="198.51.100.1""#,
            ],
        );
        assert_eq!(
            forwarded(&map),
            [
                addr("192.0.2.60"),
                addr("2001:db8:cafe::17"),
                addr("198.51.100.1")
            ]
        );
    }

    #[test]
    fn forwarded_marks_unknown_obfuscated_and_missing_for() {
        let map = headers(
            FORWARDED,
            &[br#"for=unknown, for="_gazonk", proto=https, for="a,b", for="192.0.2.1"#],
        );
        assert_eq!(
            forwarded(&map),
            [
                Hop::Unusable,
                Hop::Unusable,
                Hop::Unusable,
                Hop::Unusable,
                Hop::Unusable
            ]
        );
    }

    #[test]
    fn quoted_separators_do_not_split() {
        let parts: Vec<&str> = split_outside_quotes(r#"a="x,y",b="\"q,\"",c"#, ',').collect();
        assert_eq!(parts, [r#"a="x,y""#, r#"b="\"q,\"""#, "c"]);
        assert_eq!(unquote(r#""a\"b""#).as_deref(), Some(r#"a"b"#));
        assert_eq!(unquote(r#""open"#), None);
    }
}
