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
    expert_problem, ordinal_problem, resolve_shape, warn_categories_dropped, CountTable, LineCtx,
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
        categories: parts
            .into_iter()
            .map(|(k, t)| (k, t.finish(&shape, None)))
            .collect(),
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
mod tests {
    use super::*;
    use crate::heat::common::test_util::one_line;
    use crate::heat::HeatTable;

    fn heat(counts: Vec<Vec<f64>>, tokens: Option<Vec<u64>>) -> Heat {
        Heat {
            model: Some("tiny".into()),
            format: HeatFormat::Csv,
            source_layers: counts.len(),
            total: HeatTable { counts, tokens },
            categories: BTreeMap::new(),
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.csv");
        for tokens in [None, Some(vec![4, 4]), Some(vec![4, 3])] {
            let h = heat(vec![vec![0.0, 2.5, 1.0], vec![3.0, 0.0, 0.0]], tokens);
            let mut warnings = vec![];
            write(&h, &path, &mut warnings).unwrap();
            assert!(warnings.is_empty());
            assert_eq!(
                read(&path, &HeatContext::default(), &mut vec![]).unwrap(),
                h
            );
        }
    }

    #[test]
    fn sparse_long_form_pads_to_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.csv");
        std::fs::write(&path, "# tokens=10\nLayer,Expert,Count\n0,1,7\n1,0,2.5\n").unwrap();
        let ctx = HeatContext {
            moe_layers: Some(vec![1, 2, 3]),
            experts: Some(vec![4, 4, 4]),
            ..Default::default()
        };
        let h = read(&path, &ctx, &mut vec![]).unwrap();
        // Three model MoE layers of 4 experts; only (0,1) and (1,0) given.
        assert_eq!(
            h.total.counts,
            vec![
                vec![0.0, 7.0, 0.0, 0.0],
                vec![2.5, 0.0, 0.0, 0.0],
                vec![0.0; 4]
            ]
        );
        assert_eq!(h.total.tokens, Some(vec![10, 10, 10]));
        // Without a model: the largest layer and expert seen.
        let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
        assert_eq!(h.total.counts, vec![vec![0.0, 7.0], vec![2.5, 0.0]]);
    }

    #[test]
    fn wide_form_with_categories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.csv");
        std::fs::write(
            &path,
            "Layer,Split,Expert_0,Expert_1\n0,a,1,2\n0,b,3,4\n1,a,0,1\n",
        )
        .unwrap();
        let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
        // Total = a + b per layer: L0 = [1+3, 2+4], L1 = [0, 1] (b has no layer-1 row).
        assert_eq!(h.total.counts, vec![vec![4.0, 6.0], vec![0.0, 1.0]]);
        assert_eq!(
            h.categories["b"].counts,
            vec![vec![3.0, 4.0], vec![0.0, 0.0]]
        );
        std::fs::write(&path, "Layer,Expert_0,Expert_1\n0,1,2\n1,3,4\n").unwrap();
        let h = read(&path, &HeatContext::default(), &mut vec![]).unwrap();
        assert!(h.categories.is_empty());
        assert_eq!(h.total.counts, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
    }

    #[test]
    fn bad_inputs_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.csv");
        let ctx = HeatContext {
            moe_layers: Some(vec![0, 1]),
            experts: Some(vec![2, 2]),
            model_name: Some("m".into()),
            ..Default::default()
        };
        let none = HeatContext::default();
        let cases: &[(&str, &str, &HeatContext)] = &[
            ("", "line 1: no header", &none),
            ("a,b,c\n", "line 1: header `a,b,c`", &none),
            (
                "layer,expert,count\n0,1,x\n",
                "line 2, field 3 (count): `x` is not a finite number",
                &none,
            ),
            (
                "layer,expert,count\n0,-1,1\n",
                "line 2, field 2 (expert)",
                &none,
            ),
            (
                "layer,expert,count\n0,1,-1\n",
                "line 2, field 3 (count): `-1` is negative",
                &none,
            ),
            ("layer,expert,count\n0,1\n", "line 2: has 2 fields", &none),
            (
                "layer,expert,count\n0,1,1\n0,1,2\n",
                "line 3: layer 0 expert 1 is already given on line 2",
                &none,
            ),
            (
                "layer,expert,count\n2,1,1\n",
                "line 2, field 1 (layer): MoE layer 2 does not exist",
                &ctx,
            ),
            (
                "layer,expert,count\n1,2,1\n",
                "line 2, field 2 (expert): expert 2 does not exist",
                &ctx,
            ),
            (
                "# tokens=1,2,3\nlayer,expert,count\n1,1,1\n",
                "line 1: `# tokens=` lists 3 layers",
                &ctx,
            ),
            (
                "# tokens=x\nlayer,expert,count\n",
                "line 1, field 1 (tokens)",
                &none,
            ),
            ("Layer,Expert_0,Expert_2\n", "line 1, column 3", &none),
            ("Layer,Expert_0\n0,1,2\n", "line 2: has 3 fields", &none),
            (
                "Layer,Expert_0\n0,1\n0,2\n",
                "line 3: layer 0 is already given on line 2",
                &none,
            ),
            (
                "Layer,Expert_0,Expert_1,Expert_2\n0,1,2,3\n",
                "line 1: 3 expert columns",
                &ctx,
            ),
        ];
        for (text, place, ctx) in cases {
            std::fs::write(&path, text).unwrap();
            one_line(read(&path, ctx, &mut vec![]).unwrap_err(), "bad.csv", place);
        }
    }
}
