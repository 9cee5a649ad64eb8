//! The tollgate side of `scripts/redis-instructions.sh`: decisions of one algorithm on many keys,
//! in one of three cases, against a Redis the script runs under callgrind, so the script can
//! count the instructions Redis spends per decision.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench decision_instructions -- <port> <algorithm> <case> <phase> <keys> [batched|single] [check|charge]
//! ```
//!
//! Every policy admits 3 per hour (a calendar quota 3 a day), so nothing expires during a run.
//! The cases: `new` (each key's first decision), `counting` (each key's second, admitted) and
//! `denied` (each key's fourth, refused). The `prepare` phase brings the keys to the case (the
//! script does not count it), `measure` makes one decision per key. `batched` (the default)
//! keeps 64 decisions in flight, so the store groups them into batch calls as it does under
//! load; `single` sends one decision per call. `charge` makes the measured decisions charges of
//! 1 (recorded whatever is left) instead of checks, to compare the two.

use std::time::Duration;

use tollgate::algorithm::calendar_quota::Period;
use tollgate::{Algorithm, Anchor, Policy, Rate, Store};
use tollgate_redis::{RedisStore, Target};

/// Decisions in flight when batched.
const IN_FLIGHT: usize = 64;

fn algorithm(name: &str) -> Option<Algorithm> {
    let hour = Duration::from_secs(3_600);
    let per_hour = Rate::new(3, hour).expect("a rate");
    Some(
        match name {
            "fixed_window" => Algorithm::fixed_window(3, hour, Anchor::Epoch),
            "sliding_log" => Algorithm::sliding_log(3, hour),
            "sliding_window" => Algorithm::sliding_window(3, hour),
            "token_bucket" => Algorithm::token_bucket(3, per_hour),
            "leaky_bucket" => Algorithm::leaky_bucket(3, per_hour),
            "gcra" => Algorithm::gcra(per_hour, 3),
            "calendar_quota" => Algorithm::calendar_quota(3, Period::Day, "UTC"),
            _ => return None,
        }
        .expect("valid parameters"),
    )
}

fn main() {
    // `cargo bench` passes `--bench` first.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let usage = || -> ! {
        eprintln!(
            "usage: decision_instructions <port> <algorithm> <new|counting|denied> <prepare|measure> <keys> [batched|single] [check|charge]"
        );
        std::process::exit(2)
    };
    let [port, name, case, phase, keys, rest @ ..] = &args[..] else {
        usage()
    };
    let (Ok(port), Some(algorithm), Ok(keys)) = (port.parse::<u16>(), algorithm(name), keys.parse::<usize>())
    else {
        usage()
    };
    let before: usize = match case.as_str() {
        "new" => 0,
        "counting" => 1,
        "denied" => 3,
        _ => usage(),
    };
    let decisions_per_key = match phase.as_str() {
        "prepare" => before,
        "measure" => 1,
        _ => usage(),
    };
    let in_flight = match rest.first().map(String::as_str) {
        None | Some("batched") => IN_FLIGHT,
        Some("single") => 1,
        _ => usage(),
    };
    // Named, the operation gets keys of its own (the prepare phase is given the same word), so
    // a check and a charge compared start from the same state.
    let (suffix, charges) = match rest.get(1).map(String::as_str) {
        None => ("", false),
        Some("check") => ("-check", false),
        Some("charge") => ("-charge", phase == "measure"),
        _ => usage(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let builder = RedisStore::builder(Target::Standalone(format!("redis://127.0.0.1:{port}")))
            .prefix("tollgate-instructions:")
            .deny_cache(false)
            .batch_calls_in_flight(if in_flight == 1 { 0 } else { 2 })
            .timeout(Duration::from_secs(30));
        // The prepare phase loads the scripts and the function library, as an instance does
        // once when it starts; the measured phase finds them loaded, so what it counts is the
        // decisions alone.
        let store = if phase == "measure" {
            builder.connect_lazy().await
        } else {
            builder.connect().await
        }
        .expect("connect");
        let policy = Policy::new(format!("{name}-{case}{suffix}"), algorithm).expect("policy");
        let mut allowed = 0;
        for _ in 0..decisions_per_key {
            let mut tasks = tokio::task::JoinSet::new();
            for task in 0..in_flight {
                let (store, policy) = (store.clone(), policy.clone());
                tasks.spawn(async move {
                    let mut allowed = 0;
                    for key in (task..keys).step_by(in_flight) {
                        let key = format!("k{key}");
                        let decision = if charges {
                            let rule = [tollgate::Rule::new(&policy, key.as_bytes(), 1)];
                            store.charge(&rule).await.expect("charge")[0].decision
                        } else {
                            store.check(&policy, key.as_bytes(), 1).await.expect("check")
                        };
                        allowed += usize::from(decision.allowed);
                    }
                    allowed
                });
            }
            while let Some(done) = tasks.join_next().await {
                allowed += done.expect("task");
            }
        }
        println!("decisions={} allowed={allowed}", keys * decisions_per_key);
    });
}
