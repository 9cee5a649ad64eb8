//! Authorization by bearer token on the HTTP API: each guarded route calls one of two functions,
//! which read the `Authorization` header and ask [`tokens`] (the one comparison every door
//! shares) whether it may go on. The table of routes by kind is in
//! `docs/operations.md`.

use axum::http::{HeaderMap, StatusCode, header};

use super::error::ApiError;
use crate::runtime::SharedState;
use crate::runtime::tokens::{self, Act, Refusal};

/// Admin calls need `Authorization: Bearer <admin token>` once any token is configured; with
/// only an app token they are closed (`403`), since no credential could open them.
pub(crate) fn authorize_admin(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    authorize(state, request_headers, Act::Admin)
}

/// App calls need `Authorization: Bearer <token>` with the app token or the admin token, once
/// either is configured: a server with only an admin token keeps these calls to its admin, and
/// one with neither is open.
pub(crate) fn authorize_app(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    authorize(state, request_headers, Act::App)
}

fn authorize(state: &SharedState, request_headers: &HeaderMap, act: Act) -> Result<(), ApiError> {
    state
        .settings
        .tokens()
        .authorize(act, bearer(request_headers))
        .map_err(|refusal| {
            let status = match refusal {
                Refusal::NoToken => StatusCode::UNAUTHORIZED,
                Refusal::Closed => StatusCode::FORBIDDEN,
            };
            ApiError::new(status, refusal.message(act))
        })
}

/// The bearer token of a request, `""` without one.
fn bearer(request_headers: &HeaderMap) -> &str {
    tokens::bearer(
        request_headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    )
}
