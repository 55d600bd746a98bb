//! Miss costs (design §6 "felt wait"): the seconds one physical miss of a
//! layer's expert adds to the critical path. Calibrated from engine logs as
//! felt-wait seconds divided by physical misses (never by loads per token,
//! a mistake of Colibri's offline simulator); without calibration every read is taken as
//! felt: latency + bytes / bandwidth of the profile's fastest drive.

use residency_core::error::{read_text, PlannerError};
use residency_core::limits;
use residency_core::profile::{Drive, HardwareProfile};
use std::path::Path;

/// Seconds per physical miss from a log's totals.
pub fn miss_seconds_from_log(felt_wait_seconds: f64, physical_misses: u64) -> f64 {
    felt_wait_seconds / physical_misses as f64
}

/// Seconds per physical miss from a Colibri log's `[PROF] expert I/O:`
/// lines (`... / <misses> load) | <l> loads/token | <s>s read service /
/// <f>s felt wait`): total felt wait over total misses, over every such
/// line (one per run or serve turn). Loads per token never enter.
pub fn miss_seconds_from_prof_log(path: &Path) -> Result<f64, PlannerError> {
    let totals = prof_totals(&read_text(path)?, path)?;
    if totals.lines.is_empty() {
        return Err(PlannerError::input(
            path,
            "whole file",
            "no `[PROF] expert I/O:` line (older `PROFILE: expert-disk` lines carry no miss count)",
            "run Colibri with PROF=1 and give that log, or pass --miss-cost",
        ));
    }
    if totals.physical_misses == 0 {
        return Err(PlannerError::input(
            path,
            "whole file",
            "the `[PROF] expert I/O:` lines count 0 physical misses, so no cost per miss follows",
            "give a log of a run that read experts from disk, or pass --miss-cost",
        ));
    }
    Ok(miss_seconds_from_log(
        totals.felt_wait_seconds,
        totals.physical_misses,
    ))
}

/// The sums over a log's `[PROF] expert I/O:` lines (format in
/// docs/formats.md section 5).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfTotals {
    /// The lines' numbers, from 1.
    pub lines: Vec<usize>,
    /// `<GB> GB fetched`, in bytes (GB = 1e9).
    pub fetched_bytes: f64,
    /// `<misses> load)`: demand misses, each a disk read.
    pub physical_misses: u64,
    /// `<s>s read service`: the loader threads' summed read time.
    pub read_service_seconds: f64,
    /// `<f>s felt wait`: time the compute thread stalled on reads.
    pub felt_wait_seconds: f64,
}

/// Sums every `[PROF] expert I/O:` line of `text` (read from `path`, which
/// errors name); none is not an error here.
pub fn prof_totals(text: &str, path: &Path) -> Result<ProfTotals, PlannerError> {
    let mut totals = ProfTotals::default();
    for (i, line) in text.lines().enumerate() {
        let Some(at) = line.find("[PROF] expert I/O:") else {
            continue;
        };
        let line = &line[at..];
        let missing = |what: &str| {
            PlannerError::input(
                path,
                format!("line {}", i + 1),
                format!("a `[PROF] expert I/O:` line without {what}"),
                "give the log as Colibri prints it (PROF=1), unedited",
            )
        };
        let misses: u64 =
            number_before(line, " load)").ok_or_else(|| missing("`<misses> load)`"))?;
        let felt: f64 =
            number_before(line, "s felt wait").ok_or_else(|| missing("`<seconds>s felt wait`"))?;
        let service: f64 = number_before(line, "s read service")
            .ok_or_else(|| missing("`<seconds>s read service`"))?;
        let fetched_gb: f64 =
            number_before(line, " GB fetched").ok_or_else(|| missing("`<GB> GB fetched`"))?;
        // Times and sizes of one run: at most a million seconds, an
        // exabyte; the misses' sum a count.
        for (what, v, max) in [
            ("felt wait", felt, limits::MAX_SECONDS),
            ("read service", service, limits::MAX_SECONDS),
            ("GB fetched", fetched_gb, limits::MAX_BYTES as f64 / 1e9),
        ] {
            if !(0.0..=max).contains(&v) {
                return Err(PlannerError::input(
                    path,
                    format!("line {}", i + 1),
                    format!("`{what}` is {v:?}, out of range"),
                    "give the log as Colibri prints it (PROF=1), unedited",
                ));
            }
        }
        totals.physical_misses = totals
            .physical_misses
            .checked_add(misses)
            .ok_or_else(|| missing("a miss count that sums below 2^64"))?;
        totals.felt_wait_seconds += felt;
        totals.read_service_seconds += service;
        totals.fetched_bytes += fetched_gb * 1e9;
        totals.lines.push(i + 1);
    }
    Ok(totals)
}

/// The number just before `marker` in `line` (`3.1` in `| 3.1s read
/// service`), as Colibri's log lines put their figures.
pub fn number_before<T: std::str::FromStr>(line: &str, marker: &str) -> Option<T> {
    let (head, _) = line.split_once(marker)?;
    head.rsplit(' ').next()?.parse().ok()
}

/// The profile's fastest drive (highest read bandwidth; ties: lowest
/// latency), which prices uncalibrated misses. `None` without drives.
pub fn fastest_drive(profile: &HardwareProfile) -> Option<&Drive> {
    profile.drives.iter().max_by(|a, b| {
        a.read_bandwidth
            .0
            .total_cmp(&b.read_bandwidth.0)
            .then(b.read_latency.0.total_cmp(&a.read_latency.0))
    })
}

/// Seconds to read `bytes` from the profile's fastest drive. `None` for a
/// profile without drives.
pub fn read_seconds(profile: &HardwareProfile, bytes: u64) -> Option<f64> {
    let drive = fastest_drive(profile)?;
    Some(drive.read_latency.0 + bytes as f64 / drive.read_bandwidth.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn colibri_924_divides_by_physical_misses() {
        // 1.4 s felt over 300 physical misses = 4.6667 ms per miss; dividing
        // by the 525 loads per token instead would give 2.667 ms.
        let m = miss_seconds_from_log(1.4, 300);
        assert!((m - 0.004_666_7).abs() < 1e-7, "{m}");
    }

    #[test]
    fn prof_lines_give_felt_wait_over_physical_misses() {
        // Colibri's worked case as it prints it: 300 loads, 525 loads/token,
        // 1.4 s felt -> 1.4 / 300 s; a second turn adds 100 misses and
        // 0.6 s: (1.4 + 0.6) / 400 = 5 ms.
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        let line = |gb: f64, misses: u32, felt: f64| {
            format!("[PROF] expert I/O: {gb:.3} GB fetched (12.0 MB/token, 1.10 GB/s over the run) | hit 81.2% (900 pin + 400 lru / {misses} load) | 525.0 loads/token | 3.1s read service / {felt:.1}s felt wait\n")
        };
        std::fs::write(&log, format!("decode...\n{}", line(4.2, 300, 1.4))).unwrap();
        let m = miss_seconds_from_prof_log(&log).unwrap();
        assert!((m - 1.4 / 300.0).abs() < 1e-12, "{m}");
        std::fs::write(&log, line(4.2, 300, 1.4) + &line(1.0, 100, 0.6)).unwrap();
        assert!((miss_seconds_from_prof_log(&log).unwrap() - 0.005).abs() < 1e-12);
        std::fs::write(
            &log,
            "PROFILE: expert-disk 1340.818s service / 431.739s wait | expert-matmul 188.270s\n",
        )
        .unwrap();
        let e = miss_seconds_from_prof_log(&log).unwrap_err().to_string();
        assert!(
            e.contains("no `[PROF] expert I/O:` line") && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn uncalibrated_misses_read_from_the_fastest_drive() {
        let yaml = "
name: box
numa:
  - { id: 0, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 8, gemv_bandwidth: 30 GB/s }
drives:
  - { id: 0, name: sata, numa: 0, read_bandwidth: 500 MB/s, read_latency: 100 us }
  - { id: 1, name: nvme, numa: 0, read_bandwidth: 4 GB/s, read_latency: 80 us }
";
        let profile = HardwareProfile::from_yaml_str(yaml, Path::new("box.yaml")).unwrap();
        // nvme: 80 us + 8 MB / 4 GB/s = 80 us + 2 ms.
        let s = read_seconds(&profile, 8_000_000).unwrap();
        assert!((s - 0.002_08).abs() < 1e-12, "{s}");
    }
}
