//! Property tests of concurrency limits on the memory store against a plain model: on random
//! acquires, releases and waits, the store grants exactly when the model has a free slot, never
//! holds more than `max_in_flight` live leases, and releases exactly the leases the model holds.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::concurrency::{Acquire, ConcurrencyPolicy, LeaseId, Release};
use tollgate::{Clock as _, ManualClock, MemoryStore};

/// One step: wait this many ms, then acquire (`None`) or release the lease granted `n` grants
/// ago (`Some(n)`, wrapping).
type Step = (u64, Option<usize>);

proptest! {
    #[test]
    fn the_memory_store_follows_the_model(
        max in 1u64..5,
        timeout_ms in 1u64..50,
        steps in proptest::collection::vec((0u64..20, proptest::option::of(0usize..8)), 1..80),
    ) {
        let clock = ManualClock::new(1_000_000_000);
        let store = MemoryStore::builder().clock(clock.clone()).build();
        let policy = ConcurrencyPolicy::new("p", max, Duration::from_millis(timeout_ms)).unwrap();
        // The model: every granted lease and its expiry, in µs.
        let mut granted: Vec<(LeaseId, u64)> = Vec::new();
        let mut live: Vec<(LeaseId, u64)> = Vec::new();
        for (wait_ms, op) in steps as Vec<Step> {
            clock.advance(Duration::from_millis(wait_ms));
            let now = clock.now_us();
            live.retain(|&(_, expires)| expires > now);
            match op {
                None => match store.acquire(&policy, "k").unwrap() {
                    Acquire::Granted(lease) => {
                        prop_assert!((live.len() as u64) < max, "granted with {} live", live.len());
                        let expires = now + timeout_ms * 1_000;
                        live.push((lease.id, expires));
                        granted.push((lease.id, expires));
                        prop_assert_eq!(lease.in_flight, live.len() as u64);
                    }
                    Acquire::Denied(full) => {
                        prop_assert_eq!(live.len() as u64, max);
                        let earliest = live.iter().map(|&(_, e)| e).min().unwrap();
                        prop_assert_eq!(full.retry_after, Duration::from_micros(earliest - now));
                    }
                },
                Some(back) if !granted.is_empty() => {
                    let (id, _) = granted[granted.len() - 1 - back % granted.len()];
                    let held = live.iter().position(|&(l, _)| l == id);
                    let answer = store.release(&policy, "k", id).unwrap();
                    match held {
                        Some(at) => {
                            live.remove(at);
                            prop_assert_eq!(answer, Release::Released { in_flight: live.len() as u64 });
                        }
                        None => prop_assert_eq!(answer, Release::NotHeld),
                    }
                }
                Some(_) => {}
            }
        }
    }
}
