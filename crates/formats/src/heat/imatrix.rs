//! llama.cpp's importance matrix read as heat: the GGUF file `llama-imatrix`
//! writes by default (tools/imatrix/imatrix.cpp, `save_imatrix`).
//!
//! Layout: metadata `general.type = imatrix`, `imatrix.datasets` (the
//! calibration files), `imatrix.chunk_count` and `imatrix.chunk_size`; then
//! per weight `<weight>.in_sum2` (F32, `[row, matrices]`), `<weight>.counts`
//! (F32, `[1, matrices]`) and, in newer builds, `<weight>.in_sum`. For a
//! routed-expert weight (`blk.N.ffn_{gate,up,down}_exps.weight`) the
//! matrices are the experts and each count is the token routes that reached
//! that expert, so the counts are heat: prefill over the calibration text,
//! `chunk_count x chunk_size` tokens through every layer.
//!
//! Only the header and the `.counts` tensors are read (a few KiB of a
//! DeepSeek-V3-size file of about 1 GB of sums), and they are also what
//! [`content_sha256`] hashes, so planning with such a file reads no sums.
//!
//! The legacy `.dat` format keeps one call count per weight and no count
//! per expert; it is recognised and refused with how to get a usable file.

use super::common::LayerMap;
use super::{Heat, HeatContext, HeatFormat, HeatTable};
use crate::gguf::{Header, TensorInfo, Value};
use residency_core::error::{PlannerError, Result};
use residency_core::plan::sha256_hex;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// The expert projections whose counts are per expert; gate and up read the
/// same routed input, down the same routes' activations, so all agree.
const PROJECTIONS: [&str; 4] = [
    "ffn_gate_exps",
    "ffn_up_exps",
    "ffn_down_exps",
    "ffn_gate_up_exps",
];

const REGENERATE: &str = "regenerate it with a current llama-imatrix, which writes GGUF by default (llama-imatrix -m MODEL.gguf -f TEXT -o FILE.imatrix.gguf)";

/// Whether `head` (a file's first bytes) is llama.cpp's legacy imatrix
/// `.dat`: an i32 entry count, then the first entry's i32 name length and
/// its name, a weight name such as `blk.0.attn_k.weight`.
pub(crate) fn is_legacy_dat(head: &[u8]) -> bool {
    let int = |at: usize| {
        head.get(at..at + 4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    match (int(0), int(4)) {
        (Some(entries), Some(len)) if entries >= 1 && (1..=1024).contains(&len) => head
            .get(8..8 + len as usize)
            .is_some_and(|name| name.iter().all(u8::is_ascii_graphic) && name.contains(&b'.')),
        _ => false,
    }
}

/// Whether `path` is a GGUF file of `general.type = imatrix` (not a model).
pub fn is_imatrix(path: &Path) -> bool {
    crate::gguf::is_gguf(path)
        && Header::read(path).is_ok_and(|h| {
            h.metadata.get("general.type").and_then(Value::as_str) == Some("imatrix")
        })
}

/// The header and the bytes of every `.counts` tensor, in header order.
struct Imatrix {
    header: Header,
    counts: Vec<(TensorInfo, Vec<u8>)>,
}

impl Imatrix {
    fn open(path: &Path) -> Result<Imatrix> {
        let mut file = std::fs::File::open(path).map_err(|e| PlannerError::io(path, e))?;
        let mut head = Vec::new();
        (&mut file)
            .take(8 + 1024)
            .read_to_end(&mut head)
            .map_err(|e| PlannerError::io(path, e))?;
        if !head.starts_with(b"GGUF") && is_legacy_dat(&head) {
            return Err(PlannerError::input(
                path,
                "byte 0",
                "is llama.cpp's legacy imatrix .dat, which keeps one call count per weight and no count per expert",
                REGENERATE,
            ));
        }
        let header = Header::read(path)?;
        match header.metadata.get("general.type").and_then(Value::as_str) {
            Some("imatrix") => {}
            _ if header.metadata.contains_key("general.architecture") => {
                return Err(PlannerError::input(
                    path,
                    "general.type",
                    "is a model file, not an importance matrix",
                    "pass the model as --model; for heat, give the imatrix computed on it (llama-imatrix -m MODEL.gguf -f TEXT -o FILE.imatrix.gguf)",
                ))
            }
            other => {
                return Err(PlannerError::input(
                    path,
                    "general.type",
                    format!("is {other:?}, not \"imatrix\": not a llama-imatrix file"),
                    REGENERATE,
                ))
            }
        }
        let mut counts = Vec::new();
        for t in header
            .tensors
            .iter()
            .filter(|t| t.name.ends_with(".counts"))
        {
            // ggml type 0 is F32, which llama-imatrix writes counts in.
            if t.ggml_type.id != 0 {
                return Err(PlannerError::input(
                    path,
                    format!("tensor {}", t.name),
                    format!(
                        "is {}, not F32 as llama-imatrix writes counts",
                        t.ggml_type.name
                    ),
                    REGENERATE,
                ));
            }
            let mut bytes = vec![0u8; t.bytes as usize];
            file.seek(SeekFrom::Start(t.file_offset))
                .and_then(|_| file.read_exact(&mut bytes))
                .map_err(|e| PlannerError::io(path, e))?;
            counts.push((t.clone(), bytes));
        }
        Ok(Imatrix { header, counts })
    }

    fn u32_key(&self, key: &str) -> Option<u64> {
        self.header.metadata.get(key).and_then(Value::as_u64)
    }
}

/// The identity a plan records for an imatrix: the sha256 of its header and
/// its counts, the only bytes heat depends on.
pub(crate) fn content_sha256(path: &Path) -> Result<String> {
    let file = Imatrix::open(path)?;
    let mut bytes = file.header.sha256.clone().into_bytes();
    for (_, b) in &file.counts {
        bytes.extend_from_slice(b);
    }
    Ok(sha256_hex(&bytes))
}

/// One routed-expert weight's counts.
struct ExpertCounts {
    tensor: String,
    projection: &'static str,
    counts: Vec<f64>,
}

/// `blk.N.<projection>.weight.counts` -> (N, projection).
fn expert_weight(name: &str) -> Option<(u64, &'static str)> {
    let rest = name.strip_prefix("blk.")?.strip_suffix(".weight.counts")?;
    let (layer, projection) = rest.split_once('.')?;
    let projection = PROJECTIONS.iter().find(|&&p| p == projection)?;
    Some((layer.parse().ok()?, projection))
}

pub(crate) fn read(path: &Path, ctx: &HeatContext, warnings: &mut Vec<String>) -> Result<Heat> {
    let file = Imatrix::open(path)?;
    // Per transformer layer, every projection's counts.
    let mut layers: BTreeMap<u64, Vec<ExpertCounts>> = BTreeMap::new();
    for (info, bytes) in &file.counts {
        let Some((layer, projection)) = expert_weight(&info.name) else {
            continue;
        };
        let place = || format!("tensor {}", info.name);
        let counts: Vec<f64> = bytes
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes(b.try_into().expect("4 bytes"))))
            .collect();
        if counts.len() == 1 {
            return Err(PlannerError::input(
                path,
                place(),
                "holds one count for all experts (a file converted from the legacy .dat, which folds per-expert counts away)",
                REGENERATE,
            ));
        }
        if let Some((e, c)) = counts
            .iter()
            .enumerate()
            .find(|(_, c)| !(c.is_finite() && **c >= 0.0))
        {
            return Err(PlannerError::input(
                path,
                format!("{}, expert {e}", place()),
                format!("count {c} is not a non-negative number"),
                REGENERATE,
            ));
        }
        layers.entry(layer).or_default().push(ExpertCounts {
            tensor: info.name.clone(),
            projection,
            counts,
        });
    }
    if layers.is_empty() {
        return Err(PlannerError::input(
            path,
            "tensors",
            "hold no routed-expert counts (no blk.N.ffn_*_exps.weight.counts): the model it was computed on has no routed experts",
            "compute the importance matrix on the MoE model you plan",
        ));
    }
    for projections in layers.values() {
        agree(path, projections)?;
    }
    let rows = moe_rows(path, ctx, layers, warnings)?;
    let tokens = chunk_tokens(path, &file, &rows, warnings);
    let source_layers = rows.iter().rposition(Option::is_some).map_or(0, |l| l + 1);
    let widths: Vec<usize> = match &ctx.experts {
        Some(w) if w.len() == rows.len() => w.clone(),
        _ => rows
            .iter()
            .map(|r| r.as_ref().map_or(0, |r| r.counts.len()))
            .collect(),
    };
    let counts: Vec<Vec<f64>> = rows
        .into_iter()
        .zip(&widths)
        .map(|(row, &w)| row.map_or_else(|| vec![0.0; w], |r| r.counts))
        .collect();
    let datasets = match file.header.metadata.get("imatrix.datasets") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => String::new(),
    };
    warnings.push(format!(
        "{}: llama-imatrix counts are prefill routes over its calibration text{}{}, not decode on your traffic",
        path.display(),
        if datasets.is_empty() {
            String::new()
        } else {
            format!(" ({datasets})")
        },
        tokens.map_or_else(String::new, |n| format!(", {n} tokens"))
    ));
    Ok(Heat {
        model: None,
        format: HeatFormat::Imatrix,
        source_layers,
        total: HeatTable {
            tokens: tokens.map(|n| vec![n; counts.len()]),
            counts,
        },
        categories: Default::default(),
    })
}

/// The projections of one layer count the same routes: the same experts,
/// the same counts (whole numbers in f32, so compared exactly).
fn agree(path: &Path, projections: &[ExpertCounts]) -> Result<()> {
    let first = &projections[0];
    for other in &projections[1..] {
        let differ = first.counts.len() != other.counts.len()
            || first.counts.iter().zip(&other.counts).any(|(a, b)| a != b);
        if differ {
            let at = first
                .counts
                .iter()
                .zip(&other.counts)
                .position(|(a, b)| a != b)
                .map_or_else(
                    || {
                        format!(
                            "{} experts against {}",
                            other.counts.len(),
                            first.counts.len()
                        )
                    },
                    |e| {
                        format!(
                            "expert {e} counts {} against {}",
                            other.counts[e], first.counts[e]
                        )
                    },
                );
            return Err(PlannerError::input(
                path,
                format!("tensor {}", other.tensor),
                format!(
                    "disagrees with {} of the same layer ({at}); the projections of a layer count the same routes",
                    first.projection
                ),
                REGENERATE,
            ));
        }
    }
    Ok(())
}

/// The layers' counts by MoE ordinal: through the model's MoE layers when
/// it is known (rows of other layers dropped with a warning, expert counts
/// checked against the model's), else the file's layers in order.
fn moe_rows(
    path: &Path,
    ctx: &HeatContext,
    layers: BTreeMap<u64, Vec<ExpertCounts>>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Option<ExpertCounts>>> {
    let Some(moe_layers) = ctx.moe_layers.as_deref() else {
        return Ok(layers
            .into_values()
            .map(|mut p| Some(p.swap_remove(0)))
            .collect());
    };
    let model = ctx.model_name.as_deref().unwrap_or("the model");
    let mut map = LayerMap::new(moe_layers, model);
    let mut rows: Vec<Option<ExpertCounts>> = (0..map.layers()).map(|_| None).collect();
    let mut mapped = 0;
    for (layer, mut projections) in layers {
        let row = projections.swap_remove(0);
        let selections = row.counts.iter().sum();
        let Some(ordinal) = map.ordinal_or_drop(layer, selections) else {
            continue;
        };
        let width = ctx.experts.as_ref().and_then(|w| w.get(ordinal).copied());
        if let Some(width) = width.filter(|&w| w != row.counts.len()) {
            return Err(PlannerError::input(
                path,
                format!("tensor {}", row.tensor),
                format!(
                    "counts {} experts; MoE layer {ordinal} (layer {layer}) of `{model}` has {width}",
                    row.counts.len()
                ),
                "use the imatrix computed on this model, or pass --model with the model it was computed on",
            ));
        }
        rows[ordinal] = Some(row);
        mapped += 1;
    }
    map.check_some_mapped(path, mapped)?;
    map.warn_dropped(path, "expert counts", warnings);
    Ok(rows)
}

/// Tokens through every layer: `chunk_count x chunk_size`, unless the
/// metadata lacks them or an expert's count exceeds them (a token reaches
/// an expert at most once), when use rates fall back to `top_k x c / sum c`.
fn chunk_tokens(
    path: &Path,
    file: &Imatrix,
    rows: &[Option<ExpertCounts>],
    warnings: &mut Vec<String>,
) -> Option<u64> {
    let chunks = file.u32_key("imatrix.chunk_count")?;
    let size = file.u32_key("imatrix.chunk_size")?;
    let tokens = chunks.checked_mul(size).filter(|&n| n > 0)?;
    let most = rows
        .iter()
        .flatten()
        .flat_map(|r| r.counts.iter().copied())
        .fold(0.0, f64::max);
    if most > tokens as f64 {
        warnings.push(format!(
            "{}: an expert counts {most} routes, more than the {tokens} tokens of imatrix.chunk_count x imatrix.chunk_size; use rates are top_k x count / sum of counts",
            path.display()
        ));
        return None;
    }
    Some(tokens)
}

#[cfg(test)]
mod tests;
