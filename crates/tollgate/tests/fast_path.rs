//! The lock-free path of the memory store (a stored GCRA or token bucket key decided by
//! compare-and-swap under the shard's read lock) under contention: many threads on one hot key,
//! a manual clock moved between phases, and the locked path (penalties, eviction, reset, policy
//! changes) running beside it. Every count is exact: the store admits what the algorithm allows,
//! no more and no less. Loops are bounded; nothing here measures time.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::{Algorithm, ManualClock, MemoryStore, Policy, Rate};

const THREADS: u64 = 4;
const CHECKS_PER_THREAD: u64 = 3_000;
const START_US: u64 = 1_000_000_000;

fn fast_algorithms(burst: u64, rate: Rate) -> Vec<Algorithm> {
    vec![
        Algorithm::gcra(rate, burst).unwrap(),
        Algorithm::token_bucket(burst, rate).unwrap(),
    ]
}

/// Runs `checks` per thread on `THREADS` threads, all starting together, and counts admissions.
fn hammer(store: &MemoryStore<ManualClock>, policy: &Policy, key: &str, cost: u64, checks: u64) -> u64 {
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..checks {
                    if store.check(policy, key, cost).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

/// Phases of contention with the clock moved between them: each phase admits exactly what
/// refilled since the last, in units of the cost.
#[test]
fn a_hot_key_admits_exactly_its_refill_in_every_phase() {
    let rate = Rate::per_second(1_000).unwrap(); // one unit per ms
    for algorithm in fast_algorithms(200, rate) {
        let name = algorithm.name();
        let clock = ManualClock::new(START_US);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let policy = Policy::new("hot", algorithm).unwrap();
        assert_eq!(
            hammer(&store, &policy, "k", 1, CHECKS_PER_THREAD),
            200,
            "{name}: the burst"
        );
        for (phase, (advance_ms, cost, expected)) in
            [(1, 1, 1), (37, 1, 37), (10, 3, 3), (500, 2, 100), (0, 1, 0)]
                .into_iter()
                .enumerate()
        {
            clock.advance(Duration::from_millis(advance_ms));
            let admitted = hammer(&store, &policy, "k", cost, CHECKS_PER_THREAD / 4);
            assert_eq!(admitted, expected, "{name}: phase {phase}");
        }
    }
}

/// A penalty is recorded by the locked path while other threads keep deciding on the fast one:
/// the burst passes, then the key stays blocked for the whole `block_for`, whoever asks.
#[test]
fn a_penalty_started_under_contention_holds_for_every_thread() {
    let rate = Rate::per_second(1_000).unwrap();
    for algorithm in fast_algorithms(100, rate) {
        let name = algorithm.name();
        let clock = ManualClock::new(START_US);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let policy = Policy::new("blocked", algorithm)
            .unwrap()
            .with_block_for(Duration::from_secs(60))
            .unwrap();
        assert_eq!(hammer(&store, &policy, "k", 1, CHECKS_PER_THREAD), 100, "{name}");
        clock.advance(Duration::from_secs(59));
        assert_eq!(hammer(&store, &policy, "k", 1, 200), 0, "{name}: still blocked");
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            hammer(&store, &policy, "k", 1, CHECKS_PER_THREAD),
            100,
            "{name}: block over"
        );
    }
}

/// Eviction (a flood of new keys into a small store) runs under the write lock while a hot key
/// is hammered under the read lock: the hot key is out of budget, so it is never evicted (which
/// would hand it a fresh budget), and it admits nothing more.
#[test]
fn a_flood_beside_a_hot_key_neither_forgets_it_nor_breaks_its_count() {
    let rate = Rate::per_hour(1).unwrap();
    for algorithm in fast_algorithms(500, rate) {
        let name = algorithm.name();
        let store = MemoryStore::builder()
            .max_keys(256)
            .clock(ManualClock::new(START_US))
            .build();
        let policy = Policy::new("hot", algorithm).unwrap();
        assert_eq!(
            hammer(&store, &policy, "hot", 1, CHECKS_PER_THREAD),
            500,
            "{name}: the burst"
        );
        let admitted = AtomicU64::new(0);
        let flooding = AtomicBool::new(true);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000u32 {
                    let _ = store.check(&policy, format!("fresh:{i}"), 1);
                }
                flooding.store(false, Ordering::Relaxed);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..CHECKS_PER_THREAD {
                        if store.check(&policy, "hot", 1).unwrap().allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert!(!flooding.load(Ordering::Relaxed));
        assert_eq!(admitted.into_inner(), 0, "{name}");
        assert!(store.len() <= 256, "{name}: bounded");
        assert!(
            !store.check(&policy, "hot", 1).unwrap().allowed,
            "{name}: not forgotten"
        );
    }
}

/// Resets and a policy rebuilt with a bigger burst under the same name, from other threads,
/// while the key is hammered: every admission is one the budget in force allowed, and after the
/// last reset the key has its whole burst again. The rebuilt policy is a later generation, as
/// every config load stamps it: threads still deciding with the old one decide a key the new
/// one wrote under the new numbers, rather than migrating it back and forth.
#[test]
fn resets_and_policy_changes_race_the_fast_path_without_overspending() {
    let rate = Rate::per_hour(1).unwrap();
    for (small, large) in [
        (
            fast_algorithms(50, rate)[0].clone(),
            fast_algorithms(80, rate)[0].clone(),
        ),
        (
            fast_algorithms(50, rate)[1].clone(),
            fast_algorithms(80, rate)[1].clone(),
        ),
    ] {
        let name = small.name();
        let store = MemoryStore::builder().clock(ManualClock::new(START_US)).build();
        let small = Policy::new("p", small).unwrap();
        let large = Policy::new("p", large).unwrap().with_generation(1);
        const RESETS: u64 = 20;
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..RESETS {
                    store.reset(&small, "k").unwrap();
                    std::thread::yield_now();
                }
            });
            for policy in [&small, &large] {
                let admitted = &admitted;
                let store = &store;
                s.spawn(move || {
                    for _ in 0..CHECKS_PER_THREAD {
                        if store.check(policy, "k", 1).unwrap().allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        // Each reset gives back at most the larger burst; nothing else refills.
        let admitted = admitted.into_inner();
        assert!(admitted >= 50, "{name}: {admitted}");
        assert!(admitted <= 80 * (RESETS + 1), "{name}: {admitted}");
        store.reset(&small, "k").unwrap();
        assert_eq!(
            hammer(&store, &large, "k", 1, CHECKS_PER_THREAD),
            80,
            "{name}: whole burst after a reset"
        );
    }
}

/// Peeks from other threads change nothing: the checkers still get exactly the burst.
#[test]
fn peeks_beside_checks_spend_nothing() {
    let rate = Rate::per_hour(1).unwrap();
    for algorithm in fast_algorithms(300, rate) {
        let name = algorithm.name();
        let store = MemoryStore::builder().clock(ManualClock::new(START_US)).build();
        let policy = Policy::new("p", algorithm).unwrap();
        store.check(&policy, "k", 1).unwrap();
        let admitted = AtomicU64::new(1);
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..CHECKS_PER_THREAD {
                    let _ = store.peek(&policy, "k", 1).unwrap();
                }
            });
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..CHECKS_PER_THREAD {
                        if store.check(&policy, "k", 1).unwrap().allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 300, "{name}");
    }
}

/// A denied key is decided from a per-thread memo without the shard lock. Whatever takes the key
/// out of the table must stop the memo: a reset, a penalty, a policy rebuilt with other numbers,
/// the store itself being dropped. One thread, so its memo is the one in play.
#[test]
fn a_remembered_hot_key_follows_resets_penalties_policy_changes_and_new_stores() {
    let rate = Rate::per_hour(1).unwrap();
    for algorithm in fast_algorithms(3, rate) {
        let name = algorithm.name();
        let clock = ManualClock::new(START_US);
        let spend = |store: &MemoryStore<ManualClock>, policy: &Policy| {
            (0..10)
                .filter(|_| store.check(policy, "k", 1).unwrap().allowed)
                .count()
        };
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let policy = Policy::new("p", algorithm.clone()).unwrap();
        assert_eq!(spend(&store, &policy), 3, "{name}");
        store.reset(&policy, "k").unwrap();
        assert_eq!(spend(&store, &policy), 3, "{name}: after a reset");
        assert_eq!(store.peek(&policy, "k", 1).unwrap().remaining, 0, "{name}");

        // The same name with a penalty: the next denial blocks, and the block holds.
        let strict = Policy::new("p", algorithm.clone())
            .unwrap()
            .with_block_for(Duration::from_secs(4 * 3_600))
            .unwrap();
        assert!(!store.check(&strict, "k", 1).unwrap().allowed, "{name}");
        clock.advance(Duration::from_secs(3_600 * 3));
        assert!(
            !store.check(&policy, "k", 1).unwrap().allowed,
            "{name}: still blocked"
        );
        clock.advance(Duration::from_secs(3_600));
        assert_eq!(spend(&store, &policy), 3, "{name}: block over, bucket refilled");

        // The same name with a bigger burst decides with the new numbers, the 3 spent carried
        // over (on_change: keep), so two more fit at once.
        let bigger = match fast_algorithms(5, rate).into_iter().find(|a| a.name() == name) {
            Some(a) => Policy::new("p", a).unwrap(),
            None => unreachable!("both lists have both algorithms"),
        };
        assert_eq!(spend(&store, &bigger), 2, "{name}: under the bigger burst");

        // A new store knows nothing of the old one's keys.
        drop(store);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        assert_eq!(spend(&store, &policy), 3, "{name}: a new store");
    }
}

/// A peek of a key the algorithm denies, under a policy with a penalty, reports the block a
/// check would start, and starts nothing.
#[test]
fn a_peek_under_a_penalty_reports_the_block_without_starting_it() {
    let rate = Rate::per_second(1).unwrap();
    for algorithm in fast_algorithms(1, rate) {
        let name = algorithm.name();
        let clock = ManualClock::new(START_US);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let policy = Policy::new("p", algorithm)
            .unwrap()
            .with_block_for(Duration::from_secs(60))
            .unwrap();
        assert!(store.check(&policy, "k", 1).unwrap().allowed, "{name}");
        for _ in 0..3 {
            let peeked = store.peek(&policy, "k", 1).unwrap();
            assert!(!peeked.allowed, "{name}");
            assert_eq!(peeked.retry_after, Some(Duration::from_secs(60)), "{name}");
            assert_eq!(peeked.reset_after, Duration::from_secs(60), "{name}");
        }
        clock.advance(Duration::from_secs(1));
        assert!(
            store.check(&policy, "k", 1).unwrap().allowed,
            "{name}: no block was started"
        );
    }
}
