//! The attempts counter: increment on failure, reset on success, check before acting.

use std::time::Duration;

use tollgate::{Error, ManualClock, MemoryStore};

fn store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(1_000_000_000);
    (clock.clone(), MemoryStore::builder().clock(clock).build())
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn counts_failures_and_allows_while_below_max() {
    let (_, store) = store();
    assert_eq!(store.get_attempts("alice").unwrap(), 0);
    assert!(store.check_limit("alice", 3).unwrap().allowed);
    for expected in 1..=3 {
        assert_eq!(store.increment_attempts("alice", HOUR).unwrap(), expected);
    }
    let status = store.check_limit("alice", 3).unwrap();
    assert!(!status.allowed);
    assert_eq!(status.remaining, 0);
    assert_eq!(status.ttl, Some(HOUR));
}

#[test]
fn ttl_is_set_on_creation_and_not_extended() {
    let (clock, store) = store();
    store.increment_attempts("bob", HOUR).unwrap();
    clock.advance(Duration::from_secs(1800));
    store.increment_attempts("bob", HOUR).unwrap();
    assert_eq!(store.get_ttl("bob").unwrap(), Some(Duration::from_secs(1800)));
    clock.advance(Duration::from_secs(1799));
    assert_eq!(store.get_attempts("bob").unwrap(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.get_attempts("bob").unwrap(), 0);
    assert_eq!(store.get_ttl("bob").unwrap(), None);
    // A new counter starts after expiry.
    assert_eq!(store.increment_attempts("bob", HOUR).unwrap(), 1);
    assert_eq!(store.get_ttl("bob").unwrap(), Some(HOUR));
}

#[test]
fn reset_on_success_clears_the_counter() {
    let (_, store) = store();
    store.increment_attempts("carol", HOUR).unwrap();
    store.reset_attempts("carol").unwrap();
    assert_eq!(store.get_attempts("carol").unwrap(), 0);
    assert_eq!(store.get_ttl("carol").unwrap(), None);
    let status = store.check_limit("carol", 1).unwrap();
    assert_eq!((status.allowed, status.remaining, status.ttl), (true, 1, None));
}

#[test]
fn login_flow_locks_for_the_rest_of_the_hour() {
    let (clock, store) = store();
    let account = "login:dave";
    for _ in 0..5 {
        assert!(store.check_limit(account, 5).unwrap().allowed);
        store.increment_attempts(account, HOUR).unwrap();
        clock.advance(Duration::from_secs(60));
    }
    let locked = store.check_limit(account, 5).unwrap();
    assert!(!locked.allowed);
    assert_eq!(locked.ttl, Some(Duration::from_secs(3600 - 300)));
}

#[test]
fn rejects_bad_input() {
    let (_, store) = store();
    assert!(matches!(store.check_limit("k", 0), Err(Error::ZeroMaxAttempts)));
    assert!(matches!(
        store.increment_attempts("k", Duration::ZERO),
        Err(Error::TtlOutOfRange { .. })
    ));
    assert!(matches!(store.increment_attempts("", HOUR), Err(Error::EmptyKey)));
    assert!(matches!(
        store.get_attempts(vec![b'x'; 9000]),
        Err(Error::KeyTooLong { len: 9000, .. })
    ));
}
