//! Heat format detection (design §3.3: "detected from magic bytes or
//! extension"): magic bytes first (QTH1 -> coli-heat, IKU1 -> coli-usage,
//! GGUF and llama.cpp's legacy `.dat` layout -> imatrix, a zip -> sglang-pt,
//! whose reader refuses other zips and legacy torch files by name),
//! then the extension with a look at the content (`.json` object vs array,
//! `.jsonl` first-line keys, `.csv` header), then the content of other text
//! files (`int int int` -> coli-usage, `int int int id:gate` -> coli-route),
//! and for a directory the files it or its subfolders hold.

use super::colibri::{HEAT_MAGIC, USAGE_MAGIC};
use super::HeatFormat;
use residency_core::error::{PlannerError, Result};
use std::io::Read;
use std::path::Path;

/// Bytes read from the start of a file to detect its format.
const SNIFF: u64 = 64 * 1024;
const FIX: &str = "pass --heat-format with one of: json, jsonl, csv, coli-heat, coli-usage, coli-route, esft, llama4-json, mixtral-jsonl, qwen3-csv, sglang-json, sglang-pt, vllm-eplb, imatrix";

/// The format of a heat file or data-set directory.
pub fn detect_format(path: &Path) -> Result<HeatFormat> {
    super::common::must_exist(path)?;
    if path.is_dir() {
        return detect_dir(path);
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(SNIFF).read_to_end(&mut head))
        .map_err(|e| PlannerError::io(path, e))?;
    let unknown = |why: &str| {
        PlannerError::input(
            path,
            "format",
            format!("cannot tell the heat format: {why}"),
            FIX,
        )
    };
    if head.len() >= 4 {
        let magic = &head[..4];
        if magic == HEAT_MAGIC.to_le_bytes() {
            return Ok(HeatFormat::ColiHeat);
        }
        if magic == USAGE_MAGIC.to_le_bytes() {
            return Ok(HeatFormat::ColiUsage);
        }
        // The imatrix reader refuses a model file and the legacy .dat
        // (no per-expert counts) with how to get a usable file.
        if magic == b"GGUF" || super::imatrix::is_legacy_dat(&head) {
            return Ok(HeatFormat::Imatrix);
        }
        if magic == crate::torch::ZIP_MAGIC {
            return Ok(HeatFormat::SglangPt);
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.starts_with("expert_weights_") && name.ends_with(".txt") {
        return Ok(HeatFormat::Esft);
    }
    let text = String::from_utf8_lossy(&head);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let extension = path
        .extension()
        .map(|x| x.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        // A torch file in the legacy (pickle) format: the reader says how
        // to re-save it.
        "pt" | "pth" => Ok(HeatFormat::SglangPt),
        "json" => match first.chars().next() {
            // Engine dumps are JSON objects too, told apart by their keys.
            Some('{') if text.contains("\"logical_count\"") => Ok(HeatFormat::SglangJson),
            Some('{') if text.contains("\"expert_load_window\"") => Ok(HeatFormat::VllmEplb),
            Some('{') => Ok(HeatFormat::Json),
            Some('[') => Ok(HeatFormat::Llama4Json),
            _ => Err(unknown("a .json file that starts with neither `{` nor `[`")),
        },
        "jsonl" => jsonl_kind(first).ok_or_else(|| unknown("the first line of this .jsonl has neither `routes` nor `problem_id`")),
        "csv" => Ok(csv_kind(&name, &text)),
        _ => sniff_text(first, &text, &name).ok_or_else(|| {
            if head.is_empty() {
                unknown("the file is empty (an empty .coli_usage is all-zero history: pass --heat-format coli-usage)")
            } else {
                unknown("neither a known magic number nor a known text layout")
            }
        }),
    }
}

fn jsonl_kind(first: &str) -> Option<HeatFormat> {
    if first.contains("\"routes\"") {
        Some(HeatFormat::Jsonl)
    } else if ["\"problem_id\"", "\"gating_probs\""]
        .iter()
        .any(|k| first.contains(k))
    {
        Some(HeatFormat::MixtralJsonl)
    } else {
        None
    }
}

fn csv_kind(name: &str, text: &str) -> HeatFormat {
    let header = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    if header.starts_with("Layer,Language,")
        || name.ends_with("_avg_dist.csv")
        || name.ends_with("_avg_activation.csv")
    {
        HeatFormat::Qwen3Csv
    } else {
        HeatFormat::Csv
    }
}

/// A file without a telling extension, by its first line.
fn sniff_text(first: &str, text: &str, name: &str) -> Option<HeatFormat> {
    if first.is_empty() {
        return name.contains("coli_usage").then_some(HeatFormat::ColiUsage);
    }
    if first.starts_with('[') {
        return Some(HeatFormat::Llama4Json);
    }
    if first.starts_with('{') {
        return Some(jsonl_kind(first).unwrap_or(HeatFormat::Json));
    }
    let header = first.to_ascii_lowercase();
    if first.starts_with('#') || header.starts_with("layer,") {
        return Some(csv_kind(name, text));
    }
    let fields: Vec<&str> = first.split_whitespace().collect();
    let ints = fields.len() >= 3 && fields[..3].iter().all(|f| f.parse::<i64>().is_ok());
    match fields.len() {
        3 if ints => Some(HeatFormat::ColiUsage),
        n if n >= 4 && ints && fields[3].contains(':') => Some(HeatFormat::ColiRoute),
        _ => None,
    }
}

/// A data-set directory: the formats its files (or its subfolders' files) belong to.
fn detect_dir(path: &Path) -> Result<HeatFormat> {
    let entries = super::common::dir_entries;
    let kind_of_file = |p: &Path| -> Option<HeatFormat> {
        let name = p.file_name()?.to_string_lossy().into_owned();
        if name.starts_with("expert_weights_") && name.ends_with(".txt") {
            Some(HeatFormat::Esft)
        } else if name.ends_with("_routing.jsonl") {
            Some(HeatFormat::MixtralJsonl)
        } else if name.ends_with("_avg_activation.csv") || name.ends_with("_avg_dist.csv") {
            Some(HeatFormat::Qwen3Csv)
        } else if name.ends_with(".json") {
            Some(HeatFormat::Llama4Json)
        } else {
            None
        }
    };
    // The formats of one folder's files; ESFT task folders also hold a
    // `summary.json`, which is not a llama4-json query.
    let folder = |files: &[std::path::PathBuf]| -> Vec<HeatFormat> {
        let kinds: Vec<HeatFormat> = files
            .iter()
            .filter(|p| p.is_file())
            .filter_map(|p| kind_of_file(p))
            .collect();
        if kinds.contains(&HeatFormat::Esft) {
            vec![HeatFormat::Esft]
        } else {
            kinds
        }
    };
    let top = entries(path)?;
    let mut found = folder(&top);
    if found.is_empty() {
        for sub in top.iter().filter(|p| p.is_dir()) {
            // Subfolders are categories of esft or llama4-json only.
            found.extend(
                folder(&entries(sub)?)
                    .into_iter()
                    .filter(|k| matches!(k, HeatFormat::Esft | HeatFormat::Llama4Json)),
            );
        }
    }
    found.sort_by_key(|f| f.name());
    found.dedup();
    match found.as_slice() {
        [one] => Ok(*one),
        [] => Err(PlannerError::input(
            path,
            "directory",
            "holds no heat data set (esft, llama4-json, mixtral-jsonl or qwen3-csv files, itself or in subfolders)",
            "name a data-set folder or a heat file",
        )),
        many => {
            let names: Vec<&str> = many.iter().map(|f| f.name()).collect();
            Err(PlannerError::input(
                path,
                "directory",
                format!("holds files of several formats ({})", names.join(", ")),
                "name one data set's folder",
            ))
        }
    }
}

#[cfg(test)]
mod tests;
