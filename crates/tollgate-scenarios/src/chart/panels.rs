//! The comparison chart: six panels, one per column group of the table, each with a bar (or a
//! group of bars) per algorithm: speed, latency (log scale: the max can be a hundred times the
//! median), accuracy (with the limit drawn at 1.00), store CPU per 1 000 decisions, memory per
//! key, and the sliding window counter's worst cases against its bound.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Drawn, Root, SERIES, text};
use crate::compare::CompareReport;
use crate::compare::traffic::Shape;
use crate::throughput::StoreKind;
use crate::{ChartArgs, ScenarioError};

/// Draws the comparison into the PNG `args` names (nothing without a path); returns whether a
/// chart was written.
///
/// ```
/// use std::time::Duration;
/// use tollgate_scenarios::{ChartArgs, CompareArgs};
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("compare.png");
/// let run = CompareArgs { limit: 10, duration: Duration::from_millis(10), keys: 100, seeds: 2, ..CompareArgs::default() };
/// let report = tollgate_scenarios::compare::run(&run)?;
/// let args = ChartArgs { chart: Some(path.clone()), chart_width: 1500, chart_height: 1000 };
/// assert!(tollgate_scenarios::chart::compare(&report, &args)?);
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn compare(report: &CompareReport, args: &ChartArgs) -> Result<bool, ScenarioError> {
    super::render(args, |root| draw(report, root))
}

/// One panel's bars: a label and one value per algorithm.
type Series<'a> = (&'a str, Vec<f64>);

fn draw(report: &CompareReport, root: &Root<'_>) -> Drawn {
    let store = match report.store {
        StoreKind::Memory => "the memory store",
        StoreKind::Redis => "Redis",
        StoreKind::RedisCluster => "a Redis Cluster",
    };
    let title = format!(
        "Every algorithm on {store}: {} per {}",
        report.limit,
        crate::lineup::words(report.window)
    );
    let root = root.titled(&title, text(24))?;
    let panels = root.split_evenly((2, 3));
    let names: Vec<&str> = report.rows.iter().map(|row| row.label).collect();
    let of = |f: &dyn Fn(&crate::compare::Row) -> f64| report.rows.iter().map(f).collect::<Vec<f64>>();

    let speed = of(&|row| row.per_second());
    bars(
        &panels[0],
        "decisions per second",
        "decisions/s",
        &names,
        &[("decisions/s", speed)],
        0.0..top(&[&of(&|r| r.per_second())]),
        None,
    )?;

    let us = |d: std::time::Duration| (d.as_nanos() as f64 / 1e3).max(0.01);
    let latency: Vec<Series<'_>> = vec![
        ("mean", of(&|r| us(r.mean))),
        ("p50", of(&|r| us(r.p50))),
        ("p99", of(&|r| us(r.p99))),
        ("max", of(&|r| us(r.max))),
    ];
    let all: Vec<&Vec<f64>> = latency.iter().map(|(_, v)| v).collect();
    let low = all
        .iter()
        .flat_map(|v| v.iter())
        .copied()
        .fold(f64::INFINITY, f64::min)
        / 2.0;
    let high = top(&all) * 2.0;
    bars(
        &panels[1],
        "latency of one check (log scale)",
        "µs",
        &names,
        &latency,
        (low.max(0.001)..high).log_scale(),
        None,
    )?;

    let limit = report.limit as f64;
    let accuracy: Vec<Series<'_>> = Shape::ALL
        .iter()
        .enumerate()
        .map(|(k, shape)| (shape.label(), of(&|r| r.most_admitted[k] as f64 / limit)))
        .collect();
    bars(
        &panels[2],
        "most admitted in one window ÷ limit",
        "× limit",
        &names,
        &accuracy,
        0.0..3.0,
        Some(1.0),
    )?;

    let cpu = of(&|r| r.cpu_per_1000.map_or(0.0, |d| d.as_secs_f64() * 1e3));
    let cpu_title = match report.store {
        StoreKind::Memory => "process CPU per 1 000 decisions",
        _ => "Redis CPU per 1 000 decisions",
    };
    bars(
        &panels[3],
        cpu_title,
        "ms",
        &names,
        &[("CPU", cpu.clone())],
        0.0..top(&[&cpu]),
        None,
    )?;

    let memory = of(&|r| r.bytes_per_key.unwrap_or(0.0));
    bars(
        &panels[4],
        "bytes per key, full budget spent",
        "bytes",
        &names,
        &[("bytes", memory.clone())],
        0.0..top(&[&memory]),
        None,
    )?;

    let sw = &report.sliding_window;
    let worst_names = ["limit", "worst seed", "attack", "bound"];
    let worst = vec![(
        "admitted",
        vec![
            limit,
            sw.most_over_seeds as f64,
            sw.attack as f64,
            sw.bound as f64,
        ],
    )];
    let worst_top = limit.max(sw.bound as f64) * 1.25;
    bars(
        &panels[5],
        "sliding window: most in one window",
        "requests",
        &worst_names,
        &worst,
        0.0..worst_top,
        None,
    )?;
    Ok(())
}

/// A little above the largest value, so the value labels fit.
fn top(values: &[&Vec<f64>]) -> f64 {
    let max = values.iter().flat_map(|v| v.iter()).copied().fold(0.0, f64::max);
    if max > 0.0 { max * 1.25 } else { 1.0 }
}

/// Bars per group (`groups`), one per series; a single series takes each group's own colour.
/// `reference` draws a horizontal line (the limit).
fn bars<Y>(
    area: &Root<'_>,
    title: &str,
    y_desc: &str,
    groups: &[&str],
    series: &[Series<'_>],
    y: Y,
    reference: Option<f64>,
) -> Drawn
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let per_group = series.len().max(1) as i32;
    let slots = per_group + 1;
    let count = groups.len().max(1) as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(title, text(17))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        // Segmented ranges include their end: stop at the last bar, not at the gap after it.
        .build_cartesian_2d((0..count * slots - 2).into_segmented(), y)?;
    let group_name = |value: &SegmentValue<i32>| match value {
        SegmentValue::CenterOf(slot) if slot % slots == (per_group - 1) / 2 => usize::try_from(slot / slots)
            .ok()
            .and_then(|g| groups.get(g))
            .map(|name| name.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .axis_desc_style(text(13))
        .label_style(text(11))
        .x_labels((count * slots) as usize + 1)
        .x_label_formatter(&group_name)
        .y_label_formatter(&|v| short(*v))
        .draw()?;
    let floor = chart.y_range().start;
    for (k, (label, values)) in series.iter().enumerate() {
        let single = series.len() == 1;
        let bars = values.iter().enumerate().map(|(g, &value)| {
            let slot = g as i32 * slots + k as i32;
            let colour = if single {
                SERIES[g % SERIES.len()]
            } else {
                SERIES[k % SERIES.len()]
            };
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(slot), floor),
                    (SegmentValue::Exact(slot + 1), value.max(floor)),
                ],
                colour.filled(),
            );
            bar.set_margin(0, 0, 1, 1);
            bar
        });
        let drawn = chart.draw_series(bars)?;
        if !single {
            let colour = SERIES[k % SERIES.len()];
            drawn
                .label(*label)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        }
        if single || per_group <= 3 {
            let on_top = text(10).pos(Pos::new(HPos::Center, VPos::Bottom));
            let values = values.iter().enumerate().map(move |(g, &value)| {
                let slot = g as i32 * slots + k as i32;
                Text::new(
                    short(value),
                    (SegmentValue::CenterOf(slot), value.max(floor)),
                    on_top.clone(),
                )
            });
            chart.draw_series(values)?;
        }
    }
    if let Some(at) = reference {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(SegmentValue::Exact(0), at), (SegmentValue::Last, at)],
                BLACK.stroke_width(2),
            )))?
            .label("the limit")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], BLACK.stroke_width(2)));
    }
    if series.len() > 1 || reference.is_some() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(text(11))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// `1.5M`, `20k`, `3.2`, `0.41`.
fn short(value: f64) -> String {
    let trim = |text: String| text.strip_suffix(".0").map(str::to_string).unwrap_or(text);
    if value >= 1e6 {
        format!("{}M", trim(format!("{:.1}", value / 1e6)))
    } else if value >= 1e4 {
        format!("{}k", trim(format!("{:.0}", value / 1e3)))
    } else if value >= 1e3 {
        format!("{}k", trim(format!("{:.1}", value / 1e3)))
    } else if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}
