//! The config watcher reacts to real changes only: a change is seen once, and a directory left
//! alone (while the watcher itself reads the files) wakes it no more.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The value of a counter without labels in the Prometheus text, 0 when absent.
fn counter(name: &str) -> u64 {
    let text = tollgate_server::metrics::install().render();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn an_idle_watcher_does_not_wake_up() {
    tollgate_server::metrics::install();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tollgate.yaml");
    std::fs::write(&file, "policies: {}\n").expect("write");
    let changes = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&changes);
    let read_back = file.clone();
    let watch = tollgate_server::reload::watch(file.clone(), move || {
        // Reading the files, as a reload does, must not count as a change.
        let _ = std::fs::read(&read_back);
        seen.fetch_add(1, Ordering::SeqCst);
    })
    .expect("watch");
    let task = tokio::spawn(watch);

    std::fs::write(&file, "policies:\n  a: {algorithm: gcra, rate: 1/s, burst: 1}\n").expect("write");
    let mut changed = false;
    for _ in 0..300 {
        if changes.load(Ordering::SeqCst) == 1 {
            changed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(changed, "the change was not seen");

    // Let any echo of that change settle, then watch a quiet stretch of many debounce periods.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let events = counter("tollgate_config_watch_events_total");
    for _ in 0..4 {
        // The server reads the files, as a reload or a fingerprint does.
        let _ = std::fs::read_to_string(&file);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        counter("tollgate_config_watch_events_total"),
        events,
        "the idle watcher woke up"
    );
    assert_eq!(changes.load(Ordering::SeqCst), 1);
    task.abort();
}
