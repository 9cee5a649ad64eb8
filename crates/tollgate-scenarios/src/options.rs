//! The options every scenario shares: where and how big to draw its chart ([`ChartArgs`]), and
//! the reading and range checks of argument values, with the defaults the throughput and compare
//! scenarios share. Below the scenarios, whose own options use them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ScenarioError;

/// Default `--duration` of one throughput cell.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(2);
/// Default `--max-requests` of one throughput cell.
pub const DEFAULT_MAX_REQUESTS: u64 = 2_000_000;
/// Default chart size in pixels.
pub const DEFAULT_CHART_SIZE: (u32, u32) = (1000, 600);

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

impl Default for ChartArgs {
    fn default() -> Self {
        ChartArgs {
            chart: None,
            chart_width: DEFAULT_CHART_SIZE.0,
            chart_height: DEFAULT_CHART_SIZE.1,
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
}
