//! Escalating penalties on the memory store: the offense count outlives the algorithm's state,
//! is forgotten after the memory, is decided under the lock even for the lock-free algorithms,
//! and is all-or-nothing with the other rules of a request.

use std::time::Duration;

use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, Penalty, Policy, Rate, Rule};

const SECOND: Duration = Duration::from_secs(1);

fn store() -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(1_000_000_000);
    (MemoryStore::builder().clock(clock.clone()).build(), clock)
}

fn escalating(name: &str, algorithm: Algorithm) -> Policy {
    Policy::new(name, algorithm).unwrap().with_penalty(
        Penalty::sequence([SECOND, 10 * SECOND, 100 * SECOND])
            .unwrap()
            .remember_for(60 * SECOND)
            .unwrap(),
    )
}

/// Spends the key's whole budget of 1 and is denied once; returns the block it got.
fn offend(store: &MemoryStore<ManualClock>, policy: &Policy, key: &str) -> Option<Duration> {
    assert!(
        store.check(policy, key, 1).unwrap().allowed,
        "budget before the offense"
    );
    let denied = store.check(policy, key, 1).unwrap();
    assert!(!denied.allowed);
    denied.retry_after
}

#[test]
fn every_algorithm_escalates_the_same_way() {
    let algorithms = [
        Algorithm::fixed_window(1, SECOND, Anchor::FirstHit).unwrap(),
        Algorithm::sliding_log(1, SECOND).unwrap(),
        Algorithm::sliding_window(1, SECOND).unwrap(),
        Algorithm::token_bucket(1, Rate::per_second(1).unwrap()).unwrap(),
        Algorithm::leaky_bucket(1, Rate::per_second(1).unwrap()).unwrap(),
        Algorithm::gcra(Rate::per_second(1).unwrap(), 1).unwrap(),
    ];
    for algorithm in algorithms {
        let (store, clock) = store();
        let name = algorithm.name();
        // Steps longer than any algorithm's own wait here (the sliding window's is 2 s).
        let policy = Policy::new(name, algorithm)
            .unwrap()
            .with_penalty(Penalty::sequence([5 * SECOND, 50 * SECOND, 500 * SECOND]).unwrap());
        let mut blocks = vec![];
        for _ in 0..4 {
            let block = offend(&store, &policy, "k").unwrap();
            blocks.push(block.as_secs());
            // Wait out the block and let the budget refill (2 s covers the sliding window).
            clock.advance(block + 2 * SECOND);
        }
        assert_eq!(blocks, [5, 50, 500, 500], "{name}");
    }
}

#[test]
fn the_count_outlives_the_algorithm_state_and_survives_a_purge() {
    let (store, clock) = store();
    let policy = escalating(
        "fw",
        Algorithm::fixed_window(1, SECOND, Anchor::FirstHit).unwrap(),
    );
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
    // The window and the block are long over; only the memory keeps the key.
    clock.advance(30 * SECOND);
    store.purge_expired();
    assert_eq!(store.len(), 1);
    assert_eq!(offend(&store, &policy, "k"), Some(10 * SECOND));
}

#[test]
fn the_count_is_forgotten_once_the_memory_has_passed_since_the_block_ended() {
    let (store, clock) = store();
    let policy = escalating("log", Algorithm::sliding_log(1, SECOND).unwrap());
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
    // The block ends 1 s after the offense; the memory runs 60 s from there.
    clock.advance(61 * SECOND - Duration::from_micros(1));
    assert_eq!(offend(&store, &policy, "k"), Some(10 * SECOND));
    // (The store keeps expiry times in whole seconds, rounded up.)
    clock.advance(10 * SECOND + 61 * SECOND);
    store.purge_expired();
    assert!(store.is_empty());
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
}

#[test]
fn a_peek_reports_the_next_step_and_records_nothing() {
    let (store, clock) = store();
    let policy = escalating("gcra", Algorithm::gcra(Rate::per_second(1).unwrap(), 1).unwrap());
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
    clock.advance(2 * SECOND);
    assert!(store.check(&policy, "k", 1).unwrap().allowed);
    for _ in 0..3 {
        assert_eq!(
            store.peek(&policy, "k", 1).unwrap().retry_after,
            Some(10 * SECOND)
        );
    }
    assert_eq!(
        store.check(&policy, "k", 1).unwrap().retry_after,
        Some(10 * SECOND)
    );
}

#[test]
fn reset_forgets_the_count() {
    let (store, clock) = store();
    let policy = escalating(
        "tb",
        Algorithm::token_bucket(1, Rate::per_second(1).unwrap()).unwrap(),
    );
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
    clock.advance(2 * SECOND);
    store.reset(&policy, "k").unwrap();
    assert_eq!(offend(&store, &policy, "k"), Some(SECOND));
}

#[test]
fn only_the_rule_that_denied_counts_an_offense_in_a_request() {
    let (store, clock) = store();
    let tight = escalating("tight", Algorithm::sliding_log(1, SECOND).unwrap());
    let loose = escalating("loose", Algorithm::sliding_log(100, SECOND).unwrap());
    let rules = [Rule::new(&tight, "k", 1), Rule::new(&loose, "k", 1)];
    assert!(store.decide(&rules, true).unwrap().as_slice()[0].allowed);
    let denied = store.decide(&rules, true).unwrap();
    assert_eq!(denied.as_slice()[0].retry_after, Some(SECOND));
    assert!(denied.as_slice()[1].allowed);
    clock.advance(2 * SECOND);
    assert!(store.decide(&rules, true).unwrap().as_slice()[0].allowed);
    assert_eq!(
        store.decide(&rules, true).unwrap().as_slice()[0].retry_after,
        Some(10 * SECOND)
    );
    // The loose policy never denied: its first offense is still a first.
    // One spend of the loose policy is in the current second.
    for _ in 0..99 {
        store.check(&loose, "k", 1).unwrap();
    }
    assert_eq!(store.check(&loose, "k", 1).unwrap().retry_after, Some(SECOND));
}

#[test]
fn a_one_step_penalty_keeps_no_count() {
    let (store, clock) = store();
    let policy = Policy::new("plain", Algorithm::sliding_log(1, SECOND).unwrap())
        .unwrap()
        .with_block_for(5 * SECOND)
        .unwrap();
    for _ in 0..3 {
        assert_eq!(offend(&store, &policy, "k"), Some(5 * SECOND));
        clock.advance(6 * SECOND);
    }
    store.purge_expired();
    assert!(store.is_empty());
}

#[test]
fn bad_penalties_are_refused() {
    assert!(Penalty::sequence([SECOND, Duration::ZERO]).is_err());
    assert!(Penalty::sequence(vec![SECOND; 65]).is_err());
    assert!(Penalty::growth(SECOND, 1, 10 * SECOND).is_err());
    assert!(Penalty::growth(10 * SECOND, 2, SECOND).is_err());
    assert!(
        Penalty::sequence([SECOND, 2 * SECOND])
            .unwrap()
            .remember_for(Duration::ZERO)
            .is_err()
    );
}
