//! The throughput scenario, briefly, on the memory store and on real Redis servers.

use std::time::Duration;

use tollgate_scenarios::ThroughputArgs;
use tollgate_scenarios::throughput::{self, StoreKind, ThroughputReport};
use tollgate_testkit::{RedisCluster, RedisServer};

fn brief() -> ThroughputArgs {
    ThroughputArgs {
        concurrency: vec![1, 4],
        duration: Duration::from_millis(200),
        max_requests: 50_000,
        keys: 1_000,
        ..ThroughputArgs::default()
    }
}

fn assert_measured(report: &ThroughputReport, store: StoreKind) {
    let cells: Vec<_> = report.cells.iter().filter(|c| c.store == store).collect();
    assert_eq!(cells.len(), 6 * 2, "{store:?}");
    for cell in cells {
        let name = format!("{store:?} {} x{}", cell.algorithm, cell.concurrency);
        assert!(cell.decisions > 0, "{name}: no decisions");
        assert!(cell.decisions <= 50_000, "{name}: over the request bound");
        assert!(cell.allowed <= cell.decisions, "{name}");
        assert!(cell.per_second() > 0.0, "{name}");
        assert!(cell.p50 > Duration::ZERO, "{name}");
        assert!(
            cell.p50 <= cell.p99,
            "{name}: p50 {:?} > p99 {:?}",
            cell.p50,
            cell.p99
        );
        assert_eq!(cell.degraded, 0, "{name}: decided without the store");
    }
}

#[test]
fn memory_alone_is_measured_and_redis_is_reported_skipped() {
    let report = throughput::run(&brief()).unwrap();
    assert_measured(&report, StoreKind::Memory);
    assert_eq!(report.cells.len(), 12);
    let skipped: Vec<StoreKind> = report.skipped.iter().map(|(s, _)| *s).collect();
    assert_eq!(skipped, vec![StoreKind::Redis, StoreKind::RedisCluster]);
    let markdown = tollgate_scenarios::report::throughput(&report);
    assert!(markdown.contains("- redis skipped: no --redis address given"));
    assert!(markdown.contains("- redis cluster skipped: no --redis-cluster address given"));
}

#[test]
fn the_request_bound_ends_a_cell_before_its_time() {
    let args = ThroughputArgs {
        concurrency: vec![3],
        duration: Duration::from_secs(60),
        max_requests: 300,
        ..ThroughputArgs::default()
    };
    let report = throughput::run(&args).unwrap();
    for cell in &report.cells {
        assert_eq!(cell.decisions, 300, "{}", cell.algorithm);
    }
}

#[test]
fn redis_and_redis_cluster_are_measured() {
    let redis = RedisServer::start();
    let cluster = RedisCluster::start();
    let ports: Vec<String> = cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let args = ThroughputArgs {
        redis: Some(redis.url()),
        redis_cluster: Some(format!("redis+cluster://{}", ports.join(","))),
        ..brief()
    };
    let report = throughput::run(&args).unwrap();
    assert!(report.skipped.is_empty());
    for store in [StoreKind::Memory, StoreKind::Redis, StoreKind::RedisCluster] {
        assert_measured(&report, store);
    }
    // The checks really went to Redis: one script call per decision, or one per batch of the
    // decisions that were waiting together (at most 128 in a batch).
    let decisions: u64 = report
        .cells
        .iter()
        .filter(|c| c.store == StoreKind::Redis)
        .map(|c| c.decisions)
        .sum();
    let calls = redis.script_calls();
    assert!(
        calls > 0 && calls * 128 >= decisions,
        "{calls} script calls for {decisions} decisions"
    );
}
