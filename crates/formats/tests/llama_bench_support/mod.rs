//! What the llama-bench tests share: an H200-like profile, the
//! repository's H200 runs (`docs/device/llama-bench-h200/`) by placement,
//! and one run written and read back.

use residency_core::profile::HardwareProfile;
use residency_formats::llama_bench::runs::{read_runs, BenchRun};
use std::path::{Path, PathBuf};

const PROFILE: &str = r#"
name: h200-like
numa:
  - { id: 0, ram: 128 GiB, cores: 16, gemv_bandwidth: 20 GB/s }
gpus:
  - { id: 0, name: card, vram: 141 GB, numa: 0, gemv_bandwidth: 4 TB/s, upload_bandwidth: 50 GB/s, sync_overhead: 7 us }
"#;

pub fn profile() -> HardwareProfile {
    HardwareProfile::from_yaml_str(PROFILE, Path::new("profile.yaml")).unwrap()
}

/// The directory of the repository's H200 llama-bench runs.
pub fn h200_runs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/device/llama-bench-h200")
}

/// `json` (one llama-bench test) written to `path` and read back, with
/// its label.
pub fn read_one(path: &Path, json: &str) -> (String, BenchRun) {
    std::fs::write(path, json).unwrap();
    let run = read_runs(path).unwrap().remove(0);
    (run.label(1), run)
}

/// Every round of one placement in `dir`: the files `PREFIX_R.json`, one
/// letter a round, in round order.
pub fn runs_of(dir: &Path, prefix: &str) -> Vec<(String, BenchRun)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.strip_prefix(prefix)
                .and_then(|rest| rest.strip_prefix('_'))
                .is_some_and(|round| round.len() == "a.json".len() && round.ends_with(".json"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no runs {prefix}_*.json");
    files
        .iter()
        .map(|f| {
            let run = read_runs(f).unwrap().remove(0);
            (run.label(1), run)
        })
        .collect()
}
