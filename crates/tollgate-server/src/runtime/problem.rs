//! RFC 9457 problem answers (`application/problem+json`): the one shape every error of the HTTP
//! API, the Envoy `/json` door and the proxy's own answers has, so a client parses one kind of
//! error body.
//!
//! [`Problem`] is that body and its builder; the OpenAPI document's `Problem` schema is derived
//! from it, so the document describes what is sent. [`bare_errors`] is a middleware that turns
//! any error answer without a problem body (axum's 404 and 405, an extractor's plain-text 400)
//! into one, so no route can forget. The answer itself is built by the tower layer's builder
//! ([`tollgate_tower::problem::response`]), whose 429s the proxy sends: one shape, one place.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The media type of every error body.
pub(crate) const PROBLEM_JSON: &str = tollgate_tower::problem::CONTENT_TYPE_PROBLEM;

/// The `type` of the 403 a deny-listed key gets, with `"reason": "blocked"`.
pub(crate) const BLOCKED_TYPE: &str = "urn:tollgate:problem:blocked";

/// The longest plain-text error body [`bare_errors`] copies into `detail`.
const MAX_DETAIL: usize = 4096;

/// An RFC 9457 problem: every error answer's body (`application/problem+json`).
#[derive(Debug, Serialize, ToSchema)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<String>,
    /// `blocked` for a key on a deny list.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
}

impl Problem {
    /// A problem of type `about:blank` with `status`, its reason as `title`, and `detail`.
    pub(crate) fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Problem {
            kind: "about:blank".to_owned(),
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            policy: None,
            reason: None,
        }
    }

    /// Of type `kind` (a URI naming the kind of problem) instead of `about:blank`.
    pub(crate) fn kind(self, kind: &str) -> Self {
        Problem {
            kind: kind.to_owned(),
            ..self
        }
    }

    /// With the policy to blame as the `policy` member, when there is one.
    pub(crate) fn policy(self, policy: Option<&str>) -> Self {
        Problem {
            policy: policy.map(str::to_owned),
            ..self
        }
    }

    /// With a `reason` member.
    pub(crate) fn reason(self, reason: &str) -> Self {
        Problem {
            reason: Some(reason.to_owned()),
            ..self
        }
    }
}

impl IntoResponse for Problem {
    /// Built by the tower layer's builder, the one every problem answer goes through.
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut members = serde_json::Map::new();
        if let Some(policy) = self.policy {
            members.insert("policy".into(), policy.into());
        }
        if let Some(reason) = self.reason {
            members.insert("reason".into(), reason.into());
        }
        tollgate_tower::problem::response(status, &self.kind, self.detail, members)
    }
}

/// A problem answer with `status`, `detail`, and `policy` as a member when one is to blame: the
/// shorthand for [`Problem`].
pub(crate) fn problem(status: StatusCode, detail: impl Into<String>, policy: Option<&str>) -> Response {
    Problem::new(status, detail).policy(policy).into_response()
}

/// Middleware: an error answer (4xx or 5xx) with no body type or a plain-text body becomes a
/// problem, with the text (if short) as `detail`. Headers such as `Allow` and `Retry-After` are kept.
pub(crate) async fn bare_errors(request: Request, next: Next) -> Response {
    let answer = next.run(request).await;
    let status = answer.status();
    // Only bodies that say nothing a client could parse: none, or plain text. A JSON answer
    // (a 429 decision) is already what the API documents.
    let bare = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|value| value.as_bytes().starts_with(b"text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !bare {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let text = axum::body::to_bytes(body, MAX_DETAIL)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let detail = if text.is_empty() {
        default_detail(status)
    } else {
        text
    };
    let answer = problem(status, detail, None);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Response::from_parts(parts, answer.into_body())
}

/// What an error without a body of its own means.
fn default_detail(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "no such route".to_owned(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route (see `Allow`)".to_owned(),
        other => other.canonical_reason().unwrap_or("error").to_lowercase(),
    }
}
