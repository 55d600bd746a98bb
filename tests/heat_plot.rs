//! `residency heat IN --plot FILE` and `residency plan --plot FILE`, end to
//! end: an SVG with one line per series, a plan's stacked bars, a PNG of
//! the chosen size, and bad targets that fail on one line and leave no file
//! behind.

use residency_testkit::listing;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Layers and experts of the test heat.
const LAYERS: usize = 5;
const EXPERTS: usize = 16;
/// The picture size `src/plot.rs` draws.
const WIDTH: u32 = 1200;
const HEIGHT: u32 = 700;
/// Lines drawn per layer: top-10 % share, 50 % and 90 % coverage, entropy.
const SERIES: usize = 4;

/// A long-form CSV heat whose layers grow more concentrated.
fn write_heat(dir: &Path) -> PathBuf {
    let mut text = String::from("# model=tiny-moe\n# tokens=1000\nlayer,expert,count\n");
    for layer in 0..LAYERS {
        for expert in 0..EXPERTS {
            let count = 1000 / (1 + expert * layer) + expert;
            text.push_str(&format!("{layer},{expert},{count}\n"));
        }
    }
    let path = dir.join("heat.csv");
    std::fs::write(&path, text).unwrap();
    path
}

fn residency(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_residency"))
        .args(args)
        .output()
        .expect("run residency")
}

fn heat_plot(heat: &Path, plot: &Path) -> Output {
    residency(&[
        "heat".as_ref(),
        heat.as_os_str(),
        "--plot".as_ref(),
        plot.as_os_str(),
    ])
}

/// Number of coordinate pairs in an SVG element's `points="x,y x,y "`.
fn point_count(element: &str) -> Option<usize> {
    let start = element.find("points=\"")? + "points=\"".len();
    let end = start + element[start..].find('"')?;
    Some(element[start..end].split_whitespace().count())
}

#[test]
fn svg_plot_has_one_line_per_series() {
    let dir = tempfile::tempdir().unwrap();
    let heat = write_heat(dir.path());
    let plot = dir.path().join("concentration.svg");
    let out = heat_plot(&heat, &plot);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The summary prints first, then the plot is written.
    let summary = stdout.find("top-10% share").expect("summary printed");
    let wrote = stdout.find("wrote ").expect("plot reported");
    assert!(summary < wrote, "{stdout}");

    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.contains("<svg"), "not an SVG");
    assert!(svg.contains(&format!("width=\"{WIDTH}\"")), "width");
    // A series is one polyline (or path) through every layer; axes, ticks
    // and legend swatches have two points.
    let series_lines: Vec<&str> = svg
        .split('<')
        .filter(|e| e.starts_with("polyline") || e.starts_with("path"))
        .filter(|e| point_count(e) == Some(LAYERS))
        .collect();
    assert_eq!(series_lines.len(), SERIES, "{series_lines:#?}");
    let mut strokes: Vec<&str> = series_lines
        .iter()
        .filter_map(|e| e.split("stroke=\"").nth(1)?.split('"').next())
        .collect();
    strokes.sort();
    strokes.dedup();
    assert_eq!(strokes.len(), SERIES, "each series has its own colour");
    // Title names the input and the model; axes and legend are labelled.
    for text in [
        "heat.csv",
        "tiny-moe",
        "MoE layer",
        "fraction",
        "top 10 %",
        "50 %",
        "90 %",
        "entropy",
    ] {
        assert!(svg.contains(text), "the SVG lacks `{text}`");
    }
}

#[test]
fn png_plot_has_the_chosen_size() {
    let dir = tempfile::tempdir().unwrap();
    let heat = write_heat(dir.path());
    let plot = dir.path().join("concentration.png");
    let out = heat_plot(&heat, &plot);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&plot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {:?}",
        &png[..8.min(png.len())]
    );
    // IHDR is the first chunk: width and height, big-endian, at bytes 16..24.
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (WIDTH, HEIGHT));
    assert_eq!(listing(dir.path()), ["concentration.png", "heat.csv"]);
}

/// A failed run: non-zero exit, one line on stderr naming the file, no file.
fn assert_fails_cleanly(out: &Output, file: &str, fix: &str) {
    assert!(!out.status.success(), "should fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(lines[0].contains(file), "names the file: {stderr}");
    assert!(lines[0].contains(fix), "says the fix: {stderr}");
}

#[test]
fn unknown_extension_fails_on_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let heat = write_heat(dir.path());
    let plot = dir.path().join("concentration.pdf");
    let out = heat_plot(&heat, &plot);
    assert_fails_cleanly(&out, "concentration.pdf", ".svg or .png");
    assert!(!plot.exists());
    assert_eq!(listing(dir.path()), ["heat.csv"]);
    // Checked before the work: nothing was printed or converted.
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn unwritable_target_fails_on_one_line_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let heat = write_heat(dir.path());
    for name in ["concentration.png", "concentration.svg"] {
        let plot = dir.path().join("no-such-dir").join(name);
        let out = heat_plot(&heat, &plot);
        assert_fails_cleanly(&out, name, "writable directory");
        assert!(!plot.exists());
    }
    assert_eq!(listing(dir.path()), ["heat.csv"]);
}

/// `residency plan --plot`: three stacked-bar panels, one bar a MoE layer
/// in the first two, one bar segment per place that holds experts there.
#[test]
fn plan_plot_draws_a_bar_per_layer_and_place() {
    let dir = tempfile::tempdir().unwrap();
    let plan_plot = |plot: &Path| {
        residency(&[
            "plan".as_ref(),
            "--time-limit".as_ref(),
            "2".as_ref(),
            "--plot".as_ref(),
            plot.as_os_str(),
        ])
    };
    let svg_path = dir.path().join("plan.svg");
    let out = plan_plot(&svg_path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    // Legend headings, as wrapped at 32 characters.
    for text in [
        "routed experts per MoE layer, by",
        "use-rate mass per MoE layer, by",
        "bytes per place: 0 = gpu:0, 1 =",
        "gpu:1, 2 = ram:0, 3 = disk:0",
    ] {
        assert!(svg.contains(text), "the SVG lacks `{text}`");
    }
    // One rectangle a bar segment: the background; in each of the first
    // two panels a segment per MoE layer (26) for each of the three places
    // holding experts in the default plan (gpu:0, gpu:1, ram:0; README);
    // in the third one per place (4) for experts and for trunk, and one
    // per place with a capacity (3) for the free bytes.
    let rects = svg.matches("<rect").count();
    assert_eq!(rects, 1 + 2 * 3 * 26 + 4 + 4 + 3, "{rects}");
    let png_path = dir.path().join("plan.png");
    let out = plan_plot(&png_path);
    assert!(out.status.success());
    let png = std::fs::read(&png_path).unwrap();
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!(height, 3 * HEIGHT, "three panels");
}
