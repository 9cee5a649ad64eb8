//! RFC 9457 problem answers (`application/problem+json`): the one shape every error of the HTTP
//! API and of the proxy's own answers has, so a client parses one kind of error body.
//!
//! Handlers build theirs with [`response`]; [`bare_errors`] is a middleware that turns any error
//! answer without a problem body (axum's 404 and 405, an extractor's plain-text 400) into one, so
//! no route can forget.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The longest plain-text error body [`bare_errors`] copies into `detail`.
const MAX_DETAIL: usize = 4096;

/// A problem answer with `status`, its reason as `title`, and `detail`.
///
/// ```
/// use axum::http::StatusCode;
///
/// let answer = tollgate_server::problem::response(StatusCode::NOT_FOUND, "no route for /x");
/// assert_eq!(answer.status(), StatusCode::NOT_FOUND);
/// assert_eq!(answer.headers()["content-type"], "application/problem+json");
/// ```
pub fn response(status: StatusCode, detail: impl Into<String>) -> Response {
    let body = json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail.into(),
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    response
}

/// Middleware: an error answer (4xx or 5xx) with no body type or a plain-text body becomes a
/// problem, with the text (if short) as `detail`. Headers such as `Allow` and `Retry-After` are kept.
pub async fn bare_errors(request: Request, next: Next) -> Response {
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
    let problem = response(status, detail);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    Response::from_parts(parts, problem.into_body())
}

/// What an error without a body of its own means.
fn default_detail(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "no such route".to_owned(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route (see `Allow`)".to_owned(),
        other => other.canonical_reason().unwrap_or("error").to_lowercase(),
    }
}
