//! `profile calibrate --from-llama-bench`: where each of a GGUF's tensors
//! was in a llama-bench run (llama.cpp's own rules, below), the run's
//! `Work`, and the timing fitted to the runs, with every run predicted
//! beside its measurement (those kept out of the fit too). Runs may be of
//! several GGUF files: each is matched to the file of its `model_size`.
//!
//! llama.cpp's placement of tensor T of layer `il` (src/llama-model.cpp,
//! upstream 7d56da7): the first override rule whose pattern
//! `std::regex_search`es T's name names its buffer (the `-ot` rules, then
//! `-ncmoe`'s); else the layer's device: a GPU when `il >=
//! max(n_layer + 1 - n_gpu_layers, 0)`, where the head counts as layer
//! `n_layer`, so `-ngl N` runs the head and the last N - 1 layers on the
//! GPU; the embeddings stay on the CPU.

use super::fit::{fit, Fit};
use super::graph::{Device, Step, Work};
use super::runs::BenchRun;
use crate::gguf::describe::Metadata;
use crate::gguf::tensors::{block_of, classify, Family};
use crate::gguf::GgufModel;
use regex::Regex;
use residency_core::error::PlannerError;
use residency_core::profile::{HardwareProfile, LlamaCppTiming};
use residency_core::stats::median_mean_of_middle;
use residency_core::units::Seconds;
use std::path::Path;

/// One placement (the runs with the same flags), measured and predicted
/// by the fitted timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The first run's label.
    pub label: String,
    /// The file name of the GGUF the runs ran.
    pub model: String,
    pub flags: String,
    /// Seconds per token of each run, in the order given.
    pub measured_seconds: Vec<f64>,
    pub predicted_seconds: f64,
    pub in_fit: bool,
}

impl Row {
    /// The median run's seconds per token.
    pub fn median_seconds(&self) -> f64 {
        median_mean_of_middle(&self.measured_seconds).expect("a row has runs")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    pub fit: Fit,
    pub rows: Vec<Row>,
}

/// Fits the timing to `fit_runs` of `models` on the machine of `profile`
/// (its GPUs' weight rates; its `llama_cpp` section, else its CPU and sync
/// rates, as the prior of what the runs cannot determine), and predicts
/// `fit_runs` and `check_runs`; without `fit_runs`, predicts `check_runs`
/// by the profile's own timing. Each run comes with its label; at least
/// one run and one model are given.
pub fn calibrate(
    models: &[GgufModel],
    profile: &HardwareProfile,
    fit_runs: &[(String, BenchRun)],
    check_runs: &[(String, BenchRun)],
) -> Result<Calibration, PlannerError> {
    let all = || fit_runs.iter().chain(check_runs);
    let threads = same_threads(all())?;
    let gpu_rates: Vec<f64> = profile.gpus.iter().map(|g| g.gemv_bandwidth.0).collect();
    let measured = |runs: &[(String, BenchRun)]| -> Result<Vec<(Work, f64)>, PlannerError> {
        runs.iter()
            .map(|(_, r)| {
                let gguf = model_of(models, r)?;
                Ok((run_work(gguf, r, &gpu_rates)?, r.token_seconds()))
            })
            .collect()
    };
    let fitting = measured(fit_runs)?;
    let checking = measured(check_runs)?;
    let fit = match fit_runs.first() {
        Some((_, first)) => {
            let mut fit = fit(&fitting, &prior(profile));
            let t = &first.test;
            let mut files: Vec<&str> = fit_runs
                .iter()
                .map(|(_, r)| r.test.model_filename.as_str())
                .collect();
            files.sort_unstable();
            files.dedup();
            fit.timing.source = Some(format!(
                "profile calibrate --from-llama-bench: {} run(s) of {} (llama-bench build {}, {}, -t {threads})",
                fit_runs.len(),
                files.join(", "),
                t.build_commit,
                t.gpu_info
            ));
            fit
        }
        // Only checking: the profile's own timing.
        None => Fit {
            timing: profile.llama_cpp.clone().ok_or_else(|| {
                check_runs[0].1.bad(
                    "",
                    "cannot be checked: the profile has no llama_cpp timing".into(),
                )
            })?,
            fitted: Vec::new(),
            kept: Vec::new(),
        },
    };
    let mut rows: Vec<Row> = Vec::new();
    let measured_runs = fit_runs
        .iter()
        .zip(&fitting)
        .map(|(r, m)| (r, m, true))
        .chain(check_runs.iter().zip(&checking).map(|(r, m)| (r, m, false)));
    for ((label, run), (work, seconds), in_fit) in measured_runs {
        let flags = run.flags();
        let model = model_name(model_of(models, run)?);
        match rows
            .iter_mut()
            .find(|r| r.flags == flags && r.model == model && r.in_fit == in_fit)
        {
            Some(row) => row.measured_seconds.push(*seconds),
            None => rows.push(Row {
                label: label.clone(),
                model,
                flags,
                measured_seconds: vec![*seconds],
                predicted_seconds: work.seconds(&fit.timing),
                in_fit,
            }),
        }
    }
    Ok(Calibration { fit, rows })
}

fn model_name(gguf: &GgufModel) -> String {
    gguf.path()
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

fn tensor_bytes(gguf: &GgufModel) -> u64 {
    gguf.tensors().map(|t| t.bytes).sum()
}

/// The model `run` ran: the one whose tensors sum to the run's
/// `model_size` (what llama-bench writes; its `model_filename` is a path on
/// the machine that ran it), and of those the one of the run's file name.
fn model_of<'a>(models: &'a [GgufModel], run: &BenchRun) -> Result<&'a GgufModel, PlannerError> {
    let size = run.test.model_size;
    let sized: Vec<&GgufModel> = models.iter().filter(|m| tensor_bytes(m) == size).collect();
    let ran = Path::new(&run.test.model_filename).file_name();
    match sized.as_slice() {
        [one] => Ok(one),
        // One model: `run_work` says the run is of another file.
        [] if models.len() == 1 => Ok(&models[0]),
        [] => {
            let given: Vec<String> = models
                .iter()
                .map(|m| format!("{} {} bytes", model_name(m), tensor_bytes(m)))
                .collect();
            Err(run.bad(
                "model_size",
                format!(
                    "is {size} bytes, but no --model holds that many bytes of tensors ({}): the run is of another model (`{}`); give --model the GGUF file it used too",
                    given.join(", "),
                    run.test.model_filename
                ),
            ))
        }
        several => several
            .iter()
            .find(|m| m.path().file_name() == ran)
            .copied()
            .ok_or_else(|| {
                run.bad(
                    "model_filename",
                    format!(
                        "is `{}`, and several --model files hold its {size} bytes, none of that name: give --model files of distinct sizes, or one named as the run's",
                        run.test.model_filename
                    ),
                )
            }),
    }
}

/// What the runs cannot tell: the profile's own llama.cpp timing, else the
/// cost model's rates (node 0's GEMV rate, GPU 0's sync as a crossing, no
/// per-layer cost).
fn prior(profile: &HardwareProfile) -> LlamaCppTiming {
    profile.llama_cpp.clone().unwrap_or_else(|| LlamaCppTiming {
        source: None,
        cpu_bandwidth: profile.numa[0].gemv_bandwidth,
        gpu_layer_overhead: Seconds(0.0),
        cpu_layer_overhead: Seconds(0.0),
        crossing_overhead: profile
            .gpus
            .first()
            .map_or(Seconds(0.0), |g| g.sync_overhead),
        cpu_matrix_overhead: Seconds(0.0),
        token_overhead: profile.fixed_token_seconds,
    })
}

/// The one thread count of the runs: the CPU rate fitted is llama.cpp's
/// with that many threads.
fn same_threads<'a>(
    mut runs: impl Iterator<Item = &'a (String, BenchRun)>,
) -> Result<u32, PlannerError> {
    let (_, first) = runs.next().expect("at least one run");
    let threads = first.test.n_threads;
    for (_, r) in runs {
        if r.test.n_threads != threads {
            return Err(r.bad(
                "n_threads",
                format!(
                    "is {}, but {} ran with {threads}: the CPU rate depends on the thread count",
                    r.test.n_threads,
                    first.label(1)
                ),
            ));
        }
    }
    Ok(threads)
}

/// Order of a layer's tensor groups in the graph: attention (with the
/// norms and router), dense FFN, shared and chunk experts, then the routed
/// experts' gate and up, then down.
fn group(family: Family, name: &str) -> u8 {
    match family {
        Family::Attention => 0,
        Family::DenseFfn => 1,
        Family::SharedExperts => 2,
        Family::ChunkExperts => 3,
        Family::RoutedExperts if name.contains("ffn_down_exps") => 5,
        Family::RoutedExperts => 4,
        Family::Head | Family::Embeddings => 0,
    }
}

/// The work of `run` over `gguf`'s tensors.
pub fn run_work(
    gguf: &GgufModel,
    run: &BenchRun,
    gpu_bytes_per_s: &[f64],
) -> Result<Work, PlannerError> {
    let file_bytes = tensor_bytes(gguf);
    if run.test.model_size != file_bytes {
        return Err(run.bad(
            "model_size",
            format!(
                "is {} bytes, but {} holds {file_bytes} bytes of tensors: the run is of another model (`{}`); give --model the GGUF file the runs used",
                run.test.model_size,
                gguf.path().display(),
                run.test.model_filename
            ),
        ));
    }
    single_gpu(run)?;
    placed_by_flags(run)?;
    let rules = overrides(run, gpu_bytes_per_s.len())?;
    let meta = Metadata::of(gguf);
    let arch = meta.string("general.architecture")?;
    let n_layer = meta.whole(&format!("{arch}.block_count"))? as i64;
    let nextn = meta
        .optional(&format!("{arch}.nextn_predict_layers"))?
        .unwrap_or(0) as i64;
    let top_k = meta.whole(&format!("{arch}.expert_used_count"))? as f64;
    let ngl = run.test.n_gpu_layers;
    let gpu_start = (n_layer + 1 - ngl).max(0);
    let by_layer = |il: i64| {
        if ngl > 0 && il >= gpu_start && !gpu_bytes_per_s.is_empty() {
            Device::Gpu(0)
        } else {
            Device::Cpu
        }
    };
    // (layer order, group, device, active bytes, expert matrices) per tensor.
    let mut placed = Vec::new();
    for t in gguf.tensors() {
        // The multi-token-prediction layers, whose tensors have names of
        // their own (`nextn.*`), do not run at decode.
        if block_of(&t.name).is_some_and(|l| l as i64 >= n_layer - nextn) {
            continue;
        }
        let Some((layer, family)) = classify(&t.name) else {
            return Err(PlannerError::input(
                gguf.path(),
                format!("tensor `{}`", t.name),
                "is of no tensor family residency knows",
                "report the tensor name with the model's architecture",
            ));
        };
        let il = layer.map_or(n_layer, |l| l as i64);
        if family == Family::Embeddings {
            continue;
        }
        let device = rules
            .iter()
            .find(|(re, _)| re.is_match(&t.name))
            .map_or_else(|| by_layer(il), |&(_, d)| d);
        if let Device::Gpu(g) = device {
            if g >= gpu_bytes_per_s.len() {
                return Err(run.bad(
                    "tensor_buft_overrides",
                    format!(
                        "puts `{}` on CUDA{g}, but the profile lists {} GPU(s)",
                        t.name,
                        gpu_bytes_per_s.len()
                    ),
                ));
            }
        }
        // A routed expert tensor: top_k of its matrices per token.
        let (bytes, matrices) = if family == Family::RoutedExperts {
            let experts = t.dims.last().copied().unwrap_or(1).max(1) as f64;
            (t.bytes as f64 * top_k / experts, top_k)
        } else {
            (t.bytes as f64, 0.0)
        };
        placed.push((il, group(family, &t.name), device, bytes, matrices));
    }
    Ok(Work::of(&graph_steps(placed, n_layer), gpu_bytes_per_s))
}

/// Steps in graph order from `(layer, group, device, bytes, matrices)` per
/// tensor: tensors of one group on one device are one step; the first step
/// of a transformer layer (below `n_layer`; the head is `n_layer`) starts it.
fn graph_steps(mut placed: Vec<(i64, u8, Device, f64, f64)>, n_layer: i64) -> Vec<Step> {
    placed.sort_by_key(|&(il, g, _, _, _)| (il, g));
    let mut steps: Vec<Step> = Vec::new();
    let mut last: Option<(i64, u8, Device)> = None;
    for (il, g, device, bytes, matrices) in placed {
        match steps.last_mut() {
            Some(step) if last == Some((il, g, device)) => {
                step.bytes += bytes;
                step.matrices += matrices;
            }
            _ => steps.push(Step {
                device,
                bytes,
                matrices,
                starts_layer: il < n_layer && last.is_none_or(|(l, _, _)| l != il),
            }),
        }
        last = Some((il, g, device));
    }
    steps
}

/// Runs whose flags say where every layer goes: with `n_gpu_layers` below
/// zero llama.cpp chose (`-fitt`, or its default fit), and the JSON does
/// not record what it chose.
fn placed_by_flags(run: &BenchRun) -> Result<(), PlannerError> {
    let ngl = run.test.n_gpu_layers;
    if ngl >= 0 {
        return Ok(());
    }
    let target = run
        .test
        .fit_target
        .map(|mib| format!(" to a margin of {mib} MiB"))
        .unwrap_or_default();
    Err(PlannerError::input(
        &run.file,
        format!("[{}].n_gpu_layers", run.index),
        format!("is {ngl}: llama.cpp fitted the run's layers itself{target}, and its JSON does not say where they went"),
        "run llama-fit-params with the run's flags and give a llama-bench run of the -ngl and -ot it prints",
    ))
}

/// Runs on one GPU only: how `--tensor-split` spreads layers over several
/// is not modelled yet.
fn single_gpu(run: &BenchRun) -> Result<(), PlannerError> {
    let split = &run.test.tensor_split;
    let shares = split
        .split('/')
        .filter(|s| s.trim().parse::<f64>().is_ok_and(|v| v > 0.0))
        .count();
    if shares > 1 {
        return Err(run.bad(
            "tensor_split",
            format!("is `{split}`: the run spreads layers over several GPUs, which calibration does not model yet"),
        ));
    }
    Ok(())
}

/// The run's override rules, compiled, with their devices.
fn overrides(run: &BenchRun, gpus: usize) -> Result<Vec<(Regex, Device)>, PlannerError> {
    run.overrides()?
        .into_iter()
        .map(|(pattern, buffer)| {
            let re = Regex::new(&pattern).map_err(|e| {
                // The regex crate draws the pattern with a caret over
                // several lines; its last line says what is wrong.
                let text = e.to_string();
                let why = text.lines().rev().find(|l| !l.trim().is_empty());
                run.bad(
                    "tensor_buft_overrides",
                    format!(
                        "pattern `{pattern}` is not a regex residency reads: {}",
                        why.unwrap_or_default().trim()
                    ),
                )
            })?;
            let device = if buffer.starts_with("CPU") || buffer == "CUDA_Host" {
                Device::Cpu
            } else if let Some(g) = buffer
                .strip_prefix("CUDA")
                .and_then(|g| g.parse::<usize>().ok())
            {
                Device::Gpu(g)
            } else {
                return Err(run.bad(
                    "tensor_buft_overrides",
                    format!(
                        "names buffer `{buffer}`; residency knows CPU and CUDA0..CUDA{}",
                        gpus.saturating_sub(1)
                    ),
                ));
            };
            Ok((re, device))
        })
        .collect()
}

#[cfg(test)]
mod tests;
