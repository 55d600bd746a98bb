//! Charts for the CLI, SVG or PNG by the file's extension: the
//! per-layer routing concentration of `residency heat IN --plot FILE`
//! ([`concentration_plot`]), the miss-ratio curves of `residency simulate
//! --plot FILE` ([`simulation_plot`]) and the prefix hit ratios of
//! `residency kv-replay --plot FILE` ([`kv_replay_plot`]), and where a plan
//! put everything, `residency plan --plot FILE` ([`plan_plot`], stacked
//! bars). All are built as
//! [`Panel`]s of [`Line`]s and drawn by the one [`write_chart`], which owns
//! the layout, the font and the file writing. Plotting lives here, in the CLI crate, so
//! the planner and executor crates stay free of it; the numbers come from
//! them (`residency_formats::heat::concentration`, the simulator's runs).
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
use residency_core::cost::Instance;
use residency_core::error::PlannerError;
use residency_core::plan::Plan;
use residency_formats::heat::LayerConcentration;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Size of the picture in pixels (PNG) or user units (SVG) for one panel;
/// each further panel adds `HEIGHT`, so no chart is squeezed.
pub const WIDTH: u32 = 1200;
pub const HEIGHT: u32 = 700;
/// Width of the legend panel on the right.
const LEGEND_WIDTH: u32 = 330;
/// Characters per legend line at the legend's font size.
const LEGEND_CHARS: usize = 32;

/// Line colours, taken in turn by line index (matplotlib's "tab10", so the
/// concentration chart keeps the colours it always had).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

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

/// One line of a chart: its legend text (`\n` breaks it; long texts wrap
/// at spaces) and its `(x, y)` points, joined in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart of the picture, with its own axes and legend.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Heads the panel's legend (the legend sits beside the chart, so its
    /// heading names what the chart shows without taking plot height).
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub lines: Vec<Line>,
    /// `None`: from 0 to 5 % above the highest point (of the stacks).
    pub y_range: Option<Range<f64>>,
    /// Bars, each line's values stacked on the lines before it at the same
    /// x, instead of lines.
    pub stacked: bool,
}

/// Draws the concentration of `rows` into `path` (format from its
/// extension); `title` names the input and the model.
pub fn concentration_plot(path: &Path, title: &str, rows: &[LayerConcentration]) -> Result<()> {
    // Checked here as well as in `write_chart` so that a bad name is
    // reported before the more specific "no layers" message.
    PlotFormat::from_path(path)?;
    if rows.is_empty() {
        bail!(
            "{}: the heat has no MoE layers, so there is nothing to plot; give heat with at least one layer",
            path.display()
        );
    }
    let line = |label: &str, value: fn(&LayerConcentration) -> f64| Line {
        label: label.to_string(),
        points: rows.iter().map(|c| (c.layer as f64, value(c))).collect(),
    };
    let panel = Panel {
        title: "per MoE layer:".into(),
        x_desc: "MoE layer (ordinal, 0 = first MoE layer)".into(),
        y_desc: "fraction (0 to 1)".into(),
        lines: vec![
            line(
                "share of selections taken by the top 10 % of experts",
                |c| c.top10_share,
            ),
            line("share of experts needed for 50 % of selections", |c| {
                fraction(c.experts_for_50, c.experts)
            }),
            line("share of experts needed for 90 % of selections", |c| {
                fraction(c.experts_for_90, c.experts)
            }),
            line("entropy / max entropy\n(1 = uniform routing)", |c| {
                if c.max_entropy_bits > 0.0 {
                    c.entropy_bits / c.max_entropy_bits
                } else {
                    0.0
                }
            }),
        ],
        y_range: Some(0.0..1.0),
        stacked: false,
    };
    write_chart(path, title, &[panel])
}

/// Draws the simulator's results into `path` (format from its extension):
/// miss ratio against cache budget, one line per policy and allocation,
/// and, when `capacities` has lines, below it the per-layer cache the
/// dynamic allocation chose (x: MoE layer, y: MiB), one line per budget.
pub fn simulation_plot(
    path: &Path,
    title: &str,
    miss_ratio: Vec<Line>,
    capacities: Vec<Line>,
) -> Result<()> {
    let mut panels = vec![Panel {
        title: "miss ratio by budget".into(),
        x_desc: "cache budget (GiB)".into(),
        y_desc: "miss ratio (0 to 1)".into(),
        lines: miss_ratio,
        y_range: Some(0.0..1.0),
        stacked: false,
    }];
    if !capacities.is_empty() {
        panels.push(Panel {
            title: "per-layer cache of the dynamic allocation".into(),
            x_desc: "MoE layer (ordinal, 0 = first MoE layer)".into(),
            y_desc: "cache (MiB)".into(),
            lines: capacities,
            y_range: None,
            stacked: false,
        });
    }
    write_chart(path, title, &panels)
}

/// Draws `residency kv-replay`'s results into `path` (format from its
/// extension): the share of input tokens served from cached prefix blocks
/// against the cache's capacity in blocks of `block_tokens`, one line per
/// eviction policy.
pub fn kv_replay_plot(
    path: &Path,
    title: &str,
    block_tokens: u32,
    hit_ratio: Vec<Line>,
) -> Result<()> {
    let panel = Panel {
        title: "prefix hit ratio by capacity".into(),
        x_desc: format!("cache capacity (blocks of {block_tokens} tokens)"),
        y_desc: "hit tokens / input tokens".into(),
        lines: hit_ratio,
        y_range: None,
        stacked: false,
    };
    write_chart(path, title, &[panel])
}

/// Draws where a plan put everything into `path` (format from its
/// extension): per MoE layer the routed experts of each place and the
/// use-rate mass they carry, as stacked bars coloured by place, and each
/// place's bytes (experts, trunk, KV groups) against its capacity.
pub fn plan_plot(path: &Path, title: &str, plan: &Plan, inst: &Instance) -> Result<()> {
    PlotFormat::from_path(path)?;
    let placement = plan.placement(inst, path)?;
    let per_layer = |value: &dyn Fn(usize) -> f64| -> Vec<Line> {
        plan.places
            .iter()
            .enumerate()
            .map(|(q, name)| Line {
                label: name.clone(),
                points: inst
                    .expert_ids
                    .iter()
                    .enumerate()
                    .map(|(l, ids)| {
                        let here = ids.iter().filter(|&&o| placement[o] == q);
                        (l as f64, here.map(|&o| value(o)).sum())
                    })
                    .collect(),
            })
            .filter(|line| line.points.iter().any(|&(_, y)| y > 0.0))
            .collect()
    };
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    let bytes_of = |keep: &dyn Fn(&residency_core::cost::Object) -> bool| -> Vec<(f64, f64)> {
        (0..plan.places.len())
            .map(|q| {
                let place = inst.places[q];
                let bytes = (0..inst.objects.len())
                    .filter(|&o| placement[o] == q && keep(&inst.objects[o]))
                    .map(|o| inst.objects[o].bytes_at(place))
                    .sum();
                (q as f64, gib(bytes))
            })
            .collect()
    };
    let free: Vec<(f64, f64)> = plan
        .usage
        .iter()
        .enumerate()
        .map(|(q, u)| (q as f64, gib(u.capacity_bytes.saturating_sub(u.used_bytes))))
        .collect();
    let mut bytes = vec![
        Line {
            label: "routed experts".into(),
            points: bytes_of(&|o| o.is_expert()),
        },
        Line {
            label: "trunk".into(),
            points: bytes_of(&|o| o.is_trunk()),
        },
    ];
    if !inst.kv_ids.is_empty() {
        bytes.push(Line {
            label: "KV prefix groups".into(),
            points: bytes_of(&|o| o.is_kv()),
        });
    }
    bytes.push(Line {
        label: "free (to the capacity)".into(),
        points: free,
    });
    let names: Vec<String> = plan
        .places
        .iter()
        .enumerate()
        .map(|(q, p)| format!("{q} = {p}"))
        .collect();
    let panels = [
        Panel {
            title: "routed experts per MoE layer, by place".into(),
            x_desc: "MoE layer (ordinal, 0 = first MoE layer)".into(),
            y_desc: "experts".into(),
            lines: per_layer(&|_| 1.0),
            y_range: None,
            stacked: true,
        },
        Panel {
            title: "use-rate mass per MoE layer, by place (uses per token)".into(),
            x_desc: "MoE layer (ordinal, 0 = first MoE layer)".into(),
            y_desc: "mass (uses per token)".into(),
            lines: per_layer(&|o| inst.objects[o].use_rate),
            y_range: None,
            stacked: true,
        },
        Panel {
            title: format!("bytes per place: {}", names.join(", ")),
            x_desc: "place".into(),
            y_desc: "GiB".into(),
            lines: bytes,
            y_range: None,
            stacked: true,
        },
    ];
    write_chart(path, title, &panels)
}

fn fraction(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

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

/// Draws `panels` one above the other under `title` into `path`, SVG or
/// PNG by its extension; the file appears whole or not at all.
fn write_chart(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    let format = PlotFormat::from_path(path)?;
    // Everything that can be refused is checked before a file is touched.
    let ranges = panels
        .iter()
        .map(|p| ranges(p).ok_or_else(|| nothing_to_plot(path, p)))
        .collect::<Result<Vec<_>>>()?;
    if panels.is_empty() {
        bail!(
            "{}: no charts to draw (a bug in the caller)",
            path.display()
        );
    }
    register_font()?;
    let size = (WIDTH, HEIGHT * panels.len() as u32);
    match format {
        PlotFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw(&root, title, panels, &ranges).map_err(|e| render_failed(path, e))?;
                root.present().map_err(|e| render_failed(path, e))?;
            }
            residency_core::error::write_atomic(path, svg.as_bytes()).map_err(|e| match e {
                PlannerError::Io { error, .. } => write_failed(path, error),
                other => write_failed(path, other),
            })
        }
        PlotFormat::Png => {
            let tmp = temp_path(path);
            let result = (|| {
                // Creating the file first turns a bad directory into a plain
                // I/O error before any drawing is done.
                std::fs::File::create(&tmp).map_err(|e| write_failed(path, e))?;
                let root = BitMapBackend::new(&tmp, size).into_drawing_area();
                draw(&root, title, panels, &ranges).map_err(|e| render_failed(path, e))?;
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

/// The axes' ranges of `panel`: x spans the points (at least 1 wide, so a
/// single x still gets an axis), y is the panel's `y_range` or 0 to 5 %
/// above the highest point. `None` when the panel has no finite point or
/// an empty `y_range`.
fn ranges(panel: &Panel) -> Option<(Range<f64>, Range<f64>)> {
    let points = || panel.lines.iter().flat_map(|l| finite(&l.points));
    let first = points().map(|p| p.0).reduce(f64::min)?;
    let last = points().map(|p| p.0).reduce(f64::max)?;
    // Bars are a unit wide, centred on their x.
    let x = match panel.stacked {
        true => first - 0.5..last + 0.5,
        false => first..last.max(first + 1.0),
    };
    let y = match &panel.y_range {
        Some(r) if r.start < r.end => r.clone(),
        Some(_) => return None,
        None => {
            let highest = match panel.stacked {
                true => stack_tops(panel).into_values().fold(0.0, f64::max),
                false => points().map(|p| p.1).fold(0.0, f64::max),
            };
            let top = highest * 1.05;
            0.0..if top > 0.0 { top } else { 1.0 }
        }
    };
    Some((x, y))
}

/// The height of each stack of a stacked panel, by its x (as bits, so the
/// map can key on it).
fn stack_tops(panel: &Panel) -> std::collections::BTreeMap<u64, f64> {
    let mut tops = std::collections::BTreeMap::new();
    for (x, y) in panel.lines.iter().flat_map(|l| finite(&l.points)) {
        *tops.entry(x.to_bits()).or_insert(0.0) += y.max(0.0);
    }
    tops
}

/// The points with both coordinates finite: a NaN or infinity has no place
/// on an axis and would make plotters' ranges meaningless.
fn finite(points: &[(f64, f64)]) -> impl Iterator<Item = (f64, f64)> + '_ {
    points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
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
        "{}: cannot draw the plot ({detail}); this is a bug, please report it with the command and its input files",
        path.display()
    )
}

fn nothing_to_plot(path: &Path, panel: &Panel) -> anyhow::Error {
    let title = panel.title.trim_end_matches(':');
    match &panel.y_range {
        Some(r) if r.start >= r.end => anyhow!(
            "{}: the chart `{title}` has the empty y range {}..{} (a bug in the caller)",
            path.display(),
            r.start,
            r.end
        ),
        _ => anyhow!(
            "{}: the chart `{title}` has no points, so there is nothing to plot; give the command input that yields results",
            path.display()
        ),
    }
}

type DrawResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Draws the title and one chart per panel, top to bottom; `ranges[i]`
/// are panel `i`'s axes (from [`ranges`]).
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    ranges: &[(Range<f64>, Range<f64>)],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 26).into_font().color(&BLACK))?;
    let areas = root.split_evenly((panels.len(), 1));
    for ((panel, (x, y)), area) in panels.iter().zip(ranges).zip(&areas) {
        draw_panel(area, panel, x.clone(), y.clone())?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_range: Range<f64>,
    y_range: Range<f64>,
) -> DrawResult<DB> {
    let (chart_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    // One label per x value up to 16, as many as the longest line has.
    let x_labels = panel
        .lines
        .iter()
        .map(|l| l.points.len())
        .max()
        .unwrap_or(0)
        .clamp(2, 16);
    let (y_low, y_high) = (y_range.start, y_range.end);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(70)
        .build_cartesian_2d(x_range, y_range)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(panel.x_desc.as_str())
        .y_desc(panel.y_desc.as_str())
        .max_light_lines(1)
        .x_labels(x_labels)
        .y_labels(11)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18));
    // An x that is always whole (a layer) reads as `3`, not `3.0`, and a
    // tick between two whole values names nothing, so it stays unlabelled.
    let whole = |x: &f64| {
        if x.fract() == 0.0 {
            format!("{x:.0}")
        } else {
            String::new()
        }
    };
    if panel
        .lines
        .iter()
        .flat_map(|l| finite(&l.points))
        .all(|(x, _)| x.fract() == 0.0)
    {
        mesh.x_label_formatter(&whole);
    }
    mesh.draw()?;

    // Each stack grows from 0 as its lines are drawn, in line order.
    let mut bases = std::collections::BTreeMap::<u64, f64>::new();
    for (i, line) in panel.lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if panel.stacked {
            let bars: Vec<_> = finite(&line.points)
                .map(|(x, y)| {
                    let base = bases.entry(x.to_bits()).or_insert(0.0);
                    let bar = [(x - 0.4, *base), (x + 0.4, *base + y.max(0.0))];
                    *base += y.max(0.0);
                    Rectangle::new(bar, color.filled())
                })
                .collect();
            chart.draw_series(bars)?;
            continue;
        }
        // Clamped so that a value just outside a fixed range (rounding)
        // stays on the chart's edge instead of leaving it.
        let points: Vec<(f64, f64)> = finite(&line.points)
            .map(|(x, y)| (x, y.clamp(y_low, y_high)))
            .collect();
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(2),
        ))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }

    // The legend, in its own panel so it never hides a line.
    let text = ("sans-serif", 16).into_font().color(&BLACK);
    let mut y = 30;
    for heading in wrap(&panel.title, LEGEND_CHARS) {
        legend_area.draw(&Text::new(heading, (10, y), text.clone()))?;
        y += 20;
    }
    y += 10;
    for (i, line) in panel.lines.iter().enumerate() {
        legend_area.draw(&PathElement::new(
            vec![(10, y + 8), (40, y + 8)],
            PALETTE[i % PALETTE.len()].stroke_width(3),
        ))?;
        let mut line_y = y;
        for text_line in wrap(&line.label, LEGEND_CHARS) {
            legend_area.draw(&Text::new(text_line, (48, line_y), text.clone()))?;
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
mod tests;
