//! `residency heat IN --plot FILE`: the per-layer concentration that
//! `residency heat` prints, drawn as a line chart, SVG or PNG by the file's
//! extension. Plotting lives here, in the CLI crate, so the planner crate
//! stays free of it; the numbers come from
//! `residency_planner::heat::concentration`.
//!
//! Text is rendered with an embedded font, since machines without system
//! fonts (CI) must draw it too: Noto Sans Regular from the `ttf-noto-sans`
//! crate (crate MIT/Apache-2.0; the font itself is licensed under the Apache
//! License 2.0, as the crate's `assets/LICENSE-2.0.txt` says).
//!
//! The file appears whole or not at all: SVG is rendered to memory and
//! written atomically; PNG is encoded to a temporary file beside the target
//! and renamed over it.

use anyhow::{anyhow, bail, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use residency_planner::heat::LayerConcentration;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Size of the picture in pixels (PNG) or user units (SVG).
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 700;
/// Width of the legend panel on the right.
const LEGEND_WIDTH: u32 = 330;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    /// The format named by the file's extension (`.svg` or `.png`, any case).
    pub fn from_path(path: &Path) -> Result<PlotFormat> {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("svg") => Ok(PlotFormat::Svg),
            Some("png") => Ok(PlotFormat::Png),
            _ => bail!(
                "{}: cannot tell the plot format from the name; end the --plot file name in .svg or .png",
                path.display()
            ),
        }
    }
}

/// One line of the chart: its legend text, colour and value per layer.
struct Series {
    label: &'static str,
    color: RGBColor,
    value: fn(&LayerConcentration) -> f64,
}

fn fraction(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

const SERIES: [Series; 4] = [
    Series {
        label: "share of selections taken by the top 10 % of experts",
        color: RGBColor(31, 119, 180),
        value: |c| c.top10_share,
    },
    Series {
        label: "share of experts needed for 50 % of selections",
        color: RGBColor(255, 127, 14),
        value: |c| fraction(c.experts_for_50, c.experts),
    },
    Series {
        label: "share of experts needed for 90 % of selections",
        color: RGBColor(44, 160, 44),
        value: |c| fraction(c.experts_for_90, c.experts),
    },
    Series {
        label: "entropy / max entropy\n(1 = uniform routing)",
        color: RGBColor(214, 39, 40),
        value: |c| {
            if c.max_entropy_bits > 0.0 {
                c.entropy_bits / c.max_entropy_bits
            } else {
                0.0
            }
        },
    },
];

/// Registers the embedded font as plotters' `sans-serif` once.
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, ttf_noto_sans::REGULAR)
            .is_ok()
    });
    if !ok {
        bail!("the embedded Noto Sans font could not be loaded (a bug: the font bytes are compiled in)");
    }
    Ok(())
}

/// Draws the concentration of `rows` into `path` (format from its
/// extension); `title` names the input and the model.
pub fn concentration_plot(path: &Path, title: &str, rows: &[LayerConcentration]) -> Result<()> {
    let format = PlotFormat::from_path(path)?;
    if rows.is_empty() {
        bail!(
            "{}: the heat has no MoE layers, so there is nothing to plot; give heat with at least one layer",
            path.display()
        );
    }
    register_font()?;
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
                draw(&root, title, rows).map_err(|e| render_failed(path, e))?;
                root.present().map_err(|e| render_failed(path, e))?;
            }
            residency_planner::error::write_atomic(path, svg.as_bytes()).map_err(|e| {
                let detail = std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_else(|| e.to_string());
                write_failed(path, detail)
            })
        }
        PlotFormat::Png => {
            let tmp = temp_path(path);
            let result = (|| {
                // Creating the file first turns a bad directory into a plain
                // I/O error before any drawing is done.
                std::fs::File::create(&tmp).map_err(|e| write_failed(path, e))?;
                let root = BitMapBackend::new(&tmp, (WIDTH, HEIGHT)).into_drawing_area();
                draw(&root, title, rows).map_err(|e| render_failed(path, e))?;
                root.present().map_err(|e| write_failed(path, e))?;
                drop(root);
                std::fs::rename(&tmp, path).map_err(|e| write_failed(path, e))
            })();
            if result.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            result
        }
    }
}

/// A temporary name beside `path`, keeping the extension the encoder reads.
fn temp_path(path: &Path) -> PathBuf {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stem = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plot".into());
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{stem}.tmp{}.{ext}", std::process::id()))
}

fn write_failed(path: &Path, detail: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "{}: cannot write the plot ({detail}); give --plot a path in an existing, writable directory",
        path.display()
    )
}

fn render_failed(path: &Path, detail: impl std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "{}: cannot draw the plot ({detail}); this is a bug, please report it with the heat file",
        path.display()
    )
}

type DrawResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    rows: &[LayerConcentration],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 26).into_font().color(&BLACK))?;
    let (chart_area, legend_area) = root.split_horizontally(WIDTH - LEGEND_WIDTH);

    let last = rows.iter().map(|c| c.layer).max().unwrap_or(0) as i32;
    let first = rows.iter().map(|c| c.layer).min().unwrap_or(0) as i32;
    let x_range = first..last.max(first + 1);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("MoE layer (ordinal, 0 = first MoE layer)")
        .y_desc("fraction (0 to 1)")
        .max_light_lines(1)
        .x_labels(rows.len().clamp(2, 16))
        .y_labels(11)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .draw()?;

    for series in &SERIES {
        let style = series.color.stroke_width(2);
        let points: Vec<(i32, f64)> = rows
            .iter()
            .map(|c| (c.layer as i32, (series.value)(c).clamp(0.0, 1.0)))
            .collect();
        chart.draw_series(LineSeries::new(points.iter().copied(), style))?;
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, 3, series.color.filled())),
        )?;
    }

    // The legend, in its own panel so it never hides a line.
    let text = ("sans-serif", 16).into_font().color(&BLACK);
    let mut y = 60;
    legend_area.draw(&Text::new("per MoE layer:", (10, y - 30), text.clone()))?;
    for series in &SERIES {
        legend_area.draw(&PathElement::new(
            vec![(10, y + 8), (40, y + 8)],
            series.color.stroke_width(3),
        ))?;
        let mut line_y = y;
        for line in wrap(series.label, 32) {
            legend_area.draw(&Text::new(line, (48, line_y), text.clone()))?;
            line_y += 20;
        }
        y = line_y + 16;
    }
    Ok(())
}

/// Splits `text` into lines at its newlines and then at spaces, each of at
/// most `width` characters (unless one word is longer).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for paragraph in text.split('\n') {
        let mut current: Option<String> = None;
        for word in paragraph.split(' ') {
            current = Some(match current {
                Some(mut line) if line.len() + 1 + word.len() <= width => {
                    line.push(' ');
                    line.push_str(word);
                    line
                }
                Some(line) => {
                    lines.push(line);
                    word.to_string()
                }
                None => word.to_string(),
            });
        }
        lines.extend(current);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
