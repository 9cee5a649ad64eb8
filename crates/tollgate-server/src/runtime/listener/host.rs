//! The `Host` rule every HTTP listener applies: an HTTP/1.1 request carries exactly one `Host`
//! (RFC 9112 §3.2), no request carries two, the one it carries is one host, and it names the
//! same host as the request target when the target names one.
//!
//! The HTTP parser takes a request with no `Host` or with two, and takes any bytes a header
//! value may hold. Answering such a request would let a client be counted under one host and
//! served under another: the proxy forwards `Host`, and an upstream or a cache beside it may
//! pick either of two `Host`s, the first or the last of `a.example, b.example`, the part after
//! `@` of `user@evil.example`, or the absolute-form target's host over the header's (RFC 9112
//! §3.2.2 tells servers to). So every one of these is refused with 400 before any handler, on
//! every listener alike:
//!
//! - no `Host` in HTTP/1.1, or two `Host` headers in any version;
//! - a `Host` (or a target's authority) that is not one host: a list (`,`), whitespace inside,
//!   userinfo (`user@`), a character a host name cannot have (only ASCII letters, digits, `-`,
//!   `.` and `_`, or an `[IPv6]` literal), an empty label (`a..example`, `.a.example`), or a port
//!   that is not a number up to 65535;
//! - a `Host` that names another host than the absolute-form target (`GET http://a.example/`)
//!   or HTTP/2's `:authority`, compared in [normal form](normalize).
//!
//! HTTP/1.0 predates `Host`, and HTTP/2 names the host in `:authority`, so neither needs the
//! header. An empty `Host` is what RFC 9112 asks of a client whose target has no authority, and
//! is kept.
//!
//! What the proxy forwards is the host's normal form: ASCII letters in lower case, one trailing
//! dot dropped (`A.Example.` is `a.example`), the port without leading zeros and dropped when
//! empty (`a.example:0080` is `a.example:80`, `a.example:` is `a.example`), an IPv6 address as
//! RFC 5952 writes it. DNS and virtual hosts read all of these as one host, and a route keyed by
//! `header:Host` must count them as one.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::net::Ipv6Addr;

use axum::http::{HeaderMap, Uri, Version, header::HOST};

/// Why a request's host is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum HostError {
    /// HTTP/1.1 without `Host`.
    #[error("an HTTP/1.1 request must have a `Host` header (RFC 9112 §3.2)")]
    Missing,
    /// Two or more `Host` headers.
    #[error("the request has more than one `Host` header; exactly one is allowed")]
    Several,
    /// A `Host` or a target authority that is not one host.
    #[error("{place} {problem}")]
    Malformed {
        /// Where the host was read.
        place: Place,
        /// What is wrong with it.
        problem: Malformed,
    },
    /// `Host` and the request target name different hosts.
    #[error("the request target names the host `{target}` but the `Host` header names `{host}`")]
    Disagree {
        /// The target's host, in normal form.
        target: String,
        /// The header's host, in normal form.
        host: String,
    },
}

/// Where a host was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// The `Host` header.
    Header,
    /// The request target's authority (absolute-form, or HTTP/2's `:authority`).
    Target,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Place::Header => "the `Host` header",
            Place::Target => "the request target's authority",
        })
    }
}

/// What is wrong with a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    /// `a.example, b.example`.
    #[error("holds a list (`,`); exactly one host is allowed")]
    List,
    /// `a b`.
    #[error("has whitespace inside")]
    Whitespace,
    /// `user@evil.example`.
    #[error("has userinfo (`user@`), which servers read differently")]
    Userinfo,
    /// Anything but ASCII letters, digits, `-`, `.` and `_` outside an IPv6 literal.
    #[error(
        "has a character a host name cannot have (only ASCII letters, digits, `-`, `.`, `_`, or an `[IPv6]` address, then `:port`)"
    )]
    Character,
    /// `a..example`, `.a.example`, `a.example..`, `:80`.
    #[error("has an empty label (such as `a..example`)")]
    EmptyLabel,
    /// `[…]` that is not an IPv6 address.
    #[error("has brackets that do not hold an IPv6 address")]
    Ipv6,
    /// A port that is not a number up to 65535.
    #[error("has a port that is not a number up to 65535")]
    Port,
}

/// The request's host in [normal form](normalize): from `Host`, else from the target (HTTP/2,
/// or an HTTP/1.0 absolute-form target); `None` when neither names one (HTTP/1.0). Refuses what
/// the [module](self) refuses.
pub(crate) fn check<'a>(
    version: Version,
    uri: &'a Uri,
    headers: &'a HeaderMap,
) -> Result<Option<Cow<'a, str>>, HostError> {
    let mut hosts = headers.get_all(HOST).iter();
    let header = match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => return Err(HostError::Several),
        (None, _) if version == Version::HTTP_11 => return Err(HostError::Missing),
        (header, _) => header,
    };
    let malformed = |place| move |problem| HostError::Malformed { place, problem };
    let target = uri
        .authority()
        .map(|authority| normalize(authority.as_str()).map_err(malformed(Place::Target)))
        .transpose()?;
    let Some(header) = header else {
        return Ok(target);
    };
    // Header values may hold any byte but controls; a host is ASCII.
    let header = header
        .to_str()
        .map_err(|_| malformed(Place::Header)(Malformed::Character))?;
    let host = normalize(header).map_err(malformed(Place::Header))?;
    match target {
        Some(target) if target != host => Err(HostError::Disagree {
            target: target.into_owned(),
            host: host.into_owned(),
        }),
        _ => Ok(Some(host)),
    }
}

/// `host` (`name`, `name:port`, `[IPv6]` or `[IPv6]:port`) in normal form, borrowed when it
/// already is: lower-case letters, no trailing dot, no empty port, no leading zeros in the port,
/// an IPv6 address as RFC 5952 writes it. The empty host is kept.
pub(crate) fn normalize(host: &str) -> Result<Cow<'_, str>, Malformed> {
    if host.is_empty() {
        return Ok(Cow::Borrowed(host));
    }
    // The problems a client most likely means, before the catch-all character rule.
    if host.contains(',') {
        return Err(Malformed::List);
    }
    if host.contains(|c: char| c.is_ascii_whitespace()) {
        return Err(Malformed::Whitespace);
    }
    if host.contains('@') {
        return Err(Malformed::Userinfo);
    }
    let (name, port) = match host.strip_prefix('[') {
        Some(literal) => {
            let (address, rest) = literal.split_once(']').ok_or(Malformed::Ipv6)?;
            let port = match rest {
                "" => None,
                rest => Some(rest.strip_prefix(':').ok_or(Malformed::Character)?),
            };
            let address: Ipv6Addr = address.parse().map_err(|_| Malformed::Ipv6)?;
            let port = port.map(normal_port).transpose()?.flatten();
            return Ok(Cow::Owned(match port {
                Some(port) => format!("[{address}]:{port}"),
                None => format!("[{address}]"),
            }));
        }
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(Malformed::Character);
    }
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() || trimmed.split('.').any(str::is_empty) {
        return Err(Malformed::EmptyLabel);
    }
    let number = port.map(normal_port).transpose()?.flatten();
    // A port is already normal when it is there and has no leading zero.
    let port_normal = port.is_none_or(|port| !port.is_empty() && (port == "0" || !port.starts_with('0')));
    if trimmed.len() == name.len() && !name.bytes().any(|b| b.is_ascii_uppercase()) && port_normal {
        return Ok(Cow::Borrowed(host));
    }
    let mut normal = trimmed.to_ascii_lowercase();
    if let Some(number) = number {
        let _ = write!(normal, ":{number}");
    }
    Ok(Cow::Owned(normal))
}

/// A port's number; `None` for the empty port (`host:`), which means no port.
fn normal_port(port: &str) -> Result<Option<u16>, Malformed> {
    if port.is_empty() {
        return Ok(None);
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(if port.contains(':') {
            Malformed::Character
        } else {
            Malformed::Port
        });
    }
    port.parse().map(Some).map_err(|_| Malformed::Port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn hosts(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(HOST, HeaderValue::from_static(value));
        }
        headers
    }

    fn origin() -> Uri {
        Uri::from_static("/v4/movies")
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        let uri = origin();
        let check = |values: &[&'static str]| {
            check(Version::HTTP_11, &uri, &hosts(values)).map(|h| h.map(Cow::into_owned))
        };
        assert_eq!(check(&["a"]), Ok(Some("a".to_owned())));
        assert_eq!(check(&[""]), Ok(Some(String::new())));
        assert_eq!(check(&[]), Err(HostError::Missing));
        assert_eq!(check(&["a", "b"]), Err(HostError::Several));
        assert_eq!(check(&["a", "a"]), Err(HostError::Several));
    }

    #[test]
    fn http10_and_http2_may_go_without_host_but_never_have_two() {
        let uri = origin();
        for version in [Version::HTTP_10, Version::HTTP_2] {
            assert_eq!(check(version, &uri, &hosts(&[])), Ok(None), "{version:?}");
            assert!(check(version, &uri, &hosts(&["a"])).is_ok(), "{version:?}");
            assert_eq!(
                check(version, &uri, &hosts(&["a", "b"])),
                Err(HostError::Several),
                "{version:?}"
            );
        }
    }

    #[test]
    fn hosts_are_refused_or_normalized() {
        use Malformed::*;
        for (host, why) in [
            ("a.example, b.example", List),
            ("a.example,b.example", List),
            ("a b", Whitespace),
            ("a.example\t", Whitespace),
            ("user@evil.example", Userinfo),
            ("a.example@evil.example", Userinfo),
            ("user:pass@a.example", Userinfo),
            ("a.example:80:80", Character),
            ("a%2eexample", Character),
            ("a/b", Character),
            ("caf\u{e9}.example", Character),
            ("a.example\\", Character),
            ("a..example", EmptyLabel),
            (".a.example", EmptyLabel),
            ("a.example..", EmptyLabel),
            (".", EmptyLabel),
            (":80", EmptyLabel),
            ("a.example:http", Port),
            ("a.example:65536", Port),
            ("a.example:-1", Port),
            ("[::1", Ipv6),
            ("[v1.x]", Ipv6),
            ("[fe80::1%25eth0]", Ipv6),
            ("[::1]80", Character),
        ] {
            assert_eq!(normalize(host), Err(why), "{host:?}");
        }
        for (host, normal) in [
            ("a.example", "a.example"),
            ("a.example:8080", "a.example:8080"),
            ("127.0.0.1:3000", "127.0.0.1:3000"),
            ("a_b.example", "a_b.example"),
            ("", ""),
            ("A.Example", "a.example"),
            ("a.example.", "a.example"),
            ("A.EXAMPLE.:8080", "a.example:8080"),
            ("a.example:", "a.example"),
            ("a.example:0080", "a.example:80"),
            ("[::1]", "[::1]"),
            ("[0:0:0:0:0:0:0:1]:8080", "[::1]:8080"),
            ("[2001:DB8::1]:", "[2001:db8::1]"),
        ] {
            assert_eq!(normalize(host).as_deref(), Ok(normal), "{host:?}");
        }
        assert!(matches!(normalize("a.example:8080"), Ok(Cow::Borrowed(_))));
    }

    #[test]
    fn the_target_and_host_must_name_one_host() {
        let absolute = Uri::from_static("http://A.example./v4/movies");
        let check = |uri: &Uri, values: &[&'static str]| {
            check(Version::HTTP_11, uri, &hosts(values)).map(|h| h.map(Cow::into_owned))
        };
        assert_eq!(check(&absolute, &["a.example"]), Ok(Some("a.example".to_owned())));
        assert_eq!(
            check(&absolute, &["b.example"]),
            Err(HostError::Disagree {
                target: "a.example".to_owned(),
                host: "b.example".to_owned()
            })
        );
        let userinfo = Uri::from_static("http://user@a.example/v4/movies");
        assert_eq!(
            check(&userinfo, &["a.example"]),
            Err(HostError::Malformed {
                place: Place::Target,
                problem: Malformed::Userinfo
            })
        );
        // HTTP/1.0 and HTTP/2 take the target's host when there is no header.
        assert_eq!(
            super::check(Version::HTTP_2, &absolute, &hosts(&[])).map(|h| h.map(Cow::into_owned)),
            Ok(Some("a.example".to_owned()))
        );
        assert!(
            HostError::Malformed {
                place: Place::Header,
                problem: Malformed::List
            }
            .to_string()
            .contains("`Host`")
        );
    }
}
