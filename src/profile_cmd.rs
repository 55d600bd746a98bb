//! `residency profile`: `detect` writes this machine's hardware profile,
//! `calibrate` measures its rates (or takes them from an engine log with
//! `--from-log`); the work is the executor's `profile` module, this file
//! its arguments, progress bar and summary. The profile goes to `--out`
//! (written atomically, after the planner's reader has read it back), else
//! to standard output.

use crate::flags::{more_help, ModelArg};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use residency_hwprofile::{
    self as profile, calibrate_from_log, CalibrateOptions, DetectOptions, ProfileDoc,
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
    #[command(mut_arg("model", more_help(
        "its geometry and tier formats size the generated experts, and a log's per-token figures"
    )))]
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
        #[command(flatten)]
        model: ModelArg,
        /// Take the values from this Colibri log (`[PROF] expert I/O:`,
        /// `PROFILE: expert-disk`, `[timers]`) instead of measuring.
        #[arg(long)]
        from_log: Option<PathBuf>,
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
            model,
            from_log,
            out,
        } => {
            let doc = ProfileDoc::read(&profile)?;
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
    for note in notes {
        eprintln!("note: {note}");
    }
    Ok(())
}
