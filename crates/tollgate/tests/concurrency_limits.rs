//! Concurrency limits on the memory store: never more leases than `max_in_flight` under threads,
//! expiry on a manual clock, bounded memory, and the engine.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::concurrency::{Acquire, ConcurrencyPolicy, LeaseId, Release};
use tollgate::{Algorithm, Engine, Error, ManualClock, MemoryStore, Policy};

const THREADS: usize = 8;
const ROUNDS: usize = 2_000;

#[test]
fn threads_never_hold_more_leases_than_max_in_flight() {
    // A frozen clock: no lease expires during the run, so only releases free slots.
    let store = MemoryStore::builder().clock(ManualClock::new(1_000_000)).build();
    let policy = ConcurrencyPolicy::new("exports", 3, Duration::from_secs(60)).unwrap();
    let holding = AtomicU64::new(0);
    let most = AtomicU64::new(0);
    let granted = AtomicU64::new(0);
    let denied = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    match store.acquire(&policy, "alice").unwrap() {
                        Acquire::Granted(lease) => {
                            assert!(lease.in_flight <= 3, "{lease:?}");
                            granted.fetch_add(1, Ordering::Relaxed);
                            // Counted while the store says we hold the lease: between the grant
                            // and the release.
                            let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::yield_now();
                            holding.fetch_sub(1, Ordering::SeqCst);
                            let released = store.release(&policy, "alice", lease.id).unwrap();
                            assert!(matches!(released, Release::Released { in_flight } if in_flight < 3));
                        }
                        Acquire::Denied(full) => {
                            assert_eq!(full.in_flight, 3);
                            denied.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "held {most} at once");
    let (granted, denied) = (granted.load(Ordering::Relaxed), denied.load(Ordering::Relaxed));
    assert_eq!(granted + denied, (THREADS * ROUNDS) as u64);
    assert!(granted > 0);
    // Everything was released, so the key's slot is gone.
    assert!(store.is_empty());
}

#[test]
fn a_lease_never_released_expires_after_its_timeout() {
    let clock = ManualClock::new(5_000_000);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let policy = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(30)).unwrap();
    let Acquire::Granted(first) = store.acquire(&policy, "k").unwrap() else {
        panic!("a free slot")
    };
    assert_eq!(first.expires_in, Duration::from_secs(30));
    assert_eq!((first.in_flight, first.limit), (1, 2));
    clock.advance(Duration::from_secs(10));
    let Acquire::Granted(second) = store.acquire(&policy, "k").unwrap() else {
        panic!("a free slot")
    };
    assert_eq!(second.in_flight, 2);
    let Acquire::Denied(full) = store.acquire(&policy, "k").unwrap() else {
        panic!("both slots are taken")
    };
    assert_eq!(
        full.retry_after,
        Duration::from_secs(20),
        "the first lease ends in 20 s"
    );
    // One microsecond before the first lease ends it still holds its slot.
    clock.advance(Duration::from_secs(20) - Duration::from_micros(1));
    assert!(!store.acquire(&policy, "k").unwrap().is_granted());
    clock.advance(Duration::from_micros(1));
    let Acquire::Granted(third) = store.acquire(&policy, "k").unwrap() else {
        panic!("the first lease expired")
    };
    assert_eq!(third.in_flight, 2);
    // The expired lease cannot be released any more; the live one can.
    assert_eq!(store.release(&policy, "k", first.id).unwrap(), Release::NotHeld);
    assert_eq!(
        store.release(&policy, "k", second.id).unwrap(),
        Release::Released { in_flight: 1 }
    );
    // Nobody releases the third: once it expires, the slot is reclaimed.
    clock.advance(Duration::from_secs(31));
    store.purge_expired();
    assert!(store.is_empty());
}

#[test]
fn live_leases_are_never_evicted_and_a_full_store_refuses() {
    let clock = ManualClock::new(0);
    let store = MemoryStore::builder().max_keys(64).clock(clock.clone()).build();
    let policy = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(30)).unwrap();
    let mut refused = 0;
    for i in 0..100 {
        match store.acquire(&policy, format!("user-{i}")) {
            Ok(acquire) => assert!(acquire.is_granted()),
            Err(Error::StoreFull { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(store.len() <= 64);
    assert_eq!(refused, 100 - store.len());
    // Every key that got a lease still holds it: none was evicted to make room.
    for i in 0..100 {
        if let Ok(acquire) = store.acquire(&policy, format!("user-{i}")) {
            assert!(!acquire.is_granted(), "user-{i} lost its lease");
        }
    }
    // Once the leases expire, new keys find room again.
    clock.advance(Duration::from_secs(30));
    assert!(store.acquire(&policy, "latecomer").unwrap().is_granted());
}

#[test]
fn every_live_lease_counts_against_the_key_bound() {
    // One key may hold many leases; each is memory the store holds, so each counts as a key.
    let clock = ManualClock::new(0);
    let store = MemoryStore::builder().max_keys(64).clock(clock.clone()).build();
    let policy = ConcurrencyPolicy::new("exports", 1_000, Duration::from_secs(30)).unwrap();
    let mut granted = Vec::new();
    let mut refused = 0;
    for _ in 0..1_000 {
        match store.acquire(&policy, "alice") {
            Ok(Acquire::Granted(lease)) => granted.push(lease.id),
            Ok(Acquire::Denied(full)) => panic!("denied at {} in flight", full.in_flight),
            Err(Error::StoreFull { max_keys: 64 }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(
        granted.len(),
        64,
        "one key held more leases than the store holds keys"
    );
    assert_eq!(refused, 1_000 - 64);
    // A full store of live leases has no room for a rate limit key either.
    let rate = Policy::new("api", Algorithm::sliding_log(5, Duration::from_secs(60)).unwrap()).unwrap();
    assert!(matches!(
        store.check(&rate, "bob", 1),
        Err(Error::StoreFull { .. })
    ));
    // A release gives its unit back at once.
    store.release(&policy, "alice", granted[0]).unwrap();
    assert!(store.check(&rate, "bob", 1).unwrap().allowed);
    store.reset(&rate, "bob").unwrap();
    // Leases that expire give theirs back, even while their key still holds a live one.
    clock.advance(Duration::from_secs(10));
    assert!(store.acquire(&policy, "alice").unwrap().is_granted());
    assert!(matches!(
        store.acquire(&policy, "carol"),
        Err(Error::StoreFull { .. })
    ));
    clock.advance(Duration::from_secs(20));
    for i in 0..63 {
        assert!(
            store.check(&rate, format!("user-{i}"), 1).unwrap().allowed,
            "user-{i}"
        );
    }
    // A rate limit key with budget left is evictable: a lease may take its place.
    let Acquire::Granted(lease) = store.acquire(&policy, "alice").unwrap() else {
        unreachable!("alice holds one lease of 1 000")
    };
    assert_eq!(lease.in_flight, 2, "the lease taken at 10 s lives until 40 s");
    assert_eq!(
        store.len(),
        63,
        "one rate limit key made room for alice's second lease"
    );
}

#[test]
fn a_rate_policy_and_a_concurrency_policy_of_one_name_do_not_share_state() {
    let store = MemoryStore::builder().clock(ManualClock::new(0)).build();
    let rate = Policy::new(
        "exports",
        Algorithm::sliding_log(1, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    let limit = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(60)).unwrap();
    assert!(store.acquire(&limit, "k").unwrap().is_granted());
    assert!(store.check(&rate, "k", 1).unwrap().allowed);
    assert!(!store.acquire(&limit, "k").unwrap().is_granted());
    assert!(!store.check(&rate, "k", 1).unwrap().allowed);
    assert_eq!(store.len(), 2);
}

#[test]
fn bad_keys_are_errors_not_answers() {
    let store = MemoryStore::new();
    let policy = ConcurrencyPolicy::new("exports", 1, Duration::from_secs(60)).unwrap();
    assert!(matches!(store.acquire(&policy, ""), Err(Error::EmptyKey)));
    assert!(matches!(
        store.release(&policy, vec![b'k'; 9000], LeaseId::new(1)),
        Err(Error::KeyTooLong { .. })
    ));
}

#[tokio::test]
async fn the_engine_releases_what_it_acquired() {
    let engine = Engine::new(MemoryStore::new());
    let policy = ConcurrencyPolicy::new("exports", 2, Duration::from_secs(60)).unwrap();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let acquired = engine.acquire(&policy, b"k").await.unwrap();
        assert!(acquired.store_error.is_none());
        let Acquire::Granted(lease) = acquired.acquire else {
            panic!("a free slot")
        };
        assert!(!lease.degraded);
        ids.push(lease.id);
    }
    assert!(!engine.acquire(&policy, b"k").await.unwrap().acquire.is_granted());
    assert_eq!(
        engine.release(&policy, b"k", ids[0]).await.unwrap(),
        Release::Released { in_flight: 1 }
    );
    assert!(engine.acquire(&policy, b"k").await.unwrap().acquire.is_granted());
    assert!(engine.acquire(&policy, b"").await.is_err());
}
