//! A policy changed under the same name migrates each key's state at its first touch, as the
//! new policy's `on_change` declares: for every pair of algorithms, raised and lowered limits,
//! and each of keep, scale and reset, on the memory store. The Redis store is held to the same
//! answers by its own tests.

use std::time::Duration;

use tollgate::algorithm::calendar_quota::Period;
use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, OnChange, Policy, Rate};

/// Mid-window for every window length used here, so no window ends during a test.
const T0_US: u64 = 1_700_000_005_000_000;

/// Every algorithm with a limit (burst, capacity) of `limit`.
fn algorithms(limit: u64) -> Vec<Algorithm> {
    let minute = Duration::from_secs(60);
    vec![
        Algorithm::fixed_window(limit, minute, Anchor::Epoch).unwrap(),
        Algorithm::sliding_log(limit, minute).unwrap(),
        Algorithm::sliding_window(limit, minute).unwrap(),
        Algorithm::token_bucket(limit, Rate::per_minute(limit).unwrap()).unwrap(),
        Algorithm::leaky_bucket(limit, Rate::per_minute(limit).unwrap()).unwrap(),
        Algorithm::gcra(Rate::per_minute(limit).unwrap(), limit).unwrap(),
        Algorithm::calendar_quota(limit, Period::Day, "UTC").unwrap(),
    ]
}

fn policy(algorithm: Algorithm, on_change: OnChange, generation: u64) -> Policy {
    Policy::new("api", algorithm)
        .unwrap()
        .with_on_change(on_change)
        .with_generation(generation)
}

/// What `on_change` carries of `spent` units of `old` into a limit of `new`.
fn expected(on_change: OnChange, spent: u64, old: u64, new: u64) -> u64 {
    match on_change {
        OnChange::Keep => spent.min(new),
        // Written out as a fraction of whole units: 4 of 10 is 40%, rounded up.
        OnChange::Scale => (spent * new).div_ceil(old),
        OnChange::Reset => 0,
    }
}

#[test]
fn every_pair_of_algorithms_carries_over_what_each_on_change_declares() {
    let modes = [OnChange::Keep, OnChange::Scale, OnChange::Reset];
    let (old_limit, spent) = (10, 4);
    let mut cases = 0;
    for new_limit in [20, 3] {
        for from in algorithms(old_limit) {
            for to in algorithms(new_limit) {
                for on_change in modes {
                    let case = format!(
                        "{} {old_limit} -> {} {new_limit}, {on_change}",
                        from.name(),
                        to.name()
                    );
                    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
                    let before = policy(from.clone(), OnChange::Keep, 1);
                    assert!(store.check(&before, "k", spent).unwrap().allowed, "{case}");
                    let after = policy(to.clone(), on_change, 2);
                    let carried = expected(on_change, spent, old_limit, new_limit);
                    let peeked = store.peek(&after, "k", 1).unwrap();
                    if carried < new_limit {
                        assert!(peeked.allowed, "{case}: {peeked:?}");
                        assert_eq!(peeked.remaining, new_limit - carried - 1, "{case}");
                    } else {
                        assert!(!peeked.allowed, "{case}: {peeked:?}");
                    }
                    assert_eq!(peeked.limit, new_limit, "{case}");
                    // Migrated once: the next answers go on from the migrated state.
                    let left = new_limit - carried;
                    let admitted = (0..new_limit + 2)
                        .filter(|_| store.check(&after, "k", 1).unwrap().allowed)
                        .count() as u64;
                    assert_eq!(admitted, left, "{case}: what is left passes, and no more");
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 2 * 7 * 7 * 3);
}

#[test]
fn a_raised_and_a_lowered_limit_of_one_algorithm_follow_the_table_of_the_docs() {
    // docs/changing-limits.md: 40 of 100 spent, then a limit of 200 or of 20.
    let window = |limit| Algorithm::sliding_window(limit, Duration::from_secs(60)).unwrap();
    for (new_limit, on_change, left) in [
        (200, OnChange::Keep, 160),
        (20, OnChange::Keep, 0),
        (200, OnChange::Scale, 120),
        (20, OnChange::Scale, 12),
        (200, OnChange::Reset, 200),
        (20, OnChange::Reset, 20),
    ] {
        let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
        store
            .check(&policy(window(100), OnChange::Keep, 1), "k", 40)
            .unwrap();
        let after = policy(window(new_limit), on_change, 2);
        let admitted = (0..=new_limit)
            .filter(|_| store.check(&after, "k", 1).unwrap().allowed)
            .count() as u64;
        assert_eq!(admitted, left, "{new_limit}, {on_change}");
    }
}

#[test]
fn units_spent_earlier_are_carried_as_they_stand_at_the_first_touch() {
    let clock = ManualClock::new(T0_US);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    // A bucket of 10 refilling one a second: 6 spent, then 4 seconds refill 4 of them.
    let bucket = Algorithm::token_bucket(10, Rate::per_second(1).unwrap()).unwrap();
    store.check(&policy(bucket, OnChange::Keep, 1), "k", 6).unwrap();
    clock.advance(Duration::from_secs(4));
    let window = Algorithm::fixed_window(10, Duration::from_secs(60), Anchor::FirstHit).unwrap();
    let after = policy(window, OnChange::Keep, 2);
    assert_eq!(
        store.peek(&after, "k", 1).unwrap().remaining,
        7,
        "2 spent as of the touch"
    );
}

#[test]
fn a_penalty_stays_under_keep_and_is_lifted_by_reset() {
    let minute = Duration::from_secs(60);
    for (on_change, blocked) in [
        (OnChange::Keep, true),
        (OnChange::Scale, true),
        (OnChange::Reset, false),
    ] {
        let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
        let login = Policy::new("login", Algorithm::sliding_log(1, minute).unwrap())
            .unwrap()
            .with_block_for(Duration::from_secs(3_600))
            .unwrap()
            .with_generation(1);
        store.check(&login, "ann", 1).unwrap();
        assert!(!store.check(&login, "ann", 1).unwrap().allowed, "blocked now");
        let raised = Policy::new("login", Algorithm::sliding_log(100, minute).unwrap())
            .unwrap()
            .with_block_for(Duration::from_secs(3_600))
            .unwrap()
            .with_on_change(on_change)
            .with_generation(2);
        assert_eq!(
            !store.check(&raised, "ann", 1).unwrap().allowed,
            blocked,
            "{on_change}"
        );
    }
}

#[test]
fn an_earlier_version_decides_a_migrated_key_under_the_later_one_and_never_migrates_it_back() {
    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
    let minute = Duration::from_secs(60);
    let old = policy(
        Algorithm::fixed_window(10, minute, Anchor::Epoch).unwrap(),
        OnChange::Scale,
        1,
    );
    let new = policy(Algorithm::sliding_log(20, minute).unwrap(), OnChange::Scale, 2);
    store.check(&old, "k", 5).unwrap();
    // The later version migrates: half of 10 is half of 20.
    assert_eq!(store.check(&new, "k", 1).unwrap().remaining, 9);
    // An instance still on the old version decides under the later one's numbers...
    let seen_by_old = store.check(&old, "k", 1).unwrap();
    assert!(seen_by_old.allowed);
    assert_eq!(seen_by_old.remaining, 8);
    // ...and has not scaled it back and forth: the later version sees both spends.
    assert_eq!(store.peek(&new, "k", 1).unwrap().remaining, 7);
    // The old instance reloads to the later numbers: same fingerprint, no second migration.
    let reloaded = policy(Algorithm::sliding_log(20, minute).unwrap(), OnChange::Scale, 3);
    assert_eq!(store.peek(&reloaded, "k", 1).unwrap().remaining, 7);
}

#[test]
fn a_key_with_an_override_keeps_its_state_across_a_change() {
    use tollgate::overrides::{Override, OverrideTarget};
    let store = MemoryStore::builder().clock(ManualClock::new(T0_US)).build();
    let minute = Duration::from_secs(60);
    let old = policy(
        Algorithm::fixed_window(10, minute, Anchor::Epoch).unwrap(),
        OnChange::Reset,
        1,
    );
    let vip = Algorithm::fixed_window(100, minute, Anchor::Epoch).unwrap();
    store
        .set_override(
            &old,
            &Override::new(&old, OverrideTarget::key("vip"), vip, None).unwrap(),
        )
        .unwrap();
    for _ in 0..30 {
        assert!(store.check(&old, "vip", 1).unwrap().allowed);
    }
    store.check(&old, "plain", 3).unwrap();
    let new = policy(
        Algorithm::fixed_window(20, minute, Anchor::Epoch).unwrap(),
        OnChange::Reset,
        2,
    );
    assert_eq!(
        store.peek(&new, "vip", 1).unwrap().remaining,
        69,
        "the override's count stays"
    );
    assert_eq!(store.peek(&new, "plain", 1).unwrap().remaining, 19, "reset");
}
