//! Parallel checks of one key are exact: T threads × M checks with limit L admit exactly L.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, Policy, Rate};

const THREADS: u64 = 8;
const CHECKS_PER_THREAD: u64 = 2_000;
const LIMIT: u64 = 5_000;

fn exact_algorithms() -> Vec<Algorithm> {
    let minute = Duration::from_secs(60);
    let slow = Rate::per_hour(1).unwrap();
    vec![
        Algorithm::fixed_window(LIMIT, minute, Anchor::Epoch).unwrap(),
        Algorithm::fixed_window(LIMIT, minute, Anchor::FirstHit).unwrap(),
        Algorithm::sliding_log(LIMIT, minute).unwrap(),
        Algorithm::sliding_window(LIMIT, minute).unwrap(),
        Algorithm::token_bucket(LIMIT, slow).unwrap(),
        Algorithm::leaky_bucket(LIMIT, slow).unwrap(),
        Algorithm::gcra(Rate::new(1, Duration::from_secs(1)).unwrap(), LIMIT).unwrap(),
    ]
}

#[test]
fn parallel_checks_of_one_key_admit_exactly_the_limit() {
    for algorithm in exact_algorithms() {
        // A frozen clock: nothing refills during the run, so exactly LIMIT may pass.
        let store = MemoryStore::builder()
            .clock(ManualClock::new(1_000_000_000))
            .build();
        let policy = Policy::new("hot", algorithm).unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..CHECKS_PER_THREAD {
                        if store.check(&policy, "one-key", 1).unwrap().allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), LIMIT, "{}", policy.algorithm().name());
    }
}

#[test]
fn parallel_checks_on_the_system_clock_never_exceed_the_limit() {
    // With a real clock a little may refill during the run, but a minute-long window may not.
    let store = MemoryStore::new();
    let policy = Policy::new(
        "hot",
        Algorithm::sliding_log(LIMIT, Duration::from_secs(3600)).unwrap(),
    )
    .unwrap();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..CHECKS_PER_THREAD {
                    if store.check(&policy, "one-key", 1).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(admitted.into_inner(), LIMIT);
}

#[test]
fn parallel_attempts_increments_are_all_counted() {
    let store = MemoryStore::new();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..CHECKS_PER_THREAD {
                    store
                        .increment_attempts("login:victim", Duration::from_secs(3600))
                        .unwrap();
                }
            });
        }
    });
    assert_eq!(
        store.get_attempts("login:victim").unwrap(),
        THREADS * CHECKS_PER_THREAD
    );
}
