//! Heat: how often each routed expert is used (design §3.3). This module owns
//! the in-memory table, the conversion to use rates, format detection and
//! dispatch to one reader/writer module per format family.

use residency_core::error::{PlannerError, Result};
use residency_core::model::Model;
use std::collections::BTreeMap;
use std::path::Path;

mod colibri;
mod common;
mod csv;
mod detect;
#[cfg(test)]
mod dispatch_tests;
mod engines;
mod esft;
mod imatrix;
mod json;
mod jsonl;
mod llama4;
mod mixtral;
mod qwen3;
pub mod stats;
pub mod trace;

pub use colibri::{engine_id, DEFAULT_ENGINE};
pub use detect::detect_format;
pub use imatrix::is_imatrix;
pub use residency_core::heat::HeatTable;
pub use stats::{concentration, LayerConcentration};
pub use trace::{TokenRoutes, Trace};

/// A heat source: the whole table plus one table per category (task,
/// subject, language) where the source has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Heat {
    pub model: Option<String>,
    pub format: HeatFormat,
    /// MoE layers the source itself gives: its rows, or for a sparse source
    /// (long csv, coli-usage without a header, a trace) its highest MoE
    /// layer + 1. Readers may pad the tables to the model's MoE layers, so
    /// this, not the tables, tells partial heat (see [`read_heat`]).
    pub source_layers: usize,
    pub total: HeatTable,
    pub categories: BTreeMap<String, HeatTable>,
}

residency_core::named! {
    pub enum HeatFormat("heat format") {
        Json = "json",
        Jsonl = "jsonl",
        Csv = "csv",
        ColiHeat = "coli-heat",
        ColiUsage = "coli-usage",
        ColiRoute = "coli-route",
        Esft = "esft",
        Llama4Json = "llama4-json",
        MixtralJsonl = "mixtral-jsonl",
        Qwen3Csv = "qwen3-csv",
        SglangJson = "sglang-json",
        SglangPt = "sglang-pt",
        VllmEplb = "vllm-eplb",
        Imatrix = "imatrix",
    }
}

impl HeatFormat {
    /// Formats we can write as well as read.
    pub fn writable(self) -> bool {
        matches!(
            self,
            HeatFormat::Json
                | HeatFormat::Csv
                | HeatFormat::ColiHeat
                | HeatFormat::ColiUsage
                | HeatFormat::SglangJson
                | HeatFormat::SglangPt
        )
    }
}

/// What a reader may need from the model: engine formats number model
/// layers and must be mapped to MoE ordinals through `moe_layers`.
/// All fields are optional; without a model, formats that number model
/// layers (coli-usage, coli-route) cannot be read or written.
#[derive(Debug, Clone, Default)]
pub struct HeatContext {
    /// Transformer layer number of each MoE ordinal, when a model is known.
    pub moe_layers: Option<Vec<usize>>,
    pub model_name: Option<String>,
    /// Experts per MoE ordinal: sparse sources are padded to it and ids
    /// beyond it are errors naming the place.
    pub experts: Option<Vec<usize>>,
    /// Transformer layers of the model (the `-1 <n_layers> ..` header of
    /// `.coli_usage`).
    pub model_layers: Option<usize>,
    /// Colibri engine name whose FNV-1a-32 is the `.coli_usage` engine id
    /// (written; a mismatch on reading is a warning). `glm_moe_dsa` when unset.
    pub engine: Option<String>,
    /// Accept heat that gives fewer MoE layers than the model, its missing
    /// layers padded with zero counts (uniform heat with a note, in
    /// [`HeatTable::use_rates`]); refused when false (`--allow-partial-heat`).
    pub allow_partial_heat: bool,
}

impl HeatContext {
    pub fn for_model(model: &Model) -> Self {
        HeatContext {
            moe_layers: Some(model.moe_layer_numbers()),
            model_name: Some(model.name().to_string()),
            experts: Some(model.experts_per_layer()),
            model_layers: Some(model.description.layers),
            engine: None,
            allow_partial_heat: false,
        }
    }
}

/// Reads heat from a file or data-set directory. `format` overrides
/// detection (`--heat-format`). Per-token formats are read as a [`Trace`]
/// and summed by [`Trace::heat`]. Non-fatal findings (dropped MTP rows, a
/// model-name mismatch) are pushed to `warnings`, one line each. Heat that
/// gives fewer MoE layers than the model is refused unless
/// `ctx.allow_partial_heat`.
pub fn read_heat(
    path: &Path,
    format: Option<HeatFormat>,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Heat> {
    let format = match format {
        Some(f) => f,
        None => detect_format(path)?,
    };
    check_kind(path, format)?;
    let heat = match format {
        HeatFormat::Json => json::read(path, ctx, warnings)?,
        HeatFormat::Csv => csv::read(path, ctx, warnings)?,
        HeatFormat::ColiHeat => colibri::read_heat_file(path, ctx, warnings)?,
        HeatFormat::ColiUsage => colibri::read_usage(path, ctx, warnings)?,
        HeatFormat::Qwen3Csv => qwen3::read(path, ctx, warnings)?,
        HeatFormat::SglangJson | HeatFormat::SglangPt | HeatFormat::VllmEplb => {
            engines::read(path, format, ctx, warnings)?
        }
        HeatFormat::Imatrix => imatrix::read(path, ctx, warnings)?,
        HeatFormat::Jsonl
        | HeatFormat::ColiRoute
        | HeatFormat::Esft
        | HeatFormat::Llama4Json
        | HeatFormat::MixtralJsonl => read_trace(path, Some(format), ctx, warnings)?.heat(),
    };
    let heat = fit_model_layers(heat, path, ctx)?;
    if let (Some(recorded), Some(planned)) = (&heat.model, &ctx.model_name) {
        if recorded != planned {
            warnings.push(format!(
                "{}: heat was recorded on `{recorded}`, the model is `{planned}`",
                path.display()
            ));
        }
    }
    Ok(heat)
}

/// The sha256 a plan records for a heat source: of the file (every file of a
/// directory), except where most of a file is not heat: an imatrix's header
/// and counts, without its sums (about 1 GB for DeepSeek-V3).
pub fn content_sha256(path: &Path, format: HeatFormat) -> Result<String> {
    match format {
        HeatFormat::Imatrix => imatrix::content_sha256(path),
        _ => residency_core::plan::sha256_of_path(path),
    }
}

/// Parses our JSON heat from text (embedded defaults); `path` names it in errors.
pub fn read_json_str(text: &str, path: &Path, ctx: &HeatContext) -> Result<Heat> {
    fit_model_layers(json::from_str(text, path, ctx)?, path, ctx)
}

/// Heat that leaves MoE layers of the model out would plan them as if
/// uniformly used, which the user should choose, not find in a note: it is
/// refused unless `ctx.allow_partial_heat`, and then padded to the model's
/// MoE layers with zero counts. A layer inside the source that has no
/// selections is not partial heat (its source covers it).
fn fit_model_layers(mut heat: Heat, path: &Path, ctx: &HeatContext) -> Result<Heat> {
    let Some(widths) = &ctx.experts else {
        return Ok(heat);
    };
    if heat.source_layers >= widths.len() {
        return Ok(heat);
    }
    if !ctx.allow_partial_heat {
        let model = ctx
            .model_name
            .as_ref()
            .map_or_else(|| "the model".to_string(), |n| format!("model `{n}`"));
        return Err(PlannerError::input(
            path,
            "shape",
            format!(
                "heat gives {} MoE layers, {model} has {}",
                heat.source_layers,
                widths.len()
            ),
            "use heat recorded on every MoE layer of this model, or pass --allow-partial-heat to give the missing layers uniform heat",
        ));
    }
    for table in std::iter::once(&mut heat.total).chain(heat.categories.values_mut()) {
        table.pad_layers(widths);
    }
    Ok(heat)
}

/// Reads a per-token trace (jsonl, esft, llama4-json, mixtral-jsonl,
/// coli-route); other formats hold only counts and are refused.
pub fn read_trace(
    path: &Path,
    format: Option<HeatFormat>,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<Trace> {
    let format = match format {
        Some(f) => f,
        None => detect_format(path)?,
    };
    check_kind(path, format)?;
    match format {
        HeatFormat::Jsonl => jsonl::read_trace(path, ctx, warnings),
        HeatFormat::ColiRoute => colibri::read_route_trace(path, ctx, warnings),
        HeatFormat::Esft => esft::read_trace(path, ctx, warnings),
        HeatFormat::Llama4Json => llama4::read_trace(path, ctx, warnings),
        HeatFormat::MixtralJsonl => mixtral::read_trace(path, ctx, warnings),
        other => Err(PlannerError::input(
            path,
            "format",
            format!("{other} holds counts per expert, not the routes of each token"),
            "use a per-token format: jsonl, esft, llama4-json, mixtral-jsonl or coli-route",
        )),
    }
}

/// Writes heat atomically (temporary file + rename). Read-only formats are
/// refused, and so is `jsonl` (a per-token trace; see [`write_trace`]).
/// coli-usage needs the model (`ctx.moe_layers`) to number model layers.
/// What a format cannot hold (categories in a one-table format) is dropped
/// with a warning.
pub fn write_heat(
    heat: &Heat,
    path: &Path,
    format: HeatFormat,
    ctx: &HeatContext,
    warnings: &mut Vec<String>,
) -> Result<()> {
    match format {
        HeatFormat::Json => json::write(heat, path),
        HeatFormat::Csv => csv::write(heat, path, warnings),
        HeatFormat::ColiHeat => colibri::write_heat_file(heat, path, warnings),
        HeatFormat::ColiUsage => colibri::write_usage(heat, path, ctx, warnings),
        HeatFormat::SglangJson | HeatFormat::SglangPt => {
            engines::write(heat, path, format, ctx, warnings)
        }
        HeatFormat::Jsonl => Err(PlannerError::input(
            path,
            "format",
            "jsonl holds the routes of each token, which a heat table does not have",
            "write json or csv for heat (a trace is written with write_trace)",
        )),
        other => Err(PlannerError::input(
            path,
            "format",
            format!("{other} is read-only (we read it, we never write it)"),
            "write one of: json, csv, coli-heat, coli-usage, sglang-json, sglang-pt",
        )),
    }
}

/// Writes a per-token trace as our `jsonl`, atomically.
pub fn write_trace(trace: &Trace, path: &Path) -> Result<()> {
    jsonl::write_trace(trace, path)
}

/// Directory formats need a directory or a file of theirs; file formats a file.
fn check_kind(path: &Path, format: HeatFormat) -> Result<()> {
    let dir_ok = matches!(
        format,
        HeatFormat::Esft | HeatFormat::Llama4Json | HeatFormat::MixtralJsonl | HeatFormat::Qwen3Csv
    );
    if path.is_dir() && !dir_ok {
        return Err(PlannerError::input(
            path,
            "path",
            format!("is a directory; {format} is read from one file"),
            "name the file itself",
        ));
    }
    common::must_exist(path)?;
    Ok(())
}
