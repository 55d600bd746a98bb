//! Tests of `plot`.

use super::*;
use residency_testkit::listing;

fn line(label: &str, points: &[(f64, f64)]) -> Line {
    Line {
        label: label.into(),
        points: points.to_vec(),
    }
}

fn miss_ratio() -> Vec<Line> {
    vec![
        line("lru (global)", &[(0.5, 0.8), (1.0, 0.6), (2.0, 0.3)]),
        line("lfu (dynamic)", &[(0.5, 0.7), (1.0, 0.5), (2.0, 0.2)]),
    ]
}

fn capacities() -> Vec<Line> {
    vec![
        line("0.50 GiB", &[(0.0, 100.0), (1.0, 300.0), (2.0, 112.0)]),
        line("1.00 GiB", &[(0.0, 200.0), (1.0, 600.0), (2.0, 224.0)]),
    ]
}

#[test]
fn format_from_extension() {
    assert_eq!(
        PlotFormat::from_path(Path::new("a/b.svg")).unwrap(),
        PlotFormat::Svg
    );
    assert_eq!(
        PlotFormat::from_path(Path::new("b.PNG")).unwrap(),
        PlotFormat::Png
    );
    let err = PlotFormat::from_path(Path::new("b.pdf")).unwrap_err();
    assert!(err.to_string().contains(".svg or .png"), "{err}");
}

#[test]
fn legend_lines_wrap_at_spaces() {
    assert_eq!(wrap("one two three", 7), ["one two", "three"]);
    assert_eq!(wrap("short", 32), ["short"]);
    assert_eq!(wrap("a b\nc d", 32), ["a b", "c d"]);
}

#[test]
fn ranges_span_the_points() {
    let panel = |lines, y_range| Panel {
        title: "t".into(),
        x_desc: "x".into(),
        y_desc: "y".into(),
        lines,
        y_range,
        stacked: false,
    };
    // Default y: 0 to 5 % above the top; x from the lowest to highest.
    let (x, y) = ranges(&panel(capacities(), None)).unwrap();
    assert_eq!(x, 0.0..2.0);
    assert_eq!(y.start, 0.0);
    assert!((y.end - 630.0).abs() < 1e-9, "{y:?}");
    // A fixed range is kept; a single x still gets a 1-wide axis;
    // non-finite points are left out.
    let one = vec![line("a", &[(3.0, 0.5), (f64::NAN, 9.0)])];
    assert_eq!(
        ranges(&panel(one, Some(0.0..1.0))),
        Some((3.0..4.0, 0.0..1.0))
    );
    // All zero: the y axis still has a height.
    let zero = vec![line("a", &[(0.0, 0.0), (1.0, 0.0)])];
    assert_eq!(ranges(&panel(zero, None)).unwrap().1, 0.0..1.0);
    // Nothing to draw.
    assert_eq!(ranges(&panel(vec![line("a", &[])], None)), None);
    assert_eq!(ranges(&panel(Vec::new(), None)), None);
}

#[test]
fn simulation_plot_writes_svg_with_both_panels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.svg");
    simulation_plot(&path, "simulate: trace.bin", miss_ratio(), capacities()).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.contains("<svg"), "not an SVG");
    assert!(
        svg.contains(&format!("height=\"{}\"", 2 * HEIGHT)),
        "height"
    );
    // Panel titles head their legends, wrapped like the line labels.
    let titles = [
        "miss ratio by budget",
        "per-layer cache of the dynamic allocation",
    ]
    .into_iter()
    .flat_map(|t| wrap(t, LEGEND_CHARS));
    let others = [
        "simulate: trace.bin",
        "cache budget (GiB)",
        "cache (MiB)",
        "lru (global)",
        "1.00 GiB",
    ];
    // Each text is the whole content of one text element.
    for text in titles.chain(others.map(String::from)) {
        assert!(
            svg.lines().any(|l| l.trim() == text),
            "the SVG lacks `{text}`"
        );
    }
    assert_eq!(listing(dir.path()), ["sim.svg"]);
}

#[test]
fn simulation_plot_without_capacities_has_one_panel() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.svg");
    simulation_plot(&path, "simulate", miss_ratio(), Vec::new()).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.contains("miss ratio by budget"));
    assert!(!svg.contains("dynamic allocation"));
    assert!(svg.contains(&format!("height=\"{HEIGHT}\"")), "height");
}

#[test]
fn simulation_plot_writes_png() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.png");
    simulation_plot(&path, "simulate", miss_ratio(), capacities()).unwrap();
    let png = std::fs::read(&path).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {:?}",
        &png[..8.min(png.len())]
    );
    assert_eq!(listing(dir.path()), ["sim.png"]);
}

#[test]
fn bad_extension_fails_on_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.pdf");
    let err = simulation_plot(&path, "simulate", miss_ratio(), capacities()).unwrap_err();
    let message = format!("{err:#}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("sim.pdf"), "{message}");
    assert!(message.contains(".svg or .png"), "{message}");
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn nothing_to_plot_fails_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.svg");
    let err = simulation_plot(&path, "simulate", Vec::new(), Vec::new()).unwrap_err();
    let message = format!("{err:#}");
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("miss ratio by budget"), "{message}");
    assert!(listing(dir.path()).is_empty());
}

#[test]
fn stacked_ranges_reach_the_highest_stack() {
    // Two series at x = 0 and 1: stacks of 1 + 2 = 3 and 4 + 1 = 5, so y
    // runs to 5 x 1.05; bars are a unit wide around their x.
    let line = |points: Vec<(f64, f64)>| Line {
        label: "l".into(),
        points,
    };
    let panel = Panel {
        title: "t".into(),
        x_desc: "x".into(),
        y_desc: "y".into(),
        lines: vec![
            line(vec![(0.0, 1.0), (1.0, 4.0)]),
            line(vec![(0.0, 2.0), (1.0, 1.0)]),
        ],
        y_range: None,
        stacked: true,
    };
    let (x, y) = ranges(&panel).unwrap();
    assert_eq!(x, -0.5..1.5);
    assert!((y.end - 5.25).abs() < 1e-12, "{y:?}");
}
