//! The bot chart, in two panels. Above, one lane per algorithm (the first at the top), every
//! request a mark at its time, a green dot when admitted and a red cross when denied, with the
//! minute boundaries where epoch-aligned windows start. Below, each algorithm's admitted requests
//! so far against two lines: the rate alone (20 a minute) and the burst plus the rate (20 + 20 a
//! minute), the most any of them may admit; the curves that start on the upper line bend to the
//! rate's slope once their burst is spent.

use plotters::prelude::*;

use super::{ADMITTED, DENIED, Drawn, Root, SERIES, text};
use crate::bot::BotReport;
use crate::{ChartArgs, ScenarioError};

/// Draws the bot report into the PNG `args` names (nothing without `--chart`); returns whether
/// a chart was written.
///
/// ```
/// use tollgate_scenarios::ChartArgs;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("bot.png");
/// let report = tollgate_scenarios::bot::run()?;
/// let args = ChartArgs { chart: Some(path.clone()), ..ChartArgs::default() };
/// assert!(tollgate_scenarios::chart::bot(&report, &args)?);
/// assert!(path.exists());
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn bot(report: &BotReport, args: &ChartArgs) -> Result<bool, ScenarioError> {
    super::render(args, |root| draw(report, root))
}

fn draw(report: &BotReport, root: &Root<'_>) -> Drawn {
    let height = root.dim_in_pixel().1;
    let (top, bottom) = root.split_vertically(height * 11 / 20);
    draw_lanes(report, &top)?;
    draw_totals(report, &bottom)
}

fn draw_lanes(report: &BotReport, root: &Root<'_>) -> Drawn {
    let lanes = report.lanes.len() as i32;
    let last_s = report
        .lanes
        .iter()
        .flat_map(|lane| lane.requests.last())
        .map(|r| r.at.as_secs_f64())
        .fold(0.0, f64::max);
    let x_end = last_s + 4.0;
    let title = format!(
        "Bot: one request every {} s against {} per minute",
        report.every.as_secs_f64(),
        report.limit
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, text(24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(130)
        // One lane per algorithm, and an empty one on top for the legend.
        .build_cartesian_2d(-3.0..x_end, (0..lanes).into_segmented())?;
    let names: Vec<&str> = report.lanes.iter().map(|lane| lane.label).collect();
    let lane_name = |value: &SegmentValue<i32>| match value {
        SegmentValue::CenterOf(y) => usize::try_from(lanes - 1 - y)
            .ok()
            .and_then(|i| names.get(i))
            .map(|name| name.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_max_light_lines(1)
        .x_desc("time since the first request (s)")
        .y_desc("algorithm")
        .axis_desc_style(text(16))
        .label_style(text(14))
        .y_labels(lanes as usize + 1)
        .y_label_formatter(&lane_name)
        .x_labels(14)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;

    // Where epoch-aligned one-minute windows start.
    let marker = RGBColor(0x1f, 0x77, 0xb4).stroke_width(2);
    let minutes = (last_s / 60.0).floor() as u32;
    let boundaries = (1..=minutes).map(|m| {
        let x = f64::from(m) * 60.0;
        PathElement::new(vec![(x, SegmentValue::Exact(0)), (x, SegmentValue::Last)], marker)
    });
    chart
        .draw_series(boundaries)?
        .label("window start (epoch-aligned)")
        .legend(move |(x, y)| PathElement::new(vec![(x + 8, y - 7), (x + 8, y + 7)], marker));

    // Marks shrink as requests crowd: ten minutes of one request every 2 s is 300 per lane.
    let per_lane = report.lanes.first().map_or(0, |lane| lane.requests.len());
    let size = if per_lane > 100 { 2 } else { 5 };
    let lane_of = |i: usize| SegmentValue::CenterOf(lanes - 1 - i as i32);
    let marks = |allowed: bool| {
        report.lanes.iter().enumerate().flat_map(move |(i, lane)| {
            lane.requests
                .iter()
                .filter(move |r| r.allowed == allowed)
                .map(move |r| (r.at.as_secs_f64(), lane_of(i)))
        })
    };
    chart
        .draw_series(marks(true).map(|p| Circle::new(p, size, ADMITTED.filled())))?
        .label("admitted")
        .legend(|(x, y)| Circle::new((x + 8, y), 5, ADMITTED.filled()));
    chart
        .draw_series(marks(false).map(|p| Cross::new(p, size, DENIED.stroke_width(2))))?
        .label("denied (429)")
        .legend(|(x, y)| Cross::new((x + 8, y), 5, DENIED.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(text(14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Admitted so far, per algorithm, over time, with the rate and the burst plus the rate.
fn draw_totals(report: &BotReport, root: &Root<'_>) -> Drawn {
    let last_s = report
        .lanes
        .iter()
        .flat_map(|lane| lane.requests.last())
        .map(|r| r.at.as_secs_f64())
        .fold(0.0, f64::max);
    let x_end = last_s + 4.0;
    let limit = report.limit as f64;
    let per_s = limit / 60.0;
    let most = report.lanes.iter().map(|lane| lane.admitted()).max().unwrap_or(0) as f64;
    let y_end = (limit + per_s * x_end).max(most) * 1.05;
    let mut chart = ChartBuilder::on(root)
        .caption("Admitted so far", text(20))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(130)
        .build_cartesian_2d(-3.0..x_end, 0.0..y_end)?;
    chart
        .configure_mesh()
        .x_max_light_lines(1)
        .y_max_light_lines(1)
        .x_desc("time since the first request (s)")
        .y_desc("requests admitted")
        .axis_desc_style(text(16))
        .label_style(text(14))
        .x_labels(14)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;

    let guide = |color: RGBColor| ShapeStyle::from(&color).stroke_width(2);
    let grey = RGBColor(0x80, 0x80, 0x80);
    let black = RGBColor(0, 0, 0);
    // Dashed guide lines from `from` at slope `per_s`, as short path segments.
    let dashes = |from: f64, style: ShapeStyle| {
        let step = x_end / 60.0;
        (0..60).filter(|i| i % 2 == 0).map(move |i| {
            let (a, b) = (f64::from(i) * step, f64::from(i + 1) * step);
            PathElement::new(vec![(a, from + per_s * a), (b, from + per_s * b)], style)
        })
    };
    chart
        .draw_series(dashes(limit, guide(black)))?
        .label(format!(
            "burst + rate: {} + {} a minute",
            report.limit, report.limit
        ))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], guide(black)));
    chart
        .draw_series(dashes(0.0, guide(grey)))?
        .label(format!("rate: {} a minute", report.limit))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], guide(grey)));

    for (i, lane) in report.lanes.iter().enumerate() {
        let color = SERIES[i % SERIES.len()];
        let mut admitted = 0.0;
        let points: Vec<(f64, f64)> = lane
            .requests
            .iter()
            .map(|r| {
                admitted += f64::from(u8::from(r.allowed));
                (r.at.as_secs_f64(), admitted)
            })
            .collect();
        chart
            .draw_series(std::iter::once(PathElement::new(points, color.stroke_width(2))))?
            .label(lane.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(text(13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
