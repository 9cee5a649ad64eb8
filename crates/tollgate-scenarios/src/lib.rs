//! The scenarios behind `tollgate bench`: what each algorithm does with a polite bot, with a
//! burst placed across a window boundary, how many decisions per second each store makes, and
//! the one table that compares the algorithms on a store.
//! Each scenario prints a Markdown summary and can draw the same numbers as a PNG chart.
//!
//! ```
//! use tollgate_scenarios::{BenchArgs, BoundaryArgs, Scenario};
//!
//! let args = BenchArgs { scenario: Scenario::Boundary(BoundaryArgs { limit: 5, ..BoundaryArgs::default() }) };
//! let output = tollgate_scenarios::run(&args)?;
//! assert!(output.markdown.contains("| fixed window | 5 | 5 | 10 |"));
//! assert!(output.chart.is_none()); // no --chart given
//! # Ok::<(), tollgate_scenarios::ScenarioError>(())
//! ```
//!
//! # Layout
//!
//! - [`args`]: the command line ([`BenchArgs`], one subcommand per scenario) and its checks.
//! - [`options`]: what every scenario's options share: the chart ([`ChartArgs`]), durations,
//!   range checks and the defaults of throughput and compare.
//! - [`lineup`]: the six algorithms, set to the same budget, with their parameters in words.
//! - [`bot`]: one request every 2 s for 10 minutes against 20 per minute (simulated clock).
//! - [`boundary`]: `L` requests at 0:59.9 and `L` at 1:00.0 against `L` per minute (simulated).
//! - [`throughput`]: decisions per second and latency per algorithm, store and concurrency.
//! - [`compare`]: every algorithm on one store: speed, accuracy against the exact limit under
//!   three traffic shapes, store CPU per 1 000 decisions and memory per key.
//! - [`loopback`]: the rule that load goes to loopback addresses only.
//! - [`report`]: the Markdown summaries.
//! - [`chart`]: the PNG charts.
//! - [`error`]: [`ScenarioError`], every way a scenario can fail.
//! - `progress` (private): the progress bar on stderr.

pub mod args;
pub mod bot;
pub mod boundary;
pub mod chart;
pub mod compare;
pub mod error;
pub mod lineup;
pub mod loopback;
pub mod options;
mod progress;
pub mod report;
pub mod throughput;

use std::path::PathBuf;

pub use args::{BenchArgs, BotArgs, BoundaryArgs, ChartArgs, CompareArgs, Scenario, ThroughputArgs};
pub use error::ScenarioError;

/// What a scenario produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// The Markdown summary, for stdout.
    pub markdown: String,
    /// The chart written, if `--chart` was given.
    pub chart: Option<PathBuf>,
}

/// Runs the scenario `args` names: checks every argument first, runs, draws the chart if asked,
/// and returns the Markdown summary.
///
/// ```
/// use tollgate_scenarios::{BenchArgs, BoundaryArgs, Scenario};
///
/// let zero = BenchArgs { scenario: Scenario::Boundary(BoundaryArgs { limit: 0, ..BoundaryArgs::default() }) };
/// let err = tollgate_scenarios::run(&zero).unwrap_err();
/// assert_eq!(err.to_string(), "--limit must be 1 to 100000, got 0");
/// ```
pub fn run(args: &BenchArgs) -> Result<Output, ScenarioError> {
    let chart_args = &args.scenario.chart();
    chart_args.validate()?;
    let (markdown, drawn) = match &args.scenario {
        Scenario::Bot(_) => {
            let report = bot::run()?;
            (report::bot(&report), chart::bot(&report, chart_args)?)
        }
        Scenario::Boundary(boundary_args) => {
            boundary_args.validate()?;
            let report = boundary::run(boundary_args.limit)?;
            (report::boundary(&report), chart::boundary(&report, chart_args)?)
        }
        Scenario::Throughput(throughput_args) => {
            throughput_args.validate()?;
            let report = throughput::run(throughput_args)?;
            (
                report::throughput(&report),
                chart::throughput(&report, chart_args)?,
            )
        }
        Scenario::Compare(compare_args) => {
            compare_args.validate()?;
            let report = compare::run(compare_args)?;
            let markdown = report::compare(&report);
            let drawn = chart::compare(&report, chart_args)?;
            compare_args.write_markdown(&markdown)?;
            (markdown, drawn)
        }
    };
    Ok(Output {
        markdown,
        chart: drawn.then(|| chart_args.chart.clone()).flatten(),
    })
}
