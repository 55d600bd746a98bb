//! `residency profile calibrate --from-log`: profile values from a Colibri
//! log (formats in docs/formats.md sections 5 and 6). Each value's
//! comment names the lines it came from; several runs in one log give the
//! median, with the range.
//!
//! - `[PROF] expert I/O:` (GLM engine, `PROF=1`; summed by
//!   `sim::felt::prof_totals`): `felt_fraction` = felt wait / read service
//!   (the share of read time the compute thread waited for), and each
//!   drive's `read_bandwidth` = bytes fetched / (read service - misses x the
//!   drive's read latency), the rate one read moves once it is served.
//! - `PROFILE: expert-disk <s>s service / <w>s wait` (the GLM engine's older
//!   summary): `felt_fraction` = wait / service. The prefill profile (the
//!   line after `PROFILO PREFILL (...)`) is left out: the planner models
//!   decode.
//! - `[timers]` blocks (qwen36 engine, `COLI_TIMERS=1`), one per run:
//!   `sync_overhead` of every GPU = `take` (cudaStreamSynchronize) ms/token
//!   / MoE layers, as profiles/README.md derives its 34 us; the CPU's
//!   `gemv_bandwidth` = top-k x MoE layers x one expert's bytes in the
//!   model's RAM-tier format / `expert kernel: compute` ms/token, shared
//!   evenly by the profile's NUMA nodes (the engine's threads span them);
//!   `fixed_token_seconds` = `step() total: ... (outside the phases: x)`.
//!   The per-token figures need the model's geometry (`--model`).
//!
//! Nothing else in these logs isolates a rate (Colibri's `group_stats`
//! report 0 ms for h2d and kernels; `moe_total` mixes CPU and GPU work), so
//! the GPU's GEMV and upload bandwidths stay as they were.

use super::doc::{field, rate_text, round_rate, round_time, time_text, ProfileDoc, Quantity};
use super::spread::Spread;
use super::{read_input, Measurement, ProfileError};
use residency_core::error::PlannerError;
use residency_core::limits;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_sim::felt::{miss_seconds_from_log, number_before, prof_totals, ProfTotals};
use std::path::Path;

/// The profile with what the log gave, a line per value set, and what it
/// could not give.
#[derive(Debug, Clone)]
pub struct LogCalibration {
    pub doc: ProfileDoc,
    pub measured: Vec<Measurement>,
    pub notes: Vec<String>,
}

/// A figure of a log line and the line's number (from 1).
type Figure = (f64, usize);

/// One `[timers] decode:` block.
#[derive(Debug, Default)]
struct TimersBlock {
    take_ms: Option<Figure>,
    compute_ms: Option<Figure>,
    outside_ms: Option<Figure>,
}

/// The number right after `marker` (`1.37` in `take 1.37 ms/token`).
fn number_after(text: &str, marker: &str) -> Option<f64> {
    let (_, tail) = text.split_once(marker)?;
    tail.split_whitespace()
        .next()?
        .trim_end_matches([')', ','])
        .parse()
        .ok()
}

/// Every `[timers] decode:` block of the log, with the figures it has.
fn timers_blocks(text: &str) -> Vec<TimersBlock> {
    let mut blocks = Vec::new();
    let mut current: Option<TimersBlock> = None;
    for (i, line) in text.lines().enumerate() {
        let Some(at) = line.find("[timers]") else {
            continue;
        };
        let rest = line[at + "[timers]".len()..].trim();
        if rest.starts_with("decode:") {
            blocks.extend(current.replace(TimersBlock::default()));
            continue;
        }
        if rest.starts_with("prefill:") {
            blocks.extend(current.take());
            continue;
        }
        let Some(block) = current.as_mut() else {
            continue;
        };
        let figure = |marker| number_after(rest, marker).map(|v| (v, i + 1));
        if rest.starts_with("qtier:") {
            block.take_ms = figure("take ");
        } else if rest.starts_with("expert kernel:") {
            block.compute_ms = figure("compute ");
        } else if rest.starts_with("step() total:") {
            block.outside_ms = figure("outside the phases:");
        }
    }
    blocks.extend(current);
    blocks
}

/// (wait / service, line) of each decode `PROFILE: expert-disk` line.
fn profile_lines(text: &str) -> Vec<Figure> {
    let mut previous = "";
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(at) = line.find("PROFILE: expert-disk") {
            let line = &line[at..];
            // Colibri heads the prefill profile `PROFILO PREFILL (11.61s):`.
            let header = previous.trim_start();
            let prefill = ["PROFILO PREFILL", "PROFILE PREFILL"]
                .iter()
                .any(|h| header.starts_with(h));
            let service: Option<f64> = number_before(line, "s service");
            let wait: Option<f64> = number_before(line, "s wait");
            if let (false, Some(service), Some(wait)) = (prefill, service, wait) {
                if service > 0.0 {
                    found.push((wait / service, i + 1));
                }
            }
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    found
}

/// Figures of one kind, what they are called, their unit and whether a
/// value is one the profile can take.
type Check<'a> = (&'a Vec<Figure>, &'a str, &'a str, &'a dyn Fn(f64) -> bool);

/// `lines 26, 61 and 96 of run.log`.
fn lines_of(figures: &[Figure], log: &Path) -> String {
    let numbers: Vec<String> = figures.iter().map(|(_, l)| l.to_string()).collect();
    let list = match numbers.as_slice() {
        [one] => format!("line {one}"),
        [init @ .., last] => format!("lines {} and {last}", init.join(", ")),
        [] => String::new(),
    };
    format!("{list} of {}", log.display())
}

/// The figures' values through `f`, and their spread.
fn spread_of(figures: &[Figure], f: impl Fn(f64) -> f64) -> Spread {
    let values: Vec<f64> = figures.iter().map(|&(v, _)| f(v)).collect();
    Spread::of(&values).expect("at least one figure")
}

/// Sets what `log` gives on `doc`'s profile; `model` supplies the geometry
/// per-token figures need.
pub fn calibrate_from_log(
    doc: ProfileDoc,
    log: &Path,
    model: Option<&Model>,
) -> Result<LogCalibration, ProfileError> {
    let text = read_input(
        log,
        "give the path of a Colibri log (run with PROF=1 or COLI_TIMERS=1)",
    )?;
    let prof = prof_totals(&text, log)?;
    let profile = profile_lines(&text);
    let blocks = timers_blocks(&text);
    if prof.lines.is_empty() && profile.is_empty() && blocks.is_empty() {
        return Err(ProfileError::input(
            log,
            "has no `[PROF] expert I/O:`, decode `PROFILE: expert-disk` or `[timers] decode:` line",
            "give a Colibri log of a decode run with PROF=1 (GLM engine) or COLI_TIMERS=1 (qwen36 engine)",
        ));
    }
    let takes: Vec<Figure> = blocks.iter().filter_map(|b| b.take_ms).collect();
    let computes: Vec<Figure> = blocks.iter().filter_map(|b| b.compute_ms).collect();
    let outsides: Vec<Figure> = blocks.iter().filter_map(|b| b.outside_ms).collect();
    let ms = |v: f64| limits::time_in_range(v / 1e3);
    // A rate is bytes over the compute time: that must not be 0.
    let positive_ms = |v: f64| v > 0.0 && ms(v);
    let ratio = |v: f64| v.is_finite() && v >= 0.0;
    let checks: [Check; 4] = [
        (&profile, "wait / service", "", &ratio),
        (&takes, "take", " ms", &ms),
        (&computes, "compute", " ms", &positive_ms),
        (&outsides, "outside the phases", " ms", &ms),
    ];
    for (figures, what, unit, ok) in checks {
        if let Some((v, line)) = figures.iter().find(|(v, _)| !ok(*v)) {
            return Err(ProfileError::input(
                log,
                format!("line {line}: `{what}` is {v:?}{unit}, out of range"),
                "check the log: it is cut or corrupt on that line",
            ));
        }
    }
    let mut c = Calibrating {
        log,
        done: LogCalibration {
            doc,
            measured: Vec::new(),
            notes: Vec::new(),
        },
    };
    c.felt_fraction(&prof, &profile);
    c.drive_bandwidth(&prof);
    match model {
        _ if takes.is_empty() && computes.is_empty() => {}
        None => c.done.notes.push(
            "`[timers]` gives per-token times; pass --model (the model the log ran) to turn `take` into sync_overhead and `expert kernel: compute` into gemv_bandwidth".into(),
        ),
        Some(model) => {
            c.sync_overhead(&takes, model);
            c.gemv_bandwidth(&computes, model);
        }
    }
    c.fixed_token_seconds(&outsides);
    let mut done = c.done;
    if done.measured.is_empty() {
        let problem = if done.notes.is_empty() {
            "gives no value this profile can take".to_string()
        } else {
            done.notes.join("; ")
        };
        return Err(ProfileError::input(
            log,
            problem,
            "see docs/formats.md sections 5 and 6 for what each line gives",
        ));
    }
    // A figure out of the planner's range (a time of -1e308 ms) is the
    // log's fault, said before the profile is written.
    if let Err(e) = HardwareProfile::from_yaml_str(&done.doc.to_yaml(), log) {
        let problem = match e {
            PlannerError::Input { place, problem, .. } => {
                format!("its figures make the profile's {place} a value that {problem}")
            }
            e => e.to_string(),
        };
        return Err(ProfileError::input(
            log,
            problem,
            "check the log: it is cut or corrupt where that figure is",
        ));
    }
    let line = format!(
        "Calibrated from {} by `residency profile calibrate --from-log`.",
        log.display()
    );
    done.doc.header.retain(|l| *l != line);
    done.doc.header.push(line);
    Ok(done)
}

/// A calibration in progress: one step per value the log can give.
struct Calibrating<'a> {
    log: &'a Path,
    done: LogCalibration,
}

impl Calibrating<'_> {
    /// Records a value already set on the profile, with its comment.
    fn set(&mut self, path: String, value: String, comment: String, spread: Option<Spread>) {
        let m = Measurement {
            path,
            value,
            comment,
            spread,
        };
        self.done.doc.measured(&m);
        self.done.measured.push(m);
    }

    /// Records a value set on each of the `count` items of a profile
    /// section (`(section, count, key)`), with one comment.
    fn set_each(
        &mut self,
        (section, count, key): (&str, usize, &str),
        value: String,
        comment: String,
        spread: Spread,
    ) {
        for i in 0..count {
            self.set(
                field(section, i, key),
                value.clone(),
                comment.clone(),
                Some(spread),
            );
        }
    }

    /// The felt fraction: [PROF] totals first, else the PROFILE lines.
    fn felt_fraction(&mut self, prof: &ProfTotals, profile: &[Figure]) {
        let log = self.log;
        let felt = if !prof.lines.is_empty() && prof.read_service_seconds > 0.0 {
            let lines: Vec<Figure> = prof.lines.iter().map(|&l| (0.0, l)).collect();
            let mut comment = format!(
                "felt wait {:.1} s / read service {:.1} s of `[PROF] expert I/O:` on {}",
                prof.felt_wait_seconds,
                prof.read_service_seconds,
                lines_of(&lines, log),
            );
            if prof.physical_misses > 0 {
                comment.push_str(&format!(
                    "; {:.3} ms felt per physical miss",
                    miss_seconds_from_log(prof.felt_wait_seconds, prof.physical_misses) * 1e3
                ));
            }
            (
                prof.felt_wait_seconds / prof.read_service_seconds,
                comment,
                None,
            )
        } else if !profile.is_empty() {
            let s = spread_of(profile, |f| f);
            let comment = format!(
                "wait / service of `PROFILE: expert-disk`: median {:.4} over {} decode line(s) [{:.4}..{:.4}], {}",
                s.median,
                s.count,
                s.min,
                s.max,
                lines_of(profile, log)
            );
            (s.median, comment, Some(s))
        } else {
            return;
        };
        let (fraction, comment, spread) = felt;
        if !self.done.doc.profile.io_overlaps_compute {
            self.done.notes.push(format!(
                "felt_fraction: the log gives {fraction:.4}, but the profile says reads do not overlap compute (io_overlaps_compute: false), so every read is felt; set it true to use the log's share"
            ));
            return;
        }
        // Four decimals, at most 1 (felt wait can exceed service when reads
        // queue behind each other).
        let fraction = ((fraction * 1e4).round() / 1e4).min(1.0);
        self.done.doc.profile.felt_fraction = Some(fraction);
        self.set(
            "felt_fraction".into(),
            fraction.to_string(),
            comment,
            spread,
        );
    }

    /// Drive bandwidth from [PROF]: bytes per read over time per read.
    fn drive_bandwidth(&mut self, prof: &ProfTotals) {
        if prof.physical_misses == 0 || prof.fetched_bytes <= 0.0 {
            return;
        }
        let lines: Vec<Figure> = prof.lines.iter().map(|&l| (0.0, l)).collect();
        for d in 0..self.done.doc.profile.drives.len() {
            let latency = self.done.doc.profile.drives[d].read_latency;
            let transfer = prof.read_service_seconds - prof.physical_misses as f64 * latency.0;
            if transfer <= 0.0 {
                self.done.notes.push(format!(
                    "drives[{d}]: the log's read service ({:.1} s) is no more than {} misses x the profile's read latency; read_bandwidth left as it was",
                    prof.read_service_seconds, prof.physical_misses
                ));
                continue;
            }
            let rate = round_rate(prof.fetched_bytes / transfer);
            self.done.doc.profile.drives[d].read_bandwidth = rate;
            let comment = format!(
                "{:.3} GB fetched / ({:.1} s read service - {} misses x {}) of `[PROF] expert I/O:` on {} (the log names no drive: every drive gets it)",
                prof.fetched_bytes / 1e9,
                prof.read_service_seconds,
                prof.physical_misses,
                time_text(latency),
                lines_of(&lines, self.log)
            );
            self.set(
                field("drives", d, "read_bandwidth"),
                rate_text(rate),
                comment,
                None,
            );
        }
    }

    /// Every GPU's sync overhead from `[timers]`' `take` ms/token.
    fn sync_overhead(&mut self, takes: &[Figure], model: &Model) {
        if takes.is_empty() {
            return;
        }
        if self.done.doc.profile.gpus.is_empty() {
            self.done
                .notes
                .push("the log's `take` is a GPU's sync, but the profile lists no GPU".into());
        }
        let layers = model.moe.len() as f64;
        let s = spread_of(takes, |ms| ms / 1e3 / layers);
        let time = round_time(s.median);
        let comment = format!(
            "{} (`qtier: ... take` ms/token / {} MoE layers of {}; {})",
            s.describe(Quantity::Seconds, "runs"),
            layers,
            model.name(),
            lines_of(takes, self.log)
        );
        let gpus = &mut self.done.doc.profile.gpus;
        gpus.iter_mut().for_each(|g| g.sync_overhead = time);
        let count = gpus.len();
        self.set_each(
            ("gpus", count, "sync_overhead"),
            time_text(time),
            comment,
            s,
        );
    }

    /// The CPU's GEMV bandwidth from `[timers]`' `expert kernel: compute`
    /// ms/token, shared evenly by the NUMA nodes.
    fn gemv_bandwidth(&mut self, computes: &[Figure], model: &Model) {
        if computes.is_empty() {
            return;
        }
        let layers = model.moe.len() as f64;
        let top_k = model.top_k() as f64;
        let bytes_per_token: f64 = model.moe.iter().map(|m| top_k * m.ram_bytes as f64).sum();
        let nodes = self.done.doc.profile.numa.len() as f64;
        let s = spread_of(computes, |ms| bytes_per_token / (ms / 1e3) / nodes);
        let rate = round_rate(s.median);
        let comment = format!(
            "{} (top-{} x {} MoE layers x {} B experts ({}'s ram tier) / `expert kernel: compute` ms/token{}; {})",
            s.describe(Quantity::BytesPerSecond, "runs"),
            model.top_k(),
            layers,
            model.moe[0].ram_bytes,
            model.name(),
            if nodes > 1.0 { format!(", shared by {nodes} nodes") } else { String::new() },
            lines_of(computes, self.log)
        );
        let numa = &mut self.done.doc.profile.numa;
        numa.iter_mut().for_each(|n| n.gemv_bandwidth = rate);
        let count = numa.len();
        self.set_each(
            ("numa", count, "gemv_bandwidth"),
            rate_text(rate),
            comment,
            s,
        );
    }

    /// The time a token spends outside the phases `[timers]` splits out.
    fn fixed_token_seconds(&mut self, outsides: &[Figure]) {
        if outsides.is_empty() {
            return;
        }
        let s = spread_of(outsides, |ms| ms / 1e3);
        let time = round_time(s.median);
        self.done.doc.profile.fixed_token_seconds = time;
        let comment = format!(
            "{} (`step() total: ... outside the phases` of {})",
            s.describe(Quantity::Seconds, "runs"),
            lines_of(outsides, self.log)
        );
        self.set(
            "fixed_token_seconds".into(),
            time_text(time),
            comment,
            Some(s),
        );
    }
}

#[cfg(test)]
mod tests;
