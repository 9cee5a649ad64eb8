//! Authorization by bearer token. Every route is one of three kinds: open; *app* (what an
//! application calls on behalf of its users: attempts try, count and clear, refunds, charges,
//! lease release), which takes the app token or the admin token; and *admin* (resets, overrides,
//! access lists, top offenders, the dashboard's data), which takes the admin token only. A token
//! guards its routes only once configured, so a server without tokens answers everyone, as
//! before tokens existed. Two functions, so no route compares tokens its own way; the table of
//! routes by kind is in `docs/operations.md`.

use axum::http::{HeaderMap, StatusCode, header};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::runtime::SharedState;

/// Admin calls need `Authorization: Bearer <token>` when a token is configured. The token is
/// compared in constant time, so response timing does not reveal how much of a guess was right.
pub(crate) fn authorize_admin(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(token) = &state.settings.admin_token else {
        return Ok(());
    };
    if matches(bearer(request_headers), token) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin token required: Authorization: Bearer <token>",
        ))
    }
}

/// App calls need `Authorization: Bearer <token>` with the app token or the admin token, once
/// either is configured: a server with only an admin token keeps these calls to its admin, and
/// one with neither is open. Both tokens are always compared, so timing does not tell which one
/// a guess came close to.
pub(crate) fn authorize_app(state: &SharedState, request_headers: &HeaderMap) -> Result<(), ApiError> {
    let settings = &state.settings;
    if settings.app_token.is_none() && settings.admin_token.is_none() {
        return Ok(());
    }
    let given = bearer(request_headers);
    let app = settings.app_token.as_deref().is_some_and(|t| matches(given, t));
    let admin = settings.admin_token.as_deref().is_some_and(|t| matches(given, t));
    if app | admin {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "app or admin token required: Authorization: Bearer <token>",
        ))
    }
}

/// The bearer token of a request, `""` without one.
fn bearer(request_headers: &HeaderMap) -> &str {
    request_headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// `subtle` compares in time that depends only on the lengths, not on where they differ.
fn matches(given: &str, token: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::runtime::{AnyStore, AppState, Settings};

    fn state(token: &str) -> Arc<AppState> {
        with_tokens(Some(token), None)
    }

    fn with_tokens(admin: Option<&str>, app: Option<&str>) -> Arc<AppState> {
        let settings = Settings {
            admin_token: admin.map(Into::into),
            app_token: app.map(Into::into),
            ..Settings::default()
        };
        let limits = tollgate_config::parse("t.yaml", "policies: {}").unwrap();
        AppState::new(limits, AnyStore::memory(), settings)
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        headers
    }

    #[test]
    fn tokens_pass_only_when_identical() {
        let state = state("secret");
        assert!(authorize_admin(&state, &bearer("secret")).is_ok());
        assert!(authorize_admin(&state, &bearer("secreT")).is_err());
        assert!(authorize_admin(&state, &bearer("secret!")).is_err());
        assert!(authorize_admin(&state, &HeaderMap::new()).is_err());
    }

    #[test]
    fn app_calls_take_either_token_and_admin_calls_only_the_admin_one() {
        let state = with_tokens(Some("admin"), Some("app"));
        assert!(authorize_app(&state, &bearer("app")).is_ok());
        assert!(authorize_app(&state, &bearer("admin")).is_ok());
        assert!(authorize_app(&state, &bearer("ap")).is_err());
        assert!(authorize_app(&state, &HeaderMap::new()).is_err());
        assert!(authorize_admin(&state, &bearer("app")).is_err());
    }

    #[test]
    fn app_calls_are_open_only_without_any_token() {
        assert!(authorize_app(&with_tokens(None, None), &HeaderMap::new()).is_ok());
        let admin_only = with_tokens(Some("admin"), None);
        assert!(authorize_app(&admin_only, &HeaderMap::new()).is_err());
        assert!(authorize_app(&admin_only, &bearer("admin")).is_ok());
        let app_only = with_tokens(None, Some("app"));
        assert!(authorize_app(&app_only, &bearer("app")).is_ok());
        assert!(authorize_admin(&app_only, &HeaderMap::new()).is_ok());
    }
}
