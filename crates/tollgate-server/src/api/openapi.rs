//! The HTTP API's OpenAPI 3.1 document, generated from the handlers' annotations and the types
//! they read and answer (each in its feature's file), served at `GET /openapi.json`.
//!
//! The schemas are derived from the types the handlers serialize, so the document cannot drift
//! from what the server sends; `docs/openapi.json` is a checked-in copy kept equal by a test, for
//! people generating clients without running the server; and the test suite runs schemathesis (an
//! outside fuzzer) against the served document, checking every answer against it.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, answer, attempts, charge, check, concurrency, limits, operations, overrides, rules};
use crate::runtime::problem::Problem;

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
        check::check,
        check::peek,
        limits::refund,
        limits::reset,
        charge::charge,
        attempts::try_attempt,
        attempts::count_attempt,
        attempts::attempts,
        attempts::check_attempts,
        attempts::clear_attempts,
        operations::render_metrics,
        operations::healthz,
        operations::ready,
        openapi_json,
        admin::list,
        admin::add,
        admin::remove,
        admin::top_offenders,
        crate::api::explain::routes::explain_query,
        crate::api::explain::routes::explain_body,
        overrides::list,
        overrides::set_key,
        overrides::get_key,
        overrides::remove_key,
        overrides::set_prefix,
        overrides::get_prefix,
        overrides::remove_prefix,
        concurrency::acquire,
        concurrency::release,
        concurrency::clear,
    ),
    components(schemas(
        answer::Decision,
        answer::ListDecision,
        answer::RuleDecision,
        answer::CheckAnswer,
        charge::ChargeAnswer,
        charge::ChargeDecision,
        charge::ChargeList,
        charge::RuleCharge,
        rules::CheckBody,
        rules::OneRule,
        rules::RuleList,
        rules::RuleBody,
        attempts::TryAttempt,
        attempts::AttemptAllowed,
        attempts::AttemptRefused,
        attempts::CountAttempt,
        attempts::AttemptCount,
        attempts::Attempts,
        attempts::AttemptsCheck,
        operations::Breaker,
        operations::Readiness,
        Problem,
        admin::EntryBody,
        admin::EntryAnswer,
        admin::EntryList,
        admin::Offender,
        admin::PolicyOffenders,
        admin::TopOffenders,
        overrides::OverrideRequest,
        super::override_view::OverrideAnswer,
        overrides::OverrideList,
        crate::api::explain::routes::ExplainBody,
        crate::api::explain::routes::ExplainDescriptor,
        crate::api::explain::routes::ExplainEntryBody,
        crate::api::explain::routes::ExplainLimit,
        crate::api::explain::Explanation,
        crate::api::explain::ExplainedRule,
        crate::api::explain::ExplainedEntry,
        crate::api::explain::BudgetState,
        concurrency::LeaseGranted,
        concurrency::LeaseDenied,
        concurrency::LeaseReleased,
        concurrency::LeasesCleared,
        concurrency::ReleaseBody
    )),
    modifiers(&Tokens),
    tags(
        (name = "decisions", description = "Check, peek, explain, charge, refund and reset"),
        (name = "attempts", description = "Failed-attempt counters"),
        (name = "overrides", description = "Runtime overrides: another limit for a key or key prefix of a policy"),
        (name = "concurrency", description = "Concurrency limits: acquire, release and clear leases"),
        (name = "operations", description = "Health, readiness, metrics, this document"),
        (name = "admin", description = "Allow and deny lists, top offenders"),
    )
)]
pub(crate) struct ApiDoc;

/// The two bearer schemes operations name: `admin_token` (admin operations, and app ones too)
/// and `app_token` (app operations only). Each lists `{}` as well, since a server without
/// tokens asks for none.
struct Tokens;

impl Modify for Tokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let schemes = [
            (
                "admin_token",
                "The server's --admin-token, when it has one: every protected operation",
            ),
            (
                "app_token",
                "The server's --app-token, when it has one: the app operations only (attempts try, \
                 count and clear, refund, charge, lease release)",
            ),
        ];
        for (name, description) in schemes {
            let scheme = Http::builder()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(description))
                .build();
            components.add_security_scheme(name, SecurityScheme::Http(scheme));
        }
    }
}

/// The document as pretty JSON, as served and as checked in under `docs/openapi.json`.
pub(crate) fn document_json() -> String {
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
            "/v1/charge",
            "/v1/limits/{policy}/{key}",
            "/v1/attempts/{purpose}/{key}",
            "/v1/attempts/{purpose}/{key}/check",
            "/v1/attempts/{purpose}/{key}/try",
            "/metrics",
            "/healthz",
            "/readyz",
            "/openapi.json",
            "/v1/admin/access",
            "/v1/admin/top-offenders",
            "/v1/concurrency/{policy}/{key}/acquire",
            "/v1/concurrency/{policy}/{key}/release",
            "/v1/concurrency/{policy}/{key}",
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

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json"))
)]
pub(crate) async fn openapi_json() -> Response {
    static DOCUMENT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let body = DOCUMENT.get_or_init(document_json).as_str();
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
