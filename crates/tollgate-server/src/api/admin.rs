//! The admin API beside the decision routes: allow and deny list entries, and the top
//! offenders. Every route needs `Authorization: Bearer <token>` when the server has an admin
//! token, like the other admin endpoints.
//!
//! | route | does |
//! |---|---|
//! | `GET /v1/admin/access?limit=&cursor=` | the entries in force, from the config and from this API, a page at a time |
//! | `POST /v1/admin/access` `{"policy"?, "list", "kind", "value"}` | add an entry for the fleet (201, or 200 if it was there) |
//! | `DELETE /v1/admin/access?list=&kind=&value=&policy=`, or with the entry as a JSON body | remove an entry added through this API (204); the body takes entries too long for a URL |
//! | `GET /v1/admin/top-offenders?policy=&n=` | the most denied keys per policy, from this instance |
//!
//! Where entries live and how soon another instance applies them: see
//! [`crate::runtime::access`]. The top offenders are the keys this instance denied most
//! (enforced rate limit denials and refused leases of concurrency policies, not blocked
//! requests), per policy, in a fixed number of counters ([`TOP_KEYS`], Space-Saving: see
//! [`tollgate::top_keys`]), so their memory does not grow with the number of distinct keys; a
//! count may be above the key's true count by at most its `overestimate`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, RawQuery, State};
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tollgate::access::{AccessEntry, Added, EntryKind, Listed};
use utoipa::ToSchema;

use super::auth::authorize_admin;
use super::body::{body_bytes, json_body};
use super::error::ApiError;
use super::page::{PageQuery, bad_cursor, page};
use crate::ops::recorder::{RECORDER, TOP_KEYS};
use crate::runtime::SharedState;
use crate::runtime::access::{Listing, PageStart, Source};
use crate::runtime::problem::Problem;

/// The body of `POST /v1/admin/access`, and the query of `DELETE /v1/admin/access`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EntryBody {
    /// The policy it applies to; absent for every policy.
    #[schema(min_length = 1, max_length = 255)]
    policy: Option<String>,
    /// `allow` or `deny`.
    #[schema(example = "deny")]
    list: String,
    /// `cidr`, `key` or `prefix`.
    #[schema(example = "cidr")]
    kind: String,
    /// The CIDR range (or address), key or prefix.
    #[schema(min_length = 1, max_length = 8192, example = "203.0.113.0/24")]
    value: String,
}

/// One entry as listed.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EntryAnswer {
    /// The policy it applies to; null for every policy.
    policy: Option<String>,
    /// `allow` or `deny`.
    list: &'static str,
    /// `cidr`, `key` or `prefix`.
    kind: &'static str,
    /// The range (normalized: `203.0.113.0/24`, `2001:db8::1/128`), key or prefix.
    value: String,
    /// `config` (remove it from the config file) or `admin` (added through this API).
    source: &'static str,
    /// When an admin entry was added, in ms since the Unix epoch.
    added_at_ms: Option<u64>,
}

/// The answer of `GET /v1/admin/access`: a page of the entries in force.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EntryList {
    /// This page's entries (at most `limit`), ordered by policy (global first), list, kind and
    /// value; an entry both in the config and added through this API is listed twice, the
    /// config's first.
    entries: Vec<EntryAnswer>,
    /// Seconds within which an entry added on another instance applies here.
    refresh_seconds: u64,
    /// Pass it as `cursor` for the next page; null on the last page.
    next_cursor: Option<String>,
}

/// A cursor: the source and the encoded entry to list after, `config:<entry>` or
/// `admin:<entry>`.
/// The longest entry a cursor names by its encoding; a longer one (a key or prefix of up to
/// 8 KiB) is named by its SHA-256, so every cursor fits in a URL.
const MAX_CURSOR_ENTRY: usize = 256;

fn cursor_of(listed: &Listing) -> String {
    let encoded = listed.entry.encode();
    if encoded.len() <= MAX_CURSOR_ENTRY {
        format!("{}:{encoded}", listed.source.as_str())
    } else {
        format!("{}:#{}", listed.source.as_str(), digest(&encoded))
    }
}

/// The hex SHA-256 of an entry's encoding.
fn digest(encoded: &str) -> String {
    use sha2::Digest;
    crate::ops::hex::lower(&sha2::Sha256::digest(encoded.as_bytes()))
}

fn start_of(state: &SharedState, cursor: &str) -> Result<PageStart, ApiError> {
    let (source, entry) = cursor.split_once(':').ok_or_else(|| bad_cursor(cursor))?;
    let source = match source {
        "config" => Source::Config,
        "admin" => Source::Admin,
        _ => return Err(bad_cursor(cursor)),
    };
    if let Some(wanted) = entry.strip_prefix('#') {
        return state
            .access
            .find(state.served(), source, |entry| digest(&entry.encode()) == wanted)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "cursor: the entry this page would start after was removed since; list again from the first page",
                )
            });
    }
    let entry = AccessEntry::decode(entry).map_err(|_| bad_cursor(cursor))?;
    Ok(PageStart {
        entry: Arc::new(entry),
        source,
    })
}

fn answer(entry: &AccessEntry, source: &'static str, added_at_ms: Option<u64>) -> EntryAnswer {
    EntryAnswer {
        policy: entry.policy().map(str::to_owned),
        list: entry.list().as_str(),
        kind: entry.kind().as_str(),
        value: entry.value().to_owned(),
        source,
        added_at_ms,
    }
}

/// The entry `body` names, validated, for a configured policy (or every one).
fn entry_of(state: &SharedState, body: &EntryBody) -> Result<AccessEntry, ApiError> {
    let bad =
        |field: &str, err: tollgate::access::AccessError| ApiError::bad_request(format!("{field}: {err}"));
    let list: Listed = body.list.parse().map_err(|e| bad("list", e))?;
    let kind: EntryKind = body.kind.parse().map_err(|e| bad("kind", e))?;
    if let Some(policy) = &body.policy {
        let limits = state.limits.load();
        if limits.concurrency_policy(policy).is_some() {
            return Err(ApiError::bad_request(format!(
                "`{policy}` is a concurrency policy: allow and deny lists apply to rate policies (or give none for every policy)"
            )));
        }
        if limits.policy(policy).is_none() {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("unknown policy `{policy}`"),
            ));
        }
    }
    AccessEntry::new(body.policy.as_deref(), list, kind, &body.value).map_err(|e| bad("value", e))
}

#[utoipa::path(
    get,
    path = "/v1/admin/access",
    tag = "admin",
    summary = "List allow and deny list entries",
    description = "The entries in force (the config's and those added through this API), a page at a \
                   time: pass `next_cursor` back as `cursor` for the next page.",
    params(
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "Entries a page holds (default 100)"),
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the page before; absent for the first page"),
    ),
    responses(
        (status = 200, description = "A page of entries", body = EntryList),
        (status = 400, description = "A limit out of range, a cursor no page answered, an unknown parameter", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn list(
    State(state): State<SharedState>,
    headers: HeaderMap,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<EntryList>, ApiError> {
    authorize_admin(&state, &headers)?;
    let page = page(query)?;
    let after = page
        .cursor
        .as_deref()
        .map(|cursor| start_of(&state, cursor))
        .transpose()?;
    let (listed, more) = state.access.page(state.served(), after.as_ref(), page.limit);
    Ok(Json(EntryList {
        entries: listed
            .iter()
            .map(|l| answer(&l.entry, l.source.as_str(), l.added_at_ms))
            .collect(),
        refresh_seconds: crate::runtime::access::REFRESH_EVERY.as_secs(),
        next_cursor: listed.last().filter(|_| more).map(cursor_of),
    }))
}

#[utoipa::path(
    post,
    path = "/v1/admin/access",
    tag = "admin",
    summary = "Add an allow or deny list entry",
    description = "Kept in the store, so every instance applies it (this one at once, the others \
                   within `refresh_seconds`). A deny entry wins over an allow entry.",
    request_body(content = EntryBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Added", body = EntryAnswer),
        (status = 200, description = "It was there already", body = EntryAnswer),
        (status = 400, description = "Unusable entry", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The store holds the most entries, or bytes of entries, it keeps", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn add(
    State(state): State<SharedState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorize_admin(&state, &headers)?;
    let body: EntryBody = json_body(body)?;
    let entry = entry_of(&state, &body)?;
    let (added, added_at_ms) = state.access.add(state.served(), entry.clone()).await?;
    let status = match added {
        Added::New => StatusCode::CREATED,
        Added::AlreadyThere => StatusCode::OK,
        Added::Full { held } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("the store holds {held} access list entries, the most it keeps"),
            ));
        }
        Added::TooLarge {
            held_bytes,
            max_bytes,
        } => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "the store's access list entries take {held_bytes} bytes, and this one would take them past the most it keeps, {max_bytes}"
                ),
            ));
        }
    };
    Ok((status, Json(answer(&entry, "admin", added_at_ms))).into_response())
}

#[utoipa::path(
    delete,
    path = "/v1/admin/access",
    tag = "admin",
    summary = "Remove an allow or deny list entry",
    description = "Removes an entry added through this API (a config entry is removed from its file).",
    params(
        ("list" = Option<String>, Query, description = "`allow` or `deny` (or give the entry as a JSON body)"),
        ("kind" = Option<String>, Query, description = "`cidr`, `key` or `prefix`"),
        ("value" = Option<String>, Query, description = "The range, key or prefix"),
        ("policy" = Option<String>, Query, description = "The policy; absent for a global entry"),
    ),
    request_body(content = EntryBody, content_type = "application/json", description = "The entry, instead of the query: for a value too long for a URL (a key or prefix of up to 8 KiB)"),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Unusable entry", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such entry added through this API, or unknown policy", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store failed", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn remove(
    State(state): State<SharedState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    query: Result<Query<EntryBody>, QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    authorize_admin(&state, &headers)?;
    let in_query = raw.is_some_and(|q| !q.is_empty());
    let bytes = body_bytes(body)?;
    let named: EntryBody = match (in_query, bytes.is_empty()) {
        (true, false) => {
            return Err(ApiError::bad_request(
                "the entry goes in the query or in a JSON body, not both",
            ));
        }
        (false, false) => json_body(Ok(bytes))?,
        (_, true) => query.map_err(|e| ApiError::bad_request(e.body_text()))?.0,
    };
    let entry = entry_of(&state, &named)?;
    if state.access.remove(state.served(), &entry).await? {
        return Ok(StatusCode::NO_CONTENT);
    }
    let in_config = state.limits.load().access_entries().contains(&entry);
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        if in_config {
            format!("`{entry}` is in the config, not added through this API: remove it from the config file")
        } else {
            format!("no entry `{entry}` was added through this API")
        },
    ))
}

/// The query of `GET /v1/admin/top-offenders`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TopQuery {
    policy: Option<String>,
    n: Option<usize>,
}

/// One of the most denied keys.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Offender {
    /// The key (bytes that are not UTF-8 are shown as U+FFFD).
    key: String,
    /// Denials counted for it: at most `overestimate` above the true count.
    denied: u64,
    /// How much of `denied` it may have inherited from a key it replaced in the summary (0: exact).
    overestimate: u64,
}

/// One policy's top offenders.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PolicyOffenders {
    /// The policy.
    policy: String,
    /// Every denial counted under it since start (on this instance).
    denied_total: u64,
    /// How many keys the summary holds now (at most `capacity`).
    tracked: usize,
    /// The most keys the summary holds, whatever the number of distinct keys denied.
    capacity: usize,
    /// The most denied keys, most first.
    offenders: Vec<Offender>,
}

/// The answer of `GET /v1/admin/top-offenders`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TopOffenders {
    /// One entry per policy asked about (every policy that denied, by name, without `policy`).
    policies: Vec<PolicyOffenders>,
}

#[utoipa::path(
    get,
    path = "/v1/admin/top-offenders",
    tag = "admin",
    summary = "The most denied keys",
    description = "Per policy, the keys this instance denied most since start (enforced rate limit \
                   denials, refused leases of a concurrency policy), from a fixed-size heavy-hitter summary.",
    params(
        ("policy" = Option<String>, Query, description = "One policy; every policy that denied when absent"),
        ("n" = Option<usize>, Query, minimum = 1, maximum = 64, description = "How many keys per policy (default 10)"),
    ),
    responses(
        (status = 200, description = "The most denied keys", body = TopOffenders),
        (status = 400, description = "Unusable query", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Admin token missing or wrong", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "Unknown policy", body = Problem, content_type = "application/problem+json"),
    ),
    security((), ("admin_token" = []))
)]
pub(crate) async fn top_offenders(
    State(state): State<SharedState>,
    headers: HeaderMap,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Result<Json<TopOffenders>, ApiError> {
    authorize_admin(&state, &headers)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let n = query.n.unwrap_or(10);
    if n == 0 || n > TOP_KEYS {
        return Err(ApiError::bad_request(format!(
            "n is {n}: from 1 to {TOP_KEYS} keys per policy"
        )));
    }
    let recorder = &*RECORDER;
    let names = match query.policy {
        Some(policy) => {
            let limits = state.limits.load();
            let configured = limits.policy(&policy).is_some() || limits.concurrency_policy(&policy).is_some();
            let known = configured || recorder.has(&policy);
            if !known {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("unknown policy `{policy}`"),
                ));
            }
            vec![policy]
        }
        None => recorder.policies_with_denials(),
    };
    let policies = names
        .into_iter()
        .map(|policy| {
            let top = recorder.top_denied(&policy, n);
            PolicyOffenders {
                denied_total: top.total,
                tracked: top.tracked,
                capacity: TOP_KEYS,
                offenders: top
                    .keys
                    .into_iter()
                    .map(|(key, denied, overestimate)| Offender {
                        key: String::from_utf8_lossy(&key).into_owned(),
                        denied,
                        overestimate,
                    })
                    .collect(),
                policy,
            }
        })
        .collect();
    Ok(Json(TopOffenders { policies }))
}
