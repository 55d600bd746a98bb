//! Predicting llama.cpp from llama-bench runs: where a run's flags put each
//! tensor of a GGUF (worked by hand on a small file), the same work from an
//! instance's placement and from a run's flags (two constructions that
//! must agree), bad runs, and the fit on the H200 machine's runs
//! (`docs/device/llama-bench-h200/`, this repository's own measurements,
//! and `../shared/data/llamacpp-h200-qwen3-30b/`).

use residency_core::cost::Instance;
use residency_core::heat::HeatTable;
use residency_core::profile::HardwareProfile;
use residency_formats::export::baselines::llama_cpp_strategies;
use residency_formats::gguf::{self, GgufModel};
use residency_formats::llama_bench::calibrate::{calibrate, run_work, Calibration};
use residency_formats::llama_bench::fit::Term;
use residency_formats::llama_bench::graph::{instance_work, Work};
use residency_formats::llama_bench::runs::{read_runs, BenchRun};
use residency_testkit::gguf::{qwen3moe_sized, Qwen3MoeGeometry};

mod llama_bench_support;
use llama_bench_support::{h200_runs_dir, profile, read_one, runs_of};
use std::path::{Path, PathBuf};

/// One llama-bench test as its `-o json` writes it, with the fields the
/// timing reads.
fn bench_json(model_size: u64, ngl: i64, ncmoe: i64, ot: &str, threads: u32, ns: u64) -> String {
    format!(
        r#"[{{"build_commit": "abc", "gpu_info": "card", "model_filename": "m.gguf",
  "model_size": {model_size}, "n_threads": {threads}, "n_gpu_layers": {ngl},
  "n_cpu_moe": {ncmoe}, "tensor_buft_overrides": "{ot}", "tensor_split": "0.00",
  "n_prompt": 0, "n_gen": 10, "n_depth": 0, "samples_ns": [{ns}, {ns}, {ns}],
  "avg_ts": 1.0}}]"#
    )
}

fn run_from(dir: &Path, name: &str, json: &str) -> BenchRun {
    read_one(&dir.join(format!("{name}.json")), json).1
}

/// A 4-layer qwen3moe file: per layer a Q8_0 attn_q of 64 x 64 (4352
/// bytes), two F32 norms (256 bytes each), an F32 router of 64 x 4 (1024)
/// and three Q4_0 expert tensors of 64 x 32 x 4 (2 x 18 x 32 x 4 = 4608
/// bytes each, top-2 of 4 experts: 2304 read per token); a Q8_0 head of 64 x 100 (6800) and its
/// F32 norm (256); token_embd (6800) stays on the CPU, unread.
fn small(dir: &Path) -> (GgufModel, u64) {
    let path = dir.join("m.gguf");
    qwen3moe_sized(4, 64, 32, 4).write(&path);
    let g = GgufModel::open(&path).unwrap();
    let size = g.tensors().map(|t| t.bytes).sum();
    (g, size)
}

#[test]
fn ngl_puts_the_head_and_the_last_layers_on_the_gpu_and_rules_win() {
    let dir = tempfile::tempdir().unwrap();
    let (g, size) = small(dir.path());
    // Attention group per layer: 4352 + 256 + 256 + 1024 = 5888 bytes.
    // -ngl 3 of 4 layers: the head is slot 4, so slots 2..4 (layers 2, 3
    // and the head) are on the GPU and layers 0, 1 on the CPU.
    let run = run_from(dir.path(), "ngl3", &bench_json(size, 3, 0, "none", 4, 1));
    let w = run_work(&g, &run, &[1e6]).unwrap();
    // CPU: two whole layers, 2 x (5888 + 3 x 2304) = 25600 bytes; one
    // crossing into layer 2, one for the logits.
    assert_eq!(w.cpu_layers, 2.0);
    assert_eq!(w.gpu_layers, 2.0);
    assert_eq!(w.cpu_bytes, 25600.0);
    assert_eq!(w.crossings, 2.0);
    // Two CPU layers x 3 expert tensors x top-2 = 12 expert matrices.
    assert_eq!(w.cpu_matrices, 12.0);
    // GPU: two layers and the head (6800 + 256) at 1 MB/s.
    let gpu_bytes = 2.0 * (5888.0 + 3.0 * 2304.0) + 7056.0;
    assert!((w.fixed_seconds - gpu_bytes / 1e6).abs() < 1e-12);

    // -ngl 99 -ncmoe 1 and an -ot rule moving layer 3's down projection to
    // the CPU: layer 0's experts (6912) and layer 3's down (2304) on the
    // CPU; crossings: in, out and back for layer 0's experts, out and back
    // for layer 3's down, and the head's back to the CPU at the end = 6.
    let ot = r"blk\\.3\\.ffn_down=CPU";
    let run = run_from(dir.path(), "mixed", &bench_json(size, 99, 1, ot, 4, 1));
    let w = run_work(&g, &run, &[1e6]).unwrap();
    assert_eq!(w.cpu_bytes, 6912.0 + 2304.0);
    assert_eq!(w.crossings, 6.0);
    // Layer 0's 3 expert tensors and layer 3's down, top-2 each.
    assert_eq!(w.cpu_matrices, 8.0);
    assert_eq!(w.gpu_layers, 4.0);
    assert_eq!(w.cpu_layers, 0.0);
}

#[test]
fn a_run_of_another_file_or_with_bad_rules_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (g, size) = small(dir.path());
    let cases = [
        (bench_json(size + 1, 99, 0, "none", 4, 1), "model_size"),
        (
            bench_json(size, 99, 0, "exps=NPU0", 4, 1),
            "names buffer `NPU0`",
        ),
        // The regex crate's message is several lines; its last is kept.
        (
            bench_json(size, 99, 0, "(exps=CPU", 4, 1),
            "is not a regex residency reads: error: unclosed group;",
        ),
        (bench_json(size, 99, 0, "exps=CUDA1", 4, 1), "lists 1 GPU"),
    ];
    for (json, expected) in cases {
        let run = run_from(dir.path(), "bad", &json);
        let e = run_work(&g, &run, &[1e6]).unwrap_err().to_string();
        assert!(e.contains(expected) && e.contains("bad.json"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    // Runs of different thread counts do not make one CPU rate.
    let a = run_from(dir.path(), "a", &bench_json(size, 99, 0, "none", 4, 1000));
    let b = run_from(dir.path(), "b", &bench_json(size, 0, 0, "none", 8, 9000));
    let runs = [("a".to_string(), a), ("b".to_string(), b)];
    let e = calibrate(std::slice::from_ref(&g), &profile(), &runs, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("n_threads"), "{e}");
    // A file of prompt tests only has no decode to time.
    let path = dir.path().join("pp.json");
    std::fs::write(
        &path,
        bench_json(size, 99, 0, "none", 4, 1).replace(r#""n_gen": 10"#, r#""n_gen": 0"#),
    )
    .unwrap();
    let e = read_runs(&path).unwrap_err().to_string();
    assert!(e.contains("no decode test"), "{e}");
}

/// The repository's H200 runs and the header of the file they ran.
fn h200_runs(dir: &Path) -> (GgufModel, PathBuf) {
    let path = dir.join("q.gguf");
    Qwen3MoeGeometry::QWEN3_30B_A3B.gguf().write(&path);
    (GgufModel::open(&path).unwrap(), h200_runs_dir())
}

#[test]
fn an_instance_and_a_runs_flags_give_the_same_work() {
    // Two constructions of one placement: the baselines' `-ot exps=CPU` on
    // the instance of the file, and llama-bench's `-ngl 99 -ot exps=CPU`
    // over the file's tensors; likewise everything on the card.
    let dir = tempfile::tempdir().unwrap();
    let (g, runs) = h200_runs(dir.path());
    let (model, _, _) = gguf::read_model(g.path()).unwrap();
    let p = profile();
    let heat = HeatTable::uniform(&model);
    let inst =
        Instance::from_heat(&p, &model, &heat, Path::new("uniform"), &mut Vec::new()).unwrap();
    let strategies = llama_cpp_strategies(&inst).unwrap();
    let of = |flags: &str| {
        let s = strategies.iter().find(|s| s.flags == flags).unwrap();
        instance_work(&inst, &s.placement)
    };
    let rate = [p.gpus[0].gemv_bandwidth.0];
    let check = |instance: Work, run: Work| {
        assert_eq!(instance.gpu_layers, run.gpu_layers);
        assert_eq!(instance.cpu_layers, run.cpu_layers);
        assert_eq!(instance.crossings, run.crossings);
        // From the flags top_k per expert tensor on the CPU; from the
        // instance each expert's use rate times its 3 projections.
        assert!((instance.cpu_matrices - run.cpu_matrices).abs() < 1e-9);
        assert!(
            (instance.cpu_bytes / run.cpu_bytes.max(1.0) - 1.0).abs() < 1e-9
                || run.cpu_bytes == 0.0
        );
        assert!((instance.fixed_seconds / run.fixed_seconds - 1.0).abs() < 1e-9);
    };
    let expscpu = &runs_of(&runs, "expscpu")[0].1;
    check(
        of("-ngl 999 -ot exps=CPU"),
        run_work(&g, expscpu, &rate).unwrap(),
    );
    // By hand: 48 layers x 3 expert tensors x top-8 = 1152 CPU matrices.
    assert_eq!(run_work(&g, expscpu, &rate).unwrap().cpu_matrices, 1152.0);
    let gpuall = &runs_of(&runs, "gpuall")[0].1;
    // The card holds the whole model: `--n-cpu-moe 0` is everything on it.
    check(
        of("-ngl 999 --n-cpu-moe 0"),
        run_work(&g, gpuall, &rate).unwrap(),
    );
}

/// Each placement's median measured tok/s over its predicted, minus one.
fn errors(c: &Calibration) -> Vec<(String, bool, f64)> {
    c.rows
        .iter()
        .map(|r| {
            (
                r.flags.clone(),
                r.in_fit,
                r.predicted_seconds / r.median_seconds() - 1.0,
            )
        })
        .collect()
}

#[test]
fn four_placements_on_the_h200_predict_the_others_of_the_model() {
    // Fit on -ngl 99, -ot exps=CPU, -ot ffn_down_exps=CPU and -ngl 0 (3-4
    // rounds each); predict the seven others of the same file. Measured
    // (docs/gguf.md, "Predicting llama.cpp"): every held-out placement
    // within 6.6 % of its median.
    let dir = tempfile::tempdir().unwrap();
    let (g, runs) = h200_runs(dir.path());
    let fit: Vec<_> = ["gpuall", "expscpu", "downcpu", "ngl0"]
        .iter()
        .flat_map(|p| runs_of(&runs, p))
        .collect();
    let check: Vec<_> = [
        "gateupcpu",
        "ncmoe12",
        "ncmoe24",
        "ncmoe25",
        "ncmoe36",
        "ngl24",
        "plan8",
    ]
    .iter()
    .flat_map(|p| runs_of(&runs, p))
    .collect();
    let prior: HardwareProfile = profile();
    let c = calibrate(std::slice::from_ref(&g), &prior, &fit, &check).unwrap();
    // Runs of one file cannot tell the per-matrix and per-token costs
    // from the others (llama_bench_geometries.rs fits them on two files).
    assert_eq!(c.fit.kept, vec![Term::CpuMatrix, Term::Token]);
    for (flags, in_fit, e) in errors(&c) {
        let bound = if flags.contains("gate|up") {
            0.101
        } else {
            0.075
        };
        assert!(
            e.abs() <= bound,
            "{flags} (fit {in_fit}): {:+.1} %",
            e * 100.0
        );
    }
    // The fitted per-layer GPU cost is what the cost model lacked: tens
    // of microseconds (the calibrated H200 profile charges 7 us a stage).
    let t = &c.fit.timing;
    assert!((30e-6..80e-6).contains(&t.gpu_layer_overhead.0), "{t:?}");
}
