//! Reading request bodies: JSON parsed here rather than by an extractor, so that malformed
//! JSON, a missing field, a body over the limit and a body that arrives too slowly all become a
//! problem that names what is wrong, the same on every route.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::runtime::listener::BodyLimitError;

/// Parses a JSON body, turning every way it can be wrong into a 4xx naming the problem.
pub(crate) fn json_body<T: DeserializeOwned>(body: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    parse_json(&body_bytes(body)?)
}

/// Parses JSON bytes as `T`; the problem names the field that is wrong (`cost: invalid type:
/// string "x", expected u64`), and says what a `\uD800`-style escape is, since serde's words
/// for it ("hex escape") do not.
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let parsed: T = serde_path_to_error::deserialize(&mut reader).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let hint = if inner.to_string().contains("hex escape") {
            " (a \\u escape of half a UTF-16 surrogate pair is not a character: keys and values are UTF-8 text)"
        } else {
            ""
        };
        match path.as_str() {
            "." | "" => ApiError::bad_request(format!("invalid JSON body: {inner}{hint}")),
            path => ApiError::bad_request(format!("invalid JSON body: {path}: {inner}{hint}")),
        }
    })?;
    // Anything after the value (`{} {}`) is as wrong as a missing brace.
    reader
        .end()
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    Ok(parsed)
}

/// A body's bytes, or the 4xx for a body that was too large, too slow or unreadable.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if let Some(cut) = BodyLimitError::find(&rejection) {
            if matches!(cut, BodyLimitError::TimedOut(_)) {
                crate::ops::metrics::connection_timed_out("http", "body");
            }
            return ApiError::new(cut.status(), cut.to_string());
        }
        let status = rejection.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            "the request body is too large".to_owned()
        } else {
            rejection.body_text()
        };
        ApiError::new(status, message)
    })
}

/// A parsed JSON body as `T`, with the same errors as [`json_body`].
pub(crate) fn from_json_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        match path.as_str() {
            "." | "" => ApiError::bad_request(format!("invalid JSON body: {}", e.into_inner())),
            path => ApiError::bad_request(format!("invalid JSON body: {path}: {}", e.into_inner())),
        }
    })
}
