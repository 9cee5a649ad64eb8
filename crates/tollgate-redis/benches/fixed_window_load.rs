//! The tollgate side of `scripts/versus-rate-limiter-flexible.sh`: a fixed window of 50 per
//! second per key on 100 000 keys through one `RedisStore` (deny cache off, so every decision is
//! Redis's), with a fixed number of decisions in flight, against a Redis the script started.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench fixed_window_load -- <port> <decisions> <in_flight> <keys>
//! ```
//!
//! Prints one line: `decisions_per_second=<n> allowed=<n>`, as the peer (`peer.js`) does. The
//! work is the same: the same keys in the same order (a prime stride from a per-task start), a
//! warm-up run, then the measured run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, Policy};
use tollgate_redis::{RedisStore, Target};

fn main() {
    // `cargo bench` passes `--bench` first; the numbers are the last four arguments.
    let numbers: Vec<u64> = std::env::args().filter_map(|a| a.parse().ok()).collect();
    let [port, decisions, in_flight, keys] = numbers[..] else {
        eprintln!("usage: fixed_window_load <port> <decisions> <in_flight> <keys>");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = RedisStore::builder(Target::Standalone(format!("redis://127.0.0.1:{port}")))
            .prefix("tollgate-load:")
            .deny_cache(false)
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect");
        let policy = Policy::new(
            "load",
            Algorithm::fixed_window(50, Duration::from_secs(1), Anchor::Epoch).expect("fixed window"),
        )
        .expect("policy");
        run(&store, &policy, decisions.min(20_000), in_flight, keys).await;
        let (rate, allowed) = run(&store, &policy, decisions, in_flight, keys).await;
        println!("decisions_per_second={rate:.0} allowed={allowed}");
    });
}

/// `in_flight` tasks, each deciding its share of `decisions` one after the other.
async fn run(store: &RedisStore, policy: &Policy, decisions: u64, in_flight: u64, keys: u64) -> (f64, u64) {
    let per_task = decisions / in_flight;
    let allowed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = vec![];
    for task in 0..in_flight {
        let (store, policy, allowed) = (store.clone(), policy.clone(), allowed.clone());
        tasks.push(tokio::spawn(async move {
            let mut at = task * 7_919 % keys;
            for _ in 0..per_task {
                let key = format!("user-{at}");
                let decision = store.check(&policy, key.as_bytes(), 1).await.expect("check");
                allowed.fetch_add(u64::from(decision.allowed), Ordering::Relaxed);
                at = (at + 61_813) % keys;
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let rate = (per_task * in_flight) as f64 / started.elapsed().as_secs_f64();
    (rate, allowed.load(Ordering::Relaxed))
}
