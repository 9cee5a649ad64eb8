//! Admin authorization: the bearer token that guards every admin route (resets, overrides,
//! access lists, top offenders, the dashboard's data). One function, so no route compares tokens
//! its own way.

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
    let given = request_headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // `subtle` compares in time that depends only on the lengths, not on where they differ.
    if bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "admin token required: Authorization: Bearer <token>",
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::runtime::{AnyStore, AppState, Settings};

    fn state(token: &str) -> Arc<AppState> {
        let settings = Settings {
            admin_token: Some(token.into()),
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
}
