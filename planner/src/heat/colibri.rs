//! Colibri's heat formats (`shared/colibri-formats.md` 1-3):
//! - `coli-heat`: HEAT_FILE of the qwen36 VRAM tier, binary: u32 magic
//!   `0x51544831`, u32 nl, u32 ne, u32[nl*ne] layer-major, little-endian.
//!   Rows are MoE ordinals. Read and written (we write atomically, which
//!   Colibri itself does not).
//! - `coli-usage`: `.coli_usage` of the GLM engine: text records
//!   `<layer> <expert> <count>` after the v1 header records
//!   `-1 <n_layers> <n_experts>` and `-2 1 <engine_id>`, or legacy headerless
//!   text, or inkling's binary IKU1 (u32 magic `0x31554B49`, nl, ne, dense
//!   u32[nl][ne]). Rows are MODEL layers, mapped through the model's
//!   `moe_layers`; rows outside them (GLM's MTP row) are dropped with one
//!   warning. Written as v1 text, atomically.
//! - `coli-route`: ROUTE_TRACE, read only: `<call> <row> <layer> <id>:<gate> ..`,
//!   one line per (MoE call, batch row), model layers; read as a [`Trace`].

use super::common::{
    expert_problem, resolve_shape, uniform_width, warn_categories_dropped, whole_u32, CountTable,
    LayerMap, LineCtx,
};
use super::trace::{TokenRoutes, Trace};
use super::{Heat, HeatContext, HeatFormat, HeatTable};
use crate::error::{read_file, write_atomic, PlannerError, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// HEAT_FILE magic ("QTH1" read big-endian; bytes on disk `31 48 54 51`).
pub const HEAT_MAGIC: u32 = 0x5154_4831;
/// Inkling's binary usage magic (bytes on disk `49 4B 55 31`, "IKU1").
pub const USAGE_MAGIC: u32 = 0x3155_4B49;
/// The engine whose id a `.coli_usage` header carries unless told otherwise.
pub const DEFAULT_ENGINE: &str = "glm_moe_dsa";
/// Engine names Colibri writes usage for (colibri-formats.md 2).
const KNOWN_ENGINES: [&str; 4] = ["glm_moe_dsa", "inkling", "olmoe", "kimi_k3"];

const USAGE_SYNTAX: &str =
    "each line is `<model layer> <expert> <count>`, after optional `-1 <n_layers> <n_experts>` and `-2 1 <engine_id>` (colibri-formats.md 2)";
const ROUTE_SYNTAX: &str =
    "each line is `<call> <row> <model layer> <id>:<gate> ..` (colibri-formats.md 3)";

/// The `.coli_usage` engine id: FNV-1a-32 of the engine name.
pub fn engine_id(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A little-endian u32 file: magic, nl, ne, then nl*ne counts. Checks
/// magic, non-zero dims and that the length is exactly the dims'.
fn binary_table(
    path: &Path,
    bytes: &[u8],
    magic: u32,
    name: &str,
) -> Result<(usize, usize, Vec<u32>)> {
    let word = |offset: usize| -> Option<u32> {
        let b = bytes.get(offset..offset + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let truncated_header = || {
        PlannerError::input(
            path,
            format!("byte {}", bytes.len()),
            format!("file ends inside the 12-byte {name} header (magic, nl, ne)"),
            "the file is truncated; use a complete copy",
        )
    };
    let found = word(0).ok_or_else(truncated_header)?;
    if found != magic {
        return Err(PlannerError::input(
            path,
            "byte 0",
            format!("magic is 0x{found:08X}, not {name}'s 0x{magic:08X}"),
            "this is not a {name} file; pass --heat-format with the file's real format",
        ));
    }
    let nl = word(4).ok_or_else(truncated_header)?;
    let ne = word(8).ok_or_else(truncated_header)?;
    for (offset, field, v) in [(4, "nl (layers)", nl), (8, "ne (experts)", ne)] {
        if v == 0 {
            return Err(PlannerError::input(
                path,
                format!("byte {offset}"),
                format!("{field} is 0"),
                "the header is damaged; use a file written by the engine",
            ));
        }
    }
    let cells = u64::from(nl) * u64::from(ne);
    let want = 12 + 4 * cells;
    let have = bytes.len() as u64;
    if have < want {
        return Err(PlannerError::input(
            path,
            format!("byte {have}"),
            format!(
                "file ends after {} of the {cells} counts of {nl} layers x {ne} experts (needs {want} bytes)",
                (have - 12) / 4
            ),
            "the file is truncated (Colibri writes it in place, so a killed engine leaves it short); delete it or use a complete copy",
        ));
    }
    if have > want {
        return Err(PlannerError::input(
            path,
            format!("byte {want}"),
            format!(
                "{} bytes follow the {nl} x {ne} counts the header announces",
                have - want
            ),
            "the header's dims do not match the file; use a file written by the engine",
        ));
    }
    let counts = bytes[12..]
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok((nl as usize, ne as usize, counts))
}

/// Checks the experts per layer against the model: `ne` at byte 8.
fn check_ne(path: &Path, ctx: &HeatContext, ne: usize, layers: usize) -> Result<()> {
    if let Some(problem) = (0..layers).find_map(|l| expert_problem(ctx, l, ne - 1)) {
        return Err(PlannerError::input(
            path,
            "byte 8",
            format!("ne = {ne}: {problem}"),
            "use the file recorded on this model",
        ));
    }
    if let Some(w) = ctx
        .experts
        .as_ref()
        .and_then(|w| w.iter().find(|&&w| w != ne))
    {
        return Err(PlannerError::input(
            path,
            "byte 8",
            format!(
                "ne = {ne}, `{}` has {w} experts per layer",
                ctx.model_name.as_deref().unwrap_or("the model")
            ),
            "use the file recorded on this model",
        ));
    }
    Ok(())
}

pub(crate) fn read_heat_file(
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let bytes = read_file(path)?;
    let (nl, ne, counts) = binary_table(path, &bytes, HEAT_MAGIC, "HEAT_FILE")?;
    // Fewer rows than the model's MoE layers are partial heat, which
    // `read_heat` refuses or pads like any other format's.
    let mut layers = nl;
    if let Some(m) = ctx.moe_layers.as_ref().map(Vec::len).filter(|&m| nl > m) {
        let model = ctx.model_name.as_deref().unwrap_or("the model");
        warnings.push(format!(
            "{}: dropped HEAT_FILE rows {m}..{nl}: `{model}` has {m} MoE layers (an MTP layer the model does not list is the usual cause)",
            path.display()
        ));
        layers = m;
    }
    check_ne(path, ctx, ne, layers)?;
    let rows = counts
        .chunks_exact(ne)
        .take(layers)
        .map(|r| r.iter().map(|&c| f64::from(c)).collect())
        .collect();
    Ok(Heat {
        model: None,
        format: HeatFormat::ColiHeat,
        source_layers: layers,
        total: HeatTable {
            counts: rows,
            tokens: None,
        },
        categories: Default::default(),
    })
}

pub(crate) fn write_heat_file(heat: &Heat, path: &Path, warnings: &mut Vec<String>) -> Result<()> {
    warn_categories_dropped(heat, path, "coli-heat", warnings);
    let ne = uniform_width(&heat.total, path, "coli-heat")?;
    let counts = whole_u32(&heat.total, path, "coli-heat")?;
    let nl = counts.len();
    if nl == 0 || ne == 0 {
        return Err(PlannerError::input(
            path,
            "shape",
            "heat is empty",
            "a HEAT_FILE needs at least one layer and expert",
        ));
    }
    let too_big = |n: usize| u32::try_from(n).is_err();
    if too_big(nl) || too_big(ne) {
        return Err(PlannerError::input(
            path,
            "shape",
            "too many layers or experts for u32",
            "split the heat",
        ));
    }
    let mut out = Vec::with_capacity(12 + 4 * nl * ne);
    for w in [HEAT_MAGIC, nl as u32, ne as u32]
        .into_iter()
        .chain(counts.into_iter().flatten())
    {
        out.extend_from_slice(&w.to_le_bytes());
    }
    write_atomic(path, &out)
}

/// Rows mapped so far: the layer map (with its dropped rows), the table of
/// MoE ordinals and the number of rows that mapped.
struct Usage<'a> {
    map: LayerMap<'a>,
    table: CountTable,
    mapped: u64,
}

pub(crate) fn read_usage(
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let mut usage = Usage {
        map: LayerMap::from_ctx(ctx, path, "a .coli_usage file")?,
        table: CountTable::default(),
        mapped: 0,
    };
    let bytes = read_file(path)?;
    // Rows of zero counts are not written (text) or skipped (binary), so
    // the layers a file covers are those its dims name; headerless text
    // covers up to its highest MoE layer.
    let (width, given) = if bytes.len() >= 4 && bytes[..4] == USAGE_MAGIC.to_le_bytes() {
        let (nl, ne, counts) = binary_table(path, &bytes, USAGE_MAGIC, "IKU1")?;
        check_ne(path, ctx, ne, usage.map.layers())?;
        for (layer, row) in counts.chunks_exact(ne).enumerate().take(nl) {
            let sum: f64 = row.iter().map(|&c| f64::from(c)).sum();
            if sum == 0.0 {
                continue;
            }
            if let Some(ordinal) = usage.map.ordinal_or_drop(layer as u64, sum) {
                usage.mapped += 1;
                for (e, &c) in row.iter().enumerate() {
                    usage.table.add(ordinal, e, f64::from(c));
                }
            }
        }
        (ne, usage.map.layers_below(nl as u64))
    } else {
        let text = String::from_utf8(bytes).map_err(|e| {
            PlannerError::input(
                path,
                format!("byte {}", e.utf8_error().valid_up_to()),
                "neither text nor an IKU1 binary file",
                USAGE_SYNTAX,
            )
        })?;
        match usage_text(path, &text, ctx, &mut usage, warnings)? {
            Some((n_layers, n_experts)) => (
                (n_experts as usize).max(usage.table.width()),
                usage.map.layers_below(n_layers),
            ),
            None => (usage.table.width(), usage.table.layers()),
        }
    };
    usage.map.warn_dropped(path, "rows", warnings);
    usage.map.check_some_mapped(path, usage.mapped)?;
    let shape = resolve_shape(ctx, usage.map.layers(), width);
    Ok(Heat {
        model: None,
        format: HeatFormat::ColiUsage,
        source_layers: given,
        total: usage.table.finish(&shape, None),
        categories: Default::default(),
    })
}

/// Reads text records into `usage`; returns the header's (n_layers,
/// n_experts) if any.
fn usage_text(
    path: &Path,
    text: &str,
    ctx: &HeatContext,
    usage: &mut Usage,
    warnings: &mut Vec<String>,
) -> Result<Option<(u64, u64)>> {
    let model = ctx.model_name.as_deref().unwrap_or("the model");
    let mut dims: Option<(u64, u64)> = None;
    let mut data_seen = false;
    let mut seen: HashMap<(u64, u64), usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: USAGE_SYNTAX,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() != 3 {
            return Err(at.err(format!("has {} fields, expected 3", f.len())));
        }
        let layer = at.int(1, "layer", f[0])?;
        if layer < 0 {
            if data_seen {
                return Err(at.err(format!("header record {layer} comes after data records")));
            }
            match layer {
                -1 => {
                    let n_layers = at.uint(2, "n_layers", f[1])?;
                    let n_experts = at.uint(3, "n_experts", f[2])?;
                    if let Some(want) = ctx.model_layers.filter(|&w| w as u64 != n_layers) {
                        return Err(at.field_err(
                            2,
                            "n_layers",
                            format!("{n_layers} layers, `{model}` has {want}"),
                        ));
                    }
                    if let Some(w) = ctx
                        .experts
                        .as_ref()
                        .and_then(|w| w.iter().find(|&&w| w as u64 != n_experts))
                    {
                        return Err(at.field_err(
                            3,
                            "n_experts",
                            format!("{n_experts} experts, `{model}` has {w}"),
                        ));
                    }
                    dims = Some((n_layers, n_experts));
                }
                -2 => {
                    let version = at.uint(2, "format_version", f[1])?;
                    if version != 1 {
                        return Err(at.field_err(
                            2,
                            "format_version",
                            format!("version {version} is not supported (only 1)"),
                        ));
                    }
                    let id = at.uint(3, "engine_id", f[2])?;
                    check_engine(path, ctx, id, warnings);
                }
                _ => {
                    return Err(at.field_err(
                        1,
                        "layer",
                        format!("{layer} is not a header record (-1 or -2)"),
                    ))
                }
            }
            continue;
        }
        data_seen = true;
        let layer = layer as u64;
        let expert = at.uint(2, "expert", f[1])?;
        let count = at.uint(3, "count", f[2])? as f64;
        if let Some((n_layers, n_experts)) = dims {
            if layer > n_layers {
                return Err(at.field_err(
                    1,
                    "layer",
                    format!("{layer} is past the header's layers 0..={n_layers}"),
                ));
            }
            if expert >= n_experts {
                return Err(at.field_err(
                    2,
                    "expert",
                    format!("{expert} is past the header's {n_experts} experts"),
                ));
            }
        }
        if let Some(first) = seen.insert((layer, expert), i + 1) {
            return Err(at.err(format!(
                "layer {layer} expert {expert} is already given on line {first}"
            )));
        }
        let Some(ordinal) = usage.map.ordinal_or_drop(layer, count) else {
            continue;
        };
        if let Some(problem) = expert_problem(ctx, ordinal, expert as usize) {
            return Err(at.field_err(2, "expert", problem));
        }
        usage.mapped += 1;
        usage.table.add(ordinal, expert as usize, count);
    }
    Ok(dims)
}

fn check_engine(path: &Path, ctx: &HeatContext, id: u64, warnings: &mut Vec<String>) {
    let Some(engine) = &ctx.engine else { return };
    if u64::from(engine_id(engine)) == id {
        return;
    }
    let known = KNOWN_ENGINES.iter().find(|n| u64::from(engine_id(n)) == id);
    let written_by = known.map_or_else(|| "an unknown engine".to_string(), |n| format!("`{n}`"));
    warnings.push(format!(
        "{}: engine id {id} is {written_by}'s, not `{engine}`'s ({}); the counts may be another model's",
        path.display(),
        engine_id(engine)
    ));
}

pub(crate) fn write_usage(
    heat: &Heat,
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<()> {
    let moe_layers = ctx.moe_layers.as_ref().ok_or_else(|| {
        PlannerError::input(
            path,
            "layers",
            ".coli_usage numbers model layers, which only the model knows",
            "pass --model so that its moe_layers can be used",
        )
    })?;
    if moe_layers.len() != heat.total.counts.len() {
        return Err(PlannerError::input(
            path,
            "layers",
            format!(
                "heat has {} MoE layers, `{}` has {}",
                heat.total.counts.len(),
                ctx.model_name.as_deref().unwrap_or("the model"),
                moe_layers.len()
            ),
            "write heat of this model",
        ));
    }
    warn_categories_dropped(heat, path, "coli-usage", warnings);
    let n_experts = uniform_width(&heat.total, path, "coli-usage")?;
    let counts = whole_u32(&heat.total, path, "coli-usage")?;
    let n_layers = ctx
        .model_layers
        .unwrap_or_else(|| moe_layers.iter().max().map_or(0, |m| m + 1));
    let engine = ctx.engine.as_deref().unwrap_or(DEFAULT_ENGINE);
    let mut out = format!("-1 {n_layers} {n_experts}\n-2 1 {}\n", engine_id(engine));
    for (&layer, row) in moe_layers.iter().zip(&counts) {
        for (e, &c) in row.iter().enumerate().filter(|(_, &c)| c > 0) {
            let _ = writeln!(out, "{layer} {e} {c}");
        }
    }
    write_atomic(path, out.as_bytes())
}

pub(crate) fn read_route_trace(
    path: &Path,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Trace> {
    let mut map = LayerMap::from_ctx(ctx, path, "a ROUTE_TRACE")?;
    let text = crate::error::read_text(path)?;
    let mut tokens: Vec<TokenRoutes> = Vec::new();
    // Token index of each row of the current forward.
    let mut rows: HashMap<u64, usize> = HashMap::new();
    let mut prev: Option<(u64, u64, u64)> = None;
    let mut forward = 0u64;
    let mut mapped = 0u64;
    for (i, line) in text.lines().enumerate() {
        let at = LineCtx {
            file: path,
            line: i + 1,
            syntax: ROUTE_SYNTAX,
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() < 4 {
            return Err(at.err(format!(
                "has {} fields, expected `<call> <row> <layer>` and at least one `<id>:<gate>`",
                f.len()
            )));
        }
        let call = at.uint(1, "call", f[0])?;
        let row = at.uint(2, "row", f[1])?;
        let layer = at.uint(3, "layer", f[2])?;
        let mut ids = Vec::with_capacity(f.len() - 3);
        for (k, pair) in f.iter().enumerate().skip(3) {
            let (id, gate) = pair.split_once(':').ok_or_else(|| {
                at.field_err(
                    k + 1,
                    "id:gate",
                    format!("{} is not `<id>:<gate>`", super::common::quote(pair)),
                )
            })?;
            ids.push(at.expert(k + 1, "id", id)?);
            at.number(k + 1, "gate", gate)?;
        }
        // A forward is one pass over the layers: it ends when the layer
        // goes back, or the same layer starts another call or batch.
        let new_forward = prev
            .is_some_and(|(pc, pr, pl)| layer < pl || (layer == pl && (call != pc || row <= pr)));
        if new_forward {
            forward += 1;
            rows.clear();
        }
        prev = Some((call, row, layer));
        let Some(ordinal) = map.ordinal_or_drop(layer, ids.len() as f64) else {
            continue;
        };
        if let Some(problem) = ids
            .iter()
            .find_map(|&e| expert_problem(ctx, ordinal, e as usize))
        {
            return Err(at.err(problem));
        }
        mapped += 1;
        let index = *rows.entry(row).or_insert_with(|| {
            tokens.push(TokenRoutes {
                seq: forward.to_string(),
                pos: row,
                category: None,
                routes: vec![Vec::new(); map.layers()],
            });
            tokens.len() - 1
        });
        tokens[index].routes[ordinal] = ids;
    }
    map.warn_dropped(path, "lines", warnings);
    map.check_some_mapped(path, mapped)?;
    Ok(Trace::build(
        HeatFormat::ColiRoute,
        ctx,
        map.layers(),
        0,
        tokens,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heat::common::test_util::{one_line, shared_data};

    /// GLM-5.2: 78 layers, 0..=2 dense, MoE 3..=77, 256 experts (the MTP
    /// head is row 78 in usage files and not an MoE layer of the model).
    fn glm() -> HeatContext {
        HeatContext {
            moe_layers: Some((3..=77).collect()),
            model_name: Some("glm-5.2".into()),
            experts: Some(vec![256; 75]),
            model_layers: Some(78),
            engine: None,
            allow_partial_heat: false,
        }
    }

    fn small() -> HeatContext {
        HeatContext {
            moe_layers: Some(vec![1, 2]),
            model_name: Some("small".into()),
            experts: Some(vec![3, 3]),
            model_layers: Some(3),
            engine: None,
            allow_partial_heat: false,
        }
    }

    fn heat(counts: Vec<Vec<f64>>) -> Heat {
        Heat {
            model: None,
            format: HeatFormat::ColiHeat,
            source_layers: counts.len(),
            total: HeatTable {
                counts,
                tokens: None,
            },
            categories: Default::default(),
        }
    }

    #[test]
    fn fnv1a32_known_values() {
        // FNV-1a-32 reference values: "" -> offset basis 0x811C9DC5, "a" -> 0xE40C292C.
        assert_eq!(engine_id(""), 0x811C_9DC5);
        assert_eq!(engine_id("a"), 0xE40C_292C);
        assert_ne!(engine_id("glm_moe_dsa"), engine_id("inkling"));
    }

    #[test]
    fn heat_file_round_trip_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.bin");
        let h = heat(vec![vec![1.0, 2.0, 3.0], vec![4.0, 0.0, 4294967295.0]]);
        write_heat_file(&h, &path, &mut vec![]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // 12-byte header + 6 counts; bytes on disk start "1HTQ", nl = 2, ne = 3.
        assert_eq!(bytes.len(), 12 + 4 * 6);
        assert_eq!(
            &bytes[..12],
            &[0x31, 0x48, 0x54, 0x51, 2, 0, 0, 0, 3, 0, 0, 0]
        );
        assert_eq!(
            read_heat_file(&path, &HeatContext::default(), &mut vec![]).unwrap(),
            h
        );
    }

    #[test]
    fn heat_file_extra_row_is_dropped_with_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.bin");
        write_heat_file(
            &heat(vec![vec![1.0; 3], vec![2.0; 3], vec![9.0; 3]]),
            &path,
            &mut vec![],
        )
        .unwrap();
        let mut warnings = vec![];
        let h = read_heat_file(&path, &small(), &mut warnings).unwrap();
        assert_eq!(h.total.counts, vec![vec![1.0; 3], vec![2.0; 3]]);
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn heat_file_bad_inputs_name_the_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.bin");
        let mut good = Vec::new();
        for w in [HEAT_MAGIC, 2, 3, 1, 2, 3, 4, 5, 6] {
            good.extend_from_slice(&u32::to_le_bytes(w));
        }
        let mut bad_magic = good.clone();
        bad_magic[0] = 0;
        let mut zero_ne = good.clone();
        zero_ne[8] = 0;
        let mut long = good.clone();
        long.push(0);
        let one_layer = {
            let mut v = good[..12].to_vec();
            v[4] = 1;
            v.extend_from_slice(&good[12..24]);
            v
        };
        let none = HeatContext::default();
        let small = small();
        let cases: Vec<(Vec<u8>, &str, &HeatContext)> = vec![
            (
                good[..2].to_vec(),
                "byte 2: file ends inside the 12-byte",
                &none,
            ),
            (good[..10].to_vec(), "byte 10", &none),
            (bad_magic, "byte 0: magic is 0x51544800", &none),
            (zero_ne, "byte 8: ne (experts) is 0", &none),
            (
                good[..30].to_vec(),
                "byte 30: file ends after 4 of the 6 counts",
                &none,
            ),
            (long, "byte 36: 1 bytes follow", &none),
            // One row of the model's two reads (read_heat judges partial heat).
            (one_layer, "", &small),
            (good.clone(), "", &small),
        ];
        for (bytes, place, ctx) in cases {
            std::fs::write(&path, &bytes).unwrap();
            match read_heat_file(&path, ctx, &mut vec![]) {
                Err(e) => {
                    one_line(e, "bad.bin", place);
                }
                Ok(_) => assert_eq!(place, "", "should have failed: {place}"),
            }
        }
        // 3 experts per layer in the file, the model has 2.
        let ctx = HeatContext {
            experts: Some(vec![2, 2]),
            ..small
        };
        std::fs::write(&path, &good).unwrap();
        one_line(
            read_heat_file(&path, &ctx, &mut vec![]).unwrap_err(),
            "bad.bin",
            "byte 8",
        );
    }

    #[test]
    fn heat_file_refuses_fractions_and_ragged_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        let e = write_heat_file(&heat(vec![vec![1.5, 2.0]]), &path, &mut vec![]).unwrap_err();
        one_line(e, "out.bin", "MoE layer 0, expert 0");
        let e = write_heat_file(&heat(vec![vec![1.0, 2.0], vec![1.0]]), &path, &mut vec![])
            .unwrap_err();
        one_line(e, "out.bin", "MoE layer 1");
        assert!(!path.exists());
    }

    #[test]
    fn usage_round_trip_with_v1_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".coli_usage");
        let h = Heat {
            format: HeatFormat::ColiUsage,
            ..heat(vec![vec![0.0, 5.0, 1.0], vec![7.0, 0.0, 0.0]])
        };
        write_usage(&h, &path, &small(), &mut vec![]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        // Model layers 1 and 2 (MoE ordinals 0 and 1), zero counts omitted.
        let want = format!(
            "-1 3 3\n-2 1 {}\n1 1 5\n1 2 1\n2 0 7\n",
            engine_id("glm_moe_dsa")
        );
        assert_eq!(text, want);
        assert_eq!(read_usage(&path, &small(), &mut vec![]).unwrap(), h);
    }

    #[test]
    fn usage_legacy_and_iku1_map_model_layers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u");
        // Legacy: layer 0 is dense and layer 3 (MTP) is not an MoE layer of
        // `small`: both dropped, one warning naming [0, 3] and 2 + 4 selections.
        std::fs::write(&path, "1 0 2\n0 1 2\n2 2 3\n3 0 4\n").unwrap();
        let mut warnings = vec![];
        let h = read_usage(&path, &small(), &mut warnings).unwrap();
        assert_eq!(
            h.total.counts,
            vec![vec![2.0, 0.0, 0.0], vec![0.0, 0.0, 3.0]]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("[0, 3]") && warnings[0].contains("(6 selections)"),
            "{}",
            warnings[0]
        );
        // IKU1: 3 dense rows of 3 (model layers 0, 1, 2); row 0 all zero.
        let mut bytes = Vec::new();
        for w in [USAGE_MAGIC, 3, 3, 0, 0, 0, 1, 2, 3, 4, 5, 6] {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(&bytes[..4], b"IKU1");
        std::fs::write(&path, &bytes).unwrap();
        let mut warnings = vec![];
        let h = read_usage(&path, &small(), &mut warnings).unwrap();
        assert_eq!(
            h.total.counts,
            vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]
        );
        assert!(warnings.is_empty());
        // Zero-byte file = all-zero history.
        std::fs::write(&path, "").unwrap();
        assert_eq!(
            read_usage(&path, &small(), &mut vec![])
                .unwrap()
                .total
                .counts,
            vec![vec![0.0; 3]; 2]
        );
    }

    #[test]
    fn usage_engine_mismatch_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u");
        std::fs::write(
            &path,
            format!("-1 3 3\n-2 1 {}\n1 0 1\n", engine_id("olmoe")),
        )
        .unwrap();
        let ctx = HeatContext {
            engine: Some("glm_moe_dsa".into()),
            ..small()
        };
        let mut warnings = vec![];
        read_usage(&path, &ctx, &mut warnings).unwrap();
        assert!(
            warnings.len() == 1 && warnings[0].contains("`olmoe`"),
            "{warnings:?}"
        );
    }

    #[test]
    fn usage_bad_inputs_name_the_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad_usage");
        let cases: &[(&str, &str)] = &[
            (
                "1 0 x\n",
                "line 1, field 3 (count): `x` is not a non-negative whole number",
            ),
            ("1 0\n", "line 1: has 2 fields"),
            ("1 0 -4\n", "line 1, field 3 (count)"),
            (
                "1 7 1\n",
                "line 1, field 2 (expert): expert 7 does not exist in MoE layer 0 of `small`",
            ),
            (
                "-1 4 3\n",
                "line 1, field 2 (n_layers): 4 layers, `small` has 3",
            ),
            ("-1 3 8\n", "line 1, field 3 (n_experts): 8 experts"),
            ("-2 2 5\n", "line 1, field 2 (format_version): version 2"),
            ("-3 1 1\n", "line 1, field 1 (layer)"),
            (
                "1 0 1\n-1 3 3\n",
                "line 2: header record -1 comes after data",
            ),
            (
                "-1 3 3\n5 0 1\n",
                "line 2, field 1 (layer): 5 is past the header's layers 0..=3",
            ),
            (
                "1 0 1\n1 0 2\n",
                "line 2: layer 1 expert 0 is already given on line 1",
            ),
            (
                "0 0 1\n9 1 1\n",
                "layers: no row is in an MoE layer of `small`",
            ),
        ];
        for (text, place) in cases {
            std::fs::write(&path, text).unwrap();
            one_line(
                read_usage(&path, &small(), &mut vec![]).unwrap_err(),
                "bad_usage",
                place,
            );
        }
        std::fs::write(&path, b"1 0 1\n\x00\xff").unwrap();
        one_line(
            read_usage(&path, &small(), &mut vec![]).unwrap_err(),
            "bad_usage",
            "byte 7",
        );
        let mut bytes = USAGE_MAGIC.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[3, 0, 0, 0, 3, 0, 0, 0, 1]);
        std::fs::write(&path, &bytes).unwrap();
        one_line(
            read_usage(&path, &small(), &mut vec![]).unwrap_err(),
            "bad_usage",
            "byte 13",
        );
        // Without a model the model layers cannot be mapped.
        let msg = one_line(
            read_usage(&path, &HeatContext::default(), &mut vec![]).unwrap_err(),
            "bad_usage",
            "layers",
        );
        assert!(msg.contains("--model"), "{msg}");
        let h = heat(vec![vec![1.0; 3]]);
        let msg = one_line(
            write_usage(&h, &path, &HeatContext::default(), &mut vec![]).unwrap_err(),
            "bad_usage",
            "layers",
        );
        assert!(msg.contains("--model"), "{msg}");
        one_line(
            write_usage(&h, &path, &small(), &mut vec![]).unwrap_err(),
            "bad_usage",
            "heat has 1 MoE layers",
        );
    }

    #[test]
    fn route_trace_groups_forwards_and_maps_layers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("route.txt");
        // A prefill forward of 2 rows (calls 0, 1 = layers 1, 2; layer 3 is
        // MTP and dropped), then a decode forward of 1 row (calls 2, 3).
        let text =
            "0 0 1 0:0.5000 1:0.5000\n0 1 1 2:1.0000 0:0.1\n1 0 2 1:0.7 2:0.3\n1 1 2 1:0.6 0:0.4\n\
                    1 0 3 2:1.0 1:0.0\n2 0 1 2:0.9 1:0.1\n3 0 2 0:0.5 2:0.5\n";
        std::fs::write(&path, text).unwrap();
        let mut warnings = vec![];
        let trace = read_route_trace(&path, &small(), &mut warnings).unwrap();
        assert_eq!(warnings.len(), 1);
        let seqs: Vec<(&str, u64)> = trace
            .tokens
            .iter()
            .map(|t| (t.seq.as_str(), t.pos))
            .collect();
        assert_eq!(seqs, [("0", 0), ("0", 1), ("1", 0)]);
        assert_eq!(trace.tokens[1].routes, vec![vec![2, 0], vec![1, 0]]);
        // Layer 1 (ordinal 0): ids 0,1 | 2,0 | 2,1 -> [2, 2, 2]; layer 2: 1,2 | 1,0 | 0,2 -> [2, 2, 2].
        let h = trace.heat();
        assert_eq!(
            h.total.counts,
            vec![vec![2.0, 2.0, 2.0], vec![2.0, 2.0, 2.0]]
        );
        assert_eq!(h.total.tokens, Some(vec![3, 3]));
    }

    #[test]
    fn route_trace_bad_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad_route");
        let cases: &[(&str, &str)] = &[
            ("0 0 1\n", "line 1: has 3 fields"),
            (
                "0 0 1 2\n",
                "line 1, field 4 (id:gate): `2` is not `<id>:<gate>`",
            ),
            ("0 0 1 x:0.5\n", "line 1, field 4 (id)"),
            ("0 0 1 1:abc\n", "line 1, field 4 (gate)"),
            ("0 z 1 1:0.5\n", "line 1, field 2 (row)"),
            ("0 0 1 5:0.5\n", "line 1: expert 5 does not exist"),
        ];
        for (text, place) in cases {
            std::fs::write(&path, text).unwrap();
            one_line(
                read_route_trace(&path, &small(), &mut vec![]).unwrap_err(),
                "bad_route",
                place,
            );
        }
        std::fs::write(&path, "0 0 1 1:0.5\n").unwrap();
        let msg = one_line(
            read_route_trace(&path, &HeatContext::default(), &mut vec![]).unwrap_err(),
            "bad_route",
            "layers",
        );
        assert!(msg.contains("--model"));
    }

    #[test]
    fn real_glm_snapshot() {
        let Some(dir) = shared_data("colibri/glm52_m1ultra_fmt2_2026-08-04") else {
            return;
        };
        let path = dir.join("colibri_usage.snapshot");
        let mut warnings = vec![];
        let h = read_usage(&path, &glm(), &mut warnings).unwrap();
        // Independent sums, computed with awk on the file:
        //   awk '{s+=$3} END{print s}'          -> 6373208 (all rows, SOURCES.md)
        //   awk '$1==78{s+=$3} END{print s}'    -> 41408 (MTP row, dropped)
        //   awk '$1==3{s+=$3} END{print s}'     -> 84424 (= 8 x 10553 tokens; every MoE layer has this sum)
        let total: f64 = h.total.counts.iter().flatten().sum();
        assert_eq!(total + 41408.0, 6_373_208.0);
        assert_eq!(h.total.counts.len(), 75);
        assert!(h
            .total
            .counts
            .iter()
            .all(|r| r.len() == 256 && r.iter().sum::<f64>() == 84424.0));
        assert_eq!(h.total.counts[0][0], 429.0); // first line `3 0 429`
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("[78]") && warnings[0].contains("41408 selections"),
            "{}",
            warnings[0]
        );
        // Written back as v1 and read again: the same table.
        let out = tempfile::tempdir().unwrap();
        let copy = out.path().join(".coli_usage");
        write_usage(&h, &copy, &glm(), &mut vec![]).unwrap();
        assert_eq!(
            read_usage(&copy, &glm(), &mut vec![]).unwrap().total,
            h.total
        );
    }
}
