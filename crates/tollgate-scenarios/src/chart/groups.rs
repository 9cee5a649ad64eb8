//! The throughput chart: decisions per second, one bar per algorithm, grouped by store and
//! concurrency, on a logarithmic axis (the memory store answers orders of magnitude faster than a
//! network round trip, and a linear axis would flatten the Redis bars to nothing).

use plotters::prelude::*;

use super::{Drawn, Root, SERIES, text};
use crate::throughput::{StoreKind, ThroughputReport};
use crate::{ChartArgs, ScenarioError};

/// Draws the throughput report into the PNG `args` names (nothing without `--chart`); returns
/// whether a chart was written.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::{ChartArgs, ThroughputArgs};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("throughput.png");
/// let run = ThroughputArgs { concurrency: vec![1], duration: Duration::from_millis(10), ..ThroughputArgs::default() };
/// let report = tollgate_scenarios::throughput::run(&run)?;
/// let args = ChartArgs { chart: Some(path.clone()), ..ChartArgs::default() };
/// assert!(tollgate_scenarios::chart::throughput(&report, &args)?);
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn throughput(report: &ThroughputReport, args: &ChartArgs) -> Result<bool, ScenarioError> {
    super::render(args, |root| draw(report, root))
}

fn draw(report: &ThroughputReport, root: &Root<'_>) -> Drawn {
    // Groups in the order measured: store, then concurrency.
    let mut groups: Vec<(StoreKind, u32)> = vec![];
    for cell in &report.cells {
        if !groups.contains(&(cell.store, cell.concurrency)) {
            groups.push((cell.store, cell.concurrency));
        }
    }
    let algorithms: Vec<&str> = report.lineup.iter().map(|(label, _)| *label).collect();
    let bars = algorithms.len().max(1) as i32;
    let slots = bars + 1;
    let rates = report.cells.iter().map(|cell| cell.per_second().max(1.0));
    let high = rates.clone().fold(10.0, f64::max) * 3.0;
    let low = (rates.fold(f64::INFINITY, f64::min).min(high / 30.0) / 3.0).max(1.0);
    let title = format!(
        "Throughput: decisions per second over {} keys (at most {:.1} s per cell)",
        report.keys,
        report.duration.as_secs_f64()
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, text(22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(
            // Segmented ranges include their end: stop at the last bar, not at the gap after it.
            (0..(groups.len().max(1) as i32 * slots - 2).max(0)).into_segmented(),
            (low..high).log_scale(),
        )?;
    let group_name = |value: &SegmentValue<i32>| match value {
        SegmentValue::CenterOf(slot) if slot % slots == bars / 2 => usize::try_from(slot / slots)
            .ok()
            .and_then(|g| groups.get(g))
            .map(|(store, c)| format!("{} ×{c}", short(*store)))
            .unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("store × concurrent clients")
        .y_desc("decisions per second (log scale)")
        .axis_desc_style(text(16))
        .label_style(text(13))
        .x_labels(groups.len() * slots as usize + 1)
        .x_label_formatter(&group_name)
        .y_label_formatter(&|y| si(*y))
        .draw()?;

    for (k, algorithm) in algorithms.iter().enumerate() {
        let colour = SERIES[k % SERIES.len()];
        let bars = report
            .cells
            .iter()
            .filter(|cell| cell.algorithm == *algorithm)
            .filter_map(|cell| {
                let g = groups.iter().position(|&g| g == (cell.store, cell.concurrency))?;
                let slot = g as i32 * slots + k as i32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(slot), low),
                        (SegmentValue::Exact(slot + 1), cell.per_second().max(low)),
                    ],
                    colour.filled(),
                );
                bar.set_margin(0, 0, 1, 1);
                Some(bar)
            });
        chart
            .draw_series(bars)?
            .label(*algorithm)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(text(13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn short(store: StoreKind) -> &'static str {
    match store {
        StoreKind::Memory => "memory",
        StoreKind::Redis => "redis",
        StoreKind::RedisCluster => "cluster",
    }
}

/// `1.5M`, `20k`, `300`.
fn si(value: f64) -> String {
    if value >= 1e6 {
        format!("{}M", trim(value / 1e6))
    } else if value >= 1e3 {
        format!("{}k", trim(value / 1e3))
    } else {
        trim(value)
    }
}

fn trim(value: f64) -> String {
    let text = format!("{value:.1}");
    text.strip_suffix(".0").map(str::to_string).unwrap_or(text)
}
