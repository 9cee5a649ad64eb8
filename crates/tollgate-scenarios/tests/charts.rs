//! Charts are real PNG files of the requested size with something drawn on them.

use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use tollgate_scenarios::{BenchArgs, BotArgs, BoundaryArgs, ChartArgs, Scenario, ThroughputArgs, chart};

struct Decoded {
    width: u32,
    height: u32,
    distinct_colours: usize,
    non_white: f64,
}

fn decode(path: &Path) -> Decoded {
    let decoder = png::Decoder::new(File::open(path).expect("chart file"));
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("PNG pixels");
    let channels = frame.color_type.samples();
    let pixels = &pixels[..frame.buffer_size()];
    let mut colours = HashSet::new();
    let mut non_white = 0usize;
    for pixel in pixels.chunks(channels) {
        colours.insert(pixel.to_vec());
        if pixel.iter().take(3).any(|&c| c < 250) {
            non_white += 1;
        }
    }
    Decoded {
        width: frame.width,
        height: frame.height,
        distinct_colours: colours.len(),
        non_white: non_white as f64 / (pixels.len() / channels) as f64,
    }
}

fn chart_at(path: &Path, width: u32, height: u32) -> ChartArgs {
    ChartArgs {
        chart: Some(path.to_path_buf()),
        chart_width: width,
        chart_height: height,
    }
}

fn assert_drawn(path: &Path, width: u32, height: u32) {
    let png = decode(path);
    assert_eq!((png.width, png.height), (width, height));
    // Text, axes and coloured marks: many colours, and a real share of the picture inked.
    assert!(png.distinct_colours > 20, "only {} colours", png.distinct_colours);
    assert!(
        png.non_white > 0.03,
        "only {:.3} of the pixels drawn",
        png.non_white
    );
}

#[test]
fn bot_chart_is_a_png_of_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bot.png");
    let args = BenchArgs {
        scenario: Scenario::Bot(BotArgs {
            chart: chart_at(&path, 800, 500),
        }),
    };
    let output = tollgate_scenarios::run(&args).unwrap();
    assert_eq!(output.chart.as_deref(), Some(path.as_path()));
    assert_drawn(&path, 800, 500);
}

#[test]
fn boundary_chart_is_a_png_of_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("boundary.png");
    let args = BenchArgs {
        scenario: Scenario::Boundary(BoundaryArgs {
            limit: 50,
            chart: chart_at(&path, 1000, 600),
        }),
    };
    tollgate_scenarios::run(&args).unwrap();
    assert_drawn(&path, 1000, 600);
}

#[test]
fn throughput_chart_is_a_png_of_the_requested_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("throughput.png");
    let run = ThroughputArgs {
        concurrency: vec![1, 2],
        duration: Duration::from_millis(50),
        max_requests: 2_000,
        ..ThroughputArgs::default()
    };
    let report = tollgate_scenarios::throughput::run(&run).unwrap();
    assert!(chart::throughput(&report, &chart_at(&path, 640, 400)).unwrap());
    assert_drawn(&path, 640, 400);
}

#[test]
fn no_chart_is_written_without_a_path() {
    let report = tollgate_scenarios::bot::run().unwrap();
    assert!(!chart::bot(&report, &ChartArgs::default()).unwrap());
}
