//! PNG charts of the scenarios, drawn with plotters' bitmap backend.
//!
//! Text is rendered by plotters' `ab_glyph` renderer with DejaVu Sans from the `dejavu` crate
//! (freely licensed, shipped as bytes), registered once under `FONT`, so charts need no system
//! font libraries and look the same on every machine.
//!
//! - `lanes`: the bot, one lane per algorithm, admitted and denied requests over time.
//! - `bars`: the boundary, admitted per burst and in any 60 s, with the limit as a line.
//! - `groups`: throughput, decisions per second per algorithm, grouped by store and
//!   concurrency.
//! - `panels`: the comparison, one panel per column group of its table.

mod bars;
mod groups;
mod lanes;
mod panels;

use std::error::Error;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{ChartArgs, ScenarioError};

pub use bars::boundary;
pub use groups::throughput;
pub use lanes::bot;
pub use panels::compare;

/// The font family name the charts use.
pub(crate) const FONT: &str = "tollgate-dejavu-sans";

/// Colour of admitted requests.
pub(crate) const ADMITTED: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
/// Colour of denied requests.
pub(crate) const DENIED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// One colour per algorithm, in lineup order.
pub(crate) const SERIES: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

type Root<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn Error>>;

/// Registers DejaVu Sans once per process.
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded DejaVu Sans font could not be loaded".to_string())
        })
        .clone()
}

/// Draws a chart with `draw` into the PNG that `args` names, if any. Returns whether a chart was
/// written.
pub(crate) fn render(args: &ChartArgs, draw: impl FnOnce(&Root<'_>) -> Drawn) -> Result<bool, ScenarioError> {
    let Some(path) = &args.chart else {
        return Ok(false);
    };
    args.validate()?;
    let failed = |why: String| ScenarioError::Chart {
        path: path.clone(),
        why,
    };
    register_font().map_err(failed)?;
    let root = BitMapBackend::new(path, (args.chart_width, args.chart_height)).into_drawing_area();
    let drawn = root
        .fill(&WHITE)
        .map_err(Box::<dyn Error>::from)
        .and_then(|()| draw(&root))
        .and_then(|()| root.present().map_err(Box::<dyn Error>::from));
    drawn.map_err(|err| failed(err.to_string()))?;
    Ok(true)
}

/// The text style of titles, labels and legends at `size` pixels.
pub(crate) fn text(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}
