//! [`ApiError`], the error of every API handler: a status and a `detail`, answered as an RFC
//! 9457 problem ([`Problem`]). One type, so every route's errors have one shape and a handler can
//! use `?` on the core's errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tollgate::Error;

use crate::runtime::problem::Problem;

/// An error answer: a status and the problem's `detail`.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// The same error, about rule `index` of a list.
    pub(crate) fn at(mut self, index: usize) -> Self {
        self.message = format!("rules[{index}]: {}", self.message);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        Problem::new(self.status, self.message).into_response()
    }
}

/// Unusable input is the caller's fault (400); a policy at its bound of overrides is a conflict
/// with what the store holds (409, as a full access list); a failing store is ours (503).
impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        if matches!(err, Error::TooManyOverrides { .. }) {
            ApiError::new(StatusCode::CONFLICT, err.to_string())
        } else if err.is_bad_input() {
            ApiError::bad_request(err.to_string())
        } else {
            crate::ops::metrics::store_error(&err);
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
    }
}

impl ApiError {
    /// The 404 of a policy name the limits do not have.
    pub(crate) fn unknown_policy(name: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, format!("unknown policy `{name}`"))
    }

    /// The message, for an error that is reworded.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}
