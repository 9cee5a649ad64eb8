//! An admin access list entry costs about its size: with 8 KiB values, the memory the server
//! holds grows by about 8 KiB per entry added, not by several copies of it. Measured with a
//! global allocator that tallies the bytes live, around adds through the router (`oneshot`, no
//! socket) on the memory store.

// A global allocator can only be written with `unsafe`; it forwards to the system allocator.
#![allow(unsafe_code)]
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;
use tollgate_server::{AnyStore, AppState, Settings};
use tower::ServiceExt;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const VALUE_BYTES: usize = 8 * 1024;

async fn add(router: &Router, i: usize) {
    let value = format!("{i:08}{}", "k".repeat(VALUE_BYTES - 8));
    let entry = json!({"policy": "api", "list": "deny", "kind": "key", "value": value});
    let request = Request::builder()
        .method("POST")
        .uri("/v1/admin/access")
        .header("content-type", "application/json")
        .body(Body::from(entry.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn an_entry_costs_about_its_size() {
    let limits = tollgate_config::parse(
        "limits.yaml",
        "policies:\n  api:\n    algorithm: sliding_log\n    limit: 1\n    window: 1h\n",
    )
    .unwrap();
    let router = tollgate_server::api_router(AppState::new(limits, AnyStore::memory(), Settings::default()));
    // First adds set up what is set up once (lazy statics, first allocations of the indexes).
    for i in 0..100 {
        add(&router, i).await;
    }
    const MEASURED: usize = 400;
    let before = LIVE.load(Ordering::Relaxed);
    for i in 100..100 + MEASURED {
        add(&router, i).await;
    }
    let per_entry = (LIVE.load(Ordering::Relaxed) - before) as usize / MEASURED;
    assert!(
        (VALUE_BYTES..VALUE_BYTES + VALUE_BYTES / 2).contains(&per_entry),
        "an entry of {VALUE_BYTES} bytes holds {per_entry} bytes"
    );
}
