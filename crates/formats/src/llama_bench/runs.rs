//! llama-bench's `-o json` output (an array of tests; `-o jsonl`, one test
//! per line, too): the flags that decide where each tensor goes
//! (`n_gpu_layers`, `n_cpu_moe`, `tensor_buft_overrides`), the model file
//! it ran, and the measured decode time. Prompt-processing tests
//! (`n_gen` 0) are not decode and are left out.

use residency_core::error::{read_text, PlannerError};
use residency_core::limits;
use residency_core::stats::median_mean_of_middle;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The fields of one llama-bench test that the timing needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Test {
    #[serde(default)]
    pub build_commit: String,
    #[serde(default)]
    pub gpu_info: String,
    pub model_filename: String,
    /// Bytes of tensor data in the model file.
    pub model_size: u64,
    pub n_threads: u32,
    pub n_gpu_layers: i64,
    #[serde(default)]
    pub n_cpu_moe: i64,
    /// `none`, or `PATTERN=BUFFER` rules joined by `;`.
    #[serde(default)]
    pub tensor_buft_overrides: String,
    #[serde(default)]
    pub tensor_split: String,
    /// MiB `-fitt` left free on each card, where llama.cpp fitted the
    /// layers itself.
    #[serde(default)]
    pub fit_target: Option<u64>,
    pub n_prompt: u64,
    pub n_gen: u64,
    #[serde(default)]
    pub n_depth: u64,
    /// Nanoseconds of each repetition (`n_gen` tokens).
    pub samples_ns: Vec<f64>,
}

/// One decode test and where it came from.
#[derive(Debug, Clone)]
pub struct BenchRun {
    pub file: PathBuf,
    pub index: usize,
    pub test: Test,
}

impl BenchRun {
    /// Seconds per token: the median repetition over its tokens.
    pub fn token_seconds(&self) -> f64 {
        median_mean_of_middle(&self.test.samples_ns).expect("a test has samples")
            / self.test.n_gen as f64
            / 1e9
    }

    /// The file's name, with the test's index when the file holds several.
    pub fn label(&self, tests_in_file: usize) -> String {
        let name = self
            .file
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        if tests_in_file > 1 {
            format!("{name}[{}]", self.index)
        } else {
            name
        }
    }

    /// The placement flags, as typed.
    pub fn flags(&self) -> String {
        let t = &self.test;
        let mut flags = format!("-ngl {}", t.n_gpu_layers);
        if t.n_cpu_moe > 0 {
            flags += &format!(" -ncmoe {}", t.n_cpu_moe);
        }
        if !matches!(t.tensor_buft_overrides.as_str(), "" | "none") {
            flags += &format!(" -ot '{}'", t.tensor_buft_overrides);
        }
        flags
    }

    /// The override rules as `(pattern, buffer)`, in llama.cpp's order:
    /// the `-ot` rules, then `-ncmoe`'s (llama-bench appends them; the first
    /// rule that matches a tensor wins).
    pub fn overrides(&self) -> Result<Vec<(String, String)>, PlannerError> {
        let t = &self.test;
        let mut rules = Vec::new();
        if !matches!(t.tensor_buft_overrides.as_str(), "" | "none") {
            for rule in t.tensor_buft_overrides.split(';') {
                let Some((pattern, buffer)) = rule.rsplit_once('=') else {
                    return Err(self.bad(
                        "tensor_buft_overrides",
                        format!("rule `{rule}` has no `=BUFFER`"),
                    ));
                };
                rules.push((pattern.to_string(), buffer.to_string()));
            }
        }
        // common.h's `llm_ffn_exps_block_regex`.
        rules.extend((0..t.n_cpu_moe).map(|i| {
            (
                format!(r"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps"),
                "CPU".to_string(),
            )
        }));
        Ok(rules)
    }

    /// An error about this test's `key`.
    pub fn bad(&self, key: &str, problem: String) -> PlannerError {
        let place = match key {
            "" => format!("[{}]", self.index),
            key => format!("[{}].{key}", self.index),
        };
        PlannerError::input(
            &self.file,
            place,
            problem,
            "give llama-bench's own `-o json` output",
        )
    }
}

/// The decode tests of one llama-bench output file.
pub fn read_runs(path: &Path) -> Result<Vec<BenchRun>, PlannerError> {
    let text = read_text(path)?;
    let parse_error = |e: serde_json::Error, line: Option<usize>| {
        let place = match line {
            Some(l) => format!("line {l}"),
            None => format!("line {}, column {}", e.line(), e.column()),
        };
        PlannerError::input(
            path,
            place,
            e.to_string(),
            "give llama-bench's output of `-o json` (or `-o jsonl`)",
        )
    };
    let tests: Vec<Test> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).map_err(|e| parse_error(e, None))?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| parse_error(e, Some(i + 1))))
            .collect::<Result<_, _>>()?
    };
    let runs: Vec<BenchRun> = tests
        .into_iter()
        .enumerate()
        .filter(|(_, t)| t.n_gen > 0)
        .map(|(index, test)| BenchRun {
            file: path.to_path_buf(),
            index,
            test,
        })
        .collect();
    if runs.is_empty() {
        return Err(PlannerError::input(
            path,
            "tests",
            "holds no decode test (every test has n_gen 0)",
            "run llama-bench with -n 64 (and -p 0) to time decode",
        ));
    }
    for run in &runs {
        let t = &run.test;
        if t.samples_ns.is_empty() {
            return Err(run.bad("samples_ns", "is empty".into()));
        }
        // A repetition of `n_gen` tokens takes a positive, finite time; a
        // zero would measure infinite tokens per second.
        if let Some(i) = t
            .samples_ns
            .iter()
            .position(|&s| !(s > 0.0 && s / 1e9 <= limits::MAX_SECONDS))
        {
            return Err(run.bad(
                &format!("samples_ns[{i}]"),
                format!(
                    "is {:?} ns, not a time above 0 and at most 1e6 s",
                    t.samples_ns[i]
                ),
            ));
        }
        if t.n_cpu_moe < 0 {
            return Err(run.bad(
                "n_cpu_moe",
                format!("is {}, not a count of layers", t.n_cpu_moe),
            ));
        }
        if t.n_cpu_moe > limits::MAX_LAYERS as i64 {
            return Err(run.bad(
                "n_cpu_moe",
                format!(
                    "is {}, more than {} layers",
                    t.n_cpu_moe,
                    limits::MAX_LAYERS
                ),
            ));
        }
    }
    Ok(runs)
}
