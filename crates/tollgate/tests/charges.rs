//! Charges on the memory store, for every algorithm: a charge past the limit leaves a debt, a
//! check is refused while it lasts with the exact `retry_after`, and the algorithm's own clock
//! pays it back. Also: a charge starts no penalty, reserve-then-settle ends at the actual cost,
//! and a key in debt is never evicted to make room.

use std::time::Duration;

use tollgate::algorithm::calendar_quota::Period;
use tollgate::{Algorithm, Anchor, Clock, ManualClock, MemoryStore, Policy, Rate, Rule};

/// A time every window of these tests starts at: a whole day since the epoch.
const T0: u64 = 20_000 * 86_400_000_000;

fn store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(T0);
    (clock.clone(), MemoryStore::builder().clock(clock).build())
}

/// Every algorithm with a budget of 4, and how long a check of cost 1 is refused after a charge
/// of 6 at `T0`.
fn policies() -> Vec<(Policy, u64)> {
    let s = Duration::from_secs;
    let per_second = Rate::per_second(1).unwrap();
    [
        (
            Algorithm::fixed_window(4, s(10), Anchor::Epoch).unwrap(),
            10_000_000,
        ),
        (
            Algorithm::calendar_quota(4, Period::Day, "UTC").unwrap(),
            86_400_000_000,
        ),
        // The six units leave the window together, at 10 s.
        (Algorithm::sliding_log(4, s(10)).unwrap(), 10_000_000),
        // 6 weigh fully until 10 s, then 6 × (1 − f): 1 more fits once that is 3, at 15 s.
        (Algorithm::sliding_window(4, s(10)).unwrap(), 15_000_000),
        // 2 tokens owed, then one to spend.
        (Algorithm::token_bucket(4, per_second).unwrap(), 3_000_000),
        (Algorithm::leaky_bucket(4, per_second).unwrap(), 3_000_000),
        (Algorithm::gcra(per_second, 4).unwrap(), 3_000_000),
    ]
    .into_iter()
    .map(|(algorithm, retry)| (Policy::new(algorithm.name(), algorithm).unwrap(), retry))
    .collect()
}

#[test]
fn a_charge_past_the_limit_is_a_debt_refused_until_the_algorithm_pays_it_back() {
    for (policy, retry_us) in policies() {
        let (clock, store) = store();
        let name = policy.name();
        let charged = store.charge(&[Rule::new(&policy, "k", 6)]).unwrap();
        assert_eq!(charged[0].debt, 2, "{name}");
        assert_eq!(
            charged[0].decision,
            store.peek(&policy, "k", 1).unwrap(),
            "{name}: a peek of cost 1"
        );
        let refused = store.check(&policy, "k", 1).unwrap();
        assert!(!refused.allowed, "{name}");
        assert_eq!(
            refused.retry_after,
            Some(Duration::from_micros(retry_us)),
            "{name}"
        );
        clock.set_us(T0 + retry_us - 1);
        assert!(
            !store.check(&policy, "k", 1).unwrap().allowed,
            "{name}: not a µs early"
        );
        clock.set_us(T0 + retry_us);
        assert!(store.check(&policy, "k", 1).unwrap().allowed, "{name}: paid back");
    }
}

#[test]
fn a_charge_within_the_budget_spends_as_a_check_does() {
    for (policy, _) in policies() {
        let (_, store) = store();
        let charged = store.charge(&[Rule::new(&policy, "k", 3)]).unwrap();
        assert_eq!(charged[0].debt, 0);
        store.check(&policy, "other", 3).unwrap();
        assert_eq!(
            charged[0].decision,
            store.peek(&policy, "other", 1).unwrap(),
            "{}",
            policy.name()
        );
    }
}

#[test]
fn rules_of_one_budget_add_up_and_answer_in_order() {
    let (_, store) = store();
    let a = Policy::new("a", Algorithm::gcra(Rate::per_second(1).unwrap(), 4).unwrap()).unwrap();
    let b = Policy::new("b", Algorithm::sliding_log(4, Duration::from_secs(10)).unwrap()).unwrap();
    let rules = [
        Rule::new(&a, "k", 3),
        Rule::new(&b, "k", 1),
        Rule::new(&a, "k", 3).as_shadow(),
    ];
    let charged = store.charge(&rules).unwrap();
    assert_eq!(charged.iter().map(|c| c.debt).collect::<Vec<_>>(), [2, 0, 2]);
    assert_eq!(charged[1].decision.remaining, 2);
}

#[test]
fn a_charge_starts_no_penalty_and_the_next_refused_check_does() {
    let (_, store) = store();
    let policy = Policy::new("p", Algorithm::sliding_log(2, Duration::from_secs(10)).unwrap())
        .unwrap()
        .with_block_for(Duration::from_secs(600))
        .unwrap();
    let charged = store.charge(&[Rule::new(&policy, "k", 5)]).unwrap();
    // The answer is what a check would get: refused, and blocked by that refusal.
    assert_eq!(charged[0].decision.retry_after, Some(Duration::from_secs(600)));
    assert_eq!(store.penalty_left(&policy, "k").unwrap(), None);
    let refused = store.check(&policy, "k", 1).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(600)));
    assert_eq!(
        store.penalty_left(&policy, "k").unwrap(),
        Some(Duration::from_secs(600))
    );
}

#[test]
fn reserve_then_settle_ends_exactly_at_the_actual_cost() {
    for (policy, _) in policies() {
        for settle_after_us in [0, 1_000] {
            let (clock, store) = store();
            let name = policy.name();
            // Estimated 3, used 1: the refund gives 2 back. Estimated 3, used 5: the charge
            // records 2 more.
            store.check(&policy, "over", 3).unwrap();
            store.check(&policy, "under", 3).unwrap();
            // The same costs, known up front.
            store.check(&policy, "one", 1).unwrap();
            store.charge(&[Rule::new(&policy, "five", 5)]).unwrap();
            clock.advance(Duration::from_micros(settle_after_us));
            let refunded = store.refund(&policy, "over", 2).unwrap();
            let charged = store.charge(&[Rule::new(&policy, "under", 2)]).unwrap();
            assert_eq!(
                refunded.remaining,
                store.peek(&policy, "one", 1).unwrap().remaining,
                "{name}"
            );
            assert_eq!(charged[0].decision.remaining, 0, "{name}");
            assert_eq!(charged[0].debt, 1, "{name}");
            if settle_after_us > 0 {
                // A log records the charge at its own time, a little later: only the amounts
                // are compared.
                continue;
            }
            for (settled, direct) in [("over", "one"), ("under", "five")] {
                for later_ms in [0, 1_500, 4_000, 12_000] {
                    clock.set_us(T0 + later_ms * 1_000);
                    assert_eq!(
                        store.peek(&policy, settled, 1).unwrap(),
                        store.peek(&policy, direct, 1).unwrap(),
                        "{name}: {settled} at +{later_ms} ms"
                    );
                }
            }
        }
    }
}

#[test]
fn a_key_in_debt_is_not_evicted_to_make_room() {
    let clock = ManualClock::new(T0);
    let store = MemoryStore::builder().max_keys(1).clock(clock.clone()).build();
    let policy = Policy::new("p", Algorithm::gcra(Rate::per_second(1).unwrap(), 1).unwrap()).unwrap();
    store.charge(&[Rule::new(&policy, "debtor", 5)]).unwrap();
    // Flooding with a new key cannot hand the debtor a fresh budget.
    assert!(store.check(&policy, "newcomer", 1).is_err());
    assert!(store.charge(&[Rule::new(&policy, "newcomer", 1)]).is_err());
    assert!(!store.check(&policy, "debtor", 1).unwrap().allowed);
    // Paid back (4 s owed, 1 s for a request): evictable again.
    clock.set_us(T0 + 5_000_000);
    assert!(store.check(&policy, "newcomer", 1).unwrap().allowed);
    assert_eq!(clock.now_us(), T0 + 5_000_000);
}

#[test]
fn a_lock_free_key_in_debt_decides_as_the_pure_step() {
    // GCRA and token bucket keys live in atomic cells; a charge must reach them too.
    for policy in policies()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| matches!(p.algorithm(), Algorithm::Gcra(_) | Algorithm::TokenBucket(_)))
    {
        let (clock, store) = store();
        for _ in 0..6 {
            store.check(&policy, "k", 1).unwrap(); // four pass, two denied: a hot cell
        }
        let charged = store.charge(&[Rule::new(&policy, "k", 2)]).unwrap();
        assert_eq!(charged[0].debt, 2, "{}", policy.name());
        assert_eq!(
            store.check(&policy, "k", 1).unwrap().retry_after,
            Some(Duration::from_secs(3))
        );
        clock.advance(Duration::from_secs(3));
        assert!(store.check(&policy, "k", 1).unwrap().allowed);
    }
}

#[test]
fn a_sliding_log_in_debt_keeps_at_most_limit_plus_one_entries() {
    let (clock, store) = store();
    let policy = Policy::new("p", Algorithm::sliding_log(3, Duration::from_secs(10)).unwrap()).unwrap();
    for i in 0..100 {
        clock.set_us(T0 + i * 1_000);
        store.charge(&[Rule::new(&policy, "k", 1)]).unwrap();
    }
    let mut state = tollgate::algorithm::KeyState::default();
    // The same through the pure functions, to look at the log.
    for i in 0..100 {
        tollgate::algorithm::charge(&policy, &mut state, T0 + i * 1_000, 1);
    }
    let tollgate::algorithm::AlgorithmState::SlidingLog(log) = &state.algorithm else {
        panic!("a log")
    };
    assert_eq!(log.entries().count(), 4);
    assert_eq!(log.entries().map(|(_, n)| n).sum::<u64>(), 100);
    // Never earlier than the newest charge's time: refused until it has left the window.
    assert_eq!(
        store.peek(&policy, "k", 1).unwrap().retry_after,
        Some(Duration::from_secs(10))
    );
}

/// GCRA and token bucket keys that have a cell (checked once, budget left: not hot) are charged
/// by compare-and-swap: every answer and debt is the pure step's, with and without a penalty,
/// and for a token bucket debt too far ahead for the cell's word.
#[test]
fn a_charge_of_a_lock_free_cell_answers_as_the_pure_step() {
    let per_second = Rate::per_second(1).unwrap();
    let hour = Duration::from_secs(3_600);
    let policies = [
        Policy::new("gcra", Algorithm::gcra(per_second, 4).unwrap()).unwrap(),
        Policy::new("bucket", Algorithm::token_bucket(4, per_second).unwrap()).unwrap(),
        Policy::new("gcra-blocks", Algorithm::gcra(per_second, 4).unwrap())
            .unwrap()
            .with_block_for(hour)
            .unwrap(),
        Policy::new("bucket-blocks", Algorithm::token_bucket(4, per_second).unwrap())
            .unwrap()
            .with_block_for(hour)
            .unwrap(),
    ];
    for policy in &policies {
        let (clock, store) = store();
        let mut pure = tollgate::algorithm::KeyState::default();
        // (time after T0 in s, charge cost or 0 for a check of cost 1)
        for (at_s, cost) in [
            (0, 0),
            (0, 2),
            (1, 3),
            (2, 0),
            (3, 20_000),
            (30_000, 0),
            (30_000, 1),
        ] {
            clock.set_us(T0 + at_s * 1_000_000);
            let now_us = clock.now_us();
            if cost == 0 {
                let got = store.check(policy, "k", 1).unwrap();
                let want = tollgate::algorithm::decide(policy, &mut pure, now_us, 1, true);
                assert_eq!(
                    (got.allowed, got.remaining, got.retry_after),
                    (
                        want.allowed,
                        want.remaining,
                        want.retry_after_us.map(Duration::from_micros)
                    ),
                    "{} check at {at_s} s",
                    policy.name()
                );
            } else {
                let got = store.charge(&[Rule::new(policy, "k", cost)]).unwrap()[0];
                let want = tollgate::algorithm::charge(policy, &mut pure, now_us, cost);
                assert_eq!(
                    got.debt,
                    want.debt,
                    "{} charge of {cost} at {at_s} s",
                    policy.name()
                );
                assert_eq!(
                    (
                        got.decision.allowed,
                        got.decision.remaining,
                        got.decision.retry_after
                    ),
                    (
                        want.decision.allowed,
                        want.decision.remaining,
                        want.decision.retry_after_us.map(Duration::from_micros)
                    ),
                    "{} charge of {cost} at {at_s} s",
                    policy.name()
                );
            }
        }
    }
}

/// Threads charging one GCRA key's cell at once: every unit is recorded exactly once.
#[test]
fn charges_racing_on_one_cell_are_each_recorded() {
    let (_clock, store) = store();
    let store = std::sync::Arc::new(store);
    let policy = Policy::new("p", Algorithm::gcra(Rate::per_second(1).unwrap(), 10).unwrap()).unwrap();
    assert!(store.check(&policy, "k", 1).unwrap().allowed); // a cell with budget left
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..500 {
                    store.charge(&[Rule::new(&policy, "k", 1)]).unwrap();
                }
            });
        }
    });
    let last = store.charge(&[Rule::new(&policy, "k", 1)]).unwrap();
    assert_eq!(last[0].debt, 1 + 2_000 + 1 - 10);
}
