//! The responses the layer answers with itself, as RFC 9457 problem details
//! (`Content-Type: application/problem+json`), and the IETF rate limit headers.
//!
//! | status | when | `type` slug | extension members |
//! |---|---|---|---|
//! | 429 | an enforced rule denies | `rate-limited` | `policy`, `limit`, `remaining`, `reset_after_ms`, `retry_after_ms` |
//! | 400 | a rule has no key and [`MissingKey::Reject`](crate::MissingKey) | `missing-key` | `policy` |
//! | 400 | a key is longer than [`MAX_KEY_LEN`](tollgate::bounds::MAX_KEY_LEN) | `key-too-long` | `policy`, `key_len`, `max_key_len` |
//! | 403 | a rule's key is on a deny list ([`tollgate::access`]) | `blocked` | `policy`, `reason` (`blocked`) |
//! | 503 | the store failed and the rule's policy is `FailClosed` | `store-unavailable` | `policy` |
//! | 500 | a rule keys on the client address and the request has no peer address (the app was served without connect info) | `no-peer-address` | `policy` |
//!
//! `type` is `about:blank` (with `title` the status's reason phrase, as RFC 9457 asks) unless
//! the layer was given a base URI with
//! [`problem_type_base`](crate::RateLimitLayerBuilder::problem_type_base), in which case it is
//! the base followed by the slug. The 429 members use the same names as the tollgate server's
//! JSON decisions; durations are milliseconds rounded up, so waiting that long is never early.
//!
//! Headers follow draft-ietf-httpapi-ratelimit-headers through [`tollgate::headers`]:
//! `RateLimit-Policy` and `RateLimit` are structured-field lists with one entry per enforced
//! rule, in rule order, comma-separated in one field line each (appended to any lines the inner
//! service set). A 429 adds `Retry-After` in whole seconds, rounded up; so does a 503, with the
//! wait the engine gives a request refused while the store is failing.

use axum::body::Body;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde_json::{Map, Value, json};
use tollgate::headers::millis_up;
use tollgate::{Decision, Policy, Verdict, headers};

use crate::KeyedPolicy;
use crate::keyed_policy::PolicyHeaders;

/// The media type of every problem body.
pub const CONTENT_TYPE_PROBLEM: &str = "application/problem+json";

/// Slug of a 429: an enforced rule denied the request.
pub const RATE_LIMITED: &str = "rate-limited";
/// Slug of a 400: a rule found no key and rejects such requests.
pub const MISSING_KEY: &str = "missing-key";
/// Slug of a 400: a key is longer than the store accepts.
pub const KEY_TOO_LONG: &str = "key-too-long";
/// Slug of a 500: a rule keys on the client address and the request carries no peer address,
/// because the app was served without connect info.
pub const NO_PEER_ADDRESS: &str = "no-peer-address";
/// Slug of a 403: a rule's key is on a deny list.
pub const BLOCKED: &str = "blocked";
/// Slug of a 503: the store failed and the policy fails closed.
pub const STORE_UNAVAILABLE: &str = "store-unavailable";

/// The `RateLimit-Policy` header's name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` header's name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Builds problem responses with the layer's `type` base.
#[derive(Debug, Clone, Default)]
pub(crate) struct Problems {
    pub(crate) type_base: Option<String>,
}

impl Problems {
    /// A problem response: `status`, the slug's `type`, `detail` and extension `members`.
    pub(crate) fn response(
        &self,
        status: StatusCode,
        slug: &str,
        detail: String,
        members: Map<String, Value>,
    ) -> Response<Body> {
        let kind = match &self.type_base {
            Some(base) => format!("{base}{slug}"),
            None => "about:blank".to_owned(),
        };
        response(status, &kind, detail, members)
    }

    /// The 429 for `decision` of `policy`, the rule that denies longest.
    pub(crate) fn rate_limited(&self, policy: &Policy, decision: &Decision) -> Response<Body> {
        let retry_after = decision.retry_after.unwrap_or(decision.reset_after);
        let detail = format!(
            "rate limit `{}` exceeded; retry in {} s",
            policy.name(),
            headers::seconds_up(retry_after).max(1)
        );
        let members = json!({
            "policy": policy.name(),
            "limit": decision.limit,
            "remaining": decision.remaining,
            "reset_after_ms": millis_up(decision.reset_after),
            "retry_after_ms": millis_up(retry_after),
        });
        let mut response = self.response(
            StatusCode::TOO_MANY_REQUESTS,
            RATE_LIMITED,
            detail,
            object(members),
        );
        if let Some(seconds) = headers::retry_after_seconds(decision) {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }

    /// The 403 for a request whose key is on a deny list. Which entry matched is not told.
    pub(crate) fn blocked(&self, policy: &Policy) -> Response<Body> {
        let detail = format!("the request's key is on a deny list of `{}`", policy.name());
        let members = json!({"policy": policy.name(), "reason": "blocked"});
        self.response(StatusCode::FORBIDDEN, BLOCKED, detail, object(members))
    }

    /// The 400 for a request without a key.
    pub(crate) fn missing_key(&self, policy: &Policy, what: &str) -> Response<Body> {
        let detail = format!(
            "rate limit `{}` needs {what}, and this request has none",
            policy.name()
        );
        self.response(
            StatusCode::BAD_REQUEST,
            MISSING_KEY,
            detail,
            object(json!({ "policy": policy.name() })),
        )
    }

    /// The 500 for a request without the peer address a rule keys on: the app's setup, not the
    /// client, is at fault, and the detail says how to fix it.
    pub(crate) fn no_peer_address(&self, policy: &Policy, what: &str) -> Response<Body> {
        self.response(
            StatusCode::INTERNAL_SERVER_ERROR,
            NO_PEER_ADDRESS,
            no_peer_address_detail(policy, what),
            object(json!({ "policy": policy.name() })),
        )
    }

    /// The 400 for a key past the store's bound.
    pub(crate) fn key_too_long(&self, policy: &Policy, what: &str, len: usize) -> Response<Body> {
        let max = tollgate::bounds::MAX_KEY_LEN;
        let detail = format!(
            "rate limit `{}` keys on {what}, which is {len} bytes here, above the maximum of {max}",
            policy.name()
        );
        self.response(
            StatusCode::BAD_REQUEST,
            KEY_TOO_LONG,
            detail,
            object(json!({ "policy": policy.name(), "key_len": len, "max_key_len": max })),
        )
    }

    /// The 503 for a store failure under a fail-closed policy, with `Retry-After` when
    /// `decision` (the engine's refusal) says how long to wait.
    pub(crate) fn store_unavailable(&self, policy: &Policy, decision: Option<&Decision>) -> Response<Body> {
        let detail = format!(
            "the rate limit store failed, and rate limit `{}` denies requests while it cannot decide",
            policy.name()
        );
        let mut response = self.response(
            StatusCode::SERVICE_UNAVAILABLE,
            STORE_UNAVAILABLE,
            detail,
            object(json!({ "policy": policy.name() })),
        );
        if let Some(seconds) = decision.and_then(headers::retry_after_seconds) {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The `RateLimit-Policy` and `RateLimit` field values of one response.
#[derive(Debug, Clone)]
pub(crate) struct RateLimitHeaders {
    policy: HeaderValue,
    limit: HeaderValue,
}

impl RateLimitHeaders {
    /// The two fields for the rules of a request (`applied[i]` bound as `bound[i]`) that
    /// [`headers::reported`] picks, the rule the server's HTTP API follows too: one entry each,
    /// in rule order. `None` when there is none.
    pub(crate) fn new(
        applied: &[&KeyedPolicy],
        bound: &[tollgate::Rule<'_>],
        verdict: &Verdict,
    ) -> Option<Self> {
        let mut reported = headers::reported(bound, verdict);
        let first = reported.next()?;
        let decisions = verdict.rules();
        match reported.next() {
            None => Self::one(&applied[first].headers, &decisions[first].decision),
            Some(second) => Self::many(
                [first, second]
                    .into_iter()
                    .chain(reported)
                    .map(|i| (&applied[i].headers, &decisions[i].decision)),
            ),
        }
    }

    /// The fields of a response that reports one rule, the common case: its policy field is
    /// ready made.
    fn one(rule: &PolicyHeaders, decision: &Decision) -> Option<Self> {
        let policy = match &rule.policy_value {
            Some(value) => value.clone(),
            None => HeaderValue::try_from(rule.policy.as_str()).ok()?,
        };
        // Sized exactly: a `Vec` with spare capacity would cost `Bytes` a second allocation.
        let mut limit = Vec::new();
        rule.push_limit(&mut limit, decision);
        Some(RateLimitHeaders {
            policy,
            limit: HeaderValue::try_from(limit).ok()?,
        })
    }

    /// The fields of a response that reports several rules, out of the one-rule road.
    #[inline(never)]
    fn many<'a>(mut decided: impl Iterator<Item = (&'a PolicyHeaders, &'a Decision)>) -> Option<Self> {
        let (first, decision) = decided.next()?;
        let mut policies = first.policy.clone();
        let mut limits = Vec::new();
        first.push_limit(&mut limits, decision);
        for (rule, decision) in decided {
            policies.push_str(", ");
            policies.push_str(&rule.policy);
            limits.extend_from_slice(b", ");
            rule.push_limit(&mut limits, decision);
        }
        // The core's renderings are printable ASCII, always valid header values.
        Some(RateLimitHeaders {
            policy: HeaderValue::try_from(policies).ok()?,
            limit: HeaderValue::try_from(limits).ok()?,
        })
    }

    /// Appends both fields to `map`, after any lines already there.
    pub(crate) fn append_to(self, map: &mut HeaderMap) {
        map.append(RATELIMIT_POLICY, self.policy);
        map.append(RATELIMIT, self.limit);
    }
}

/// The one builder of an RFC 9457 problem response (`application/problem+json`) in tollgate:
/// `type`, `title` (the status's reason phrase), `status` and `detail`, then the extension
/// `members`. The layer's answers and the server's errors are all built here, so every error a
/// client sees has one shape.
///
/// ```
/// use axum::http::StatusCode;
/// use tollgate_tower::problem::{CONTENT_TYPE_PROBLEM, response};
///
/// let answer = response(StatusCode::BAD_REQUEST, "about:blank", "cost must be at least 1".into(), Default::default());
/// assert_eq!(answer.status(), 400);
/// assert_eq!(answer.headers()["content-type"], CONTENT_TYPE_PROBLEM);
/// ```
pub fn response(
    status: StatusCode,
    kind: &str,
    detail: String,
    members: Map<String, Value>,
) -> Response<Body> {
    let mut body = Map::new();
    body.insert("type".into(), kind.into());
    body.insert(
        "title".into(),
        status.canonical_reason().unwrap_or("Error").into(),
    );
    body.insert("status".into(), status.as_u16().into());
    body.insert("detail".into(), detail.into());
    body.extend(members);
    let mut response = Response::new(Body::from(Value::Object(body).to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_PROBLEM));
    response
}

pub(crate) fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// What to do about a request without a peer address: the problem's detail.
fn no_peer_address_detail(policy: &Policy, what: &str) -> String {
    format!(
        "rate limit `{}` keys on {what}, but the request carries no peer address: serve the app \
         with `into_make_service_with_connect_info::<SocketAddr>()` (axum), or insert the \
         connection's `SocketAddr` into the request extensions (hyper)",
        policy.name()
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn limit_entries_are_the_cores_rendering() -> Result<(), Box<dyn std::error::Error>> {
        use tollgate::{Algorithm, Rate};
        for name in ["movies", r#"a"b\c;r=0;t=0"#, "café", "x;q=1"] {
            let policy = Policy::new(name, Algorithm::gcra(Rate::per_second(10)?, 5)?)?;
            let rule = PolicyHeaders::new(&policy);
            assert_eq!(rule.policy, headers::ratelimit_policy(&policy));
            for (remaining, reset_after) in [
                (0, Duration::ZERO),
                (u64::MAX, Duration::from_micros(1)),
                (17, Duration::from_millis(59_001)),
            ] {
                let decision = Decision {
                    remaining,
                    reset_after,
                    ..Decision::default()
                };
                let mut out = Vec::new();
                rule.push_limit(&mut out, &decision);
                assert_eq!(
                    String::from_utf8(out)?,
                    headers::ratelimit(&policy, &decision),
                    "{name}"
                );
            }
        }
        Ok(())
    }
}
