//! Throughput: decisions per second and latency of `check`, per algorithm × store × concurrency.
//!
//! In each cell, `concurrency` tokio tasks share one store (for Redis, one multiplexed
//! connection) and check keys drawn pseudo-randomly from `keys` distinct keys, until the cell's
//! time is up or its request budget is spent, whichever comes first. Latency is measured around
//! each `check` call and kept in an HDR histogram. The Redis deny cache is off, so every decision
//! is a round trip. Stores without an address are skipped and the report says so; addresses must
//! be on loopback (checked before anything is sent).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::{MemoryStore, Policy, Store};
use tollgate_redis::{RedisStore, Target};

use crate::lineup::{self, Contender};
use crate::options::{ChartArgs, DEFAULT_DURATION, DEFAULT_MAX_REQUESTS, in_range, parse_duration};
use crate::{ScenarioError, progress};

/// Default `--keys` of the throughput scenario.
pub const DEFAULT_KEYS: u64 = 10_000;
/// Default `--concurrency` of the throughput scenario.
pub const DEFAULT_CONCURRENCY: [u32; 3] = [1, 16, 64];

/// Options of `bench throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct ThroughputArgs {
    /// A standalone Redis on loopback, e.g. redis://127.0.0.1:6379 (skipped when absent).
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// A Redis Cluster on loopback, e.g. redis+cluster://127.0.0.1:7000,127.0.0.1:7001
    /// (skipped when absent).
    #[arg(long, value_name = "URL")]
    pub redis_cluster: Option<String>,
    /// Concurrent clients, a comma-separated list.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_CONCURRENCY)]
    pub concurrency: Vec<u32>,
    /// Longest time spent on one cell (algorithm × store × concurrency), e.g. 2s or 500ms.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub duration: Duration,
    /// Most checks made in one cell.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: u64,
    /// Distinct keys the checks are spread over.
    #[arg(long, default_value_t = DEFAULT_KEYS)]
    pub keys: u64,
    /// The chart.
    #[command(flatten)]
    pub chart: ChartArgs,
}

impl Default for ThroughputArgs {
    fn default() -> Self {
        ThroughputArgs {
            redis: None,
            redis_cluster: None,
            concurrency: DEFAULT_CONCURRENCY.to_vec(),
            duration: DEFAULT_DURATION,
            max_requests: DEFAULT_MAX_REQUESTS,
            keys: DEFAULT_KEYS,
            chart: ChartArgs::default(),
        }
    }
}

impl ThroughputArgs {
    /// Checks counts, durations, Redis addresses (loopback only) and the chart.
    ///
    /// ```
    /// use tollgate_scenarios::ThroughputArgs;
    ///
    /// let far = ThroughputArgs { redis: Some("redis://192.0.2.1:6379".into()), ..ThroughputArgs::default() };
    /// assert!(far.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.concurrency.is_empty() {
            return Err(ScenarioError::BadArgument {
                arg: "concurrency",
                expected: "a list of 1 to 4096",
                value: "nothing".into(),
            });
        }
        for &c in &self.concurrency {
            in_range("concurrency", u64::from(c), 1, 4096, "1 to 4096")?;
        }
        let ms = u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX);
        if !(1..=600_000).contains(&ms) {
            return Err(ScenarioError::BadArgument {
                arg: "duration",
                expected: "1ms to 10 minutes",
                value: format!("{:?}", self.duration),
            });
        }
        in_range(
            "max-requests",
            self.max_requests,
            1,
            1_000_000_000,
            "1 to 1000000000",
        )?;
        in_range("keys", self.keys, 1, 10_000_000, "1 to 10000000")?;
        if let Some(url) = &self.redis {
            crate::loopback::check_url("redis", url, false)?;
        }
        if let Some(url) = &self.redis_cluster {
            crate::loopback::check_url("redis-cluster", url, true)?;
        }
        self.chart.validate()
    }
}

/// Each key's budget in this scenario: `LIMIT` per `WINDOW`, high enough that most checks pass.
pub const LIMIT: u64 = 100;
/// See [`LIMIT`].
pub const WINDOW: Duration = Duration::from_millis(100);

/// A store the scenario can measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded memory store.
    Memory,
    /// One Redis server.
    Redis,
    /// A Redis Cluster.
    RedisCluster,
}

impl StoreKind {
    /// How the report names it.
    ///
    /// ```
    /// assert_eq!(tollgate_scenarios::throughput::StoreKind::RedisCluster.label(), "redis cluster");
    /// ```
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis cluster",
        }
    }
}

/// One measured cell.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The store.
    pub store: StoreKind,
    /// The algorithm's short name.
    pub algorithm: &'static str,
    /// Concurrent tasks.
    pub concurrency: u32,
    /// Checks answered.
    pub decisions: u64,
    /// Of which admitted.
    pub allowed: u64,
    /// Of which decided by the failure mode because the store did not answer in time.
    pub degraded: u64,
    /// Wall time of the cell.
    pub elapsed: Duration,
    /// Median latency of one check.
    pub p50: Duration,
    /// 99th percentile latency of one check.
    pub p99: Duration,
}

impl Cell {
    /// Decisions per second of wall time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_scenarios::throughput::{Cell, StoreKind};
    ///
    /// let cell = Cell {
    ///     store: StoreKind::Memory, algorithm: "GCRA", concurrency: 1, decisions: 500,
    ///     allowed: 500, degraded: 0, elapsed: Duration::from_millis(250),
    ///     p50: Duration::from_micros(1), p99: Duration::from_micros(2),
    /// };
    /// assert_eq!(cell.per_second(), 2000.0);
    /// ```
    pub fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The whole scenario.
#[derive(Debug, Clone)]
pub struct ThroughputReport {
    /// The algorithms and their parameters.
    pub lineup: Vec<(&'static str, String)>,
    /// Measured cells, by store, then algorithm, then concurrency.
    pub cells: Vec<Cell>,
    /// Stores not measured, and why.
    pub skipped: Vec<(StoreKind, String)>,
    /// Distinct keys.
    pub keys: u64,
    /// Time bound of one cell.
    pub duration: Duration,
    /// Request bound of one cell.
    pub max_requests: u64,
}

/// Measures every cell. Real time: takes up to `duration` per cell.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::ThroughputArgs;
///
/// let args = ThroughputArgs {
///     concurrency: vec![2],
///     duration: Duration::from_millis(20),
///     max_requests: 1_000,
///     ..ThroughputArgs::default()
/// };
/// let report = tollgate_scenarios::throughput::run(&args)?;
/// assert_eq!(report.cells.len(), 6);
/// assert_eq!(report.skipped.len(), 2);
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn run(args: &ThroughputArgs) -> Result<ThroughputReport, ScenarioError> {
    args.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ScenarioError::Runtime)?;
    runtime.block_on(measure(args))
}

async fn measure(args: &ThroughputArgs) -> Result<ThroughputReport, ScenarioError> {
    let contenders = lineup::lineup(LIMIT, WINDOW)?;
    let mut skipped = vec![];
    let redis = match &args.redis {
        Some(url) => Some(connect(StoreKind::Redis, url).await?),
        None => {
            skipped.push((StoreKind::Redis, "no --redis address given".to_string()));
            None
        }
    };
    let cluster = match &args.redis_cluster {
        Some(url) => Some(connect(StoreKind::RedisCluster, url).await?),
        None => {
            let why = "no --redis-cluster address given".to_string();
            skipped.push((StoreKind::RedisCluster, why));
            None
        }
    };
    let stores = 1 + u64::from(redis.is_some()) + u64::from(cluster.is_some());
    let total = stores * contenders.len() as u64 * args.concurrency.len() as u64;
    let bar = progress::bar(total, "throughput");
    let mut cells = vec![];
    for kind in [StoreKind::Memory, StoreKind::Redis, StoreKind::RedisCluster] {
        for contender in &contenders {
            for &concurrency in &args.concurrency {
                bar.set_message(format!("{} {} x{concurrency}", kind.label(), contender.label));
                let shape = Shape {
                    concurrency,
                    keys: args.keys,
                    duration: args.duration,
                    max_requests: args.max_requests,
                };
                let numbers = match kind {
                    StoreKind::Memory => {
                        let store = Arc::new(MemoryStore::new());
                        Some(cell(store, contender, shape).await)
                    }
                    StoreKind::Redis => match &redis {
                        Some(store) => Some(cell(store.clone(), contender, shape).await),
                        None => None,
                    },
                    StoreKind::RedisCluster => match &cluster {
                        Some(store) => Some(cell(store.clone(), contender, shape).await),
                        None => None,
                    },
                };
                let Some(numbers) = numbers else { continue };
                let numbers = numbers.map_err(|source| ScenarioError::Store {
                    store: kind.label(),
                    source,
                })?;
                cells.push(Cell {
                    store: kind,
                    algorithm: contender.label,
                    concurrency,
                    ..numbers
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(ThroughputReport {
        lineup: contenders
            .iter()
            .map(|c| (c.label, c.parameters.clone()))
            .collect(),
        cells,
        skipped,
        keys: args.keys,
        duration: args.duration,
        max_requests: args.max_requests,
    })
}

pub(crate) async fn connect(kind: StoreKind, url: &str) -> Result<Arc<RedisStore>, ScenarioError> {
    let connect_error = |source| ScenarioError::Connect {
        store: kind.label(),
        url: url.to_string(),
        source,
    };
    let target = Target::parse(url).map_err(connect_error)?;
    let connecting = RedisStore::builder(target)
        .prefix("tollgate-bench:")
        .deny_cache(false)
        .timeout(Duration::from_secs(1))
        .connect();
    match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(store) => store.map(Arc::new).map_err(connect_error),
        Err(_) => Err(ScenarioError::BadRedisUrl {
            arg: match kind {
                StoreKind::RedisCluster => "redis-cluster",
                _ => "redis",
            },
            url: url.to_string(),
            why: "no answer within 10 s".into(),
        }),
    }
}

/// The bounds of one cell.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) concurrency: u32,
    pub(crate) keys: u64,
    pub(crate) duration: Duration,
    pub(crate) max_requests: u64,
}

/// What one task counted.
struct Tally {
    decisions: u64,
    allowed: u64,
    degraded: u64,
    latencies: Histogram<u64>,
}

async fn cell<S>(store: Arc<S>, contender: &Contender, shape: Shape) -> Result<Cell, tollgate::Error>
where
    S: Store + 'static,
{
    measured(store, contender, shape).await.map(|(cell, _)| cell)
}

/// One cell, and every latency it recorded (ns).
pub(crate) async fn measured<S>(
    store: Arc<S>,
    contender: &Contender,
    shape: Shape,
) -> Result<(Cell, Histogram<u64>), tollgate::Error>
where
    S: Store + 'static,
{
    let started = Instant::now();
    let deadline = started + shape.duration;
    let per_task = shape.max_requests.div_ceil(u64::from(shape.concurrency));
    let mut tasks = vec![];
    for task in 0..shape.concurrency {
        let (store, policy) = (store.clone(), contender.policy.clone());
        tasks.push(tokio::spawn(async move {
            client(&*store, &policy, u64::from(task), per_task, shape.keys, deadline).await
        }));
    }
    let mut total = Tally {
        decisions: 0,
        allowed: 0,
        degraded: 0,
        latencies: histogram(),
    };
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(tally)) => {
                total.decisions += tally.decisions;
                total.allowed += tally.allowed;
                total.degraded += tally.degraded;
                // Both histograms have the same bounds, so adding cannot fail.
                let _ = total.latencies.add(&tally.latencies);
            }
            Ok(Err(err)) => failure = Some(err),
            Err(join) => {
                failure = Some(tollgate::Error::store(
                    tollgate::StoreErrorKind::Script,
                    format!("client task failed: {join}"),
                ))
            }
        }
    }
    let elapsed = started.elapsed();
    if let Some(err) = failure {
        return Err(err);
    }
    let quantile = |q| Duration::from_nanos(total.latencies.value_at_quantile(q));
    let cell = Cell {
        store: StoreKind::Memory,
        algorithm: contender.label,
        concurrency: shape.concurrency,
        decisions: total.decisions,
        allowed: total.allowed,
        degraded: total.degraded,
        elapsed,
        p50: quantile(0.5),
        p99: quantile(0.99),
    };
    Ok((cell, total.latencies))
}

/// Latencies from 1 ns to 60 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("constant histogram bounds are valid")
}

/// One client: checks pseudo-random keys until `budget` checks are done or `deadline` passes.
async fn client<S: Store>(
    store: &S,
    policy: &Policy,
    task: u64,
    budget: u64,
    keys: u64,
    deadline: Instant,
) -> Result<Tally, tollgate::Error> {
    let mut tally = Tally {
        decisions: 0,
        allowed: 0,
        degraded: 0,
        latencies: histogram(),
    };
    // xorshift64: a cheap, well-spread key sequence, different for each task.
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (task.wrapping_add(1)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mut key = String::with_capacity(24);
    for i in 0..budget {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        key.clear();
        let _ = write!(key, "user-{}", state % keys);
        let begun = Instant::now();
        let decision = store.check(policy, key.as_bytes(), 1).await?;
        let done = Instant::now();
        tally
            .latencies
            .saturating_record((done - begun).as_nanos().max(1) as u64);
        tally.decisions += 1;
        tally.allowed += u64::from(decision.allowed);
        tally.degraded += u64::from(decision.degraded);
        if done >= deadline {
            break;
        }
        // The memory store never waits, so let the other tasks of this cell have their turn.
        if i % 128 == 127 {
            tokio::task::yield_now().await;
        }
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_zero_concurrency_and_keys() {
        let zero = ThroughputArgs {
            concurrency: vec![1, 0],
            ..ThroughputArgs::default()
        };
        assert!(zero.validate().is_err());
        let no_keys = ThroughputArgs {
            keys: 0,
            ..ThroughputArgs::default()
        };
        assert!(no_keys.validate().is_err());
    }
}
