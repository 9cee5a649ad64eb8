//! The functions of this module on every algorithm, with and without a penalty: a charge
//! answers as a peek of cost 1 after it does, on random sequences that replay exactly.

use super::*;
use crate::Policy;

/// A day boundary, so that windows and periods start here.
const T0: u64 = 20_000 * 86_400_000_000;

/// SplitMix64: a fixed sequence, so a failure replays exactly.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every algorithm, with small budgets (so charges go into debt and checks are refused) and
/// short periods (so time moves them on).
fn algorithms() -> Vec<Algorithm> {
    let ms = Duration::from_millis;
    let rate = |n, millis| Rate::new(n, ms(millis)).unwrap();
    vec![
        Algorithm::fixed_window(3, ms(50), Anchor::Epoch).unwrap(),
        Algorithm::fixed_window(5, ms(30), Anchor::FirstHit).unwrap(),
        Algorithm::sliding_log(3, ms(50)).unwrap(),
        Algorithm::sliding_log(6, ms(20)).unwrap(),
        Algorithm::sliding_window(3, ms(50)).unwrap(),
        Algorithm::sliding_window(7, ms(20)).unwrap(),
        Algorithm::token_bucket(3, rate(1, 10)).unwrap(),
        Algorithm::token_bucket(6, rate(3, 7)).unwrap(),
        Algorithm::leaky_bucket(3, rate(1, 10)).unwrap(),
        Algorithm::leaky_bucket(6, rate(3, 7)).unwrap(),
        Algorithm::gcra(rate(1, 10), 3).unwrap(),
        Algorithm::gcra(rate(3, 7), 6).unwrap(),
        Algorithm::calendar_quota(3, Period::Day, "UTC").unwrap(),
        Algorithm::calendar_quota(5, Period::Week, "Europe/Paris").unwrap(),
    ]
}

/// Each algorithm without a penalty, with a fixed block, and with an escalating one.
fn policies() -> Vec<Policy> {
    let ms = Duration::from_millis;
    algorithms()
        .into_iter()
        .flat_map(|algorithm| {
            let plain = Policy::new("p", algorithm).unwrap();
            let blocked = plain.clone().with_block_for(ms(15)).unwrap();
            let escalating = plain.clone().with_penalty(
                Penalty::sequence([ms(5), ms(20), ms(60)])
                    .unwrap()
                    .remember_for(ms(100))
                    .unwrap(),
            );
            [plain, blocked, escalating]
        })
        .collect()
}

/// A charge's answer is the one a peek of cost 1 gets on the state it left, whatever the
/// algorithm, penalty, state and time: random checks, peeks, refunds and charges on one key,
/// with time moving forward (a little, or past a window or a day) and sometimes back.
#[test]
fn a_charge_answers_as_a_peek_of_one_after_it() {
    let mut random = Random(0x7011_6a7e);
    let mut charges = 0;
    for policy in policies() {
        let max_cost = policy.max_cost();
        let mut state = KeyState::default();
        let mut now = T0;
        for i in 0..400 {
            now = match random.below(20) {
                0 => now.saturating_sub(random.below(30_000)),
                1 => now + random.below(2 * 86_400_000_000),
                2..=5 => now,
                _ => now + random.below(40_000),
            };
            let cost = 1 + random.below(max_cost);
            match random.below(10) {
                0..=3 => {
                    decide(&policy, &mut state, now, cost, true);
                }
                4 => {
                    decide(&policy, &mut state, now, cost, false);
                }
                5 => refund(&policy, &mut state, now, cost),
                _ => {
                    // From nothing to three budgets: within it, exactly spent, in debt.
                    let cost = random.below(3 * max_cost + 1);
                    let before = state.clone();
                    let charged = charge(&policy, &mut state, now, cost);
                    let peek = decide(&policy, &mut state.clone(), now, 1, false);
                    assert_eq!(
                        charged.decision,
                        peek,
                        "{:?}, step {i}, a charge of {cost} at {now} on {before:?} left {state:?}",
                        policy.algorithm(),
                    );
                    charges += 1;
                }
            }
        }
    }
    // Most draws are charges: the comparison above ran thousands of times.
    assert!(charges > 10 * policies().len(), "{charges} charges");
}
