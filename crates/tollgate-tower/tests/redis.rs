//! The layer over a real Redis: failure modes when the server is stopped mid-test (the store
//! reports the failure, the engine applies each policy's failure mode), and one limit shared by
//! two separately built app instances.

mod common;

use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{fresh_client, policy, request, routes, send};
use tollgate::FailureMode;
use tollgate_redis::{RedisStore, Target};
use tollgate_testkit::{AppServer, RedisServer, STORE_TIMEOUT};
use tollgate_tower::{KeyExtractor, KeyedPolicy, RateLimitLayer, Stats};

const MINUTE: Duration = Duration::from_secs(60);

async fn connect(redis: &RedisServer) -> RedisStore {
    RedisStore::builder(Target::parse(&redis.url()).expect("url"))
        .timeout(STORE_TIMEOUT)
        .connect()
        .await
        .expect("connect")
}

/// `/` limited to 3 per minute per client under `mode`.
fn app(store: RedisStore, name: &str, mode: FailureMode) -> (Router, Stats) {
    let rule = KeyedPolicy::new(
        policy(name, 3, MINUTE).with_failure_mode(mode),
        KeyExtractor::peer_ip(),
    );
    let layer = RateLimitLayer::new(store, rule);
    let stats = layer.stats();
    (routes().layer(layer), stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_modes_decide_once_redis_is_stopped() {
    let mut redis = RedisServer::start();
    let store = connect(&redis).await;
    let (open, open_stats) = app(store.clone(), "open", FailureMode::FailOpen);
    let (closed, closed_stats) = app(store.clone(), "closed", FailureMode::FailClosed);
    let local = FailureMode::Local {
        instances: NonZeroU32::MIN,
    };
    let (local, local_stats) = app(store, "local", local);
    let client = || request("/", "192.0.2.1:1", &[]);

    // While Redis answers, every app spends its 3 and is then denied.
    for app in [&open, &closed, &local] {
        for _ in 0..3 {
            assert_eq!(send(app, client()).await.status, StatusCode::OK);
        }
        assert_eq!(send(app, client()).await.status, StatusCode::TOO_MANY_REQUESTS);
    }
    for stats in [&open_stats, &closed_stats, &local_stats] {
        assert_eq!(stats.snapshot().degraded, 0);
    }

    redis.kill();

    // A client that has not been denied yet (a denied one stays denied through the store's deny
    // cache, which needs no Redis), under each failure mode.
    let newcomer = || request("/", "192.0.2.2:1", &[]);
    // Fail open: everything is admitted, past the limit.
    for _ in 0..5 {
        assert_eq!(send(&open, newcomer()).await.status, StatusCode::OK);
    }
    // Fail closed: refused at once with a 503 problem, told to come back shortly.
    let refused = send(&closed, newcomer()).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.header("content-type"), "application/problem+json");
    assert_eq!(refused.header("retry-after"), "1");
    assert_eq!(refused.json()["policy"], "closed");
    // Local: the engine's in-memory limiter, with the whole limit of 3 on this one instance.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(send(&local, newcomer()).await.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // The store's failures reached the engine, which decided by the failure modes.
    let open = open_stats.snapshot();
    assert_eq!((open.store_errors, open.degraded, open.failed_closed), (5, 5, 0));
    let closed = closed_stats.snapshot();
    assert_eq!((closed.store_errors, closed.failed_closed), (1, 1));
    let local = local_stats.snapshot();
    assert_eq!((local.store_errors, local.degraded, local.denied), (5, 5, 1 + 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_app_instances_on_one_redis_share_one_limit() {
    let redis = RedisServer::start();
    let mut servers = Vec::new();
    let mut all_stats = Vec::new();
    for _ in 0..2 {
        // Each instance connects on its own and builds its own layer and router.
        let rule = KeyedPolicy::new(policy("shared", 6, MINUTE), KeyExtractor::peer_ip());
        let layer = RateLimitLayer::new(connect(&redis).await, rule);
        all_stats.push(layer.stats());
        servers.push(AppServer::start(routes().layer(layer)).await);
    }
    let client = fresh_client();
    let mut admitted = 0;
    for i in 0..20 {
        let status = client
            .get(servers[i % 2].url("/"))
            .send()
            .await
            .expect("send")
            .status();
        admitted += usize::from(status == StatusCode::OK);
    }
    assert_eq!(admitted, 6);
    let allowed: Vec<u64> = all_stats.iter().map(|s| s.snapshot().allowed).collect();
    assert_eq!(allowed, [3, 3], "alternating requests share the budget evenly");
}
