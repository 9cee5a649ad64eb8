//! Shared by the Redis integration tests: store builders and random policies.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use tollgate::{Algorithm, Anchor, ManualClock, Policy, Rate};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::STORE_TIMEOUT;

/// A store on `target` with the test kit's deadline and otherwise the defaults.
pub async fn store(target: Target) -> RedisStore {
    RedisStore::builder(target)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect to redis")
}

/// [`store`] at a `redis://` or `redis+cluster://` address.
pub async fn store_at(url: &str) -> RedisStore {
    store(Target::parse(url).expect("a store address")).await
}

/// A store on `target` whose scripts use `clock`, with the deny cache off so every decision is
/// Redis's own.
pub async fn exact_store(target: Target, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(target)
        .clock(clock.clone())
        .deny_cache(false)
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect to redis")
}

/// A small deterministic generator, so a failing case can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }
}

/// One step of random time: the random tests draw durations in these units. Minutes, so that
/// the keys' real TTLs in Redis (which follow Redis's clock, not the test's) never run out while
/// a test runs, however slow the machine.
pub const UNIT: Duration = Duration::from_secs(60);

/// A random policy of every algorithm in turn (`i % 7`), sometimes with a penalty; durations
/// are 1 to 80 [`UNIT`]s.
pub fn random_policy(i: u64, rng: &mut Rng) -> Policy {
    random_named_policy(format!("random-{i}"), i, rng)
}

/// [`random_policy`] with its name.
pub fn random_named_policy(name: String, i: u64, rng: &mut Rng) -> Policy {
    let limit = rng.between(1, 8);
    let window = UNIT * rng.between(1, 50) as u32;
    let rate = Rate::new(rng.between(1, 5), UNIT * rng.between(1, 60) as u32).expect("rate");
    let algorithm = match i % 7 {
        0 => {
            let anchor = if rng.below(2) == 0 {
                Anchor::Epoch
            } else {
                Anchor::FirstHit
            };
            Algorithm::fixed_window(limit, window, anchor)
        }
        1 => Algorithm::sliding_log(limit, window),
        2 => Algorithm::sliding_window(limit, window),
        3 => Algorithm::token_bucket(limit, rate),
        4 => Algorithm::leaky_bucket(limit, rate),
        5 => Algorithm::gcra(rate, limit),
        // Daily, in a zone with daylight saving time: the random steps cross a few midnights.
        _ => Algorithm::calendar_quota(
            limit,
            tollgate::algorithm::calendar_quota::Period::Day,
            "Europe/Paris",
        ),
    }
    .expect("algorithm");
    let policy = Policy::new(name, algorithm).expect("policy");
    match rng.below(6) {
        0 => policy
            .with_block_for(UNIT * rng.between(1, 80) as u32)
            .expect("block_for"),
        // Escalating: repeat offenses within the memory block longer.
        1 => {
            let initial = UNIT * rng.between(1, 20) as u32;
            let penalty = tollgate::Penalty::growth(initial, rng.between(2, 4), initial * 20)
                .and_then(|p| p.remember_for(UNIT * rng.between(1, 100) as u32))
                .expect("penalty");
            policy.with_penalty(penalty)
        }
        _ => policy,
    }
}
