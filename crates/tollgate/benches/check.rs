//! Nanoseconds per `MemoryStore::check`, for every algorithm, next to `governor`'s keyed limiter.
//!
//! A check is what every request through tollgate pays, so this is the number that says whether
//! the limiter is a measurable part of a request. Each bench id reads
//! `check/{algorithm}/{keys}/{threads}`:
//!
//! - `algorithm`: `fixed_window` (epoch-anchored), `sliding_log`, `sliding_window`,
//!   `token_bucket`, `leaky_bucket`, `gcra`, and `governor_keyed`, which is
//!   `governor::RateLimiter::keyed(..)` with its default clock and `check_key(&key)`, on the same
//!   workload as `gcra`.
//! - `keys`: `1_key` hammers one hot key (`"user:0"`); `100k_keys` walks 100 000 pre-built keys
//!   `"user:{i}"` in a fixed pseudo-random order (each step adds a stride coprime with 100 000, so
//!   every key is visited once per cycle and consecutive keys are far apart in memory). Both
//!   libraries get the same keys in the same order.
//! - `threads`: `1_thread`, or `2_threads` sharing one store (a `MemoryStore` is `Sync` and is
//!   used through `&`) or one governor limiter. With 2 threads, each thread performs `iters`
//!   checks on its own half of the keys (walked the same way), so a key still comes back after
//!   100 000 checks in all, as with one thread; on `1_key` both threads hit the same key. The
//!   reported time is the wall time from the first thread's start to the last thread's end
//!   divided by 2: nanoseconds per check of aggregate throughput, so perfect scaling halves the
//!   1-thread number.
//!
//! Every policy admits bursts of 50 and 1000 per second in the long run: `gcra` is rate 1000/s,
//! burst 50, and so is governor's `Quota::per_second(1000).allow_burst(50)`; `token_bucket` and
//! `leaky_bucket` have capacity 50 at 1000/s; the three windowed algorithms allow 50 per 50 ms.
//! On `100k_keys` a key comes back once per cycle of 100 000 checks, tens of milliseconds later,
//! far below its limit, so nearly every check is allowed (the share is printed before each run);
//! on `1_key` nearly every check is denied. Each store is filled with every key once before it is measured, and the clock
//! is the real one (`SystemClock`, the default), as in production.
//!
//! Run with `cargo bench -p tollgate --bench check`; add criterion's `--warm-up-time` and
//! `--measurement-time` (seconds) to trade precision for time, and a filter such as `gcra` to run a
//! subset. Results are also saved under `target/criterion/check/`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota};
use tollgate::{Algorithm, Anchor, MemoryStore, Policy, PolicyError, Rate};

/// Keys in the large key set.
const MANY_KEYS: usize = 100_000;

/// Step of the key walk: prime and not a factor of 100 000, so the walk is one full cycle.
const STRIDE: usize = 61_813;

/// Long-run rate and burst shared by every policy.
const RATE_PER_SECOND: u32 = 1000;
const BURST: u32 = 50;

/// The window of the windowed algorithms: `BURST` requests per `BURST / RATE_PER_SECOND` s.
const WINDOW: Duration = Duration::from_millis(50);

/// Every policy has this name: the name is part of each stored key, so one name keeps the
/// algorithms comparable.
const POLICY_NAME: &str = "api";

/// The six tollgate policies.
fn policies() -> Result<Vec<Policy>, PolicyError> {
    let rate = Rate::per_second(u64::from(RATE_PER_SECOND))?;
    let burst = u64::from(BURST);
    [
        Algorithm::fixed_window(burst, WINDOW, Anchor::Epoch)?,
        Algorithm::sliding_log(burst, WINDOW)?,
        Algorithm::sliding_window(burst, WINDOW)?,
        Algorithm::token_bucket(burst, rate)?,
        Algorithm::leaky_bucket(burst, rate)?,
        Algorithm::gcra(rate, burst)?,
    ]
    .into_iter()
    .map(|algorithm| Policy::new(POLICY_NAME, algorithm))
    .collect()
}

/// governor's quota equal to the `gcra` policy.
fn governor_quota() -> Quota {
    let rate = NonZeroU32::new(RATE_PER_SECOND).expect("rate is not zero");
    let burst = NonZeroU32::new(BURST).expect("burst is not zero");
    Quota::per_second(rate).allow_burst(burst)
}

/// A position in one thread's walk over its slice of the keys.
#[derive(Clone, Copy)]
struct Walk {
    /// Index of the slice's first key.
    first: usize,
    len: usize,
    stride: usize,
    /// Position in the slice.
    at: usize,
}

impl Walk {
    /// The walk over `keys[first..first + len]`. `STRIDE` is prime, so it is coprime with any
    /// smaller `len` and the walk visits every key of the slice once per cycle.
    fn new(first: usize, len: usize) -> Self {
        Walk {
            first,
            len,
            stride: STRIDE % len,
            at: 0,
        }
    }

    fn next_index(&mut self) -> usize {
        let index = self.first + self.at;
        self.at += self.stride;
        if self.at >= self.len {
            self.at -= self.len;
        }
        index
    }
}

/// Runs `iters` checks on each of `walks.len()` threads (the current one when there is one) and
/// returns the wall time divided by the number of threads. Walks continue where they stopped.
fn run<F>(keys: &[String], walks: &mut [Walk], iters: u64, check: &F) -> Duration
where
    F: Fn(&String) -> bool + Sync,
{
    let work = |walk: &mut Walk| {
        for _ in 0..iters {
            black_box(check(&keys[walk.next_index()]));
        }
    };
    if let [walk] = walks {
        let start = Instant::now();
        work(walk);
        return start.elapsed();
    }
    // Threads start together after the barrier; spawning is not measured.
    let barrier = Barrier::new(walks.len());
    let spans: Vec<(Instant, Instant)> = thread::scope(|scope| {
        let handles: Vec<_> = walks
            .iter_mut()
            .map(|walk| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    work(walk);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("bench thread panicked"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("at least one thread");
    let end = spans.iter().map(|s| s.1).max().expect("at least one thread");
    (end - start) / walks.len() as u32
}

/// The walks of `threads` threads over `len` keys: each thread gets its own equal slice, so a key
/// is revisited after `len` checks in all, whatever the number of threads. With fewer keys than
/// threads, every thread walks all of them.
fn walks(len: usize, threads: usize) -> Vec<Walk> {
    if len < threads {
        return vec![Walk::new(0, len); threads];
    }
    let per_thread = len / threads;
    (0..threads)
        .map(|t| Walk::new(t * per_thread, per_thread))
        .collect()
}

/// Fills the limiter with every key once, then prints the share of allowed checks in two
/// unmeasured cycles at full speed.
fn prepare<F>(id: &str, keys: &[String], threads: usize, check: &F)
where
    F: Fn(&String) -> bool + Sync,
{
    for key in keys {
        check(key);
    }
    let cycles = 2 * keys.len().max(MANY_KEYS) as u64;
    let allowed = AtomicU64::new(0);
    let counting = |key: &String| {
        let ok = check(key);
        if ok {
            allowed.fetch_add(1, Ordering::Relaxed);
        }
        ok
    };
    run(
        keys,
        &mut walks(keys.len(), threads),
        cycles / threads as u64,
        &counting,
    );
    let allowed = allowed.into_inner();
    println!(
        "{id}: {allowed} of {cycles} checks allowed ({:.1}%) in an unmeasured pass",
        100.0 * allowed as f64 / cycles as f64
    );
}

/// Registers `check/{name}/{keys}/{threads}`. The limiter is built on first use, so a filtered-out
/// bench costs nothing, and dropped when its bench ends.
fn bench<L, F>(c: &mut Criterion, name: &str, key_set: (&str, &[String]), threads: usize, build: L)
where
    L: Fn() -> F,
    F: Fn(&String) -> bool + Sync,
{
    let (key_label, keys) = key_set;
    let thread_label = if threads == 1 {
        "1_thread".to_owned()
    } else {
        format!("{threads}_threads")
    };
    let id = format!("check/{name}/{key_label}/{thread_label}");
    let mut state: Option<(F, Vec<Walk>)> = None;
    c.bench_function(&id, |b| {
        let (check, walks) = state.get_or_insert_with(|| {
            let check = build();
            prepare(&id, keys, threads, &check);
            (check, walks(keys.len(), threads))
        });
        b.iter_custom(|iters| run(keys, walks, iters, check));
    });
}

fn checks(c: &mut Criterion) {
    let policies = policies().expect("valid policies");
    let one_key = ["user:0".to_owned()];
    let many_keys: Vec<String> = (0..MANY_KEYS).map(|i| format!("user:{i}")).collect();
    for key_set in [("1_key", &one_key[..]), ("100k_keys", &many_keys[..])] {
        for threads in [1, 2] {
            for policy in &policies {
                bench_tollgate(c, policy, key_set, threads);
                if policy.algorithm().name() == "gcra" {
                    bench_governor(c, key_set, threads);
                }
            }
        }
    }
}

fn bench_tollgate(c: &mut Criterion, policy: &Policy, key_set: (&str, &[String]), threads: usize) {
    let name = policy.algorithm().name();
    let build = || {
        let store = MemoryStore::new();
        let policy = policy.clone();
        move |key: &String| matches!(store.check(&policy, key, 1), Ok(d) if d.allowed)
    };
    bench(c, name, key_set, threads, build);
}

fn bench_governor(c: &mut Criterion, key_set: (&str, &[String]), threads: usize) {
    let build = || {
        let limiter: DefaultKeyedRateLimiter<String> = DefaultKeyedRateLimiter::keyed(governor_quota());
        move |key: &String| limiter.check_key(key).is_ok()
    };
    bench(c, "governor_keyed", key_set, threads, build);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = checks
}
criterion_main!(benches);
