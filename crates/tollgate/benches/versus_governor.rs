//! tollgate's GCRA against governor's keyed limiter, paired: the ratio the target is about.
//!
//! This machine's speed drifts by several times over minutes (BENCHMARKS-HISTORY.md, "Noise"), so
//! two numbers measured a minute apart, as criterion's `check` bench measures them, can say
//! either library is faster. Here the two run in alternating rounds within one process (the
//! order flips every round), each round short, and the ratio is taken *per round*, so drift
//! slower than a round cancels out. The reported ratio is the median of the per-round ratios,
//! with the spread of the middle half.
//!
//! Workload: the same as `check/gcra` and `check/governor_keyed` (rate 1000/s, burst 50; 100 000
//! keys `"user:{i}"` walked with a stride coprime with 100 000, or one hot key; 1 or 2 threads
//! sharing one store or limiter, each thread on its own half of the keys). Every round performs
//! the same bounded number of checks.
//!
//! A second ratio uses each thread's own CPU time (Linux, `/proc/thread-self/schedstat`) instead
//! of the wall clock: on a machine shared with other work, a thread preempted mid-round counts
//! the time it waited in the wall clock number but not in this one. Both are printed; where they
//! disagree the machine was busy, and the CPU-time ratio is the one that compares the code.
//!
//! Run with `cargo bench -p tollgate --bench versus_governor`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Instant;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tollgate::{Algorithm, MemoryStore, Policy, Rate};

const KEYS: usize = 100_000;
const STRIDE: usize = 61_813;
const ROUNDS: usize = 41;
const CHECKS_PER_THREAD_PER_ROUND: usize = 300_000;

fn main() {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let policy = Policy::new(
        "api",
        Algorithm::gcra(Rate::per_second(1000).expect("rate"), 50).expect("gcra"),
    )
    .expect("policy");
    let quota = Quota::per_second(NonZeroU32::new(1000).expect("rate"))
        .allow_burst(NonZeroU32::new(50).expect("burst"));

    println!(
        "| keys | threads | tollgate gcra ns/check | governor keyed ns/check | ratio (median of {ROUNDS} rounds) | middle half of ratios | CPU-time ratio (median) | middle half |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (label, key_count) in [("100 000", KEYS), ("1 (hot)", 1)] {
        for threads in [1, 2] {
            let store = MemoryStore::new();
            let limiter: DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
            let keys = &keys[..key_count];
            // Fill both with every key once, unmeasured.
            for key in keys {
                black_box(store.check(&policy, key, 1).expect("check"));
                black_box(limiter.check_key(key).is_ok());
            }
            let tollgate = |key: &String| store.check(&policy, key, 1).is_ok_and(|d| d.allowed);
            let governor = |key: &String| limiter.check_key(key).is_ok();
            let (mut ours, mut theirs, mut ratios, mut cpu_ratios) = (vec![], vec![], vec![], vec![]);
            for round in 0..ROUNDS {
                let (a, b) = if round % 2 == 0 {
                    let a = ns_per_check(keys, threads, round, &tollgate);
                    (a, ns_per_check(keys, threads, round, &governor))
                } else {
                    let b = ns_per_check(keys, threads, round, &governor);
                    (ns_per_check(keys, threads, round, &tollgate), b)
                };
                ours.push(a.wall);
                theirs.push(b.wall);
                ratios.push(a.wall / b.wall);
                if let (Some(a), Some(b)) = (a.cpu, b.cpu) {
                    cpu_ratios.push(a / b);
                }
            }
            let (low, mid, high) = quartiles(&mut ratios);
            let cpu = if cpu_ratios.is_empty() {
                "- | -".to_owned()
            } else {
                let (low, mid, high) = quartiles(&mut cpu_ratios);
                format!("**{mid:.3}** | {low:.3} to {high:.3}")
            };
            println!(
                "| {label} | {threads} | {:.1} | {:.1} | **{mid:.3}** | {low:.3} to {high:.3} | {cpu} |",
                quartiles(&mut ours).1,
                quartiles(&mut theirs).1,
            );
        }
    }
}

/// One round's cost per check.
struct Round {
    /// Wall time per check of aggregate throughput.
    wall: f64,
    /// The threads' CPU time per check, when the system reports it.
    cpu: Option<f64>,
}

/// This thread's time on a CPU so far, in ns (Linux).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// One round on `threads` threads.
fn ns_per_check<F: Fn(&String) -> bool + Sync>(
    keys: &[String],
    threads: usize,
    round: usize,
    check: &F,
) -> Round {
    let share = keys.len().div_ceil(threads);
    let cpu_ns = AtomicU64::new(0);
    let cpu_known = AtomicU64::new(0);
    let start = Instant::now();
    thread::scope(|scope| {
        for thread in 0..threads {
            let first = (thread * share).min(keys.len() - 1);
            let mine = &keys[first..(first + share).min(keys.len())];
            let (cpu_ns, cpu_known) = (&cpu_ns, &cpu_known);
            scope.spawn(move || {
                let before = thread_cpu_ns();
                let mut at = round * 7 % mine.len();
                for _ in 0..CHECKS_PER_THREAD_PER_ROUND {
                    black_box(check(&mine[at]));
                    at = (at + STRIDE) % mine.len();
                }
                if let (Some(before), Some(after)) = (before, thread_cpu_ns()) {
                    cpu_ns.fetch_add(after.saturating_sub(before), Ordering::Relaxed);
                    cpu_known.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let checks = (threads * CHECKS_PER_THREAD_PER_ROUND) as f64;
    Round {
        wall: start.elapsed().as_nanos() as f64 / checks,
        cpu: (cpu_known.into_inner() == threads as u64).then(|| cpu_ns.into_inner() as f64 / checks),
    }
}

/// First quartile, median and third quartile.
fn quartiles(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    (at(1), at(2), at(3))
}
