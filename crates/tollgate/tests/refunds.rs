//! Refunds on the memory store: the lock-free cells (GCRA, token bucket) and the hot-key memo
//! give the budget back as the locked path does, a key with no state has nothing to give, and
//! bad input is refused.

use std::time::Duration;

use tollgate::{Algorithm, Error, ManualClock, MemoryStore, Policy, Rate};

fn store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(ManualClock::new(1_000_000_000))
        .build()
}

#[test]
fn a_hot_gcra_key_gets_its_budget_back() {
    let store = store();
    let policy = Policy::new("api", Algorithm::gcra(Rate::per_hour(3).unwrap(), 3).unwrap()).unwrap();
    for _ in 0..3 {
        assert!(store.check(&policy, "k", 1).unwrap().allowed);
    }
    // Denied twice: the key is now decided from this thread's memo, without the lock.
    for _ in 0..2 {
        assert!(!store.check(&policy, "k", 1).unwrap().allowed);
    }
    let after = store.refund(&policy, "k", 2).unwrap();
    assert!(after.allowed);
    assert_eq!(after.remaining, 1);
    assert!(store.check(&policy, "k", 2).unwrap().allowed);
    assert!(!store.check(&policy, "k", 1).unwrap().allowed);
}

#[test]
fn a_token_bucket_cell_is_refunded_up_to_full() {
    let store = store();
    let policy = Policy::new(
        "tb",
        Algorithm::token_bucket(4, Rate::per_hour(1).unwrap()).unwrap(),
    )
    .unwrap();
    assert!(store.check(&policy, "k", 1).unwrap().allowed);
    assert!(store.check(&policy, "k", 1).unwrap().allowed);
    assert_eq!(store.refund(&policy, "k", 4).unwrap().remaining, 3);
    assert!(store.check(&policy, "k", 4).unwrap().allowed);
}

#[test]
fn nothing_stored_is_nothing_to_give_back() {
    let store = store();
    let policy = Policy::new("log", Algorithm::sliding_log(2, Duration::from_secs(60)).unwrap()).unwrap();
    assert_eq!(store.refund(&policy, "nobody", 2).unwrap().remaining, 1);
    assert!(store.is_empty());
    assert!(store.check(&policy, "nobody", 2).unwrap().allowed);
    assert!(!store.check(&policy, "nobody", 1).unwrap().allowed);
}

#[test]
fn bad_refunds_are_refused() {
    let store = store();
    let policy = Policy::new("log", Algorithm::sliding_log(2, Duration::from_secs(60)).unwrap()).unwrap();
    assert!(matches!(store.refund(&policy, "k", 0), Err(Error::ZeroCost)));
    assert!(matches!(
        store.refund(&policy, "k", 3),
        Err(Error::CostTooLarge { .. })
    ));
    assert!(matches!(store.refund(&policy, "", 1), Err(Error::EmptyKey)));
}
