//! Table-driven steps per algorithm on a manual clock, window edges included.
//!
//! Each row is (time since start in ms, cost) -> (allowed, remaining, retry_after in ms).
//! `T0` is a multiple of every window used, so epoch-aligned windows start at 0 ms.

use std::time::Duration;

use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, OnChange, Policy, Rate};

const T0_US: u64 = 28_333_333 * 60_000_000;

struct Row {
    at_ms: u64,
    cost: u64,
    allowed: bool,
    remaining: u64,
    retry_ms: Option<u64>,
}

const fn ok(at_ms: u64, cost: u64, remaining: u64) -> Row {
    Row {
        at_ms,
        cost,
        allowed: true,
        remaining,
        retry_ms: None,
    }
}

const fn no(at_ms: u64, cost: u64, remaining: u64, retry_ms: u64) -> Row {
    Row {
        at_ms,
        cost,
        allowed: false,
        remaining,
        retry_ms: Some(retry_ms),
    }
}

fn run(algorithm: Algorithm, rows: &[Row]) {
    run_policy(Policy::new("p", algorithm).unwrap(), rows);
}

fn run_policy(policy: Policy, rows: &[Row]) {
    let clock = ManualClock::new(T0_US);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    for (i, row) in rows.iter().enumerate() {
        clock.set_us(T0_US + row.at_ms * 1000);
        let d = store.check(&policy, "k", row.cost).unwrap();
        let got = (
            d.allowed,
            d.remaining,
            d.retry_after.map(|r| r.as_micros() as u64),
        );
        let want = (row.allowed, row.remaining, row.retry_ms.map(|r| r * 1000));
        assert_eq!(
            got,
            want,
            "{} row {i} at {} ms",
            policy.algorithm().name(),
            row.at_ms
        );
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn fixed_window_epoch_resets_at_the_aligned_edge() {
    run(
        Algorithm::fixed_window(3, secs(10), Anchor::Epoch).unwrap(),
        &[
            ok(0, 1, 2),
            ok(5_000, 2, 0),
            no(5_001, 1, 0, 4_999),
            no(9_999, 1, 0, 1),
            ok(10_000, 3, 0),
            no(19_999, 1, 0, 1),
            ok(20_000, 1, 2),
        ],
    );
}

#[test]
fn fixed_window_first_hit_starts_at_the_first_request() {
    run(
        Algorithm::fixed_window(2, secs(10), Anchor::FirstHit).unwrap(),
        &[
            ok(3_000, 1, 1),
            ok(12_999, 1, 0),
            no(12_999, 1, 0, 1),
            ok(13_000, 1, 1), // a new window opens at the first request after 13 s
            ok(22_999, 1, 0),
            no(22_999, 1, 0, 1),
            ok(40_000, 2, 0),
        ],
    );
}

#[test]
fn fixed_window_denials_are_not_counted() {
    run(
        Algorithm::fixed_window(2, secs(10), Anchor::Epoch).unwrap(),
        &[
            ok(0, 2, 0),
            no(1, 1, 0, 9_999),
            no(2, 1, 0, 9_998),
            ok(10_000, 2, 0),
        ],
    );
}

#[test]
fn sliding_log_frees_each_request_one_window_after_it() {
    run(
        Algorithm::sliding_log(3, secs(10)).unwrap(),
        &[
            ok(0, 1, 2),
            ok(4_000, 1, 1),
            ok(8_000, 1, 0),
            no(9_999, 1, 0, 1),
            ok(10_000, 1, 0),        // the request from 0 s left the window
            no(10_001, 2, 0, 7_999), // two must leave (4 s and 8 s): the later frees at 18 s
            no(13_999, 1, 0, 1),
            ok(14_000, 1, 0),
            ok(18_000, 1, 0),
        ],
    );
}

#[test]
fn sliding_log_retry_for_a_larger_cost_waits_for_enough_entries() {
    run(
        Algorithm::sliding_log(4, secs(10)).unwrap(),
        &[
            ok(0, 1, 3),
            ok(1_000, 1, 2),
            ok(2_000, 2, 0),
            no(5_000, 3, 0, 7_000),
            ok(12_000, 3, 1),
        ],
    );
}

#[test]
fn sliding_window_weights_the_previous_window() {
    run(
        Algorithm::sliding_window(10, secs(10)).unwrap(),
        &[
            ok(0, 10, 0),
            no(9_000, 1, 0, 2_000), // at 11 s: 10 x 0.9 = 9 used, one fits
            ok(11_000, 1, 0),
            no(11_000, 1, 0, 1_000),
            // At 15 s: 10 x 0.5 + 1 = 6 used, 4 left.
            ok(15_000, 4, 0),
            // Next window: previous is 5; at 20 s it weighs 5, so 5 fit.
            ok(20_000, 5, 0),
            no(20_000, 1, 0, 2_000),
        ],
    );
}

#[test]
fn sliding_window_forgets_after_two_windows() {
    run(
        Algorithm::sliding_window(5, secs(10)).unwrap(),
        &[ok(0, 5, 0), no(1, 1, 0, 11_999), ok(20_000, 5, 0)],
    );
}

#[test]
fn token_bucket_starts_full_and_refills_one_token_per_interval() {
    run(
        Algorithm::token_bucket(3, Rate::per_second(2).unwrap()).unwrap(),
        &[
            ok(0, 3, 0),
            no(0, 1, 0, 500),
            no(499, 1, 0, 1),
            ok(500, 1, 0),
            no(600, 2, 0, 900),
            ok(1_500, 2, 0),
            ok(10_000, 3, 0), // full again, never more than capacity
            no(10_000, 1, 0, 500),
        ],
    );
}

#[test]
fn leaky_bucket_fills_and_drains() {
    run(
        Algorithm::leaky_bucket(3, Rate::per_second(1).unwrap()).unwrap(),
        &[
            ok(0, 2, 1),
            ok(100, 1, 0),
            no(200, 1, 0, 800),
            ok(1_000, 1, 0),
            no(1_500, 3, 0, 2_500),
            ok(4_000, 3, 0),
        ],
    );
}

#[test]
fn gcra_follows_the_documented_worked_example() {
    let algorithm = Algorithm::gcra(Rate::per_second(10).unwrap(), 5).unwrap();
    let mut rows = vec![];
    for remaining in (0..5).rev() {
        rows.push(ok(0, 1, remaining));
    }
    rows.extend([
        no(0, 1, 0, 100),
        no(0, 1, 0, 100),
        no(0, 1, 0, 100),
        ok(100, 1, 0),
        no(150, 1, 0, 50),
        ok(200, 1, 0),
        ok(700, 5, 0), // after 500 ms of silence the whole burst is back
    ]);
    run(algorithm, &rows);
}

#[test]
fn block_for_denies_every_check_until_it_ends() {
    let policy = Policy::new("p", Algorithm::fixed_window(2, secs(1), Anchor::Epoch).unwrap())
        .unwrap()
        .with_block_for(secs(30))
        .unwrap();
    run_policy(
        policy,
        &[
            ok(0, 2, 0),
            no(500, 1, 0, 30_000),   // trips the block
            no(5_000, 1, 0, 25_500), // the window reopened, the block holds and is not extended
            no(30_499, 1, 0, 1),
            ok(30_500, 1, 1),
        ],
    );
}

#[test]
fn block_for_shorter_than_the_algorithm_wait_reports_the_longer() {
    let policy = Policy::new("p", Algorithm::sliding_log(1, secs(60)).unwrap())
        .unwrap()
        .with_block_for(secs(5))
        .unwrap();
    run_policy(
        policy,
        &[
            ok(0, 1, 0),
            no(1_000, 1, 0, 59_000),
            no(6_000, 1, 0, 54_000),
            ok(60_000, 1, 0),
        ],
    );
}

#[test]
fn windows_from_one_millisecond_to_four_hundred_days_work() {
    run(
        Algorithm::sliding_log(1, Duration::from_millis(1)).unwrap(),
        &[ok(0, 1, 0), no(0, 1, 0, 1), ok(1, 1, 0)],
    );
    let days_400 = secs(400 * 24 * 3600);
    run(
        Algorithm::fixed_window(1, days_400, Anchor::FirstHit).unwrap(),
        &[ok(0, 1, 0), no(1, 1, 0, 400 * 24 * 3600 * 1000 - 1)],
    );
    let odd = Duration::from_millis(1_234);
    run(
        Algorithm::sliding_log(1, odd).unwrap(),
        &[ok(0, 1, 0), no(1_000, 1, 0, 234), ok(1_234, 1, 0)],
    );
}

#[test]
fn reset_clears_state_and_penalty() {
    let clock = ManualClock::new(T0_US);
    let store = MemoryStore::builder().clock(clock).build();
    let policy = Policy::new("p", Algorithm::sliding_log(1, secs(60)).unwrap())
        .unwrap()
        .with_block_for(secs(600))
        .unwrap();
    store.check(&policy, "k", 1).unwrap();
    assert!(!store.check(&policy, "k", 1).unwrap().allowed);
    store.reset(&policy, "k").unwrap();
    assert!(store.check(&policy, "k", 1).unwrap().allowed);
}

#[test]
fn policies_with_the_same_key_do_not_share_state() {
    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
    let a = Policy::new("a", Algorithm::sliding_log(1, secs(60)).unwrap()).unwrap();
    let b = Policy::new("b", Algorithm::sliding_log(1, secs(60)).unwrap()).unwrap();
    assert!(store.check(&a, "user", 1).unwrap().allowed);
    assert!(store.check(&b, "user", 1).unwrap().allowed);
    assert!(!store.check(&a, "user", 1).unwrap().allowed);
}

#[test]
fn a_policy_switching_algorithm_carries_what_was_spent_or_starts_fresh_as_declared() {
    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
    let log = Policy::new("api", Algorithm::sliding_log(1, secs(60)).unwrap()).unwrap();
    let bucket = |on_change| {
        Policy::new(
            "api",
            Algorithm::token_bucket(2, Rate::per_second(1).unwrap()).unwrap(),
        )
        .unwrap()
        .with_on_change(on_change)
    };
    // keep (the default): the unit spent under the log stays spent in the bucket of 2.
    assert!(store.check(&log, "k", 1).unwrap().allowed);
    assert_eq!(store.check(&bucket(OnChange::Keep), "k", 1).unwrap().remaining, 0);
    // reset: a fresh bucket.
    assert!(store.check(&log, "r", 1).unwrap().allowed);
    assert_eq!(
        store.check(&bucket(OnChange::Reset), "r", 1).unwrap().remaining,
        1
    );
}

#[test]
fn reset_after_reports_when_the_budget_is_full_again() {
    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
    let gcra = Policy::new("g", Algorithm::gcra(Rate::per_second(10).unwrap(), 5).unwrap()).unwrap();
    let d = store.check(&gcra, "k", 3).unwrap();
    assert_eq!(d.reset_after, Duration::from_millis(300));
    assert_eq!(d.limit, 5);
    let fixed = Policy::new("f", Algorithm::fixed_window(5, secs(10), Anchor::Epoch).unwrap()).unwrap();
    assert_eq!(store.check(&fixed, "k", 1).unwrap().reset_after, secs(10));
}
