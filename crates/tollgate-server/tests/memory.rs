//! Memory stays bounded without scrapes: checks recorded through the engine and the metrics path
//! (decision counters and the store latency histogram) must not grow the process while nobody
//! reads `/metrics`. The exporter keeps raw histogram samples until they are drained; a drain
//! that only happens at scrape time grows an unscraped instance by about 8-18 bytes per check.
//!
//! This measures resident memory (`VmRSS` in `/proc/self/status`) before and after two million
//! checks on a fixed set of keys, after a warm-up that fills the store's and the metrics' tables,
//! and reports the growth per million (10 million would take minutes in a debug build; the
//! growth is linear in the checks when it happens at all). It is a memory bound, not a timing
//! threshold.

use std::time::{Duration, Instant};

use tollgate::{Algorithm, Engine, Policy, Rate, Rule};
use tollgate_server::AnyStore;
use tollgate_server::metrics;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

async fn checks(engine: &Engine<AnyStore>, policy: &Policy, keys: &[String], count: u64) {
    for i in 0..count {
        let key = &keys[(i % keys.len() as u64) as usize];
        let rules = [Rule::new(policy, key.as_bytes(), 1)];
        let started = Instant::now();
        let verdict = engine.check_all(&rules).await.expect("valid rules");
        metrics::store_latency(started.elapsed());
        tollgate_server::count::verdict(&rules, &verdict);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn millions_of_checks_without_a_scrape_do_not_grow_memory() {
    metrics::install();
    let engine = Engine::new(AnyStore::memory());
    let policy = Policy::new(
        "memory",
        Algorithm::token_bucket(1_000_000, Rate::new(1_000, Duration::from_millis(1)).unwrap()).unwrap(),
    )
    .unwrap();
    let keys: Vec<String> = (0..1_000).map(|i| format!("client-{i}")).collect();

    checks(&engine, &policy, &keys, 200_000).await;
    let before = rss_bytes();
    const MILLIONS: u64 = 2;
    checks(&engine, &policy, &keys, MILLIONS * 1_000_000).await;
    let after = rss_bytes();
    let per_million = after.saturating_sub(before) / MILLIONS;
    println!("rss before {before} B, after {after} B: {per_million} B per million checks");
    // Raw samples kept until a scrape cost about 17 MB per million checks; the bound leaves
    // room for allocator noise.
    assert!(
        per_million < 2 * 1024 * 1024,
        "resident memory grew by {per_million} bytes per million checks without a scrape"
    );
}
