//! envoyproxy/ratelimit's `/json` endpoint: `ShouldRateLimit` over plain HTTP, for clients that
//! cannot speak gRPC (a Lua filter, a shell script, a service without a gRPC stack).
//!
//! `POST /json` takes a `RateLimitRequest` in the proto3 JSON mapping and answers the
//! `RateLimitResponse` in the same mapping, decided by the very function the gRPC door calls
//! ([`RlsService::answer`]), so both doors always give the same answer:
//!
//! ```json
//! {"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/login"}]}]}
//! ```
//!
//! ```json
//! {"overallCode": "OVER_LIMIT", "statuses": [{"code": "OVER_LIMIT",
//!  "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"}, "durationUntilReset": "42s"}]}
//! ```
//!
//! # Reading the request, as protobuf's JSON parser does
//!
//! - Field names in either spelling: `hits_addend` or `hitsAddend`, `is_negative_hits` or
//!   `isNegativeHits`, `requests_per_unit` or `requestsPerUnit`; both spellings of one field in
//!   one object is an error, and so is a field the message does not have.
//! - Integers as JSON numbers or as strings (`"3"`); `null` for any field means its default.
//! - A descriptor's `limit.unit` by name (`"MINUTE"`) or number; `hits_addend` of a descriptor
//!   is a `google.protobuf.UInt64Value`, written as the bare number.
//!
//! # Status codes
//!
//! As upstream: `200` when the overall code is `OK`, `429` when it is `OVER_LIMIT`, `500` when it
//! is `UNKNOWN`, and `400` for a body that is not a valid request (malformed JSON, a wrong type,
//! an unknown field) and for the requests `ShouldRateLimit` refuses (an empty domain or
//! descriptor list, `is_negative_hits`). Where upstream answers `400` with the text `Bad
//! Request`, tollgate answers an RFC 9457 problem (`application/problem+json`) whose `detail`
//! says what is wrong (`descriptors[0].entries[0].key: expected a string, got 7`). One deliberate
//! difference: when the store failed and a limit fails closed, the answer is `503` (the gRPC
//! door's `UNAVAILABLE`), not `400`, so a client can tell a sick server from a bad request.
//! A body over `MAX_BODY` (64 KiB) is `413`. Refunds (`is_negative_hits`) and charges (a
//! descriptor's `hits_addend`) need the app or admin token once one is set, as
//! `POST /v1/refund` and `POST /v1/charge` do: `401` without it.
//!
//! # Writing the answer, as protobuf's JSON printer does
//!
//! lowerCamelCase names; fields at their default (0, `""`, `UNKNOWN`, empty lists) left out;
//! enums by name; `google.protobuf.Duration` as `"42s"` (fractions as `"1.500s"`); bytes in
//! base64; `google.protobuf.Struct` as the JSON object it stands for.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tonic::Code as GrpcCode;

use super::RlsService;
use super::proto::rate_limit_response::Code;
use crate::ops::decision_log::Door;
use crate::runtime::listener::MAX_BODY;
use crate::runtime::problem::problem;
use crate::runtime::tokens::{self, Caller};

mod read;
mod write;

pub use read::parse_request;
pub use write::response_json;
pub(crate) use write::struct_json;

/// `POST /json` over `rls`, to merge into the HTTP router.
///
/// ```
/// use axum::body::Body;
/// use axum::http::{Request, StatusCode};
/// use tollgate_server::grpc::{RlsService, json};
/// use tollgate_server::{AppState, Settings};
/// use tollgate_server::AnyStore;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limits = tollgate_config::parse(
///     "edge.yaml",
///     "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
/// )?;
/// let app = json::router(RlsService::new(AppState::new(limits, AnyStore::memory(), Settings::default())));
/// let ask = || {
///     Request::post("/json").body(Body::from(
///         r#"{"domain": "edge", "descriptors": [{"entries": [{"key": "path", "value": "/"}]}]}"#,
///     ))
/// };
/// assert_eq!(app.clone().oneshot(ask()?).await?.status(), StatusCode::OK);
/// assert_eq!(app.oneshot(ask()?).await?.status(), StatusCode::TOO_MANY_REQUESTS);
/// # Ok(())
/// # }
/// ```
pub fn router(rls: RlsService) -> Router {
    Router::new()
        .route("/json", post(json))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(rls)
}

async fn json(
    State(rls): State<RlsService>,
    request_headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return problem(rejection.status(), rejection.body_text(), None),
    };
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err(detail) => return problem(StatusCode::BAD_REQUEST, detail, None),
    };
    let authorization = request_headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let caller = Caller::Bearer(tokens::bearer(authorization));
    match rls.answer_through(Door::Json, request, caller).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::Unknown) | Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let mut answer = (status, response_json(&response).to_string()).into_response();
            answer
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            answer
        }
        Err(status) => {
            let code = match status.code() {
                GrpcCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                GrpcCode::Unauthenticated => StatusCode::UNAUTHORIZED,
                GrpcCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            problem(code, status.message().to_owned(), None)
        }
    }
}
