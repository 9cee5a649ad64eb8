//! The HTTP API's OpenAPI 3.1 document, generated from the handlers' annotations in `http.rs`
//! and the answer types below, served at `GET /openapi.json`.
//!
//! The answer types are the ones the handlers serialize, so the document cannot drift from what
//! the server sends; `docs/openapi.json` is a checked-in copy kept equal by a test, for people
//! generating clients without running the server; and the test suite runs schemathesis (an
//! outside fuzzer) against the served document, checking every answer against it.

use serde::Serialize;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// The decision on one rule, the answer of `POST /v1/check` with `policy` and `key`, and of
/// `GET /v1/limits/{policy}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The policy's limit (a window's limit, a bucket's capacity, GCRA's burst).
    pub limit: u64,
    /// What is left of it after this decision.
    pub remaining: u64,
    /// Milliseconds until the budget is full again.
    pub reset_after_ms: u64,
    /// When denied: milliseconds until a request of this cost could pass.
    pub retry_after_ms: Option<u64>,
    /// The store failed and the policy's failure mode decided.
    pub degraded: bool,
    /// Present and true when the rule was decided in shadow mode (the policy is in shadow mode,
    /// or the key is outside a gradually enforced policy's share): it never denies.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// Present when the key is on an allow list (`allow`: never limited, nothing spent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed: Option<&'static str>,
}

/// The decision on a list of rules, decided all or nothing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ListDecision {
    /// Whether the request may pass: no enforced rule denied it.
    pub allowed: bool,
    /// A rule's store failed and its failure mode decided.
    pub degraded: bool,
    /// When denied: milliseconds until the rule that waits longest could pass.
    pub retry_after_ms: Option<u64>,
    /// One entry per rule, in request order.
    pub rules: Vec<RuleDecision>,
}

/// One rule's part in a [`ListDecision`].
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RuleDecision {
    /// The rule's policy.
    pub policy: String,
    /// `allowed`, `denied`, `shadow_denied` (a shadow rule that would have denied) or `degraded`.
    pub outcome: &'static str,
    /// Whether this rule let the request pass.
    pub allowed: bool,
    /// The rule was decided in shadow mode (the policy is, or the key is outside a gradually
    /// enforced policy's share): it never denies.
    pub shadow: bool,
    /// The policy's limit.
    pub limit: u64,
    /// What is left; a rule that would have allowed a denied request reports its untouched budget.
    pub remaining: u64,
    /// Milliseconds until the budget is full again.
    pub reset_after_ms: u64,
    /// When this rule denied: milliseconds until it could pass.
    pub retry_after_ms: Option<u64>,
    /// The store failed and the policy's failure mode decided.
    pub degraded: bool,
    /// Present when the key is on an allow list (`allow`: never limited, nothing spent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listed: Option<&'static str>,
}

/// The answer of `POST /v1/check`: one decision, or a list's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum CheckAnswer {
    /// For `policy` and `key`.
    One(Decision),
    /// For `rules`.
    Many(ListDecision),
}

/// The count after `POST /v1/attempts/{purpose}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptCount {
    /// Failed attempts counted so far.
    pub attempts: u64,
}

/// The counter, from `GET /v1/attempts/{purpose}/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Attempts {
    /// Failed attempts counted so far.
    pub attempts: u64,
    /// Seconds until the counter is forgotten; null when there is none.
    pub ttl_seconds: Option<u64>,
}

/// Whether another attempt is allowed, from `GET /v1/attempts/{purpose}/{key}/check`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptsCheck {
    /// Another attempt is allowed.
    pub allowed: bool,
    /// Attempts left before `max`.
    pub remaining: u64,
    /// Seconds until the counter is forgotten; null when there is none.
    pub ttl_seconds: Option<u64>,
}

/// One circuit breaker of the store.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Breaker {
    /// The node: `host:port`.
    pub node: String,
    /// Open: calls to it are refused at once.
    pub open: bool,
}

/// The store's health, from `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// The store can decide now.
    pub ready: bool,
    /// `memory` or `redis` (one server or a cluster).
    pub store: &'static str,
    /// When not ready: `timeout`, `connection`, `auth`, `cluster`, ...
    pub class: Option<&'static str>,
    /// When not ready: what failed.
    pub error: Option<String>,
    /// Each node's breaker (none for the memory store).
    pub breakers: Vec<Breaker>,
}

/// The answer of `POST /v1/concurrency/{policy}/{key}/acquire` when a slot was granted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseGranted {
    /// What to send to `.../release`: 32 hexadecimal digits.
    pub lease_id: String,
    /// Milliseconds until the lease ends by itself, if it is not released before.
    pub expires_in_ms: u64,
    /// Leases of the key live now, this one included.
    pub in_flight: u64,
    /// The policy's `max_in_flight` (this instance's share, when degraded under `local`).
    pub limit: u64,
    /// The store failed and the policy's failure mode granted the lease.
    pub degraded: bool,
}

/// The 429 of an acquisition: an RFC 9457 problem with the wait and the count.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseDenied {
    /// Always `about:blank`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `Too Many Requests`.
    pub title: &'static str,
    /// 429.
    pub status: u16,
    /// How many leases are in flight, of how many.
    pub detail: String,
    /// The concurrency policy.
    pub policy: String,
    /// Milliseconds until the oldest lease expires: a slot is free by then at the latest.
    pub retry_after_ms: u64,
    /// Leases of the key live now.
    pub in_flight: u64,
    /// The policy's `max_in_flight`.
    pub limit: u64,
    /// The store failed and the policy's failure mode (`local`) denied.
    pub degraded: bool,
}

/// The answer of `POST /v1/concurrency/{policy}/{key}/release`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LeaseReleased {
    /// True when the lease was live and its slot is free now; false when it was not held
    /// (released before, expired, or never granted).
    pub released: bool,
    /// When released: leases of the key still live.
    pub in_flight: Option<u64>,
}

/// An RFC 9457 problem: every error answer's body (`application/problem+json`).
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // written by `http::problem`; this is its documented shape
pub(crate) struct Problem {
    /// `about:blank` (the status says what kind of problem it is), or
    /// `urn:tollgate:problem:blocked` for a key on a deny list.
    #[serde(rename = "type")]
    kind: String,
    /// The status's reason phrase.
    title: String,
    /// The HTTP status.
    status: u16,
    /// What exactly is wrong, naming the field or rule.
    detail: String,
    /// The policy to blame, when one is (a policy that fails closed, a deny list's policy).
    policy: Option<String>,
    /// `blocked` for a key on a deny list.
    reason: Option<String>,
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "tollgate",
        description = "Rate limit decisions over HTTP/JSON: check, peek, refund and reset per (policy, key), \
                       runtime overrides, concurrency leases (acquire and release), attempts counters for login protection, health and metrics. Every error is \
                       an RFC 9457 problem (application/problem+json)."
    ),
    paths(
        crate::http::check,
        crate::http::peek,
        crate::http::refund,
        crate::http::reset,
        crate::http::count_attempt,
        crate::http::attempts,
        crate::http::check_attempts,
        crate::http::clear_attempts,
        crate::http::render_metrics,
        crate::http::healthz,
        crate::http::ready,
        crate::http::openapi_json,
        crate::admin::list,
        crate::admin::add,
        crate::admin::remove,
        crate::admin::top_offenders,
        crate::explain::explain_query,
        crate::explain::explain_body,
        crate::overrides::list,
        crate::overrides::set_key,
        crate::overrides::get_key,
        crate::overrides::remove_key,
        crate::overrides::set_prefix,
        crate::overrides::get_prefix,
        crate::overrides::remove_prefix,
        crate::concurrency::acquire,
        crate::concurrency::release,
    ),
    components(schemas(
        Decision,
        ListDecision,
        RuleDecision,
        CheckAnswer,
        crate::http::CheckBody,
        crate::http::OneRule,
        crate::http::RuleList,
        crate::http::RuleBody,
        crate::http::CountAttempt,
        AttemptCount,
        Attempts,
        AttemptsCheck,
        Breaker,
        Readiness,
        Problem,
        crate::admin::EntryBody,
        crate::admin::EntryAnswer,
        crate::admin::EntryList,
        crate::admin::Offender,
        crate::admin::PolicyOffenders,
        crate::admin::TopOffenders,
        crate::overrides::OverrideRequest,
        crate::overrides::OverrideAnswer,
        crate::overrides::OverrideList,
        crate::explain::ExplainBody,
        crate::explain::ExplainDescriptor,
        crate::explain::ExplainEntryBody,
        crate::explain::Explanation,
        crate::explain::ExplainedRule,
        crate::explain::ExplainedEntry,
        crate::explain::BudgetState,
        LeaseGranted,
        LeaseDenied,
        LeaseReleased,
        crate::concurrency::ReleaseBody
    )),
    modifiers(&AdminToken),
    tags(
        (name = "decisions", description = "Check, peek, explain, refund and reset"),
        (name = "attempts", description = "Failed-attempt counters"),
        (name = "overrides", description = "Runtime overrides: another limit for a key or key prefix of a policy"),
        (name = "concurrency", description = "Concurrency limits: acquire and release leases"),
        (name = "operations", description = "Health, readiness, metrics, this document"),
        (name = "admin", description = "Allow and deny lists, top offenders"),
    )
)]
pub struct ApiDoc;

/// The `admin_token` scheme the reset and clear operations name: a bearer token, required only
/// when the server was started with `--admin-token`.
struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = Http::builder()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some("The server's --admin-token, when it has one"))
            .build();
        components.add_security_scheme("admin_token", SecurityScheme::Http(scheme));
    }
}

/// The document as pretty JSON, as served and as checked in under `docs/openapi.json`.
///
/// ```
/// let document = tollgate_server::openapi::document_json();
/// assert!(document.contains("\"/v1/check\""));
/// ```
pub fn document_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|err| format!("{{\"error\": \"the document did not render: {err}\"}}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// `docs/openapi.json` is the served document. `TOLLGATE_WRITE_OPENAPI=1 cargo test -p
    /// tollgate-server --lib openapi` rewrites it after a change to the API.
    #[test]
    fn the_checked_in_document_is_the_served_one() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
        let served = format!("{}\n", super::document_json());
        if std::env::var_os("TOLLGATE_WRITE_OPENAPI").is_some() {
            std::fs::write(&path, &served).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == served,
            "docs/openapi.json differs from the served document; run \
             TOLLGATE_WRITE_OPENAPI=1 cargo test -p tollgate-server --lib openapi"
        );
    }

    #[test]
    fn the_document_is_openapi_3_1_with_every_route() {
        let document: serde_json::Value = serde_json::from_str(&super::document_json()).unwrap();
        assert!(
            document["openapi"].as_str().unwrap().starts_with("3.1"),
            "{}",
            document["openapi"]
        );
        for path in [
            "/v1/check",
            "/v1/refund",
            "/v1/limits/{policy}/{key}",
            "/v1/attempts/{purpose}/{key}",
            "/v1/attempts/{purpose}/{key}/check",
            "/metrics",
            "/healthz",
            "/readyz",
            "/openapi.json",
            "/v1/admin/access",
            "/v1/admin/top-offenders",
            "/v1/concurrency/{policy}/{key}/acquire",
            "/v1/concurrency/{policy}/{key}/release",
        ] {
            assert!(document["paths"][path].is_object(), "no {path}");
        }
        let one_rule = &document["components"]["schemas"]["OneRule"];
        assert_eq!(one_rule["additionalProperties"], false);
        assert_eq!(
            document["components"]["schemas"]["CheckRequest"]["oneOf"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
}
