//! Shared by the server's tests: how they open a Redis store, with the test kit's deadline.

#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use tollgate_server::{AnyStore, StoreOptions};
use tollgate_testkit::STORE_TIMEOUT;

/// The server's store options, with the test kit's deadline for each store call.
pub fn store_options() -> StoreOptions {
    StoreOptions {
        timeout: STORE_TIMEOUT,
        ..StoreOptions::default()
    }
}

/// The Redis store at `url` (`redis://...` or `redis+cluster://...`), opened as `serve` opens
/// it, with [`store_options`]. An unreachable Redis is still a store: the failure modes decide.
pub async fn redis_store(url: &str) -> AnyStore {
    AnyStore::open(Some(url), &store_options())
        .await
        .unwrap_or_else(|err| panic!("store {url}: {err:#}"))
}
