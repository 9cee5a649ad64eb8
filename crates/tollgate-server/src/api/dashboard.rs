//! The dashboard: a page that shows what the server is doing now, for an operator with a
//! browser and no Prometheus at hand.
//!
//! | route | does | token |
//! |---|---|---|
//! | `GET /dashboard` | the page (HTML, no data in it) | no |
//! | `GET /dashboard/app.js`, `/dashboard/style.css` | its script and style | no |
//! | `GET /dashboard/data` | everything the page shows, as JSON | `Authorization: Bearer` when `--admin-token` is set |
//!
//! Per policy the page draws the decisions per second of each outcome (allowed, denied,
//! shadow-denied, degraded, error) over the last [`WINDOW_SECONDS`] seconds, the totals since
//! start (the same numbers as `tollgate_decisions_total`), and the most denied keys; beside them
//! the config in force, the store's health and circuit breakers (what `/readyz` says) and the
//! last reload. See [`recorder`](crate::ops::recorder) for how the counting stays cheap and bounded.
//!
//! **The token rule.** A browser sends no `Authorization` header when it navigates, so the page
//! and its assets are public and hold no data; the data endpoint answers only with the admin
//! token, like the other admin endpoints. When it answers 401 the page asks for the token once
//! and keeps it in the tab's `sessionStorage` (gone when the tab closes), sending it as a bearer
//! header on every poll. The token never appears in a URL, so it is not in access logs or history.
//!
//! The assets are ours, embedded in the binary with `include_str!` (no build step, nothing
//! fetched from elsewhere), and every answer carries a strict `Content-Security-Policy`
//! (`default-src 'self'`, no inline script or style), so a key a client chose cannot run as
//! script even if it were rendered carelessly (the page only ever sets `textContent`).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tollgate::Outcome;

use super::auth::authorize_admin;
use crate::ops::metrics;
use crate::ops::recorder::{RECORDER, WINDOW_SECONDS, unix_ms};
use crate::runtime::SharedState;

const PAGE: &str = include_str!("dashboard/assets/index.html");
const SCRIPT: &str = include_str!("dashboard/assets/app.js");
const STYLE: &str = include_str!("dashboard/assets/style.css");

/// Everything the page loads comes from this server; nothing inline, nothing framed.
const CSP: &str =
    "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// How many of the most denied keys the data endpoint lists per policy.
pub(crate) const TOP_KEYS_SHOWN: usize = 20;

/// The dashboard's routes over `state`; starts the once-a-second sampler.
pub(crate) fn router(state: SharedState) -> Router {
    RECORDER.start_sampling();
    Router::new()
        .route(
            "/dashboard",
            get(|| async { asset("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/dashboard/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/dashboard/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/dashboard/data", get(data))
        .with_state(state)
}

fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    secure(
        (
            [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
        )
            .into_response(),
    )
}

/// `GET /dashboard/data`: the admin token when one is set, then the whole picture.
async fn data(State(state): State<SharedState>, request_headers: HeaderMap) -> Response {
    if let Err(refused) = authorize_admin(&state, &request_headers) {
        return secure(refused.into_response());
    }
    secure(axum::Json(snapshot(&state).await).into_response())
}

/// The JSON the page draws.
async fn snapshot(state: &SharedState) -> Value {
    let limits = state.limits.load_full();
    let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    let by_outcome = |row: &[u64; Outcome::ALL.len()]| {
        Value::Object(
            outcomes
                .iter()
                .zip(row)
                .map(|(name, n)| ((*name).to_owned(), json!(n)))
                .collect(),
        )
    };
    let policies: Vec<Value> = limits
        .policies()
        .map(|(name, named)| {
            let view = RECORDER.view(name);
            let policy = named.policy();
            let (count, period) = tollgate_config::per_period(policy);
            let series: Vec<Vec<u64>> = (0..outcomes.len())
                .map(|i| view.per_second.iter().map(|row| row[i]).collect())
                .collect();
            json!({
                "name": name,
                "algorithm": policy.algorithm().name(),
                "limit": policy.algorithm().limit(),
                "per_period": {"count": count, "seconds": period.as_secs_f64()},
                "block_for_seconds": policy.block_for().map(|d| d.as_secs_f64()),
                "failure_mode": policy.failure_mode().to_string(),
                "shadow": named.shadow(),
                "totals": by_outcome(&view.totals),
                "per_second": Value::Object(
                    outcomes.iter().zip(series).map(|(name, s)| ((*name).to_owned(), json!(s))).collect()
                ),
                "top_keys": view.top.iter().take(TOP_KEYS_SHOWN).map(|(key, count, error)| json!({
                    "key": String::from_utf8_lossy(key),
                    "count": count,
                    "error": error,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let health = state.store.health().await;
    metrics::store_breakers(&health.breakers);
    let reload = RECORDER
        .last_reload()
        .map(|r| json!({"at_ms": r.at_ms, "ok": r.ok, "error": r.error}));
    json!({
        "now_ms": unix_ms(),
        "window_seconds": WINDOW_SECONDS,
        "outcomes": outcomes,
        "seconds": RECORDER.seconds(),
        "policies": policies,
        "config": {
            "domains": limits.domains(),
            "descriptors": limits.dump(),
        },
        "store": {
            "kind": state.store.kind(),
            "ready": health.ready,
            "class": health.class,
            "error": health.error,
            "breakers": health.breakers.iter().map(|(node, open)| json!({"node": node, "open": open})).collect::<Vec<_>>(),
        },
        "reload": reload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_page_is_public_and_its_data_needs_the_token() -> Result<(), Box<dyn std::error::Error>> {
        use crate::runtime::{AnyStore, AppState, Settings};
        use axum::body::Body;
        use axum::http::{Request, StatusCode};

        use tower::ServiceExt;

        let settings = Settings {
            admin_token: Some("s3cret".into()),
            ..Settings::default()
        };
        let state = AppState::new(tollgate_config::demo()?, AnyStore::memory(), settings);
        let app = router(state);
        let page = app
            .clone()
            .oneshot(Request::get("/dashboard").body(Body::empty())?)
            .await?;
        assert_eq!(page.status(), StatusCode::OK);
        let data = app
            .clone()
            .oneshot(Request::get("/dashboard/data").body(Body::empty())?)
            .await?;
        assert_eq!(data.status(), StatusCode::UNAUTHORIZED);
        let data = app
            .oneshot(
                Request::get("/dashboard/data")
                    .header("authorization", "Bearer s3cret")
                    .body(Body::empty())?,
            )
            .await?;
        assert_eq!(data.status(), StatusCode::OK);
        Ok(())
    }
}
