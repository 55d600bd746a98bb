//! `residency heat`: heat in any format read, summed up per layer, drawn
//! and converted.

use crate::flags::ModelArg;
use crate::{plot, print, PartialHeatArg};
use anyhow::{bail, Result};
use residency_core::model::Model;
use residency_formats::heat::{self, HeatContext, HeatFormat};
use std::path::Path;

/// The model given with `--model` and the heat reader's context for it.
pub fn heat_context(
    model: &ModelArg,
    partial_heat: PartialHeatArg,
) -> Result<(Option<Model>, HeatContext)> {
    let model = model.load()?;
    let ctx = HeatContext {
        allow_partial_heat: partial_heat.allow_partial_heat,
        ..model
            .as_ref()
            .map(HeatContext::for_model)
            .unwrap_or_default()
    };
    Ok((model, ctx))
}

/// `residency heat`: heat read in any format, its per-layer concentration
/// printed and drawn, and written in another format.
pub fn heat_command(
    input: &Path,
    format: Option<HeatFormat>,
    model: &ModelArg,
    partial_heat: PartialHeatArg,
    out: Option<&Path>,
    out_format: Option<HeatFormat>,
    plot_file: Option<&Path>,
) -> Result<()> {
    if let Some(file) = plot_file {
        plot::PlotFormat::from_path(file)?;
    }
    let (model, ctx) = heat_context(model, partial_heat)?;
    let mut warnings = Vec::new();
    let heat = heat::read_heat(input, format, &ctx, &mut warnings)?;
    if let Some(model) = &model {
        heat.total.use_rates(model, input, &mut warnings)?;
    }
    crate::term::notes(&warnings);
    print::heat_summary(input, &heat);
    if let Some(file) = plot_file {
        let model_name = model
            .as_ref()
            .map(|m| m.name().to_string())
            .or_else(|| heat.model.clone())
            .unwrap_or_else(|| "model not named".into());
        let input_name = input.file_name().unwrap_or(input.as_os_str());
        let title = format!(
            "Routing concentration: {} ({model_name})",
            input_name.to_string_lossy()
        );
        plot::concentration_plot(file, &title, &heat::concentration(&heat.total))?;
        println!("wrote {}", file.display());
    }
    if let Some(out) = out {
        let format = match out_format {
            Some(f) => f,
            None => format_from_extension(out)?,
        };
        let mut warnings = Vec::new();
        heat::write_heat(&heat, out, format, &ctx, &mut warnings)?;
        crate::term::notes(&warnings);
        println!("wrote {} ({format})", out.display());
    }
    Ok(())
}

/// The heat format `--out` names by its extension.
fn format_from_extension(path: &Path) -> Result<HeatFormat> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    Ok(match ext {
        "json" => HeatFormat::Json,
        "csv" => HeatFormat::Csv,
        "pt" | "pth" => HeatFormat::SglangPt,
        "bin" | "heat" => HeatFormat::ColiHeat,
        _ if name.ends_with("coli_usage") => HeatFormat::ColiUsage,
        _ => bail!("{}: cannot tell the heat format from the name; give --out-format json|csv|coli-heat|coli-usage|sglang-json|sglang-pt", path.display()),
    })
}
