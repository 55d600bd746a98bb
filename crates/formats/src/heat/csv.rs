//! Our `csv` heat format (design §3.3), read and written, and the wide-CSV
//! parser that `qwen3` shares.
//!
//! Long form (written by us): optional `# model=NAME` and `# tokens=N` (all
//! layers) or `# tokens=N0,N1,..` (per layer) comment lines, the header
//! `layer,expert,count`, then one row per (MoE ordinal, expert); missing rows
//! count zero. Wide form (read): header `Layer,..,Expert_0,..,Expert_{E-1}`,
//! one row per layer; columns between `Layer` and `Expert_0` (e.g.
//! `Language`) name categories (their values joined by `/`) and the total is
//! the sum of the rows. Fields are split on `,` (no quoted commas; a field
//! wholly in double quotes is unquoted); blank lines and other `#` lines are
//! skipped. The csv form holds one table: categories are not written.

use super::common::{
    expert_problem, finish_categories, ordinal_problem, resolve_shape, warn_categories_dropped,
    CountTable, LineCtx,
};
use super::{Heat, HeatContext, HeatFormat};
use residency_core::error::{read_text, write_atomic, PlannerError, Result};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;

const LONG_SYNTAX: &str =
    "after the header `layer,expert,count` each line is `<MoE layer>,<expert>,<count>`";
const WIDE_SYNTAX: &str = "each line has the header's columns: `<layer>,..,<count of Expert_0>,..`";
const HEADER_FIX: &str =
    "start with the header `layer,expert,count`, or `Layer,..,Expert_0,..` for the wide form";

/// A CSV text split into comments, header and data lines (1-based numbers).
pub(crate) struct CsvText<'a> {
    pub comments: Vec<(usize, &'a str)>,
    pub header_line: usize,
    pub header: Vec<&'a str>,
    pub rows: Vec<(usize, &'a str)>,
}

pub(crate) fn fields(line: &str) -> Vec<&str> {
    line.split(',')
        .map(|f| {
            let f = f.trim();
            f.strip_prefix('"')
                .and_then(|g| g.strip_suffix('"'))
                .unwrap_or(f)
        })
        .collect()
}

pub(crate) fn split<'a>(text: &'a str, path: &Path) -> Result<CsvText<'a>> {
    let mut comments = Vec::new();
    let mut header = None;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(c) = trimmed.strip_prefix('#') {
            comments.push((i + 1, c.trim()));
        } else if header.is_none() {
            header = Some((i + 1, fields(trimmed)));
        } else {
            rows.push((i + 1, trimmed));
        }
    }
    let (header_line, header) = header.ok_or_else(|| {
        PlannerError::input(
            path,
            "line 1",
            "no header line (the file is empty)",
            HEADER_FIX,
        )
    })?;
    Ok(CsvText {
        comments,
        header_line,
        header,
        rows,
    })
}

/// `# tokens=..` and `# model=..`.
#[derive(Default)]
struct Preamble {
    tokens: Option<(usize, Vec<u64>)>,
    model: Option<String>,
}

fn preamble(csv: &CsvText, path: &Path) -> Result<Preamble> {
    let mut p = Preamble::default();
    for &(line, c) in &csv.comments {
        let Some((key, value)) = c.split_once('=') else {
            continue;
        };
        match key.trim() {
            "tokens" => {
                let at = LineCtx {
                    file: path,
                    line,
                    syntax:
                        "write `# tokens=N` (all layers) or `# tokens=N0,N1,..` (one per MoE layer)",
                };
                let list = fields(value)
                    .into_iter()
                    .enumerate()
                    .map(|(k, f)| at.uint(k + 1, "tokens", f))
                    .collect::<Result<Vec<u64>>>()?;
                p.tokens = Some((line, list));
            }
            "model" => p.model = Some(value.trim().to_string()),
            _ => {}
        }
    }
    Ok(p)
}

/// The wide form: extra column names, expert columns and rows.
pub(crate) struct Wide {
    pub header_line: usize,
    pub extras: Vec<String>,
    pub experts: usize,
    pub rows: Vec<WideRow>,
}

pub(crate) struct WideRow {
    pub line: usize,
    pub layer: usize,
    pub extras: Vec<String>,
    pub values: Vec<f64>,
}

/// Is this the wide header `Layer,..,Expert_0,..`? Returns the index of `Expert_0`.
fn wide_start(header: &[&str]) -> Option<usize> {
    let first = header.first()?;
    if !first.eq_ignore_ascii_case("layer") {
        return None;
    }
    header.iter().position(|h| *h == "Expert_0")
}

pub(crate) fn parse_wide(csv: &CsvText, path: &Path) -> Result<Wide> {
    let start = wide_start(&csv.header).ok_or_else(|| {
        PlannerError::input(
            path,
            format!("line {}", csv.header_line),
            "the header is not `Layer,..,Expert_0,..`",
            HEADER_FIX,
        )
    })?;
    for (k, name) in csv.header.iter().enumerate().skip(start) {
        if *name != format!("Expert_{}", k - start) {
            return Err(PlannerError::input(
                path,
                format!("line {}, column {}", csv.header_line, k + 1),
                format!(
                    "header {} should be `Expert_{}`",
                    super::common::quote(name),
                    k - start
                ),
                "list Expert_0..Expert_{E-1} in order, last",
            ));
        }
    }
    let experts = csv.header.len() - start;
    let mut rows = Vec::with_capacity(csv.rows.len());
    for &(line, text) in &csv.rows {
        let at = LineCtx {
            file: path,
            line,
            syntax: WIDE_SYNTAX,
        };
        let f = fields(text);
        if f.len() != csv.header.len() {
            return Err(at.err(format!(
                "has {} fields, the header has {}",
                f.len(),
                csv.header.len()
            )));
        }
        let layer = at.uint(1, csv.header[0], f[0])? as usize;
        let values = f[start..]
            .iter()
            .enumerate()
            .map(|(e, v)| at.count(start + e + 1, csv.header[start + e], v))
            .collect::<Result<Vec<f64>>>()?;
        rows.push(WideRow {
            line,
            layer,
            extras: f[1..start].iter().map(|s| s.to_string()).collect(),
            values,
        });
    }
    Ok(Wide {
        header_line: csv.header_line,
        extras: csv.header[1..start].iter().map(|s| s.to_string()).collect(),
        experts,
        rows,
    })
}

/// Rows of a wide table grouped by `key(row)`, one count table per key,
/// layers and ids checked against the model; a (key, layer) given twice is
/// an error naming both lines.
pub(crate) fn wide_tables(
    wide: &Wide,
    path: &Path,
    ctx: &HeatContext,
    key: impl Fn(&WideRow) -> String,
) -> Result<BTreeMap<String, CountTable>> {
    if let Some(problem) = (0..ctx.experts.as_ref().map_or(0, Vec::len))
        .find_map(|l| expert_problem(ctx, l, wide.experts.saturating_sub(1)))
    {
        return Err(PlannerError::input(
            path,
            format!("line {}", wide.header_line),
            format!("{} expert columns: {problem}", wide.experts),
            "use heat recorded on this model",
        ));
    }
    let mut tables: BTreeMap<String, CountTable> = BTreeMap::new();
    let mut seen: HashMap<(String, usize), usize> = HashMap::new();
    for row in &wide.rows {
        let at = LineCtx {
            file: path,
            line: row.line,
            syntax: WIDE_SYNTAX,
        };
        if let Some(problem) = ordinal_problem(ctx, row.layer) {
            return Err(at.field_err(1, "layer", problem));
        }
        let k = key(row);
        if let Some(first) = seen.insert((k.clone(), row.layer), row.line) {
            let what = if k.is_empty() {
                String::new()
            } else {
                format!(" of `{k}`")
            };
            return Err(at.err(format!(
                "layer {}{what} is already given on line {first}",
                row.layer
            )));
        }
        let table = tables.entry(k).or_default();
        for (e, &v) in row.values.iter().enumerate() {
            table.add(row.layer, e, v);
        }
    }
    Ok(tables)
}

pub(crate) fn read(path: &Path, ctx: &HeatContext, _warnings: &mut Vec<String>) -> Result<Heat> {
    let text = read_text(path)?;
    let csv = split(&text, path)?;
    let pre = preamble(&csv, path)?;
    let lower: Vec<String> = csv.header.iter().map(|h| h.to_ascii_lowercase()).collect();
    let (total, parts, width) = if lower == ["layer", "expert", "count"] {
        let total = read_long(&csv, path, ctx)?;
        let width = total.width();
        (total, BTreeMap::new(), width)
    } else if wide_start(&csv.header).is_some() {
        let wide = parse_wide(&csv, path)?;
        let mut parts = wide_tables(&wide, path, ctx, |row| row.extras.join("/"))?;
        let mut total = CountTable::default();
        parts.values().for_each(|t| total.merge(t));
        parts.remove("");
        (total, parts, wide.experts)
    } else {
        return Err(PlannerError::input(
            path,
            format!("line {}", csv.header_line),
            format!(
                "header {} is not a heat header",
                super::common::quote(&csv.header.join(","))
            ),
            HEADER_FIX,
        ));
    };
    let listed = pre
        .tokens
        .as_ref()
        .map_or(0, |(_, t)| if t.len() > 1 { t.len() } else { 0 });
    let given = total.layers().max(listed);
    let layers = ctx.moe_layers.as_ref().map_or(given, Vec::len);
    let tokens = match pre.tokens {
        None => None,
        Some((_, list)) if list.len() == 1 => Some(vec![list[0]; layers]),
        Some((_, list)) if list.len() == layers => Some(list),
        Some((line, list)) => {
            return Err(PlannerError::input(
                path,
                format!("line {line}"),
                format!(
                    "`# tokens=` lists {} layers, the heat has {layers}",
                    list.len()
                ),
                "give one token count per MoE layer, or one number for all",
            ))
        }
    };
    let shape = resolve_shape(ctx, layers, width);
    Ok(Heat {
        model: pre.model,
        format: HeatFormat::Csv,
        source_layers: given,
        total: total.finish(&shape, tokens),
        categories: finish_categories(parts, &shape),
    })
}

fn read_long(csv: &CsvText, path: &Path, ctx: &HeatContext) -> Result<CountTable> {
    let mut table = CountTable::default();
    let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
    for &(line, text) in &csv.rows {
        let at = LineCtx {
            file: path,
            line,
            syntax: LONG_SYNTAX,
        };
        let f = fields(text);
        if f.len() != 3 {
            return Err(at.err(format!("has {} fields, expected 3", f.len())));
        }
        let layer = at.uint(1, "layer", f[0])? as usize;
        let expert = at.uint(2, "expert", f[1])? as usize;
        let count = at.count(3, "count", f[2])?;
        if let Some(problem) = ordinal_problem(ctx, layer) {
            return Err(at.field_err(1, "layer", problem));
        }
        if let Some(problem) = expert_problem(ctx, layer, expert) {
            return Err(at.field_err(2, "expert", problem));
        }
        if let Some(first) = seen.insert((layer, expert), line) {
            return Err(at.err(format!(
                "layer {layer} expert {expert} is already given on line {first}"
            )));
        }
        table.add(layer, expert, count);
    }
    Ok(table)
}

/// Writes the long form, every (layer, expert) including zeros, so that the
/// shape reads back without a model.
pub(crate) fn write(heat: &Heat, path: &Path, warnings: &mut Vec<String>) -> Result<()> {
    warn_categories_dropped(heat, path, "csv", warnings);
    let mut out = String::new();
    if let Some(model) = &heat.model {
        let _ = writeln!(out, "# model={}", model.replace(['\n', '\r'], " "));
    }
    match &heat.total.tokens {
        Some(t) if !t.is_empty() && t.iter().all(|&n| n == t[0]) => {
            let _ = writeln!(out, "# tokens={}", t[0]);
        }
        Some(t) => {
            let list: Vec<String> = t.iter().map(u64::to_string).collect();
            let _ = writeln!(out, "# tokens={}", list.join(","));
        }
        None => {}
    }
    out.push_str("layer,expert,count\n");
    for (l, row) in heat.total.counts.iter().enumerate() {
        for (e, c) in row.iter().enumerate() {
            let _ = writeln!(out, "{l},{e},{c}");
        }
    }
    write_atomic(path, out.as_bytes())
}

#[cfg(test)]
mod tests;
