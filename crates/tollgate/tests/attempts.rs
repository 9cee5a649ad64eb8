//! The attempts counter: try before acting (atomic, exact under parallel tries), increment on
//! failure, reset on success, check.

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

#[test]
fn parallel_tries_admit_exactly_max() {
    let (_, store) = store();
    let store = std::sync::Arc::new(store);
    // 50 threads released together by a barrier, each trying once against a maximum of 5.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let threads: Vec<_> = (0..50)
        .map(|_| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                store.try_attempt("login:victim", 5, HOUR).unwrap().allowed
            })
        })
        .collect();
    let allowed = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|&allowed| allowed)
        .count();
    assert_eq!(allowed, 5);
    assert_eq!(store.get_attempts("login:victim").unwrap(), 5);
}

#[test]
fn a_refused_try_changes_nothing_and_reports_the_wait() {
    let (clock, store) = store();
    for expected in 1..=3 {
        let tried = store.try_attempt("erin", 3, HOUR).unwrap();
        assert_eq!(
            (tried.allowed, tried.attempts, tried.remaining),
            (true, expected, 3 - expected)
        );
    }
    clock.advance(Duration::from_secs(600));
    let refused = store.try_attempt("erin", 3, HOUR).unwrap();
    assert_eq!(
        (refused.allowed, refused.attempts, refused.remaining),
        (false, 3, 0)
    );
    assert_eq!(refused.ttl, Duration::from_secs(3000));
    assert_eq!(store.get_attempts("erin").unwrap(), 3);
    // A higher maximum lets the next try count; the expiry is the first try's.
    let tried = store.try_attempt("erin", 4, HOUR).unwrap();
    assert_eq!(
        (tried.allowed, tried.attempts, tried.ttl),
        (true, 4, Duration::from_secs(3000))
    );
    clock.advance(Duration::from_secs(3000));
    assert_eq!(store.try_attempt("erin", 3, HOUR).unwrap().attempts, 1);
}

#[test]
fn try_rejects_bad_input() {
    let (_, store) = store();
    assert!(matches!(
        store.try_attempt("k", 0, HOUR),
        Err(Error::ZeroMaxAttempts)
    ));
    assert!(matches!(
        store.try_attempt("k", 5, Duration::ZERO),
        Err(Error::TtlOutOfRange { .. })
    ));
    assert!(matches!(store.try_attempt("", 5, HOUR), Err(Error::EmptyKey)));
}
