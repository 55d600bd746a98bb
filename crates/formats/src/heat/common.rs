//! Helpers shared by the heat readers and writers: one-line errors for text
//! fields (`line N, field K`), serde JSON errors turned into places, the
//! model-layer -> MoE-ordinal map with its single "rows dropped" warning, a
//! growable count table and the rule that picks a table's shape.

use super::{HeatContext, HeatTable};
use residency_core::error::{split_serde_location, PlannerError, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

/// At most this many characters of a bad field are quoted in an error.
const QUOTE_MAX: usize = 40;

/// Quotes a piece of input for an error message: clipped, one line.
/// Fails with one line unless `path` exists.
pub(crate) fn must_exist(path: &Path) -> Result<()> {
    if path.exists() {
        Ok(())
    } else {
        Err(PlannerError::input(
            path,
            "path",
            "does not exist",
            "check the path",
        ))
    }
}

/// The paths in a directory, sorted.
pub(crate) fn dir_entries(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| PlannerError::io(dir, e))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    Ok(paths)
}

pub(crate) fn quote(text: &str) -> String {
    let mut clipped: String = text.chars().take(QUOTE_MAX).collect();
    if text.chars().count() > QUOTE_MAX {
        clipped.push_str("...");
    }
    format!("`{}`", clipped.escape_debug())
}

/// One line of a text file, for errors: the file, the 1-based line number
/// and the line syntax the format expects (the fix of every error).
#[derive(Clone, Copy)]
pub(crate) struct LineCtx<'a> {
    pub file: &'a Path,
    pub line: usize,
    pub syntax: &'a str,
}

impl LineCtx<'_> {
    /// An error about the whole line.
    pub fn err(&self, problem: impl Into<String>) -> PlannerError {
        PlannerError::input(
            self.file,
            format!("line {}", self.line),
            problem,
            self.syntax,
        )
    }

    /// An error about field `field` (1-based), called `name`.
    pub fn field_err(&self, field: usize, name: &str, problem: impl Into<String>) -> PlannerError {
        PlannerError::input(
            self.file,
            format!("line {}, field {field} ({name})", self.line),
            problem,
            self.syntax,
        )
    }

    /// A non-negative whole number.
    pub fn uint(&self, field: usize, name: &str, text: &str) -> Result<u64> {
        self.parsed(field, name, text, "a non-negative whole number")
    }

    /// A whole number that may be negative.
    pub fn int(&self, field: usize, name: &str, text: &str) -> Result<i64> {
        self.parsed(field, name, text, "a whole number")
    }

    /// `text` as a `T`, or an error saying it is not `what`.
    fn parsed<T: FromStr>(&self, field: usize, name: &str, text: &str, what: &str) -> Result<T> {
        text.parse()
            .map_err(|_| self.field_err(field, name, format!("{} is not {what}", quote(text))))
    }

    /// A finite number (decimal point allowed).
    pub fn number(&self, field: usize, name: &str, text: &str) -> Result<f64> {
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(self.field_err(
                field,
                name,
                format!("{} is not a finite number", quote(text)),
            )),
        }
    }

    /// A count: a finite number that is not negative.
    pub fn count(&self, field: usize, name: &str, text: &str) -> Result<f64> {
        let v = self.number(field, name, text)?;
        if v < 0.0 {
            return Err(self.field_err(field, name, format!("{} is negative", quote(text))));
        }
        Ok(v)
    }

    /// An expert id that fits in u32.
    pub fn expert(&self, field: usize, name: &str, text: &str) -> Result<u32> {
        let v = self.uint(field, name, text)?;
        u32::try_from(v)
            .map_err(|_| self.field_err(field, name, format!("expert id {v} is out of range")))
    }
}

/// Turns a serde_json error into a one-line input error. `line` is the line
/// of the file the parsed text started on (1 for a whole file; N for line N
/// of a JSONL file, where serde's own line is always 1).
pub(crate) fn json_err(
    file: &Path,
    line: Option<usize>,
    e: &serde_json::Error,
    fix: &str,
) -> PlannerError {
    let (place, problem) = match line {
        Some(n) => {
            let (_, problem) = split_serde_location(&e.to_string());
            (format!("line {n}, column {}", e.column()), problem)
        }
        None => split_serde_location(&e.to_string()),
    };
    PlannerError::input(file, place, problem, fix)
}

/// Writes layer numbers compactly: `3..=77` when contiguous, else a list.
pub(crate) fn describe_layers(layers: &[usize]) -> String {
    match (layers.first(), layers.last()) {
        (Some(&a), Some(&b)) if layers.len() > 2 && b - a + 1 == layers.len() => {
            format!("{a}..={b}")
        }
        _ => format!("{layers:?}"),
    }
}

/// Maps an engine's model-layer numbers to MoE ordinals through the model's
/// `moe_layers`, and remembers the rows it had to drop so that a reader can
/// give one warning for all of them.
pub(crate) struct LayerMap<'a> {
    moe_layers: &'a [usize],
    by_layer: Vec<Option<usize>>,
    model: &'a str,
    dropped_layers: BTreeSet<usize>,
    dropped_rows: u64,
    dropped_selections: f64,
}

impl<'a> LayerMap<'a> {
    /// The map for a model, or the error "pass --model" when none is known.
    pub fn from_ctx(ctx: &'a HeatContext, file: &Path, what: &str) -> Result<Self> {
        Self::of_model(ctx).ok_or_else(|| {
            PlannerError::input(
                file,
                "layers",
                format!("{what} numbers model layers (dense ones included), which only the model can map to MoE layers"),
                "pass --model so that its moe_layers can be used",
            )
        })
    }

    /// The map for the model, when one is known.
    pub fn of_model(ctx: &'a HeatContext) -> Option<Self> {
        let model = ctx.model_name.as_deref().unwrap_or("the model");
        Some(Self::new(ctx.moe_layers.as_deref()?, model))
    }

    pub fn new(moe_layers: &'a [usize], model: &'a str) -> Self {
        let top = moe_layers.iter().max().map_or(0, |&m| m + 1);
        let mut by_layer = vec![None; top];
        for (ordinal, &layer) in moe_layers.iter().enumerate() {
            by_layer[layer] = Some(ordinal);
        }
        LayerMap {
            moe_layers,
            by_layer,
            model,
            dropped_layers: BTreeSet::new(),
            dropped_rows: 0,
            dropped_selections: 0.0,
        }
    }

    pub fn layers(&self) -> usize {
        self.moe_layers.len()
    }

    /// MoE layers among the first `model_layers` model layers: those a
    /// file of that many model layers covers.
    pub fn layers_below(&self, model_layers: u64) -> usize {
        self.moe_layers
            .iter()
            .filter(|&&l| (l as u64) < model_layers)
            .count()
    }

    /// The MoE ordinal of a model layer, if it is an MoE layer.
    pub fn ordinal(&self, layer: u64) -> Option<usize> {
        usize::try_from(layer)
            .ok()
            .and_then(|l| self.by_layer.get(l).copied().flatten())
    }

    /// The ordinal, or records the row as dropped (`selections` in it).
    pub fn ordinal_or_drop(&mut self, layer: u64, selections: f64) -> Option<usize> {
        let ordinal = self.ordinal(layer);
        if ordinal.is_none() {
            self.dropped_layers
                .insert(usize::try_from(layer).unwrap_or(usize::MAX));
            self.dropped_rows += 1;
            self.dropped_selections += selections;
        }
        ordinal
    }

    /// A problem text for a model layer that is not an MoE layer.
    pub fn not_moe(&self, layer: u64) -> String {
        format!(
            "layer {layer} is not an MoE layer of `{}` (MoE layers {})",
            self.model,
            describe_layers(self.moe_layers)
        )
    }

    /// The one warning for all dropped rows, if any; `rows` names the unit.
    pub fn warn_dropped(&self, file: &Path, rows: &str, warnings: &mut Vec<String>) {
        if self.dropped_rows == 0 {
            return;
        }
        let layers: Vec<usize> = self.dropped_layers.iter().copied().collect();
        warnings.push(format!(
            "{}: dropped {} {rows} ({} selections) of layers {layers:?}, which are not MoE layers of `{}` (MoE layers {}; an MTP row is the usual cause)",
            file.display(),
            self.dropped_rows,
            self.dropped_selections,
            self.model,
            describe_layers(self.moe_layers)
        ));
    }

    /// Fails when nothing at all mapped: the file is for another model.
    pub fn check_some_mapped(&self, file: &Path, mapped_rows: u64) -> Result<()> {
        if mapped_rows == 0 && self.dropped_rows > 0 {
            let layers: Vec<usize> = self.dropped_layers.iter().copied().collect();
            return Err(PlannerError::input(
                file,
                "layers",
                format!(
                    "no row is in an MoE layer of `{}` (rows name layers {}, MoE layers are {})",
                    self.model,
                    describe_layers(&layers),
                    describe_layers(self.moe_layers)
                ),
                "use the file recorded on this model, or pass the model it was recorded on",
            ));
        }
        Ok(())
    }
}

/// Checks an expert id against the model, when one is known: a problem text
/// naming the layer and the model's expert count.
pub(crate) fn expert_problem(ctx: &HeatContext, ordinal: usize, expert: usize) -> Option<String> {
    let widths = ctx.experts.as_ref()?;
    let &width = widths.get(ordinal)?;
    (expert >= width).then(|| {
        format!(
            "expert {expert} does not exist in MoE layer {ordinal} of `{}`, which has {width} experts (0..={})",
            ctx.model_name.as_deref().unwrap_or("the model"),
            width - 1
        )
    })
}

/// Checks an MoE ordinal against the model, when one is known.
pub(crate) fn ordinal_problem(ctx: &HeatContext, ordinal: usize) -> Option<String> {
    let layers = ctx.moe_layers.as_ref()?.len();
    (ordinal >= layers).then(|| {
        format!(
            "MoE layer {ordinal} does not exist: `{}` has {layers} MoE layers (0..={})",
            ctx.model_name.as_deref().unwrap_or("the model"),
            layers.saturating_sub(1)
        )
    })
}

/// The shape of a table read from a sparse source: the model's widths when
/// the model is known and has this many MoE layers, else `width` for every
/// layer (the larger of the format's own expert count and the largest id
/// seen plus one; ids are checked against the model while reading).
pub(crate) fn resolve_shape(ctx: &HeatContext, layers: usize, width: usize) -> Vec<usize> {
    match &ctx.experts {
        Some(widths) if widths.len() == layers => widths.clone(),
        _ => vec![width; layers],
    }
}

/// A count table that grows as records arrive, padded to a shape at the end.
#[derive(Default)]
pub(crate) struct CountTable {
    rows: Vec<Vec<f64>>,
}

impl CountTable {
    pub fn add(&mut self, layer: usize, expert: usize, count: f64) {
        if self.rows.len() <= layer {
            self.rows.resize_with(layer + 1, Vec::new);
        }
        let row = &mut self.rows[layer];
        if row.len() <= expert {
            row.resize(expert + 1, 0.0);
        }
        row[expert] += count;
    }

    /// Adds every cell of another table.
    pub fn merge(&mut self, other: &CountTable) {
        for (l, row) in other.rows.iter().enumerate() {
            for (e, &c) in row.iter().enumerate() {
                self.add(l, e, c);
            }
        }
    }

    /// Layers seen (the highest layer + 1).
    pub fn layers(&self) -> usize {
        self.rows.len()
    }

    /// The widest row (the highest expert + 1).
    pub fn width(&self) -> usize {
        self.rows.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// The table in `shape` (layers and experts per layer); every recorded
    /// cell must lie inside it (readers check ids before adding).
    pub fn finish(mut self, shape: &[usize], tokens: Option<Vec<u64>>) -> HeatTable {
        debug_assert!(self.rows.len() <= shape.len());
        self.rows.resize_with(shape.len(), Vec::new);
        for (row, &width) in self.rows.iter_mut().zip(shape) {
            debug_assert!(row.len() <= width);
            row.resize(width, 0.0);
        }
        HeatTable {
            counts: self.rows,
            tokens,
        }
    }
}

/// Each category's table in `shape`, without token counts (the wide CSV
/// forms count no tokens per category).
pub(crate) fn finish_categories(
    parts: BTreeMap<String, CountTable>,
    shape: &[usize],
) -> BTreeMap<String, HeatTable> {
    parts
        .into_iter()
        .map(|(k, t)| (k, t.finish(shape, None)))
        .collect()
}

/// Checks that every count of a table is a whole number that fits in u32
/// (the Colibri binary and text counters); names the first one that is not.
pub(crate) fn whole_u32(table: &HeatTable, file: &Path, format: &str) -> Result<Vec<Vec<u32>>> {
    table
        .counts
        .iter()
        .enumerate()
        .map(|(l, row)| {
            row.iter()
                .enumerate()
                .map(|(e, &c)| {
                    if c.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&c) {
                        Ok(c as u32)
                    } else {
                        Err(PlannerError::input(
                            file,
                            format!("MoE layer {l}, expert {e}"),
                            format!("count {c} is not a whole number in 0..=4294967295, which {format} stores"),
                            "write json or csv, which keep fractional counts",
                        ))
                    }
                })
                .collect()
        })
        .collect()
}

/// Every row of a table has the same width, or an error saying which differs.
pub(crate) fn uniform_width(table: &HeatTable, file: &Path, format: &str) -> Result<usize> {
    let width = table.counts.first().map_or(0, Vec::len);
    if let Some((l, row)) = table
        .counts
        .iter()
        .enumerate()
        .find(|(_, r)| r.len() != width)
    {
        return Err(PlannerError::input(
            file,
            format!("MoE layer {l}"),
            format!("has {} experts, layer 0 has {width}; {format} stores one expert count for all layers", row.len()),
            "write json or csv, which keep per-layer expert counts",
        ));
    }
    Ok(width)
}

/// The warning given when a one-table format is asked to write categories.
pub(crate) fn warn_categories_dropped(
    heat: &super::Heat,
    file: &Path,
    format: &str,
    warnings: &mut Vec<String>,
) {
    if !heat.categories.is_empty() {
        warnings.push(format!(
            "{}: {format} holds one table; the {} categories were not written (json keeps them)",
            file.display(),
            heat.categories.len()
        ));
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::HeatContext;
    use residency_core::error::{PlannerError, Result};
    use std::path::Path;

    /// A model called `small`: layers 0..=2, MoE layers 1 and 2 of 3
    /// experts each.
    pub fn small() -> HeatContext {
        HeatContext {
            moe_layers: Some(vec![1, 2]),
            model_name: Some("small".into()),
            experts: Some(vec![3, 3]),
            model_layers: Some(3),
            engine: None,
            allow_partial_heat: false,
        }
    }

    /// A model called `m` with `experts[i]` experts in MoE layer
    /// `moe_layers[i]`: what a file's layers and experts are checked against.
    pub fn model_m(moe_layers: &[usize], experts: &[usize]) -> HeatContext {
        HeatContext {
            moe_layers: Some(moe_layers.to_vec()),
            experts: Some(experts.to_vec()),
            model_name: Some("m".into()),
            ..Default::default()
        }
    }

    /// Writes each case's text to `path` in turn and checks that `read`
    /// refuses it, against the case's model, with a one-line input error
    /// that names the file and the case's place.
    pub fn each_refused_naming_its_place<T: std::fmt::Debug>(
        path: &Path,
        cases: &[(impl AsRef<[u8]>, &str, &HeatContext)],
        read: fn(&Path, &HeatContext, &mut Vec<String>) -> Result<T>,
    ) {
        let file = path.file_name().unwrap().to_str().unwrap();
        for (text, place, ctx) in cases {
            std::fs::write(path, text).unwrap();
            one_line(read(path, ctx, &mut vec![]).unwrap_err(), file, place);
        }
    }

    /// The message of an input error, asserting it is one line and names
    /// the file and the place.
    pub fn one_line(err: PlannerError, file_part: &str, place_part: &str) -> String {
        let msg = err.to_string();
        assert!(
            matches!(err, PlannerError::Input { .. }),
            "not an input error: {msg}"
        );
        assert!(!msg.contains('\n'), "error spans lines: {msg}");
        assert!(
            msg.contains(file_part),
            "error does not name `{file_part}`: {msg}"
        );
        assert!(
            msg.contains(place_part),
            "error does not name `{place_part}`: {msg}"
        );
        msg
    }

    /// The shared data directory, or None (and a reason on stderr).
    pub use residency_testkit::shared_data;
}
