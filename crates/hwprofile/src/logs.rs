//! `residency profile calibrate --from-log`: profile values from a Colibri
//! log (formats in colibri-formats.md sections 5 and 6). Each value's
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

use super::doc::{field, rate_text, round_rate, round_time, time_text, ProfileDoc};
use super::spread::Spread;
use super::{read_input, Measurement, ProfileError};
use residency_cache::sim::felt::{miss_seconds_from_log, number_before, prof_totals};
use residency_core::model::Model;
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
    mut doc: ProfileDoc,
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
    let mut notes = Vec::new();
    let mut measured = Vec::new();
    let mut set = |doc: &mut ProfileDoc,
                   path: String,
                   value: String,
                   comment: String,
                   spread: Option<Spread>| {
        let m = Measurement {
            path,
            value,
            comment,
            spread,
        };
        doc.measured(&m);
        measured.push(m);
    };

    // The felt fraction: [PROF] totals first, else the PROFILE lines.
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
        Some((
            prof.felt_wait_seconds / prof.read_service_seconds,
            comment,
            None,
        ))
    } else if !profile.is_empty() {
        let s = spread_of(&profile, |f| f);
        let comment = format!(
            "wait / service of `PROFILE: expert-disk`: median {:.4} over {} decode line(s) [{:.4}..{:.4}], {}",
            s.median,
            s.count,
            s.min,
            s.max,
            lines_of(&profile, log)
        );
        Some((s.median, comment, Some(s)))
    } else {
        None
    };
    if let Some((fraction, comment, spread)) = felt {
        if !doc.profile.io_overlaps_compute {
            notes.push(format!(
                "felt_fraction: the log gives {fraction:.4}, but the profile says reads do not overlap compute (io_overlaps_compute: false), so every read is felt; set it true to use the log's share"
            ));
        } else {
            // Four decimals, at most 1 (felt wait can exceed service when
            // reads queue behind each other).
            let fraction = ((fraction * 1e4).round() / 1e4).min(1.0);
            doc.profile.felt_fraction = Some(fraction);
            set(
                &mut doc,
                "felt_fraction".into(),
                fraction.to_string(),
                comment,
                spread,
            );
        }
    }

    // Drive bandwidth from [PROF]: bytes per read over time per read.
    if prof.physical_misses > 0 && prof.fetched_bytes > 0.0 {
        for d in 0..doc.profile.drives.len() {
            let latency = doc.profile.drives[d].read_latency.0;
            let transfer = prof.read_service_seconds - prof.physical_misses as f64 * latency;
            if transfer <= 0.0 {
                notes.push(format!(
                    "drives[{d}]: the log's read service ({:.1} s) is no more than {} misses x the profile's read latency; read_bandwidth left as it was",
                    prof.read_service_seconds, prof.physical_misses
                ));
                continue;
            }
            let rate = round_rate(prof.fetched_bytes / transfer);
            doc.profile.drives[d].read_bandwidth = rate;
            let comment = format!(
                "{:.3} GB fetched / ({:.1} s read service - {} misses x {}) of `[PROF] expert I/O:` on {} (the log names no drive: every drive gets it)",
                prof.fetched_bytes / 1e9,
                prof.read_service_seconds,
                prof.physical_misses,
                time_text(doc.profile.drives[d].read_latency),
                lines_of(&prof.lines.iter().map(|&l| (0.0, l)).collect::<Vec<_>>(), log)
            );
            set(
                &mut doc,
                field("drives", d, "read_bandwidth"),
                rate_text(rate),
                comment,
                None,
            );
        }
    }

    // [timers]: sync, CPU GEMV, time outside the phases.
    let takes: Vec<Figure> = blocks.iter().filter_map(|b| b.take_ms).collect();
    let computes: Vec<Figure> = blocks.iter().filter_map(|b| b.compute_ms).collect();
    let outsides: Vec<Figure> = blocks.iter().filter_map(|b| b.outside_ms).collect();
    match (model, takes.is_empty() && computes.is_empty()) {
        (_, true) => {}
        (None, false) => notes.push(
            "`[timers]` gives per-token times; pass --model (the model the log ran) to turn `take` into sync_overhead and `expert kernel: compute` into gemv_bandwidth".into(),
        ),
        (Some(model), false) => {
            let layers = model.moe.len() as f64;
            if !takes.is_empty() {
                if doc.profile.gpus.is_empty() {
                    notes.push("the log's `take` is a GPU's sync, but the profile lists no GPU".into());
                }
                let s = spread_of(&takes, |ms| ms / 1e3 / layers);
                let time = round_time(s.median);
                let comment = format!(
                    "{} (`qtier: ... take` ms/token / {} MoE layers of {}; {})",
                    s.describe(false, "runs"),
                    layers,
                    model.name(),
                    lines_of(&takes, log)
                );
                for g in 0..doc.profile.gpus.len() {
                    doc.profile.gpus[g].sync_overhead = time;
                    set(&mut doc, field("gpus", g, "sync_overhead"), time_text(time), comment.clone(), Some(s));
                }
            }
            if !computes.is_empty() {
                let top_k = model.top_k() as f64;
                let bytes_per_token: f64 = model.moe.iter().map(|m| top_k * m.ram_bytes as f64).sum();
                let nodes = doc.profile.numa.len() as f64;
                let s = spread_of(&computes, |ms| bytes_per_token / (ms / 1e3) / nodes);
                let rate = round_rate(s.median);
                let comment = format!(
                    "{} (top-{} x {} MoE layers x {} B experts ({}'s ram tier) / `expert kernel: compute` ms/token{}; {})",
                    s.describe(true, "runs"),
                    model.top_k(),
                    layers,
                    model.moe[0].ram_bytes,
                    model.name(),
                    if nodes > 1.0 { format!(", shared by {nodes} nodes") } else { String::new() },
                    lines_of(&computes, log)
                );
                for n in 0..doc.profile.numa.len() {
                    doc.profile.numa[n].gemv_bandwidth = rate;
                    set(&mut doc, field("numa", n, "gemv_bandwidth"), rate_text(rate), comment.clone(), Some(s));
                }
            }
        }
    }
    if !outsides.is_empty() {
        let s = spread_of(&outsides, |ms| ms / 1e3);
        let time = round_time(s.median);
        doc.profile.fixed_token_seconds = time;
        let comment = format!(
            "{} (`step() total: ... outside the phases` of {})",
            s.describe(false, "runs"),
            lines_of(&outsides, log)
        );
        set(
            &mut doc,
            "fixed_token_seconds".into(),
            time_text(time),
            comment,
            Some(s),
        );
    }
    if measured.is_empty() {
        let problem = if notes.is_empty() {
            "gives no value this profile can take".to_string()
        } else {
            notes.join("; ")
        };
        return Err(ProfileError::input(
            log,
            problem,
            "see colibri-formats.md sections 5 and 6 for what each line gives",
        ));
    }
    let line = format!(
        "Calibrated from {} by `residency profile calibrate --from-log`.",
        log.display()
    );
    doc.header.retain(|l| *l != line);
    doc.header.push(line);
    Ok(LogCalibration {
        doc,
        measured,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{rate_text, time_text};
    use std::path::PathBuf;

    const BOX: &str = "
name: box
numa:
  - { id: 0, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 16, gemv_bandwidth: 30 GB/s }
  - { id: 1, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 16, gemv_bandwidth: 30 GB/s }
gpus:
  - { id: 0, name: card, vram: 16 GiB, reserved: 2 GiB, numa: 0, gemv_bandwidth: 500 GB/s, upload_bandwidth: 25 GB/s, sync_overhead: 34 us }
drives:
  - { id: 0, name: nvme0n1, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us }
";

    /// Four MoE layers of 8 experts, top-2, 1 MiB experts in RAM.
    const MODEL: &str = "
name: four-layers
layers: 4
moe_layers: \"0..=3\"
experts: 8
top_k: 2
hidden: 1024
expert_intermediate: 512
formats:
  int4: 1 MiB
tiers: { gpu: int4, ram: int4, disk: int4 }
";

    fn doc() -> ProfileDoc {
        ProfileDoc::parse(BOX, Path::new("box.yaml")).unwrap()
    }

    fn log(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("run.log");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn prof_lines_give_the_felt_fraction_and_the_drive_rate() {
        let dir = tempfile::tempdir().unwrap();
        let line = |gb: f64, misses: u32, felt: f64| {
            format!("[PROF] expert I/O: {gb:.3} GB fetched (12.0 MB/token, 1.10 GB/s over the run) | hit 81.2% (900 pin + 400 lru / {misses} load) | 525.0 loads/token | 3.1s read service / {felt:.1}s felt wait\n")
        };
        let path = log(
            dir.path(),
            &format!("decode\n{}{}", line(4.2, 300, 1.4), line(1.0, 100, 0.6)),
        );
        let c = calibrate_from_log(doc(), &path, None).unwrap();
        // Felt 1.4 + 0.6 = 2.0 s of 3.1 + 3.1 = 6.2 s read service: 0.3226.
        assert_eq!(c.doc.profile.felt_fraction, Some(0.3226));
        // 5.2 GB over (6.2 s - 400 misses x 80 us = 6.168 s) = 843.06 MB/s.
        assert_eq!(
            rate_text(c.doc.profile.drives[0].read_bandwidth),
            "843.1 MB/s"
        );
        let comment = c.doc.origin("felt_fraction").unwrap();
        assert!(
            comment.starts_with("measured: felt wait 2.0 s / read service 6.2 s"),
            "{comment}"
        );
        assert!(
            comment.contains("lines 2 and 3 of")
                && comment.contains("5.000 ms felt per physical miss"),
            "{comment}"
        );
        // The rest is untouched.
        assert_eq!(rate_text(c.doc.profile.gpus[0].gemv_bandwidth), "500 GB/s");
    }

    #[test]
    fn profile_lines_skip_prefill() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(
            dir.path(),
            "PROFILO PREFILL (11.61s):\n\
             PROFILE: expert-disk 295.811s service / 9.057s wait | expert-matmul 1.336s\n\
             prefill 13 tokens in 11.61s | decode 1024 tokens in 781.17s (1.31 tok/s)\n\
             PROFILE: expert-disk 1340.818s service / 431.739s wait | expert-matmul 188.270s\n",
        );
        let c = calibrate_from_log(doc(), &path, None).unwrap();
        // 431.739 / 1340.818 = 0.32200; the prefill line (0.0306) is left out.
        assert_eq!(c.doc.profile.felt_fraction, Some(0.322));
        assert!(c.doc.origin("felt_fraction").unwrap().contains("line 4 of"));
        assert_eq!(c.measured.len(), 1);
    }

    #[test]
    fn timers_blocks_give_sync_cpu_bandwidth_and_fixed_time() {
        let dir = tempfile::tempdir().unwrap();
        let block = |take: f64, compute: f64, outside: f64| {
            format!(
                "   [timers] decode: 63 tokens  (shared/router are subsets of moe_total)\n\
                 [timers]   step() total: 32.1 ms/token (outside the phases: {outside})\n\
                 [timers]   expert kernel: fetch 9.03 | compute {compute} ms/token\n\
                 [timers]   qtier: issue 1.95 | cpu-miss 3.69 | take {take} ms/token\n\
                 [timers] prefill: 56 tokens  dn=413 attn=74 moe=437(sh=62 rt=5) head=2 ms\n"
            )
        };
        let path = log(dir.path(), &(block(0.4, 2.0, 1.5) + &block(0.6, 4.0, 1.3)));
        let model = Model::from_yaml_str(MODEL, Path::new("m.yaml")).unwrap();
        let c = calibrate_from_log(doc(), &path, Some(&model)).unwrap();
        let p = &c.doc.profile;
        // take 0.4 and 0.6 ms/token over 4 layers: 100 and 150 us, median 125 us.
        assert_eq!(time_text(p.gpus[0].sync_overhead), "125 us");
        // 2 x 4 x 1 MiB = 8388608 B a token over 2 and 4 ms: 4.194 and 2.097
        // GB/s, median 3.146 GB/s, shared by two nodes: 1.573 GB/s each.
        assert_eq!(rate_text(p.numa[0].gemv_bandwidth), "1.573 GB/s");
        assert_eq!(p.numa[1].gemv_bandwidth, p.numa[0].gemv_bandwidth);
        // Outside the phases: 1.5 and 1.3 ms, median 1.4 ms.
        assert_eq!(time_text(p.fixed_token_seconds), "1.4 ms");
        let sync = c.doc.origin("gpus[0].sync_overhead").unwrap();
        assert!(
            sync.contains("over 2 runs") && sync.contains("lines 4 and 9 of"),
            "{sync}"
        );
        // Without the model only the time outside the phases follows.
        let c = calibrate_from_log(doc(), &path, None).unwrap();
        assert_eq!(c.measured.len(), 1);
        assert!(c.notes[0].contains("pass --model"), "{:?}", c.notes);
    }

    #[test]
    fn a_log_without_lines_or_values_is_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = log(dir.path(), "nothing to see\n");
        let e = calibrate_from_log(doc(), &path, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{}: has no `[PROF] expert I/O:`", path.display())),
            "{e}"
        );
        assert!(e.contains("COLI_TIMERS=1") && !e.contains('\n'), "{e}");
        // Lines that give nothing this profile takes (a sync, but no GPU;
        // a felt share, but no overlap) are an error too, saying why.
        let path = log(
            dir.path(),
            "PROFILE: expert-disk 10.0s service / 5.0s wait | expert-matmul 1.0s\n",
        );
        let serial = format!("{BOX}io_overlaps_compute: false\n");
        let serial = ProfileDoc::parse(&serial, Path::new("box.yaml")).unwrap();
        let e = calibrate_from_log(serial, &path, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("io_overlaps_compute: false") && !e.contains('\n'),
            "{e}"
        );
        let missing = dir.path().join("absent.log");
        let e = calibrate_from_log(doc(), &missing, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{}: cannot read it", missing.display())),
            "{e}"
        );
    }
}
