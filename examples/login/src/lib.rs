//! A login endpoint protected from password guessing by tollgate's attempts counter, per account.
//!
//! `POST /login` with `{"username", "password"}`:
//!
//! | answer | when |
//! |---|---|
//! | 200 `{"username", "session_token", "note"}` | right password; the account's counter is cleared |
//! | 401 problem, `attempts_remaining` | wrong password or unknown user (the same answer for both) |
//! | 429 problem, `Retry-After`, `retry_after_ms` | [`MAX_FAILURES`] tries without a success within the [`LOCKOUT`] hour that began with the first one |
//! | 400 problem | malformed JSON, a missing field, an empty or overlong username |
//! | 415 problem | a body that is not declared `application/json` |
//! | 503 problem | the attempts store failed: a login limiter fails closed |
//!
//! The counter is per account (`login:<username in lower case>`), not per client address, so
//! guessing one account's password from many addresses is stopped too. The price is that anyone
//! can lock an account for an hour by failing five times; real deployments pair this with a
//! per-IP limit (see the movies example) and a way for the owner to unlock.
//!
//! ```
//! use tollgate::MemoryStore;
//! use tollgate_example_login::{Users, app};
//!
//! // One instance: the embedded store. A fleet passes a `tollgate_redis::RedisStore` instead,
//! // so every instance counts the same failures.
//! let router: axum::Router = app(MemoryStore::new(), Users::demo());
//! # let _ = router;
//! ```
//!
//! # Layout
//!
//! - this file: the router and the login handler, where a try is counted and the counter reset.
//! - [`users`]: [`Users`], the in-memory user table with constant-time password checks.
//! - [`problem`]: the 400, 401, 415, 429 and 503 problem answers.

pub mod problem;
pub mod users;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tollgate::AttemptsStore;

pub use users::Users;

/// Failed logins an account may have before it is locked: each try counts before the password
/// is verified, and a success clears the count.
pub const MAX_FAILURES: u64 = 5;
/// How long the counter lives, from the try that creates it; later tries do not extend it.
pub const LOCKOUT: Duration = Duration::from_secs(60 * 60);
/// The longest accepted username, in bytes (the counter key must stay small).
pub const MAX_USERNAME_LEN: usize = 128;

/// The body of `POST /login`.
#[derive(Debug, Deserialize)]
struct Credentials {
    username: String,
    password: String,
}

struct AppState<S> {
    store: S,
    users: Users,
}

/// The router: `POST /login`, with failures counted in `store` (a `MemoryStore` for one instance,
/// a `RedisStore` to share the counts across a fleet) and passwords checked against `users`.
///
/// ```
/// use tollgate::MemoryStore;
/// use tollgate_example_login::{Users, app};
///
/// let users = Users::new([("carol", "correct horse battery staple")]);
/// let router: axum::Router = app(MemoryStore::new(), users);
/// # let _ = router;
/// ```
pub fn app<S: AttemptsStore + 'static>(store: S, users: Users) -> Router {
    let state = Arc::new(AppState { store, users });
    Router::new().route("/login", post(login::<S>)).with_state(state)
}

/// The counter key of an account. Usernames are case-insensitive, so `Alice` and `alice` share
/// one counter.
///
/// ```
/// assert_eq!(tollgate_example_login::attempts_key("Alice"), "login:alice");
/// ```
pub fn attempts_key(username: &str) -> String {
    format!("login:{}", username.to_lowercase())
}

async fn login<S: AttemptsStore>(
    State(state): State<Arc<AppState<S>>>,
    body: Result<Json<Credentials>, JsonRejection>,
) -> Response {
    let credentials = match body {
        Ok(Json(credentials)) => credentials,
        Err(rejection) => {
            // axum says 422 for well-formed JSON of the wrong shape; to a client both are a bad
            // request. Only a body not declared as JSON keeps its 415.
            let status = match rejection {
                JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
                _ => StatusCode::BAD_REQUEST,
            };
            return problem::bad_request(status, rejection.body_text());
        }
    };
    if credentials.username.is_empty() || credentials.username.len() > MAX_USERNAME_LEN {
        return problem::bad_request(
            StatusCode::BAD_REQUEST,
            format!("username must be 1 to {MAX_USERNAME_LEN} bytes"),
        );
    }
    let key = attempts_key(&credentials.username);
    let store = &state.store;

    // Count the try before looking at the password, in one atomic step: of any number of
    // parallel guesses, at most `MAX_FAILURES` get this far. A locked account answers 429 even
    // to the right password, so a guesser learns nothing from the answers once locked.
    // (Checking first and counting failures after would let every guess in flight pass the
    // check before any is counted: see docs/login.md.)
    let tried = match store.try_attempt(key.as_bytes(), MAX_FAILURES, LOCKOUT).await {
        Ok(tried) => tried,
        Err(err) => return problem::store_unavailable(&err),
    };
    if !tried.allowed {
        return problem::locked(tried.ttl);
    }

    if state.users.verify(&credentials.username, &credentials.password) {
        if let Err(err) = store.reset_attempts(key.as_bytes()).await {
            return problem::store_unavailable(&err);
        }
        let username = credentials.username.to_lowercase();
        let body = json!({
            "session_token": format!("fake-session-token-for-{username}"),
            "username": username,
            "note": "a fake token: this example shows rate limiting and issues no real sessions",
        });
        return (StatusCode::OK, Json(body)).into_response();
    }

    // Unknown users land here too, counted and answered exactly like a wrong password, so the
    // answers do not reveal which usernames exist. The try is already counted.
    problem::unauthorized(tried.remaining)
}
