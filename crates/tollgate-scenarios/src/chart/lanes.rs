//! The bot chart: one lane per algorithm (the first at the top), every request a mark at its
//! time, a green dot when admitted and a red cross when denied, with the minute boundaries where
//! epoch-aligned windows start.

use plotters::prelude::*;

use super::{ADMITTED, DENIED, Drawn, Root, text};
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
        .draw_series(marks(true).map(|p| Circle::new(p, 5, ADMITTED.filled())))?
        .label("admitted")
        .legend(|(x, y)| Circle::new((x + 8, y), 5, ADMITTED.filled()));
    chart
        .draw_series(marks(false).map(|p| Cross::new(p, 5, DENIED.stroke_width(2))))?
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
