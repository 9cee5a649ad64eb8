//! `tollgate bench compare`: every algorithm on one store, side by side, in the columns people
//! choose an algorithm by.
//!
//! For each algorithm of the [lineup], all set to `--limit` per `--window`:
//!
//! 1. **Speed** (real time): `--concurrency` tasks check keys drawn from `--keys` distinct keys
//!    for `--duration` or `--max-requests` checks, whichever ends first (the
//!    [throughput] scenario's client). Decisions per second, and the mean,
//!    p50, p99 and max latency of one check from an HDR histogram.
//! 2. **Store CPU per 1 000 decisions** over that run: the Redis processes' `INFO cpu` (user +
//!    system) on Redis, this process's CPU time on the memory store (see [`cost`]).
//! 3. **Accuracy** (simulated time, see [`accuracy`]): the most requests admitted in any span of
//!    one window, divided by the limit, under a boundary burst, Poisson traffic at 1.5× the
//!    limit and a bursty on/off client ([`traffic`]). 1.00 means the limit held exactly; 2.00
//!    means twice the limit got through in one window. For the sliding window counter also the
//!    worst case over `--seeds` seeds of both random shapes, its proven bound, and the attack
//!    that reaches the bound.
//! 4. **Memory per key**: sampled keys each given a full budget (`L` checks spread over one
//!    window, so a sliding log holds `L` entries), then Redis `MEMORY USAGE` of their keys, or
//!    the resident memory a fresh memory store grew by.
//!
//! The accuracy runs are exact and repeatable: the same seed gives the same numbers on every
//! machine and every store.

pub mod accuracy;
pub mod cost;
pub mod traffic;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::{ManualClock, MemoryStore, Policy};
use tollgate_redis::{RedisStore, Target};

use self::accuracy::{Clocked, Probe, Run};
use self::cost::Nodes;
use self::traffic::Shape;
use crate::lineup::{self, Contender};
use crate::options::{ChartArgs, DEFAULT_DURATION, DEFAULT_MAX_REQUESTS, in_range, parse_duration};
use crate::throughput::{self, StoreKind};
use crate::{ScenarioError, progress};

/// Default `--limit`.
pub const DEFAULT_LIMIT: u64 = 100;
/// Default `--window`.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(1);
/// Default `--concurrency`.
pub const DEFAULT_CONCURRENCY: u32 = 16;
/// Default `--keys`: enough that the memory store, at millions of checks per second, still
/// admits most of them.
pub const DEFAULT_KEYS: u64 = 100_000;
/// Default `--seeds`.
pub const DEFAULT_SEEDS: u64 = 100;
/// Default chart size: six panels.
pub const DEFAULT_CHART_SIZE: (u32, u32) = (1500, 1000);
/// Keys filled to measure the memory store's bytes per key (many, so the resident memory
/// growth is well above page granularity).
pub const MEMORY_SAMPLE_KEYS: u64 = 20_000;
/// The window of the policies whose memory per key is measured (see [`CompareReport::sample_keys`]).
pub const FILL_WINDOW: Duration = Duration::from_secs(3600);
/// Keys filled and asked `MEMORY USAGE` of on Redis.
pub const REDIS_SAMPLE_KEYS: u64 = 200;
/// The speed run of each algorithm is split into this many rounds, interleaved.
pub const SPEED_ROUNDS: u32 = 5;
/// Probes (stores with their own manual clock) running accuracy runs in parallel on Redis.
const REDIS_PROBES: usize = 8;

/// `tollgate bench compare`: every algorithm on one store, side by side.
///
/// ```
/// use clap::Parser;
/// use tollgate_scenarios::{BenchArgs, Scenario};
///
/// #[derive(Parser)]
/// struct Cli {
///     #[command(flatten)]
///     bench: BenchArgs,
/// }
///
/// let cli = Cli::try_parse_from(["tollgate", "compare", "--limit", "10", "--window", "500ms"])?;
/// let Scenario::Compare(args) = cli.bench.scenario else { unreachable!() };
/// assert_eq!((args.limit, args.window.as_millis()), (10, 500));
/// assert_eq!(args.store, "memory");
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The store: `memory`, `redis://host:port` or `redis+cluster://host:port,host:port`
    /// (loopback addresses only).
    #[arg(long, default_value = "memory", value_name = "memory|URL")]
    pub store: String,
    /// Requests allowed per window, for every algorithm (1 to 10000).
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    pub limit: u64,
    /// The window, in whole milliseconds (10ms to 1 hour), e.g. 1s or 250ms.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub window: Duration,
    /// Longest time spent measuring the speed of one algorithm, e.g. 2s or 500ms.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub duration: Duration,
    /// Most checks made when measuring the speed of one algorithm.
    #[arg(long, default_value_t = DEFAULT_MAX_REQUESTS)]
    pub max_requests: u64,
    /// Concurrent clients when measuring speed.
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    pub concurrency: u32,
    /// Distinct keys the speed run's checks are spread over.
    #[arg(long, default_value_t = DEFAULT_KEYS)]
    pub keys: u64,
    /// Random seeds the sliding window counter's worst case is sought over (per random shape).
    #[arg(long, default_value_t = DEFAULT_SEEDS)]
    pub seeds: u64,
    /// Write `compare.md` and `compare.png` into this directory (it must exist).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Write the chart to this PNG instead (or, without --out, at all).
    #[arg(long, value_name = "PATH.png")]
    pub chart: Option<PathBuf>,
    /// Chart width in pixels (200 to 4000).
    #[arg(long, default_value_t = DEFAULT_CHART_SIZE.0)]
    pub chart_width: u32,
    /// Chart height in pixels (150 to 4000).
    #[arg(long, default_value_t = DEFAULT_CHART_SIZE.1)]
    pub chart_height: u32,
}

impl Default for CompareArgs {
    fn default() -> Self {
        CompareArgs {
            store: "memory".into(),
            limit: DEFAULT_LIMIT,
            window: DEFAULT_WINDOW,
            duration: DEFAULT_DURATION,
            max_requests: DEFAULT_MAX_REQUESTS,
            concurrency: DEFAULT_CONCURRENCY,
            keys: DEFAULT_KEYS,
            seeds: DEFAULT_SEEDS,
            out: None,
            chart: None,
            chart_width: DEFAULT_CHART_SIZE.0,
            chart_height: DEFAULT_CHART_SIZE.1,
        }
    }
}

impl CompareArgs {
    /// Which store `--store` names.
    ///
    /// ```
    /// use tollgate_scenarios::CompareArgs;
    /// use tollgate_scenarios::throughput::StoreKind;
    ///
    /// let args = CompareArgs { store: "redis+cluster://127.0.0.1:7000".into(), ..CompareArgs::default() };
    /// assert_eq!(args.store_kind(), StoreKind::RedisCluster);
    /// ```
    pub fn store_kind(&self) -> StoreKind {
        if self.store.starts_with("redis+cluster://") {
            StoreKind::RedisCluster
        } else if self.store == "memory" {
            StoreKind::Memory
        } else {
            StoreKind::Redis
        }
    }

    /// Where the chart goes: `--chart`, else `compare.png` in `--out`, else nowhere.
    ///
    /// ```
    /// use tollgate_scenarios::CompareArgs;
    ///
    /// let args = CompareArgs { out: Some("docs".into()), ..CompareArgs::default() };
    /// assert_eq!(args.chart_args().chart, Some("docs/compare.png".into()));
    /// ```
    pub fn chart_args(&self) -> ChartArgs {
        ChartArgs {
            chart: self
                .chart
                .clone()
                .or_else(|| self.out.as_ref().map(|dir| dir.join("compare.png"))),
            chart_width: self.chart_width,
            chart_height: self.chart_height,
        }
    }

    /// Checks every argument before any work starts.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate_scenarios::CompareArgs;
    ///
    /// assert!(CompareArgs::default().validate().is_ok());
    /// let odd = CompareArgs { window: Duration::from_micros(1500), ..CompareArgs::default() };
    /// assert_eq!(odd.validate().unwrap_err().to_string(), "--window must be whole milliseconds from 10ms to 1 hour, got 1.5ms");
    /// let far = CompareArgs { store: "redis://192.0.2.1:6379".into(), ..CompareArgs::default() };
    /// assert!(far.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ScenarioError> {
        in_range("limit", self.limit, 1, 10_000, "1 to 10000")?;
        let window_us = self.window.as_micros();
        if !(10_000..=3_600_000_000).contains(&window_us) || !window_us.is_multiple_of(1000) {
            return Err(ScenarioError::BadArgument {
                arg: "window",
                expected: "whole milliseconds from 10ms to 1 hour",
                value: format!("{:?}", self.window),
            });
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
        in_range("concurrency", u64::from(self.concurrency), 1, 4096, "1 to 4096")?;
        in_range("keys", self.keys, 1, 10_000_000, "1 to 10000000")?;
        in_range("seeds", self.seeds, 1, 100_000, "1 to 100000")?;
        match self.store_kind() {
            StoreKind::Memory => {}
            StoreKind::Redis => crate::loopback::check_url("store", &self.store, false)?,
            StoreKind::RedisCluster => crate::loopback::check_url("store", &self.store, true)?,
        }
        if let Some(dir) = &self.out
            && !dir.is_dir()
        {
            return Err(ScenarioError::BadArgument {
                arg: "out",
                expected: "an existing directory",
                value: dir.display().to_string(),
            });
        }
        self.chart_args().validate()
    }

    /// Writes `markdown` to `compare.md` in `--out`, if given.
    pub fn write_markdown(&self, markdown: &str) -> Result<(), ScenarioError> {
        let Some(dir) = &self.out else { return Ok(()) };
        let path = dir.join("compare.md");
        std::fs::write(&path, markdown).map_err(|source| ScenarioError::Write { path, source })
    }
}

/// One algorithm's numbers.
#[derive(Debug, Clone)]
pub struct Row {
    /// The algorithm's short name.
    pub label: &'static str,
    /// Its parameters in words.
    pub parameters: String,
    /// Checks answered in the speed run.
    pub decisions: u64,
    /// Of which admitted.
    pub allowed: u64,
    /// Wall time of the speed run.
    pub elapsed: Duration,
    /// Mean latency of one check.
    pub mean: Duration,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// Slowest check.
    pub max: Duration,
    /// Most admitted in any span of one window, per shape of [`Shape::ALL`] (seed 1).
    pub most_admitted: [u64; 3],
    /// Store CPU time per 1 000 decisions in the speed run (None where it cannot be read).
    pub cpu_per_1000: Option<Duration>,
    /// Memory per key with a full budget spent (None where it cannot be read).
    pub bytes_per_key: Option<f64>,
}

impl Row {
    /// Decisions per second of the speed run.
    pub fn per_second(&self) -> f64 {
        self.decisions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Most admitted in any window over the limit, per shape of [`Shape::ALL`].
    pub fn accuracy(&self, limit: u64) -> [f64; 3] {
        self.most_admitted.map(|most| most as f64 / limit as f64)
    }
}

/// The sliding window counter's worst cases.
#[derive(Debug, Clone)]
pub struct SlidingWindowWorst {
    /// Seeds tried per random shape.
    pub seeds: u64,
    /// The most admitted in any window over every seed of both random shapes.
    pub most_over_seeds: u64,
    /// The seed and shape that gave it.
    pub worst_seed: (Shape, u64),
    /// The proven bound, [`traffic::sliding_window_bound`].
    pub bound: u64,
    /// What the attack of [`traffic::trickle_after_burst`] got through.
    pub attack: u64,
}

/// The whole comparison.
#[derive(Debug, Clone)]
pub struct CompareReport {
    /// The store measured.
    pub store: StoreKind,
    /// Redis nodes measured for CPU (0 for memory).
    pub redis_nodes: usize,
    /// Requests allowed per window.
    pub limit: u64,
    /// The window.
    pub window: Duration,
    /// Concurrent clients of the speed run.
    pub concurrency: u32,
    /// Distinct keys of the speed run.
    pub keys: u64,
    /// Time bound of one speed run.
    pub duration: Duration,
    /// Request bound of one speed run.
    pub max_requests: u64,
    /// Keys sampled for memory per key.
    pub sample_keys: u64,
    /// One row per algorithm, in lineup order.
    pub rows: Vec<Row>,
    /// The sliding window counter's worst cases.
    pub sliding_window: SlidingWindowWorst,
}

/// Runs the comparison.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::CompareArgs;
///
/// let args = CompareArgs {
///     limit: 10, duration: Duration::from_millis(20), max_requests: 2_000, keys: 100, seeds: 3,
///     ..CompareArgs::default()
/// };
/// let report = tollgate_scenarios::compare::run(&args)?;
/// assert_eq!(report.rows.len(), 6);
/// assert_eq!(report.rows[0].most_admitted[0], 20); // fixed window: twice the limit at the boundary
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn run(args: &CompareArgs) -> Result<CompareReport, ScenarioError> {
    args.validate()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ScenarioError::Runtime)?;
    runtime.block_on(compare(args))
}

async fn compare(args: &CompareArgs) -> Result<CompareReport, ScenarioError> {
    let kind = args.store_kind();
    let contenders = lineup::lineup(args.limit, args.window)?;
    let policies: Vec<Policy> = contenders.iter().map(|c| c.policy.clone()).collect();
    let store_error = |source| ScenarioError::Store {
        store: kind.label(),
        source,
    };
    let mut nodes = match kind {
        StoreKind::Memory => None,
        StoreKind::Redis => Some(Nodes::open(kind.label(), &args.store, false).await?),
        StoreKind::RedisCluster => Some(Nodes::open(kind.label(), &args.store, true).await?),
    };
    // A prefix of this run's own, so simulated keys never meet an earlier run's.
    let nonce = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let prefix = format!("tollgate-compare:{nonce}:");

    let sliding = contenders
        .iter()
        .position(|c| matches!(c.policy.algorithm(), tollgate::Algorithm::SlidingWindow(_)))
        .unwrap_or(2);
    let mut runs: Vec<Run> = vec![];
    for contender in 0..contenders.len() {
        for shape in Shape::ALL {
            runs.push(Run {
                contender,
                shape,
                seed: 1,
            });
        }
    }
    for seed in 1..=args.seeds {
        for shape in [Shape::Poisson, Shape::OnOff] {
            runs.push(Run {
                contender: sliding,
                shape,
                seed,
            });
        }
    }
    let steps = contenders.len() as u64 * 3 + runs.len() as u64 + 1;
    let bar = progress::bar(steps, &format!("compare ({})", kind.label()));

    // Memory per key first, while this process has freed little memory an allocator could
    // hand back without growing (which would hide the store's growth).
    let sample_keys = match kind {
        StoreKind::Memory => MEMORY_SAMPLE_KEYS,
        _ => REDIS_SAMPLE_KEYS,
    };
    let mut bytes_per_key = vec![];
    // Filled memory stores stay alive until every algorithm is measured: memory one of them
    // freed would be reused by the next without the process growing.
    let mut filled = vec![];
    // The same algorithms with an hour's window: a key's state has the same shape whatever the
    // window, and on Redis its TTL (which follows the simulated clock's window, but runs out in
    // real time) must outlast the fill and the measurement.
    let long = lineup::lineup(args.limit, FILL_WINDOW)?;
    for contender in &long {
        bar.set_message(format!("{}: memory per key", contender.label));
        let bytes = match &mut nodes {
            None => memory_bytes_per_key(&contender.policy, args.limit, FILL_WINDOW, &mut filled),
            Some(nodes) => {
                let probe = redis_probe(kind, &args.store, &prefix).await?;
                let b = redis_bytes_per_key(
                    kind,
                    &probe,
                    nodes,
                    &prefix,
                    &contender.policy,
                    args.limit,
                    FILL_WINDOW,
                )
                .await?;
                Some(b)
            }
        };
        bytes_per_key.push(bytes);
        bar.inc(1);
    }
    drop(filled);

    // Speed and CPU, in real time.
    let speed_store = match kind {
        StoreKind::Memory => None,
        _ => Some(throughput::connect(kind, &args.store).await?),
    };
    // Interleaved in rounds, so that a burst of other load on the machine falls on every
    // algorithm alike instead of on whichever ran at that moment.
    let memory_stores: Vec<Arc<MemoryStore>> =
        contenders.iter().map(|_| Arc::new(MemoryStore::new())).collect();
    let mut speed: Vec<Speed> = contenders.iter().map(|_| Speed::default()).collect();
    let rounds = SPEED_ROUNDS
        .min(u32::try_from(args.max_requests).unwrap_or(u32::MAX))
        .max(1);
    let shape = throughput::Shape {
        concurrency: args.concurrency,
        keys: args.keys,
        duration: args.duration / rounds,
        max_requests: args.max_requests.div_ceil(u64::from(rounds)),
    };
    for round in 0..rounds {
        for (i, contender) in contenders.iter().enumerate() {
            bar.set_message(format!(
                "{}: speed, round {}/{rounds}",
                contender.label,
                round + 1
            ));
            let before = cpu_seconds(&mut nodes).await?;
            let (cell, histogram) = match &speed_store {
                None => throughput::measured(memory_stores[i].clone(), contender, shape).await,
                Some(store) => throughput::measured(store.clone(), contender, shape).await,
            }
            .map_err(store_error)?;
            let after = cpu_seconds(&mut nodes).await?;
            speed[i].add(
                &cell,
                &histogram,
                before.zip(after).map(|(b, a)| (a - b).max(0.0)),
            );
        }
    }
    drop(memory_stores);
    bar.inc(contenders.len() as u64);

    // Accuracy, on simulated time.
    bar.set_message("accuracy");
    let probes: Vec<Arc<Probe>> = match kind {
        StoreKind::Memory => (0..2).map(|_| Arc::new(Probe::memory())).collect(),
        _ => {
            let mut probes = vec![];
            for _ in 0..REDIS_PROBES {
                probes.push(Arc::new(redis_probe(kind, &args.store, &prefix).await?));
            }
            probes
        }
    };
    let ticker = bar.clone();
    let most = accuracy::measure(&probes, &policies, &runs, args.limit, args.window, move || {
        ticker.inc(1)
    })
    .await
    .map_err(store_error)?;
    let attack = accuracy::trickle(&probes[0], &policies[sliding], args.limit, args.window)
        .await
        .map_err(store_error)?;
    bar.inc(1);
    bar.finish_and_clear();

    let mut rows = vec![];
    for (i, (contender, (speed, bytes))) in contenders
        .iter()
        .zip(speed.into_iter().zip(bytes_per_key))
        .enumerate()
    {
        let mut most_admitted = [0; 3];
        for (k, slot) in most_admitted.iter_mut().enumerate() {
            *slot = most[i * 3 + k];
        }
        rows.push(speed.row(contender, bytes, most_admitted));
    }
    let (worst_index, most_over_seeds) = most
        .iter()
        .enumerate()
        .skip(contenders.len() * 3)
        .max_by_key(|&(i, m)| (*m, std::cmp::Reverse(i)))
        .map_or((0, 0), |(i, m)| (i, *m));
    let worst = runs.get(worst_index).copied().unwrap_or(Run {
        contender: sliding,
        shape: Shape::Poisson,
        seed: 1,
    });
    Ok(CompareReport {
        store: kind,
        redis_nodes: nodes.as_ref().map_or(0, Nodes::len),
        limit: args.limit,
        window: args.window,
        concurrency: args.concurrency,
        keys: args.keys,
        duration: args.duration,
        max_requests: args.max_requests,
        sample_keys,
        rows,
        sliding_window: SlidingWindowWorst {
            seeds: args.seeds,
            most_over_seeds,
            worst_seed: (worst.shape, worst.seed),
            bound: traffic::sliding_window_bound(args.limit, args.window),
            attack,
        },
    })
}

/// One algorithm's speed runs, added up over the rounds.
#[derive(Default)]
struct Speed {
    decisions: u64,
    allowed: u64,
    elapsed: Duration,
    latencies: Option<hdrhistogram::Histogram<u64>>,
    /// CPU seconds, None once any round could not read it.
    cpu_seconds: Option<f64>,
    rounds: u32,
}

impl Speed {
    fn add(
        &mut self,
        cell: &throughput::Cell,
        histogram: &hdrhistogram::Histogram<u64>,
        cpu_seconds: Option<f64>,
    ) {
        self.decisions += cell.decisions;
        self.allowed += cell.allowed;
        self.elapsed += cell.elapsed;
        match &mut self.latencies {
            // Same bounds everywhere, so adding cannot fail.
            Some(all) => {
                let _ = all.add(histogram);
            }
            None => self.latencies = Some(histogram.clone()),
        }
        self.cpu_seconds = match (self.rounds, self.cpu_seconds, cpu_seconds) {
            (0, _, now) => now,
            (_, Some(sum), Some(now)) => Some(sum + now),
            _ => None,
        };
        self.rounds += 1;
    }

    fn row(self, contender: &Contender, bytes_per_key: Option<f64>, most_admitted: [u64; 3]) -> Row {
        let at = |q: f64| {
            self.latencies
                .as_ref()
                .map_or(Duration::ZERO, |h| Duration::from_nanos(h.value_at_quantile(q)))
        };
        Row {
            label: contender.label,
            parameters: contender.parameters.clone(),
            decisions: self.decisions,
            allowed: self.allowed,
            elapsed: self.elapsed,
            mean: Duration::from_nanos(self.latencies.as_ref().map_or(0.0, |h| h.mean()).round() as u64),
            p50: at(0.5),
            p99: at(0.99),
            max: Duration::from_nanos(self.latencies.as_ref().map_or(0, |h| h.max())),
            most_admitted,
            cpu_per_1000: self
                .cpu_seconds
                .map(|cpu| Duration::from_secs_f64(cpu * 1000.0 / self.decisions.max(1) as f64)),
            bytes_per_key,
        }
    }
}

/// CPU seconds used so far by the store: the Redis nodes, or this process.
async fn cpu_seconds(nodes: &mut Option<Nodes>) -> Result<Option<f64>, ScenarioError> {
    match nodes {
        Some(nodes) => Ok(Some(nodes.cpu_seconds().await?)),
        None => Ok(cost::process_cpu_seconds()),
    }
}

/// A Redis store whose scripts run on a manual clock.
async fn redis_probe(kind: StoreKind, url: &str, prefix: &str) -> Result<Probe, ScenarioError> {
    let connect_error = |source| ScenarioError::Connect {
        store: kind.label(),
        url: url.to_string(),
        source,
    };
    let clock = ManualClock::new(lineup::START_US);
    let target = Target::parse(url).map_err(connect_error)?;
    let connecting = RedisStore::builder(target)
        .prefix(prefix)
        .deny_cache(false)
        .timeout(Duration::from_secs(1))
        .clock(clock.clone())
        .connect();
    let store = match tokio::time::timeout(Duration::from_secs(10), connecting).await {
        Ok(store) => store.map_err(connect_error)?,
        Err(_) => {
            return Err(ScenarioError::BadRedisUrl {
                arg: "store",
                url: url.to_string(),
                why: "no answer within 10 s".into(),
            });
        }
    };
    Ok(Probe {
        store: Clocked::Redis(store),
        clock,
    })
}

/// The times of a full budget: `limit` checks spread evenly over the first window.
fn fill_times(limit: u64, window: Duration) -> impl Iterator<Item = u64> {
    let origin = accuracy::origin_us(window);
    let gap = window.as_micros() as u64 / limit;
    (0..limit).map(move |j| origin + j * gap)
}

/// Resident memory a fresh memory store grows by when [`MEMORY_SAMPLE_KEYS`] keys each spend a
/// full budget, per key; None where resident memory cannot be read.
fn memory_bytes_per_key(
    policy: &Policy,
    limit: u64,
    window: Duration,
    keep: &mut Vec<MemoryStore<ManualClock>>,
) -> Option<f64> {
    let clock = ManualClock::new(lineup::START_US);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let keys: Vec<String> = (0..MEMORY_SAMPLE_KEYS).map(|i| format!("user-{i}")).collect();
    let before = cost::resident_bytes()?;
    for at in fill_times(limit, window) {
        clock.set_us(at);
        for key in &keys {
            // Only the memory it takes matters here; every check of a full budget is admitted.
            let _ = store.check(policy, key, 1);
        }
    }
    let after = cost::resident_bytes()?;
    keep.push(store);
    Some(after.saturating_sub(before) as f64 / MEMORY_SAMPLE_KEYS as f64)
}

/// `MEMORY USAGE` of [`REDIS_SAMPLE_KEYS`] keys' Redis keys (state, and the sliding log's sorted
/// set) after each spent a full budget, per key.
async fn redis_bytes_per_key(
    kind: StoreKind,
    probe: &Probe,
    nodes: &mut Nodes,
    prefix: &str,
    policy: &Policy,
    limit: u64,
    window: Duration,
) -> Result<f64, ScenarioError> {
    let store_error = |source| ScenarioError::Store {
        store: kind.label(),
        source,
    };
    let keys: Vec<String> = (0..REDIS_SAMPLE_KEYS).map(|i| format!("memory-{i}")).collect();
    for at in fill_times(limit, window) {
        for key in &keys {
            probe
                .check(policy, key.as_bytes(), at)
                .await
                .map_err(store_error)?;
        }
    }
    let mut total = 0;
    for key in &keys {
        let (names, _) = RedisStore::script_call(prefix, policy, key.as_bytes(), 1);
        for name in names {
            total += nodes.memory_usage(&name).await?;
        }
    }
    // Leave nothing behind for an hour.
    for key in &keys {
        if let Clocked::Redis(store) = &probe.store {
            tollgate::Store::reset(store, policy, key.as_bytes())
                .await
                .map_err(store_error)?;
        }
    }
    Ok(total as f64 / REDIS_SAMPLE_KEYS as f64)
}
