//! The `tollgate bench` command line: one subcommand per scenario, each with its own options, and
//! the checks that run before any work starts, so a bad argument is reported at once and never
//! after a two-minute run.

use crate::ScenarioError;
use crate::options::in_range;

pub use crate::compare::CompareArgs;
pub use crate::options::{ChartArgs, DEFAULT_CHART_SIZE, DEFAULT_DURATION, DEFAULT_MAX_REQUESTS};
pub use crate::throughput::{DEFAULT_CONCURRENCY, DEFAULT_KEYS, ThroughputArgs};

/// Default `--limit` of the boundary scenario.
pub const DEFAULT_BOUNDARY_LIMIT: u64 = 100;

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

impl Default for BoundaryArgs {
    fn default() -> Self {
        BoundaryArgs {
            limit: DEFAULT_BOUNDARY_LIMIT,
            chart: ChartArgs::default(),
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
