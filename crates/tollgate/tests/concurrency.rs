//! Parallel checks of one key are exact: T threads × M checks with limit L admit exactly L, for
//! every algorithm, calendar quotas included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::algorithm::calendar_quota::Period;
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
        // The frozen clock below is far from any midnight, in either zone.
        Algorithm::calendar_quota(LIMIT, Period::Day, "UTC").unwrap(),
        Algorithm::calendar_quota(LIMIT, Period::Month, "Asia/Kolkata").unwrap(),
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

/// Requests of two rules, on keys in different shards, from many threads: every request spends
/// on both rules or on neither, so the two budgets always move together, and the total admitted
/// is exactly the smaller limit. Threads take the rules in opposite orders, which would
/// deadlock a store that locked shards in request order.
#[test]
fn parallel_multi_rule_requests_are_all_or_nothing() {
    use tollgate::Rule;
    for algorithm in exact_algorithms() {
        let store = MemoryStore::builder()
            .clock(ManualClock::new(1_000_000_000))
            .build();
        let wide = Policy::new("wide", algorithm.clone()).unwrap();
        let narrow = Policy::new(
            "narrow",
            Algorithm::sliding_log(LIMIT / 2, Duration::from_secs(3600)).unwrap(),
        )
        .unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (store, wide, narrow, admitted) = (&store, &wide, &narrow, &admitted);
                s.spawn(move || {
                    for i in 0..CHECKS_PER_THREAD {
                        let a = Rule::new(wide, "tenant-a", 1);
                        let b = Rule::new(narrow, "user-7", 1);
                        let rules = if (t + i) % 2 == 0 { [a, b] } else { [b, a] };
                        let decisions = store.decide(&rules, true).unwrap();
                        let allowed: Vec<bool> = decisions.as_slice().iter().map(|d| d.allowed).collect();
                        if allowed.iter().all(|&a| a) {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let name = algorithm.name();
        assert_eq!(admitted.into_inner(), LIMIT / 2, "{name}");
        let wide_left = store
            .peek(&wide, "tenant-a", 1)
            .map(|d| d.remaining + 1)
            .unwrap_or(0);
        let spent_wide = LIMIT - wide_left;
        assert_eq!(
            spent_wide,
            LIMIT / 2,
            "{name}: the wide rule spent only with the narrow one"
        );
    }
}

/// Two requests race for the last unit of a shared rule, each with a rule of its own: exactly
/// one passes, every time.
#[test]
fn two_racing_multi_rule_requests_never_both_pass() {
    use tollgate::Rule;
    for round in 0..200 {
        let store = MemoryStore::new();
        let shared = Policy::new(
            "shared",
            Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap(),
        )
        .unwrap();
        let own = Policy::new("own", Algorithm::sliding_log(5, Duration::from_secs(60)).unwrap()).unwrap();
        let barrier = std::sync::Barrier::new(2);
        let passed = AtomicU64::new(0);
        std::thread::scope(|s| {
            for who in ["alice", "bob"] {
                let (store, shared, own, barrier, passed) = (&store, &shared, &own, &barrier, &passed);
                s.spawn(move || {
                    let rules = [Rule::new(own, who, 1), Rule::new(shared, "tenant", 1)];
                    barrier.wait();
                    let decisions = store.decide(&rules, true).unwrap();
                    if decisions.as_slice().iter().all(|d| d.allowed) {
                        passed.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(passed.into_inner(), 1, "round {round}");
        let own_spent: u64 = ["alice", "bob"]
            .iter()
            .map(|who| 5 - (store.peek(&own, who, 1).unwrap().remaining + 1))
            .sum();
        assert_eq!(own_spent, 1, "round {round}: the loser spent nothing");
    }
}
