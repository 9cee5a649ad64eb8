//! Key floods: the store stays within its bound, reclaims expired keys by itself, and never
//! forgets a key that is blocked or out of budget.

use std::time::Duration;

use tollgate::{Algorithm, Error, ManualClock, MemoryStore, Policy, Rate};

const MAX_KEYS: usize = 1_000;

fn store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(1_000_000_000_000);
    (
        clock.clone(),
        MemoryStore::builder().max_keys(MAX_KEYS).clock(clock).build(),
    )
}

fn login_policy() -> Policy {
    Policy::new(
        "login",
        Algorithm::sliding_log(3, Duration::from_secs(60)).unwrap(),
    )
    .unwrap()
    .with_block_for(Duration::from_secs(3600))
    .unwrap()
}

#[test]
fn a_flood_of_fresh_keys_stays_bounded_and_keeps_blocked_keys() {
    let (clock, store) = store();
    let policy = login_policy();
    let attackers: Vec<String> = (0..50).map(|i| format!("attacker-{i}")).collect();
    for key in &attackers {
        for _ in 0..4 {
            store.check(&policy, key, 1).unwrap();
        }
        assert!(!store.check(&policy, key, 1).unwrap().allowed);
    }
    // The bots' keys live for a day, longer than any block, so an evictor that only looked at
    // expiry would pick the attackers first.
    let daily = Policy::new(
        "daily",
        Algorithm::sliding_log(100, Duration::from_secs(86_400)).unwrap(),
    )
    .unwrap();
    for i in 0..100_000 {
        clock.advance(Duration::from_micros(100));
        let decision = store.check(&daily, format!("bot-{i}"), 1).unwrap();
        assert!(decision.allowed, "a fresh key is allowed");
        if i % 1_000 == 0 {
            assert!(store.len() <= MAX_KEYS, "{} keys stored", store.len());
        }
    }
    assert!(store.len() <= MAX_KEYS);
    // 10 s have passed; every attacker is still blocked for the rest of the hour.
    for key in &attackers {
        let decision = store.check(&policy, key, 1).unwrap();
        assert!(!decision.allowed, "{key} got a fresh budget");
        assert!(decision.retry_after.unwrap() > Duration::from_secs(3500));
    }
}

#[test]
fn keys_over_their_limit_survive_a_flood_without_any_penalty() {
    let (clock, store) = store();
    let policy = Policy::new("api", Algorithm::gcra(Rate::per_hour(10).unwrap(), 10).unwrap()).unwrap();
    for _ in 0..10 {
        store.check(&policy, "greedy", 1).unwrap();
    }
    let daily = Policy::new(
        "daily",
        Algorithm::sliding_log(100, Duration::from_secs(86_400)).unwrap(),
    )
    .unwrap();
    for i in 0..20_000 {
        clock.advance(Duration::from_micros(10));
        store.check(&daily, format!("fresh-{i}"), 1).unwrap();
    }
    assert!(!store.check(&policy, "greedy", 1).unwrap().allowed);
}

#[test]
fn expired_keys_are_reclaimed_without_help() {
    let (clock, store) = store();
    let policy = Policy::new(
        "short",
        Algorithm::sliding_log(5, Duration::from_secs(1)).unwrap(),
    )
    .unwrap();
    for round in 0..5 {
        for i in 0..MAX_KEYS {
            store.check(&policy, format!("r{round}-{i}"), 1).unwrap();
        }
        clock.advance(Duration::from_secs(2));
    }
    // Each round's keys expired before the next round, so no round was refused or squeezed.
    assert!(store.len() <= MAX_KEYS);
    store.purge_expired();
    assert_eq!(store.len(), 0);
}

#[test]
fn a_store_full_of_blocked_keys_refuses_new_keys_instead_of_forgetting() {
    let clock = ManualClock::new(1_000_000_000_000);
    let store = MemoryStore::builder().max_keys(64).clock(clock.clone()).build();
    let policy = login_policy();
    let mut blocked = 0;
    for i in 0..1_000 {
        let key = format!("attacker-{i}");
        let outcomes: Vec<_> = (0..4).map(|_| store.check(&policy, &key, 1)).collect();
        if outcomes.iter().any(|o| matches!(o, Err(Error::StoreFull { .. }))) {
            break;
        }
        blocked += 1;
    }
    assert_eq!(blocked, 64);
    assert!(matches!(
        store.check(&policy, "newcomer", 1),
        Err(Error::StoreFull { max_keys: 64 })
    ));
    for i in 0..64 {
        assert!(!store.check(&policy, format!("attacker-{i}"), 1).unwrap().allowed);
    }
    // Once the blocks end, room is made again.
    clock.advance(Duration::from_secs(3601));
    assert!(store.check(&policy, "newcomer", 1).unwrap().allowed);
}

#[test]
fn attempts_counters_share_the_bound() {
    let (_, store) = store();
    for i in 0..10 * MAX_KEYS {
        store
            .increment_attempts(format!("user-{i}"), Duration::from_secs(60))
            .unwrap();
    }
    assert!(store.len() <= MAX_KEYS);
}
