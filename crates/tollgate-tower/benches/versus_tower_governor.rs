//! The cost of the layer on an axum app, against `tower_governor` (governor's keyed limiter as
//! tower middleware) and against no limiter at all, measured side by side.
//!
//! Requests go through `Router::oneshot` on a current-thread runtime, so the numbers are the
//! middleware's own cost plus axum's routing, with no sockets. Each limiter counts per peer
//! address (`ConnectInfo`), over 10 000 distinct client addresses walked in a fixed order, with a
//! quota no client reaches (every request is admitted), and both add rate limit headers to each
//! response (tollgate's IETF `RateLimit-Policy`/`RateLimit`; tower_governor's `x-ratelimit-*`
//! with `use_headers`). The three run in alternating rounds within one process, the order
//! rotating every round, and ratios are taken per round, so this machine's slow drift cancels
//! out; the reported ratio is the median over the rounds, with the middle half.
//!
//! Run with `cargo bench -p tollgate-tower --bench versus_tower_governor`. With an app's name
//! (`no-limiter`, `tollgate`, `tower_governor`) as argument, the bench runs that app alone for
//! one round, in `measured_round`, for callgrind: `scripts/tower-instructions.sh` divides that
//! function's instructions by its requests, a count that does not move with the machine's load.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use tollgate::{Algorithm, MemoryStore, Policy, Rate};
use tollgate_tower::{KeyExtractor, KeyedPolicy, RateLimitLayer};
use tower::ServiceExt;
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

const CLIENTS: u32 = 10_000;
const ROUNDS: usize = 31;
const REQUESTS_PER_ROUND: u32 = 100_000;

fn app() -> Router {
    Router::new().route("/v4/movies", get(|| async { "[]" }))
}

fn tollgate_app() -> Router {
    let policy = Policy::new(
        "movies",
        Algorithm::gcra(Rate::per_second(1_000_000).expect("rate"), 1_000_000).expect("gcra"),
    )
    .expect("policy");
    app().layer(RateLimitLayer::new(
        MemoryStore::new(),
        KeyedPolicy::new(policy, KeyExtractor::peer_ip()),
    ))
}

fn governor_app() -> Router {
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1_000)
        .burst_size(1_000_000)
        .use_headers()
        .finish()
        .expect("governor config");
    app().layer(GovernorLayer::new(config))
}

fn request(client: u32) -> Request<Body> {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + client));
    let mut request = Request::get("/v4/movies").body(Body::empty()).expect("request");
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::new(ip, 40_000)));
    request
}

/// Nanoseconds per request over one round.
fn ns_per_request(runtime: &tokio::runtime::Runtime, router: &Router) -> f64 {
    let started = Instant::now();
    measured_round(runtime, router);
    started.elapsed().as_nanos() as f64 / f64::from(REQUESTS_PER_ROUND)
}

/// One round of requests: what callgrind counts per app (kept out of line so that its
/// inclusive count is the round's).
#[inline(never)]
fn measured_round(runtime: &tokio::runtime::Runtime, router: &Router) {
    runtime.block_on(async {
        for i in 0..REQUESTS_PER_ROUND {
            let client = i.wrapping_mul(7_919) % CLIENTS;
            let response = router.clone().oneshot(request(client)).await.expect("infallible");
            assert!(response.status().is_success(), "every request is admitted");
            black_box(response);
        }
    })
}

fn median_and_middle_half(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    (values[n / 2], values[n / 4], values[3 * n / 4])
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let apps = [
        ("no-limiter", app()),
        ("tollgate", tollgate_app()),
        ("tower_governor", governor_app()),
    ];
    let only = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    // Every client seen once by each limiter, unmeasured.
    for (_, router) in apps
        .iter()
        .filter(|(name, _)| only.as_ref().is_none_or(|o| o == name))
    {
        runtime.block_on(async {
            for client in 0..CLIENTS {
                black_box(router.clone().oneshot(request(client)).await.expect("infallible"));
            }
        });
    }
    if let Some(only) = only {
        let (_, router) = apps
            .iter()
            .find(|(name, _)| *name == only)
            .expect("an app's name: no-limiter, tollgate or tower_governor");
        measured_round(&runtime, router);
        println!("{only}: {REQUESTS_PER_ROUND} requests in measured_round");
        return;
    }
    let mut times: [Vec<f64>; 3] = Default::default();
    let (mut versus_governor, mut overhead_ours, mut overhead_theirs) = (vec![], vec![], vec![]);
    let deadline = Instant::now() + Duration::from_secs(300);
    for round in 0..ROUNDS {
        if Instant::now() > deadline {
            break;
        }
        let mut this_round = [0.0; 3];
        for k in 0..3 {
            let which = (round + k) % 3;
            this_round[which] = ns_per_request(&runtime, &apps[which].1);
        }
        for (all, one) in times.iter_mut().zip(this_round) {
            all.push(one);
        }
        versus_governor.push(this_round[1] / this_round[2]);
        overhead_ours.push(this_round[1] - this_round[0]);
        overhead_theirs.push(this_round[2] - this_round[0]);
    }
    println!("| app | ns per request (median of {} rounds) |", times[0].len());
    println!("|---|---|");
    for ((name, _), samples) in apps.iter().zip(&times) {
        println!("| {name} | {:.0} |", median_and_middle_half(samples.clone()).0);
    }
    let (ratio, low, high) = median_and_middle_half(versus_governor);
    println!();
    println!("tollgate / tower_governor, per round: median {ratio:.3} (middle half {low:.3} to {high:.3})");
    let (ours, _, _) = median_and_middle_half(overhead_ours);
    let (theirs, _, _) = median_and_middle_half(overhead_theirs);
    println!("added to a bare router: tollgate {ours:.0} ns, tower_governor {theirs:.0} ns per request");
}
