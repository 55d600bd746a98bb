//! Colibri's heat formats (docs/formats.md sections 1-3):
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
//!
//! This module owns the binary table that HEAT_FILE and IKU1 share (magic,
//! dims, counts) and its check against the model; `heat_file`, `usage` and
//! `route` read and write one format each.

mod heat_file;
mod route;
#[cfg(test)]
mod tests;
mod usage;

pub use heat_file::HEAT_MAGIC;
pub(crate) use heat_file::{read_heat_file, write_heat_file};
pub(crate) use route::read_route_trace;
pub use usage::{engine_id, DEFAULT_ENGINE, USAGE_MAGIC};
pub(crate) use usage::{read_usage, write_usage};

use super::common::expert_problem;
use super::HeatContext;
use residency_core::error::{PlannerError, Result};
use std::path::Path;

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
