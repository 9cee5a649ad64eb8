//! The `Host` rule every HTTP listener applies: an HTTP/1.1 request carries exactly one `Host`
//! (RFC 9112 §3.2), and no request carries two.
//!
//! The HTTP parser takes a request with no `Host` or with two. Answering it would let a client
//! be counted under one host and served under another: the proxy forwards headers as they came,
//! and an upstream or a cache beside it may pick either `Host`, or fill in its own. So both are
//! refused with 400 before any handler, on every listener alike. HTTP/1.0 predates `Host`, and
//! HTTP/2 names the host in `:authority`, so neither needs the header; HTTP/2 with two is still
//! refused.

use axum::http::{HeaderMap, Version, header::HOST};

/// Why a request's `Host` headers are refused; `None` when they are fine.
pub(crate) fn refusal(version: Version, headers: &HeaderMap) -> Option<&'static str> {
    let mut hosts = headers.get_all(HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Some("the request has more than one `Host` header; exactly one is allowed"),
        (None, _) if version == Version::HTTP_11 => {
            Some("an HTTP/1.1 request must have a `Host` header (RFC 9112 §3.2)")
        }
        _ => None,
    }
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

    #[test]
    fn http11_needs_exactly_one_host() {
        assert_eq!(refusal(Version::HTTP_11, &hosts(&["a"])), None);
        assert_eq!(refusal(Version::HTTP_11, &hosts(&[""])), None);
        assert!(refusal(Version::HTTP_11, &hosts(&[])).is_some());
        assert!(refusal(Version::HTTP_11, &hosts(&["a", "b"])).is_some());
        assert!(refusal(Version::HTTP_11, &hosts(&["a", "a"])).is_some());
    }

    #[test]
    fn http10_and_http2_may_go_without_host_but_never_have_two() {
        for version in [Version::HTTP_10, Version::HTTP_2] {
            assert_eq!(refusal(version, &hosts(&[])), None, "{version:?}");
            assert_eq!(refusal(version, &hosts(&["a"])), None, "{version:?}");
            assert!(refusal(version, &hosts(&["a", "b"])).is_some(), "{version:?}");
        }
    }
}
