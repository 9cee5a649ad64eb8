//! The boundary chart: per algorithm, three bars (admitted at 0:59.9, admitted at 1:00.0, most
//! admitted in any 60 s) with their values on top, and the limit drawn as a line across.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Drawn, Root, SERIES, text};
use crate::boundary::{BoundaryReport, Row};
use crate::{ChartArgs, ScenarioError};

/// Bars per algorithm, and one empty slot between algorithms.
const BARS: i32 = 3;
const SLOTS: i32 = BARS + 1;

/// Reads one bar's value from a row.
type Measure = fn(&Row) -> u64;

/// Draws the boundary report into the PNG `args` names (nothing without `--chart`); returns
/// whether a chart was written.
///
/// ```
/// use tollgate_scenarios::ChartArgs;
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("boundary.png");
/// let report = tollgate_scenarios::boundary::run(10)?;
/// let args = ChartArgs { chart: Some(path.clone()), ..ChartArgs::default() };
/// assert!(tollgate_scenarios::chart::boundary(&report, &args)?);
/// # Ok::<(), tollgate_scenarios::ScenarioError>(())
/// ```
pub fn boundary(report: &BoundaryReport, args: &ChartArgs) -> Result<bool, ScenarioError> {
    super::render(args, |root| draw(report, root))
}

fn draw(report: &BoundaryReport, root: &Root<'_>) -> Drawn {
    let groups = report.rows.len() as i32;
    let top = report
        .rows
        .iter()
        .map(|row| row.max_in_span)
        .chain([report.limit])
        .max()
        .unwrap_or(1);
    let y_end = (top as f64 * 1.25).ceil().max(1.0) as u64;
    let title = format!(
        "Boundary: {l} at 0:59.9 and {l} at 1:00.0, against {l} per minute",
        l = report.limit
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, text(24))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(70)
        // Segmented ranges include their end: stop at the last bar, not at the gap after it.
        .build_cartesian_2d((0..groups * SLOTS - 2).into_segmented(), 0..y_end)?;
    let names: Vec<&str> = report.rows.iter().map(|row| row.label).collect();
    let group_name = |value: &SegmentValue<i32>| match value {
        SegmentValue::CenterOf(slot) if slot % SLOTS == BARS / 2 => usize::try_from(slot / SLOTS)
            .ok()
            .and_then(|i| names.get(i))
            .map(|name| name.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_max_light_lines(1)
        .x_desc("algorithm")
        .y_desc("requests admitted")
        .axis_desc_style(text(16))
        .label_style(text(14))
        .x_labels((groups * SLOTS) as usize + 1)
        .x_label_formatter(&group_name)
        .draw()?;

    let series: [(&str, Measure); BARS as usize] = [
        ("admitted at 0:59.9", |row| row.first_burst),
        ("admitted at 1:00.0", |row| row.second_burst),
        ("most admitted in any 60 s", |row| row.max_in_span),
    ];
    for (k, (label, value)) in series.into_iter().enumerate() {
        let colour = SERIES[k];
        let bars = report.rows.iter().enumerate().map(move |(g, row)| {
            let slot = g as i32 * SLOTS + k as i32;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(slot), 0),
                    (SegmentValue::Exact(slot + 1), value(row)),
                ],
                colour.filled(),
            );
            bar.set_margin(0, 0, 2, 2);
            bar
        });
        chart
            .draw_series(bars)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        let on_top = text(12).pos(Pos::new(HPos::Center, VPos::Bottom));
        let values = report.rows.iter().enumerate().map(move |(g, row)| {
            let slot = g as i32 * SLOTS + k as i32;
            Text::new(
                value(row).to_string(),
                (SegmentValue::CenterOf(slot), value(row)),
                on_top.clone(),
            )
        });
        chart.draw_series(values)?;
    }

    let limit_line = PathElement::new(
        vec![
            (SegmentValue::Exact(0), report.limit),
            (SegmentValue::Last, report.limit),
        ],
        BLACK.stroke_width(2),
    );
    chart
        .draw_series(std::iter::once(limit_line))?
        .label(format!("limit: {} per 60 s", report.limit))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(text(14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
