//! `residency profile`: `detect` writes this machine's hardware profile,
//! `calibrate` measures its rates (or takes them from an engine log with
//! `--from-log`, or fits llama.cpp's timing to llama-bench runs with
//! `--from-llama-bench`); the work is the executor's `profile` module and
//! `residency_formats::llama_bench`, this file its arguments, progress bar
//! and summary. The profile goes to `--out`
//! (written atomically, after the planner's reader has read it back), else
//! to standard output.

use crate::flags::ModelArg;
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use residency_core::units::{parse_size, Bytes};
use residency_formats::gguf::{self, GgufModel};
use residency_formats::llama_bench::calibrate::{calibrate, Calibration};
use residency_formats::llama_bench::fit::Term;
use residency_formats::llama_bench::runs::{read_runs, BenchRun};
use residency_hwprofile::doc::{round_rate, round_time};
use residency_hwprofile::{
    self as profile, calibrate_from_log, CalibrateOptions, DetectOptions, Origin, ProfileDoc,
};
use std::fmt::Display;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(clap::Subcommand)]
enum ProfileCommand {
    /// Detect this machine: NUMA nodes, cores and memory, the drive behind
    /// --model-dir, GPUs (CUDA, else Vulkan). Rates get documented defaults,
    /// marked `default`, for `calibrate` to measure.
    Detect {
        /// The directory the checkpoint is (or will be) in: its drive is the
        /// profile's drive.
        #[arg(long, default_value = ".")]
        model_dir: PathBuf,
        /// Write the profile here (YAML); default: standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Measure a profile's rates on this machine: CPU GEMV per NUMA node,
    /// drive bandwidth and latency (O_DIRECT), GPU GEMV, upload and sync;
    /// or take them from a Colibri log with --from-log.
    Calibrate {
        /// The profile to calibrate (from `residency profile detect`).
        profile: PathBuf,
        /// Time this checkpoint's packed experts and read its shards (else
        /// generated experts and a temporary file under --model-dir).
        #[arg(long, conflicts_with = "from_log")]
        checkpoint: Option<PathBuf>,
        /// Seconds the measurements may take together.
        #[arg(long, default_value_t = 20.0, conflicts_with = "from_log")]
        seconds: f64,
        /// A directory on the drive to time (default: the checkpoint's, else
        /// the working directory).
        #[arg(long, conflicts_with = "from_log")]
        model_dir: Option<PathBuf>,
        /// Expert bytes each GEMV measurement cycles through, e.g. 16GiB:
        /// about what a plan keeps resident on a node or card, so that the
        /// rates are those of memory as spread out (default: 4x the
        /// last-level cache up to 1 GiB on a CPU, 1 GiB and 512 MiB on a
        /// card).
        #[arg(long, value_parser = parse_size, conflicts_with = "from_log")]
        span: Option<Bytes>,
        // `ModelArg`'s description, repeated: `--model` is given once per
        // file here (tests/cli checks that the descriptions agree).
        /// Model description (YAML, docs/design.md §3.2), checkpoint
        /// directory (config.json and safetensors shards) or GGUF file (a
        /// split model by its first shard); its geometry and tier formats
        /// size the generated experts, and a log's per-token figures. With
        /// llama-bench runs, the GGUF files they ran: give --model once per
        /// file (each run is matched to the file of its `model_size`).
        #[arg(long = "model", value_name = "MODEL")]
        model: Vec<PathBuf>,
        /// Take the values from this Colibri log (`[PROF] expert I/O:`,
        /// `PROFILE: expert-disk`, `[timers]`) instead of measuring.
        #[arg(long, conflicts_with = "from_llama_bench")]
        from_log: Option<PathBuf>,
        /// Fit the profile's `llama_cpp` timing to these llama-bench
        /// `-o json` runs of the --model files instead of measuring: a few
        /// placements, e.g. `-ngl 99`, `-ngl 99 -ot exps=CPU`, `-ngl 99 -ot
        /// ffn_down_exps=CPU` and `-ngl 0`; runs of two geometries fit a
        /// per-expert-matrix CPU cost too.
        #[arg(long, num_args = 1.., value_name = "JSON")]
        from_llama_bench: Vec<PathBuf>,
        /// llama-bench runs of --model to predict, not fit to: with
        /// --from-llama-bench, by the fitted timing (how well it predicts
        /// placements it has not seen); alone, by the profile's own
        /// `llama_cpp` timing, writing no profile.
        #[arg(long, num_args = 1.., value_name = "JSON", conflicts_with = "from_log")]
        check: Vec<PathBuf>,
        /// Write the calibrated profile here (it may be the input);
        /// default: standard output.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

pub fn run(args: ProfileArgs) -> Result<()> {
    match args.command {
        ProfileCommand::Detect { model_dir, out } => {
            let doc = profile::detect(&DetectOptions { model_dir })?;
            let p = &doc.profile;
            let summary = format!(
                "{}: {} NUMA node(s), {} cores, {} GPU(s){}, {} drive(s){}",
                p.name,
                p.numa.len(),
                p.numa.iter().map(|n| n.cores).sum::<u32>(),
                p.gpus.len(),
                names(p.gpus.iter().map(|g| g.name.as_str())),
                p.drives.len(),
                names(p.drives.iter().map(|d| d.name.as_str())),
            );
            emit(&doc, out.as_deref(), &[summary], &[])
        }
        ProfileCommand::Calibrate {
            profile,
            checkpoint,
            seconds,
            model_dir,
            span,
            model,
            from_log,
            from_llama_bench,
            check,
            out,
        } => {
            let doc = ProfileDoc::read(&profile)?;
            if !from_llama_bench.is_empty() || !check.is_empty() {
                let (doc, lines) = from_llama_bench_runs(doc, &model, &from_llama_bench, &check)?;
                if from_llama_bench.is_empty() {
                    lines.iter().for_each(|l| println!("{l}"));
                    return Ok(());
                }
                return emit(&doc, out.as_deref(), &lines, &[]);
            }
            let model = match model.as_slice() {
                [] => ModelArg { path: None },
                [one] => ModelArg {
                    path: Some(one.clone()),
                },
                [_, second, ..] => anyhow::bail!(
                    "--model {}: several models are for llama-bench runs only; give one --model",
                    second.display()
                ),
            };
            let model = model.load()?;
            if let Some(log) = from_log {
                let c = calibrate_from_log(doc, &log, model.as_ref())?;
                return emit(&c.doc, out.as_deref(), &c.measured, &c.notes);
            }
            let options = CalibrateOptions {
                seconds,
                checkpoint,
                model,
                model_dir,
                span_bytes: span.map(|b| b.0),
            };
            let bar = ProgressBar::new(1000);
            bar.set_style(
                ProgressStyle::with_template("calibrating {bar:30} {elapsed:>4} {msg}")
                    .expect("a valid template"),
            );
            let calibrated = profile::calibrate(doc, &options, &|step, done| {
                bar.set_position((done * 1000.0) as u64);
                bar.set_message(step.to_string());
            });
            bar.finish_and_clear();
            let c = calibrated?;
            emit(&c.doc, out.as_deref(), &c.measured, &c.notes)
        }
    }
}

/// The profile with its `llama_cpp` timing fitted to the `fit` runs of the
/// GGUF `models`, and the lines saying what was fitted and how each run
/// (the `check` runs too) is predicted.
fn from_llama_bench_runs(
    mut doc: ProfileDoc,
    models: &[PathBuf],
    fit: &[PathBuf],
    check: &[PathBuf],
) -> Result<(ProfileDoc, Vec<String>)> {
    let not_gguf = models.iter().find(|p| !gguf::is_gguf(p));
    if models.is_empty() || not_gguf.is_some() {
        let given = not_gguf.map_or("no --model".to_string(), |p| {
            format!("--model {}", p.display())
        });
        anyhow::bail!(
            "{given}: llama-bench runs need --model FILE.gguf, the model file they ran: they name its tensors"
        );
    }
    let ggufs = models
        .iter()
        .map(|p| GgufModel::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let read = |files: &[PathBuf]| -> Result<Vec<(String, BenchRun)>> {
        let mut runs = Vec::new();
        for file in files {
            let tests = read_runs(file)?;
            let n = tests.len();
            runs.extend(tests.into_iter().map(|t| (t.label(n), t)));
        }
        Ok(runs)
    };
    let c = calibrate(&ggufs, &doc.profile, &read(fit)?, &read(check)?)?;
    let mut timing = c.fit.timing.clone();
    timing.cpu_bandwidth = round_rate(timing.cpu_bandwidth.0);
    for t in [
        &mut timing.gpu_layer_overhead,
        &mut timing.cpu_layer_overhead,
        &mut timing.crossing_overhead,
        &mut timing.cpu_matrix_overhead,
        &mut timing.token_overhead,
    ] {
        if t.0 > 0.0 {
            *t = round_time(t.0);
        }
    }
    let fitted_runs: usize = c
        .rows
        .iter()
        .filter(|r| r.in_fit)
        .map(|r| r.measured_seconds.len())
        .sum();
    for term in &c.fit.fitted {
        doc.set(
            &format!("llama_cpp.{}", term.key()),
            Origin::Measured(format!("fitted to {fitted_runs} llama-bench run(s)")),
        );
    }
    for term in &c.fit.kept {
        doc.set(
            &format!("llama_cpp.{}", term.key()),
            Origin::Default(
                "not told apart by these runs (or fitted below zero): the prior, from the profile"
                    .into(),
            ),
        );
    }
    let lines = calibration_lines(&c, fitted_runs, fit.is_empty(), ggufs.len() > 1);
    doc.profile.llama_cpp = Some(timing);
    Ok((doc, lines))
}

/// What `calibrate` fitted (or that it only checked), then one line per
/// placement (after its model's file name when there are several): its
/// runs, the median and range measured, the prediction.
fn calibration_lines(
    c: &Calibration,
    fitted_runs: usize,
    checking_only: bool,
    several_models: bool,
) -> Vec<String> {
    let kept = match c.fit.kept.as_slice() {
        [] => "none".to_string(),
        kept => join_keys(kept),
    };
    let mut lines = vec![
        if checking_only {
            "llama.cpp timing of the profile, checked against llama-bench runs:".to_string()
        } else {
            format!(
                "llama.cpp timing fitted to {fitted_runs} run(s): {}; kept from the profile: {kept}",
                join_keys(&c.fit.fitted)
            )
        },
        format!(
            "{:<44} {:>4} {:>24} {:>10} {:>9}",
            "placement", "runs", "measured tok/s, median", "predicted", "meas/pred"
        ),
    ];
    for r in &c.rows {
        let flags = if several_models {
            format!("{}: {}", r.model, r.flags)
        } else {
            r.flags.clone()
        };
        // By characters: a file name may be of any script.
        let flags = if flags.chars().count() > 44 {
            format!("{}...", flags.chars().take(41).collect::<String>())
        } else {
            flags
        };
        let tok_s = |s: f64| 1.0 / s;
        let (fastest, slowest) = r
            .measured_seconds
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &s| (lo.min(s), hi.max(s)));
        lines.push(format!(
            "{flags:<44} {:>4} {:>8.2} [{:.2}..{:.2}] {:>10.2} {:>+8.1} %{}",
            r.measured_seconds.len(),
            tok_s(r.median_seconds()),
            tok_s(slowest),
            tok_s(fastest),
            tok_s(r.predicted_seconds),
            (r.predicted_seconds / r.median_seconds() - 1.0) * 100.0,
            if r.in_fit { "  (fit)" } else { "" }
        ));
    }
    lines
}

fn join_keys(terms: &[Term]) -> String {
    terms.iter().map(|t| t.key()).collect::<Vec<_>>().join(", ")
}

/// ` (NVIDIA H200, NVIDIA H200)`, or nothing.
fn names<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", names.join(", "))
    }
}

/// Writes the profile to `out` (or standard output) and says what was done:
/// the lines on standard output when the profile went to a file, else on
/// standard error; notes on standard error.
fn emit(
    doc: &ProfileDoc,
    out: Option<&Path>,
    lines: &[impl Display],
    notes: &[String],
) -> Result<()> {
    match out {
        Some(path) => {
            doc.write(path)?;
            println!("wrote {}", path.display());
            for line in lines {
                println!("  {line}");
            }
        }
        None => {
            print!("{}", doc.to_yaml_checked(Path::new("<standard output>"))?);
            for line in lines {
                eprintln!("{line}");
            }
        }
    }
    crate::term::notes(notes);
    Ok(())
}
