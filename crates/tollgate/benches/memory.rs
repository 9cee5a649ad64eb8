//! Heap bytes per key in `MemoryStore`, for every algorithm, next to `governor`'s keyed limiter,
//! and what happens to both when a flood of distinct keys arrives.
//!
//! Memory per key decides how many clients one process can track, and a limiter whose memory
//! follows the number of distinct keys can be exhausted by anyone who can invent keys (bots
//! rotating IPs or user ids). So this bench prints, as Markdown tables:
//!
//! 1. Bytes per key after one check of each of 100 000 keys `"user:{i}"` into a fresh
//!    `MemoryStore::new()` (default bound of 1 048 576 keys), per algorithm, and into
//!    `governor::RateLimiter::keyed(..)` (a `DashMap<String, _>`). "Live" is what stays allocated
//!    afterwards, "peak" the most allocated at any moment while inserting (maps grow by doubling,
//!    so the peak holds old and new tables at once). Both divide by 100 000.
//! 2. A flood: 1 000 000 distinct keys, one check each, into a store built with
//!    `max_keys(100_000)`, then the keys stored and the bytes held. Once with the bench policies of
//!    `check.rs` (whose state expires within 1 to 50 ms, so expired keys are reclaimed), and once
//!    with a GCRA of 1 per minute, whose state lives 60 s, so only eviction can keep the bound.
//!    governor gets the same 1 000 000 keys: it keeps every key until `retain_recent` is called,
//!    so it is measured before and after `retain_recent` + `shrink_to_fit`.
//!
//! Bytes are counted by a global allocator that wraps the system allocator and adds up the sizes
//! requested from it; the allocator's own per-block overhead is not included. The keys are built
//! before counting starts, so only what each limiter allocates (including its copy of each key)
//! is counted. The policies are those of `check.rs`: bursts of 50, 1000 per second.
//!
//! Run with `cargo bench -p tollgate --bench memory`.

// A global allocator can only be written with `unsafe` (`GlobalAlloc` is an unsafe trait); this
// one forwards every call to `System` unchanged and only counts sizes.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota};
use tollgate::{Algorithm, Anchor, MemoryStore, Policy, PolicyError, Rate};

/// Counts live and peak heap bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments, so `System`'s guarantees
// hold; the counters have no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            grew(new_size);
            shrank(layout.size());
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Keys per limiter in the bytes-per-key table.
const KEYS: usize = 100_000;

/// Distinct keys in the flood.
const FLOOD_KEYS: usize = 1_000_000;

/// The store's bound in the flood.
const FLOOD_MAX_KEYS: usize = 100_000;

/// Heap bytes held at the end of a measurement, and the most held at any moment during it.
struct Usage {
    live: usize,
    peak: usize,
}

/// Runs `f`, returning what it returns (kept alive, so it is measured) and the bytes it holds.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Usage) {
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let value = f();
    let usage = Usage {
        live: LIVE.load(Ordering::Relaxed).saturating_sub(start),
        peak: PEAK.load(Ordering::Relaxed).saturating_sub(start),
    };
    (value, usage)
}

/// Every policy has this name, as in `check.rs`: it is stored with each key, so one name keeps the
/// algorithms comparable.
const POLICY_NAME: &str = "api";

/// The six policies of `check.rs`: bursts of 50, 1000 per second (50 per 50 ms for windows).
fn policies() -> Result<Vec<Policy>, PolicyError> {
    let rate = Rate::per_second(1000)?;
    let window = Duration::from_millis(50);
    [
        Algorithm::fixed_window(50, window, Anchor::Epoch)?,
        Algorithm::sliding_log(50, window)?,
        Algorithm::sliding_window(50, window)?,
        Algorithm::token_bucket(50, rate)?,
        Algorithm::leaky_bucket(50, rate)?,
        Algorithm::gcra(rate, 50)?,
    ]
    .into_iter()
    .map(|algorithm| Policy::new(POLICY_NAME, algorithm))
    .collect()
}

fn governor() -> DefaultKeyedRateLimiter<String> {
    let rate = NonZeroU32::new(1000).expect("rate is not zero");
    let burst = NonZeroU32::new(50).expect("burst is not zero");
    DefaultKeyedRateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
}

/// Checks every key once; returns how many checks failed (the store refused the key).
fn fill(store: &MemoryStore, policy: &Policy, keys: &[String]) -> usize {
    keys.iter()
        .filter(|key| store.check(policy, key, 1).is_err())
        .count()
}

fn per_key(bytes: usize, keys: usize) -> String {
    format!("{:.1}", bytes as f64 / keys as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let policies = policies()?;
    let keys: Vec<String> = (0..FLOOD_KEYS).map(|i| format!("user:{i}")).collect();
    let (some_keys, all_keys) = (&keys[..KEYS], &keys[..]);

    println!("## Heap bytes per key, {KEYS} keys, one check each\n");
    println!("| limiter | keys stored | live bytes | live bytes/key | peak bytes/key |");
    println!("|---|---:|---:|---:|---:|");
    for policy in &policies {
        let ((store, failed), usage) = measure(|| {
            let store = MemoryStore::new();
            let failed = fill(&store, policy, some_keys);
            (store, failed)
        });
        assert_eq!(failed, 0, "no check may fail below the bound");
        println!(
            "| tollgate {} | {} | {} | {} | {} |",
            policy.algorithm().name(),
            store.len(),
            usage.live,
            per_key(usage.live, KEYS),
            per_key(usage.peak, KEYS)
        );
    }
    let (limiter, usage) = measure(|| {
        let limiter = governor();
        for key in some_keys {
            let _ = limiter.check_key(key);
        }
        limiter
    });
    println!(
        "| governor keyed | {} | {} | {} | {} |",
        limiter.len(),
        usage.live,
        per_key(usage.live, KEYS),
        per_key(usage.peak, KEYS)
    );
    drop(limiter);

    println!("\n## Flood: {FLOOD_KEYS} distinct keys, one check each\n");
    println!("tollgate stores are built with `max_keys({FLOOD_MAX_KEYS})`; governor has no bound.\n");
    println!("| limiter | keys stored after | live bytes after | peak bytes | checks refused |");
    println!("|---|---:|---:|---:|---:|");
    let long_lived = Policy::new(POLICY_NAME, Algorithm::gcra(Rate::per_minute(1)?, 50)?)?;
    let labelled = policies.iter().map(|p| (p.algorithm().name(), p));
    for (label, policy) in labelled.chain([("gcra, 1 per minute (state lives 60 s)", &long_lived)]) {
        let ((store, failed), usage) = measure(|| {
            let store = MemoryStore::builder().max_keys(FLOOD_MAX_KEYS).build();
            let failed = fill(&store, policy, all_keys);
            (store, failed)
        });
        println!(
            "| tollgate {label} | {} | {} | {} | {failed} |",
            store.len(),
            usage.live,
            usage.peak,
        );
    }
    let (limiter, usage) = measure(|| {
        let limiter = governor();
        for key in all_keys {
            let _ = limiter.check_key(key);
        }
        limiter
    });
    println!(
        "| governor keyed | {} | {} | {} | 0 |",
        limiter.len(),
        usage.live,
        usage.peak
    );
    let before = LIVE.load(Ordering::Relaxed) as isize;
    limiter.retain_recent();
    limiter.shrink_to_fit();
    let freed = before - LIVE.load(Ordering::Relaxed) as isize;
    println!(
        "| governor keyed, then `retain_recent` + `shrink_to_fit` | {} | {} | - | - |",
        limiter.len(),
        usage.live as isize - freed
    );
    Ok(())
}
