//! `coli-heat`: the HEAT_FILE of Colibri's qwen36 VRAM tier, binary: u32
//! magic, nl, ne, then u32[nl*ne] layer-major, little-endian; rows are MoE
//! ordinals. Read and written (atomically, which Colibri itself does not).

use super::super::common::{uniform_width, warn_categories_dropped, whole_u32};
use super::super::{Heat, HeatContext, HeatFormat, HeatTable};
use super::{binary_table, check_ne};
use residency_core::error::{read_file, write_atomic, PlannerError, Result};
use std::path::Path;

/// HEAT_FILE magic ("QTH1" read big-endian; bytes on disk `31 48 54 51`).
pub const HEAT_MAGIC: u32 = 0x5154_4831;

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
