//! Property tests of each algorithm's invariants, on random traffic and a manual clock.

use std::time::Duration;

use proptest::prelude::*;
use tollgate::{Algorithm, Anchor, ManualClock, MemoryStore, Policy, Rate};

const T0_US: u64 = 28_333_333 * 60_000_000;

/// A burst of traffic: (microseconds to wait before, cost) pairs.
type Traffic = Vec<(u64, u64)>;

fn any_algorithm() -> impl Strategy<Value = Algorithm> {
    let limit = 1u64..12;
    let window = (1u64..60).prop_map(Duration::from_millis);
    let rate = (1u64..8, 1u64..80).prop_map(|(n, ms)| Rate::new(n, Duration::from_millis(ms)).unwrap());
    prop_oneof![
        (limit.clone(), window.clone(), any::<bool>()).prop_map(|(l, w, first)| {
            let anchor = if first { Anchor::FirstHit } else { Anchor::Epoch };
            Algorithm::fixed_window(l, w, anchor).unwrap()
        }),
        (limit.clone(), window.clone()).prop_map(|(l, w)| Algorithm::sliding_log(l, w).unwrap()),
        (limit.clone(), window).prop_map(|(l, w)| Algorithm::sliding_window(l, w).unwrap()),
        (limit.clone(), rate.clone()).prop_map(|(c, r)| Algorithm::token_bucket(c, r).unwrap()),
        (limit.clone(), rate.clone()).prop_map(|(c, r)| Algorithm::leaky_bucket(c, r).unwrap()),
        (limit, rate).prop_map(|(b, r)| Algorithm::gcra(r, b).unwrap()),
    ]
}

fn any_policy() -> impl Strategy<Value = Policy> {
    (any_algorithm(), prop::option::of(1u64..100)).prop_map(|(algorithm, block_ms)| {
        let policy = Policy::new("p", algorithm).unwrap();
        match block_ms {
            Some(ms) => policy.with_block_for(Duration::from_millis(ms)).unwrap(),
            None => policy,
        }
    })
}

/// Traffic whose costs are valid for a policy with this limit: mostly cost 1, sometimes more.
fn traffic(max_cost: u64) -> impl Strategy<Value = Traffic> {
    let wait = prop_oneof![3 => 0u64..2_000, 1 => 0u64..80_000];
    let cost = prop_oneof![3 => Just(1u64), 1 => 1..=max_cost];
    prop::collection::vec((wait, cost), 1..80)
}

fn policy_and_traffic() -> impl Strategy<Value = (Policy, Traffic)> {
    any_policy().prop_flat_map(|p| {
        let max = p.max_cost();
        (Just(p), traffic(max))
    })
}

fn store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(T0_US);
    (
        clock.clone(),
        MemoryStore::builder().max_keys(64).clock(clock).build(),
    )
}

/// Runs the traffic and returns the admitted (time µs, cost) pairs.
fn admitted(policy: &Policy, traffic: &Traffic) -> Vec<(u64, u64)> {
    let (clock, store) = store();
    let mut now = T0_US;
    let mut passed = vec![];
    for &(wait, cost) in traffic {
        now += wait;
        clock.set_us(now);
        if store.check(policy, "k", cost).unwrap().allowed {
            passed.push((now, cost));
        }
    }
    passed
}

/// Most cost admitted in any closed span `[t, t + span_us]` starting at an admission.
fn most_in_span(passed: &[(u64, u64)], span_us: u64) -> u64 {
    passed
        .iter()
        .map(|&(start, _)| {
            passed
                .iter()
                .filter(|&&(t, _)| t >= start && t <= start + span_us)
                .map(|&(_, c)| c)
                .sum()
        })
        .max()
        .unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A retry after exactly `retry_after` passes, and one a microsecond earlier does not.
    #[test]
    fn retry_after_is_exact((policy, traffic) in policy_and_traffic()) {
        let (clock, store) = store();
        let mut now = T0_US;
        for (wait, cost) in traffic {
            now += wait;
            clock.set_us(now);
            let decision = store.check(&policy, "k", cost).unwrap();
            let Some(retry) = decision.retry_after else { continue };
            let retry = retry.as_micros() as u64;
            prop_assert!(retry > 0, "a denial must wait for something");
            clock.set_us(now + retry - 1);
            prop_assert!(!store.peek(&policy, "k", cost).unwrap().allowed, "passes before retry_after");
            clock.set_us(now + retry);
            prop_assert!(store.peek(&policy, "k", cost).unwrap().allowed, "still denied at retry_after");
            clock.set_us(now);
        }
    }

    /// Peeking between checks changes none of the checks' answers.
    #[test]
    fn peek_never_changes_state((policy, traffic) in policy_and_traffic(), peek_costs in prop::collection::vec(1u64..12, 80)) {
        let (clock_a, plain) = store();
        let (clock_b, peeked) = store();
        let mut now = T0_US;
        for (i, (wait, cost)) in traffic.into_iter().enumerate() {
            now += wait;
            clock_a.set_us(now);
            clock_b.set_us(now);
            let _ = peeked.peek(&policy, "k", peek_costs[i].min(policy.max_cost())).unwrap();
            prop_assert_eq!(plain.check(&policy, "k", cost).unwrap(), peeked.check(&policy, "k", cost).unwrap());
        }
    }

    /// `remaining` is exactly whether one more request of cost 1 would pass.
    #[test]
    fn remaining_matches_a_unit_peek((policy, traffic) in policy_and_traffic()) {
        let (clock, store) = store();
        let mut now = T0_US;
        for (wait, cost) in traffic {
            now += wait;
            clock.set_us(now);
            let decision = store.check(&policy, "k", cost).unwrap();
            let unit = store.peek(&policy, "k", 1).unwrap();
            prop_assert_eq!(unit.allowed, decision.remaining > 0);
            if unit.allowed {
                prop_assert_eq!(unit.remaining, decision.remaining - 1);
            }
        }
    }

    /// In every interval of length `window`, at most `limit` is admitted.
    #[test]
    fn sliding_log_never_exceeds_the_limit_in_any_window(limit in 1u64..12, window_ms in 1u64..60, traffic in traffic(11)) {
        let policy = Policy::new("p", Algorithm::sliding_log(limit, Duration::from_millis(window_ms)).unwrap()).unwrap();
        let traffic: Traffic = traffic.into_iter().map(|(w, c)| (w, c.min(limit))).collect();
        let passed = admitted(&policy, &traffic);
        prop_assert!(most_in_span(&passed, window_ms * 1000 - 1) <= limit);
    }

    /// Token bucket, leaky bucket and GCRA never admit more than burst + rate × elapsed.
    #[test]
    fn buckets_never_exceed_burst_plus_rate(size in 1u64..12, n in 1u64..8, per_ms in 1u64..80, which in 0..3, traffic in traffic(11)) {
        let rate = Rate::new(n, Duration::from_millis(per_ms)).unwrap();
        let algorithm = match which {
            0 => Algorithm::token_bucket(size, rate).unwrap(),
            1 => Algorithm::leaky_bucket(size, rate).unwrap(),
            _ => Algorithm::gcra(rate, size).unwrap(),
        };
        let policy = Policy::new("p", algorithm).unwrap();
        let traffic: Traffic = traffic.into_iter().map(|(w, c)| (w, c.min(size))).collect();
        let passed = admitted(&policy, &traffic);
        for (i, &(start, _)) in passed.iter().enumerate() {
            let mut sum = 0;
            for &(t, c) in &passed[i..] {
                sum += c;
                let elapsed_us = t - start;
                let by_rate = u128::from(elapsed_us) * u128::from(n) / u128::from(per_ms * 1000);
                prop_assert!(u128::from(sum) <= u128::from(size) + by_rate,
                    "{} admitted in {} µs", sum, elapsed_us);
            }
        }
    }

    /// A fixed window admits at most `limit` per window, so at most twice that in any span of
    /// one window length, and the sliding window counter at most `limit` per aligned window.
    #[test]
    fn counters_respect_their_windows(limit in 1u64..12, window_ms in 1u64..60, traffic in traffic(11)) {
        let w = window_ms * 1000;
        let traffic: Traffic = traffic.into_iter().map(|(wait, c)| (wait, c.min(limit))).collect();
        for algorithm in [
            Algorithm::fixed_window(limit, Duration::from_millis(window_ms), Anchor::Epoch).unwrap(),
            Algorithm::sliding_window(limit, Duration::from_millis(window_ms)).unwrap(),
        ] {
            let passed = admitted(&Policy::new("p", algorithm).unwrap(), &traffic);
            let mut per_window = std::collections::HashMap::<u64, u64>::new();
            for &(t, c) in &passed {
                *per_window.entry(t / w).or_default() += c;
            }
            prop_assert!(per_window.values().all(|&sum| sum <= limit));
            prop_assert!(most_in_span(&passed, w - 1) <= 2 * limit);
        }
    }
}

/// The flaw that makes people switch: a fixed window admits `2 × limit` across a boundary, within
/// a tenth of a second, where a sliding log admits `limit`.
#[test]
fn fixed_window_admits_twice_the_limit_across_a_boundary() {
    let minute = Duration::from_secs(60);
    let limit = 20;
    let burst_at = |ms: u64| std::iter::repeat_n((ms, 1), limit as usize);
    // L requests at 0:59.9 and L more at 1:00.0.
    let mut traffic: Traffic = vec![];
    let mut last = 0;
    for (at_ms, cost) in burst_at(59_900).chain(burst_at(60_000)) {
        traffic.push(((at_ms - last) * 1000, cost));
        last = at_ms;
    }
    let count = |algorithm| admitted(&Policy::new("p", algorithm).unwrap(), &traffic).len() as u64;
    assert_eq!(
        count(Algorithm::fixed_window(limit, minute, Anchor::Epoch).unwrap()),
        2 * limit
    );
    assert_eq!(count(Algorithm::sliding_log(limit, minute).unwrap()), limit);
    assert!(count(Algorithm::sliding_window(limit, minute).unwrap()) < 2 * limit);
    assert_eq!(
        count(Algorithm::gcra(Rate::per_minute(limit).unwrap(), limit).unwrap()),
        limit
    );
}
