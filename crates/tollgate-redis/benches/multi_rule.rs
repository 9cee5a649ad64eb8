//! Requests per second of requests limited by 1, 3 and 5 rules on one `redis-server`, two ways in
//! the same run:
//!
//! - **before**: what a door did before the store decided a whole request: peek every rule, then
//!   check every rule, one after another: 2 × N script calls per request;
//! - **after**: `Store::decide` of all the rules: one script call (EVALSHA) per request.
//!
//! The rules mix algorithms (gcra, fixed window, token bucket, sliding window, leaky bucket, in
//! that order) with budgets no key runs out of, on 10 000 keys, so every request is allowed and
//! both ways do the same work in Redis. `tasks` tokio tasks (2 worker threads) share one store
//! (one multiplexed connection, deny cache off). Each (rules, tasks) pair is measured in
//! alternating rounds, before then after, and the median round of each is reported, with the
//! script time Redis itself spent per request (`usec` of `cmdstat_evalsha` in `INFO
//! commandstats`), which a loaded machine disturbs far less than wall time.
//!
//! Every loop is bounded by a count. Run with `cargo bench -p tollgate-redis --bench multi_rule`
//! (needs `redis-server`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Algorithm, Anchor, Policy, Rate, Rule, Store};
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::RedisServer;

const KEYS: u64 = 10_000;
const ROUNDS: usize = 3;

fn policies() -> Vec<Policy> {
    let rate = Rate::per_second(100_000).expect("rate");
    let second = Duration::from_secs(1);
    [
        Algorithm::gcra(rate, 1_000),
        Algorithm::fixed_window(1_000_000, second, Anchor::Epoch),
        Algorithm::token_bucket(1_000, rate),
        Algorithm::sliding_window(1_000_000, second),
        Algorithm::leaky_bucket(1_000, rate),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, a)| Policy::new(format!("multi-{i}"), a.expect("algorithm")).expect("policy"))
    .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Before,
    After,
}

/// The old door: peek every rule, then check every rule.
async fn before(store: &RedisStore, rules: &[Rule<'_>]) -> bool {
    let mut allowed = true;
    for rule in rules {
        allowed &= store
            .peek(rule.policy, rule.key, rule.cost)
            .await
            .expect("peek")
            .allowed;
    }
    if allowed {
        for rule in rules {
            allowed &= store
                .check(rule.policy, rule.key, rule.cost)
                .await
                .expect("check")
                .allowed;
        }
    }
    allowed
}

async fn after(store: &RedisStore, rules: &[Rule<'_>]) -> bool {
    let decisions = store.decide(rules, true).await.expect("decide");
    decisions.as_slice().iter().all(|d| d.allowed)
}

/// The total `usec` Redis spent in EVALSHA since its stats were last reset.
fn evalsha_usec(server: &RedisServer) -> f64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
        .and_then(|stats| stats.split(',').find_map(|field| field.strip_prefix("usec=")))
        .and_then(|usec| usec.parse().ok())
        .unwrap_or(0.0)
}

struct Run {
    per_second: f64,
    calls_per_request: f64,
    redis_us_per_request: f64,
}

async fn run(
    server: &RedisServer,
    store: &RedisStore,
    policies: &Arc<Vec<Policy>>,
    rules: usize,
    tasks: u64,
    way: Way,
) -> Run {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let per_task = if tasks == 1 { 3_000 } else { 30_000 / tasks };
    let calls = store.stats().redis_calls;
    let started = Instant::now();
    let mut handles = vec![];
    for task in 0..tasks {
        let (store, policies) = (store.clone(), policies.clone());
        handles.push(tokio::spawn(async move {
            let mut at = task * 7_919 % KEYS;
            for _ in 0..per_task {
                let key = format!("user-{at}");
                let request: Vec<Rule<'_>> =
                    policies[..rules].iter().map(|p| Rule::new(p, &key, 1)).collect();
                let allowed = match way {
                    Way::Before => before(&store, &request).await,
                    Way::After => after(&store, &request).await,
                };
                assert!(allowed, "budgets are sized so that nothing is denied");
                at = (at + 61_813) % KEYS;
            }
        }));
    }
    for handle in handles {
        handle.await.expect("task");
    }
    let requests = (tasks * per_task) as f64;
    Run {
        per_second: requests / started.elapsed().as_secs_f64(),
        calls_per_request: (store.stats().redis_calls - calls) as f64 / requests,
        redis_us_per_request: evalsha_usec(server) / requests,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = RedisStore::builder(Target::Standalone(server.url()))
            .deny_cache(false)
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .expect("connect");
        let policies = Arc::new(policies());
        println!("## Requests limited by several rules: before (2 × N calls) vs after (one call)\n");
        println!(
            "| rules | tasks | before requests/s | after requests/s | after / before | calls per request before / after | Redis µs per request before / after |"
        );
        println!("|---|---|---|---|---|---|---|");
        for tasks in [1, 64] {
            for rules in [1, 3, 5] {
                let (mut old, mut new) = (vec![], vec![]);
                for _ in 0..ROUNDS {
                    old.push(run(&server, &store, &policies, rules, tasks, Way::Before).await);
                    new.push(run(&server, &store, &policies, rules, tasks, Way::After).await);
                }
                let rps = |runs: &[Run]| median(runs.iter().map(|r| r.per_second).collect());
                let cpu = |runs: &[Run]| median(runs.iter().map(|r| r.redis_us_per_request).collect());
                let (old_rps, new_rps) = (rps(&old), rps(&new));
                println!(
                    "| {rules} | {tasks} | {old_rps:.0} | {new_rps:.0} | **{:.2}** | {:.0} / {:.0} | {:.1} / {:.1} |",
                    new_rps / old_rps,
                    old[0].calls_per_request,
                    new[0].calls_per_request,
                    cpu(&old),
                    cpu(&new),
                );
            }
        }
    });
}
