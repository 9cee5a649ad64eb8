//! One hot key on one `redis-server`, decided by two instances (two `RedisStore`s, each with its
//! own connection, deny cache and lease table), with hot-key leases and without, in alternating
//! rounds; the ratio of decisions (admitted + denied) per second is taken per round.
//!
//! The policy is a fixed window of `LIMIT` per 100 ms (the same for both, under two names so
//! their counters never meet), deny cache on (the default) in both, a 2 s store deadline. With
//! leases, `max_units` is `MAX_UNITS` and the other lease options are the defaults. `TASKS` tokio
//! tasks (2 worker threads) per instance each make a fixed number of checks of the one key.
//!
//! Besides the rate, every decision is placed in its window (the decision's time plus its
//! `reset_after`, which for a fixed window is the time left in the window, rounded to the
//! nearest window end), and each window's shortfall against a perfect limiter is counted:
//! `min(demand, LIMIT) - admitted`, the requests denied that a perfect limiter would have
//! admitted, shown beside the bound `instances × MAX_UNITS`. Windows the demand does not fill
//! have no shortfall by construction; the saturated ones are what tests the bound.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench leases`
//! (needs `redis-server`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tollgate::{Algorithm, Anchor, LeaseOptions, Policy, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

const INSTANCES: usize = 2;
const TASKS: usize = 16;
const WINDOW: Duration = Duration::from_millis(100);
const WINDOW_US: u64 = 100_000;
const LIMIT: u64 = 100_000;
const MAX_UNITS: u64 = 1_000;
const ROUNDS: usize = 7;
/// Checks per task and round: without leases every check is a round trip, so fewer.
const CHECKS_PLAIN: usize = 2_000;
const CHECKS_LEASED: usize = 40_000;

/// Per window (its end, in whole windows since the epoch): admitted, denied.
type Windows = BTreeMap<u64, (u64, u64)>;

struct Round {
    decisions_per_sec: f64,
    admitted_per_sec: f64,
    windows: Windows,
    /// Decisions whose window could not be told: admitted, denied.
    unplaced: (u64, u64),
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

async fn round(stores: &[Arc<RedisStore>], policy: &Policy, checks: usize) -> Round {
    let started = Instant::now();
    let mut tasks = vec![];
    for store in stores {
        for _ in 0..TASKS {
            let store = store.clone();
            let policy = policy.clone();
            tasks.push(tokio::spawn(async move {
                let mut windows = Windows::new();
                let mut unplaced = (0, 0);
                for _ in 0..checks {
                    let before = now_us();
                    let decision = store.check(&policy, b"hot", 1).await.expect("check");
                    let after = now_us();
                    // The decision was taken between `before` and `after`; when that is too long
                    // to tell its window for sure (the task waited for a core), it is not placed.
                    let slot = if after - before < WINDOW_US / 5 {
                        let end_us = (before + after) / 2 + decision.reset_after.as_micros() as u64;
                        windows.entry((end_us + WINDOW_US / 2) / WINDOW_US).or_default()
                    } else {
                        &mut unplaced
                    };
                    match decision.allowed {
                        true => slot.0 += 1,
                        false => slot.1 += 1,
                    }
                }
                (windows, unplaced)
            }));
        }
    }
    let mut windows = Windows::new();
    let mut unplaced = (0, 0);
    for task in tasks {
        let (placed, missed) = task.await.expect("task");
        for (w, (a, d)) in placed {
            let slot = windows.entry(w).or_default();
            slot.0 += a;
            slot.1 += d;
        }
        unplaced.0 += missed.0;
        unplaced.1 += missed.1;
    }
    let secs = started.elapsed().as_secs_f64();
    let admitted: u64 = windows.values().map(|w| w.0).sum::<u64>() + unplaced.0;
    let total = (stores.len() * TASKS * checks) as f64;
    Round {
        decisions_per_sec: total / secs,
        admitted_per_sec: admitted as f64 / secs,
        windows,
        unplaced,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

async fn run() {
    let server = RedisServer::start();
    let mut stores = vec![];
    for _ in 0..INSTANCES {
        // A deadline far above any answer time: this measures throughput, not stalls.
        let store = RedisStore::builder(Target::Standalone(server.url()))
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect");
        stores.push(Arc::new(store));
    }
    let algorithm = Algorithm::fixed_window(LIMIT, WINDOW, Anchor::Epoch).expect("algorithm");
    let plain = Policy::new("plain", algorithm.clone()).expect("policy");
    let leased = Policy::new("leased", algorithm)
        .expect("policy")
        .with_lease(LeaseOptions::new(MAX_UNITS).expect("lease"))
        .expect("lease");

    // One unmeasured round each.
    round(&stores, &plain, CHECKS_PLAIN / 4).await;
    round(&stores, &leased, CHECKS_LEASED / 4).await;

    let mut ratios = vec![];
    let mut plain_rates = vec![];
    let mut leased_rates = vec![];
    let mut plain_admitted = vec![];
    let mut leased_admitted = vec![];
    let mut total_short = [0u64; 2];
    let mut saturated = [0u64; 2];
    let mut windows_seen = [0u64; 2];
    let mut worst = [0u64; 2];
    let mut most_admitted = [0u64; 2];
    let mut unplaced = [0u64; 2];
    for r in 0..ROUNDS {
        // Alternate which goes first.
        let (p, l) = if r % 2 == 0 {
            let p = round(&stores, &plain, CHECKS_PLAIN).await;
            let l = round(&stores, &leased, CHECKS_LEASED).await;
            (p, l)
        } else {
            let l = round(&stores, &leased, CHECKS_LEASED).await;
            let p = round(&stores, &plain, CHECKS_PLAIN).await;
            (p, l)
        };
        for (i, result) in [&p, &l].into_iter().enumerate() {
            for &(admitted, denied) in result.windows.values() {
                let demand = admitted + denied;
                let short = demand.min(LIMIT).saturating_sub(admitted);
                most_admitted[i] = most_admitted[i].max(admitted);
                windows_seen[i] += 1;
                saturated[i] += u64::from(demand > LIMIT);
                total_short[i] += short;
                worst[i] = worst[i].max(short);
            }
            unplaced[i] += result.unplaced.0 + result.unplaced.1;
        }
        let ratio = l.decisions_per_sec / p.decisions_per_sec;
        println!(
            "round {r}: without leases {:.0}/s ({:.0} admitted/s), with leases {:.0}/s ({:.0} admitted/s), ratio {ratio:.2}",
            p.decisions_per_sec, p.admitted_per_sec, l.decisions_per_sec, l.admitted_per_sec
        );
        ratios.push(ratio);
        plain_rates.push(p.decisions_per_sec);
        leased_rates.push(l.decisions_per_sec);
        plain_admitted.push(p.admitted_per_sec);
        leased_admitted.push(l.admitted_per_sec);
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let quarter = sorted.len() / 4;
    println!();
    println!(
        "| | decisions/s (median) | admitted/s (median) | windows | saturated windows | most admitted in one window (limit {LIMIT}) | most denied a perfect limiter admits, one window | total over all windows | bound per window | decisions not placed in a window |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, name) in ["without leases", "with leases"].into_iter().enumerate() {
        let (rates, admitted) = match i {
            0 => (&mut plain_rates, &mut plain_admitted),
            _ => (&mut leased_rates, &mut leased_admitted),
        };
        let bound = match i {
            0 => "0".to_string(),
            _ => format!("{}", INSTANCES as u64 * MAX_UNITS),
        };
        println!(
            "| {name} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {bound} | {} |",
            median(rates),
            median(admitted),
            windows_seen[i],
            saturated[i],
            most_admitted[i],
            worst[i],
            total_short[i],
            unplaced[i]
        );
    }
    println!();
    println!(
        "with / without leases, decisions/s: median of {ROUNDS} rounds {:.2} (middle half {:.2} to {:.2})",
        median(&mut ratios),
        sorted[quarter],
        sorted[sorted.len() - 1 - quarter]
    );
    let calls: u64 = stores.iter().map(|s| s.stats().redis_calls).sum();
    let local: u64 = stores.iter().map(|s| s.lease_stats().local_decisions).sum();
    println!("redis calls {calls}, decisions from leases {local}");
}
