//! The `tollgate bench` command line: one subcommand per scenario, each with its own options, and
//! the checks that run before any work starts, so a bad argument is reported at once and never
//! after a two-minute run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ScenarioError;
pub use crate::compare::CompareArgs;

/// Default `--limit` of the boundary scenario.
pub const DEFAULT_BOUNDARY_LIMIT: u64 = 100;
/// Default `--keys` of the throughput scenario.
pub const DEFAULT_KEYS: u64 = 10_000;
/// Default `--duration` of one throughput cell.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(2);
/// Default `--max-requests` of one throughput cell.
pub const DEFAULT_MAX_REQUESTS: u64 = 2_000_000;
/// Default `--concurrency` of the throughput scenario.
pub const DEFAULT_CONCURRENCY: [u32; 3] = [1, 16, 64];
/// Default chart size in pixels.
pub const DEFAULT_CHART_SIZE: (u32, u32) = (1000, 600);

/// `tollgate bench <scenario>`: run one scenario, print its Markdown summary on stdout and, with
/// `--chart`, draw it as a PNG.
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
/// let cli = Cli::try_parse_from(["tollgate", "boundary", "--limit", "10"])?;
/// let Scenario::Boundary(args) = cli.bench.scenario else { unreachable!() };
/// assert_eq!(args.limit, 10);
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// The scenario to run.
    #[command(subcommand)]
    pub scenario: Scenario,
}

/// The scenarios.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Scenario {
    /// One client, one request every 2 s for 10 minutes, against 20 per minute, on every
    /// algorithm (simulated clock: finishes at once).
    Bot(BotArgs),
    /// L requests at 0:59.9 and L more at 1:00.0 against L per minute, on every algorithm: how
    /// many pass in one 60 s span (simulated clock).
    Boundary(BoundaryArgs),
    /// Decisions per second and latency per algorithm, store and concurrency (real time, real
    /// servers on loopback).
    Throughput(ThroughputArgs),
    /// Every algorithm on one store, side by side: decisions per second, latency, accuracy
    /// against the exact limit, store CPU per 1 000 decisions and memory per key.
    Compare(CompareArgs),
}

/// Where and how big to draw the chart.
#[derive(Debug, Clone, clap::Args)]
pub struct ChartArgs {
    /// Write the chart as a PNG to this path (its directory must exist).
    #[arg(long, value_name = "PATH.png")]
    pub chart: Option<PathBuf>,
    /// Chart width in pixels (200 to 4000).
    #[arg(long, default_value_t = DEFAULT_CHART_SIZE.0)]
    pub chart_width: u32,
    /// Chart height in pixels (150 to 4000).
    #[arg(long, default_value_t = DEFAULT_CHART_SIZE.1)]
    pub chart_height: u32,
}

/// Options of `bench bot`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BotArgs {
    /// The chart.
    #[command(flatten)]
    pub chart: ChartArgs,
}

/// Options of `bench boundary`.
#[derive(Debug, Clone, clap::Args)]
pub struct BoundaryArgs {
    /// Requests per minute allowed, and the size of each burst.
    #[arg(long, default_value_t = DEFAULT_BOUNDARY_LIMIT)]
    pub limit: u64,
    /// The chart.
    #[command(flatten)]
    pub chart: ChartArgs,
}

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

impl Default for BoundaryArgs {
    fn default() -> Self {
        BoundaryArgs {
            limit: DEFAULT_BOUNDARY_LIMIT,
            chart: ChartArgs::default(),
        }
    }
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

impl Default for ChartArgs {
    fn default() -> Self {
        ChartArgs {
            chart: None,
            chart_width: DEFAULT_CHART_SIZE.0,
            chart_height: DEFAULT_CHART_SIZE.1,
        }
    }
}

impl Scenario {
    /// The chart options of this scenario.
    ///
    /// ```
    /// use tollgate_scenarios::{BotArgs, Scenario};
    ///
    /// assert!(Scenario::Bot(BotArgs::default()).chart().chart.is_none());
    /// ```
    pub fn chart(&self) -> ChartArgs {
        match self {
            Scenario::Bot(args) => args.chart.clone(),
            Scenario::Boundary(args) => args.chart.clone(),
            Scenario::Throughput(args) => args.chart.clone(),
            Scenario::Compare(args) => args.chart_args(),
        }
    }
}

impl ChartArgs {
    /// Checks the size and, when a chart is asked for, that the path ends in `.png` and its
    /// directory exists.
    ///
    /// ```
    /// use tollgate_scenarios::ChartArgs;
    ///
    /// let args = ChartArgs { chart: Some("/no/such/dir/x.png".into()), ..ChartArgs::default() };
    /// assert!(args.validate().is_err());
    /// assert!(ChartArgs::default().validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), ScenarioError> {
        in_range(
            "chart-width",
            u64::from(self.chart_width),
            200,
            4000,
            "200 to 4000",
        )?;
        in_range(
            "chart-height",
            u64::from(self.chart_height),
            150,
            4000,
            "150 to 4000",
        )?;
        let Some(path) = &self.chart else {
            return Ok(());
        };
        let is_png = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("png"));
        if !is_png {
            return Err(ScenarioError::ChartNotPng(path.clone()));
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(ScenarioError::ChartDirMissing {
                dir: dir.to_path_buf(),
                path: path.clone(),
            });
        }
        Ok(())
    }
}

impl BoundaryArgs {
    /// Checks the limit (1 to 100 000, the sliding log's maximum) and the chart.
    ///
    /// ```
    /// use tollgate_scenarios::BoundaryArgs;
    ///
    /// assert!(BoundaryArgs { limit: 0, ..BoundaryArgs::default() }.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ScenarioError> {
        in_range("limit", self.limit, 1, 100_000, "1 to 100000")?;
        self.chart.validate()
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

pub(crate) fn in_range(
    arg: &'static str,
    value: u64,
    min: u64,
    max: u64,
    expected: &'static str,
) -> Result<(), ScenarioError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ScenarioError::BadArgument {
            arg,
            expected,
            value: value.to_string(),
        })
    }
}

/// Parses `500ms`, `2s` or `1.5s`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        return Err(format!("expected a duration like 2s or 500ms, got `{text}`"));
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * scale <= 86_400.0 => Ok(Duration::from_secs_f64(n * scale)),
        _ => Err(format!("expected a duration like 2s or 500ms, got `{text}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_in_seconds_and_milliseconds() {
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("2").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fortnight").is_err());
    }

    #[test]
    fn rejects_a_chart_that_is_not_png() {
        let args = ChartArgs {
            chart: Some("chart.jpg".into()),
            ..ChartArgs::default()
        };
        assert!(matches!(args.validate(), Err(ScenarioError::ChartNotPng(_))));
    }

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
