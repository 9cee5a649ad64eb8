//! The query of a list route read page by page (`?limit=&cursor=`): how many items one answer
//! holds, and where it starts. Shared by the routes that list what an admin can grow (overrides,
//! access list entries), so that no answer grows with what the store holds: each answers at most
//! `limit` items and a `next_cursor` to pass back for the next page (`null` on the last).

use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use serde::Deserialize;

use super::error::ApiError;

/// Items a page holds when `limit` is not given.
pub(crate) const DEFAULT_LIMIT: usize = 100;

/// The most items a page holds: the core's bound on a page of overrides.
pub(crate) const MAX_LIMIT: usize = tollgate::overrides::MAX_PAGE;

/// `?limit=&cursor=`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PageQuery {
    limit: Option<usize>,
    cursor: Option<String>,
}

/// A page's size and start, checked.
#[derive(Debug)]
pub(crate) struct Page {
    /// 1 to [`MAX_LIMIT`].
    pub limit: usize,
    /// The `next_cursor` of the page before; `None` for the first page.
    pub cursor: Option<String>,
}

/// Reads `?limit=&cursor=`: a limit out of range or an unknown parameter is a 400.
pub(crate) fn page(query: Result<Query<PageQuery>, QueryRejection>) -> Result<Page, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit is {limit}: from 1 to {MAX_LIMIT} items a page"
        )));
    }
    Ok(Page {
        limit,
        cursor: query.cursor.filter(|c| !c.is_empty()),
    })
}

/// The problem of a cursor that no page answered.
pub(crate) fn bad_cursor(cursor: &str) -> ApiError {
    let shown: String = cursor.chars().take(64).collect();
    ApiError::bad_request(format!(
        "cursor: {shown:?} is not a `next_cursor` this route answered"
    ))
}
