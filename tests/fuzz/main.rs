//! Mutation fuzzing of the planner's input files. Each campaign takes seed
//! files (the repository's own profiles and models, and files generated
//! here for a tiny model), mutates them with a seeded generator and runs
//! what `residency plan` runs on them: read, validate, build the instance,
//! solve, write the plan and read it back. Every input must either be
//! refused with one line naming the file, or be accepted and plan to finite
//! times. A panic, an input that takes over `SLOW_SECONDS`, a refusal of
//! several lines or that does not name the file, or an accepted input that
//! plans to a non-finite time is a finding; the campaign fails listing each
//! one. An allocation over `MAX_ALLOCATION_BYTES` aborts the run, saying
//! which campaign and input asked for it.
//!
//! `FUZZ_ITERATIONS` (inputs per campaign, default 1000) and `FUZZ_SEED`
//! (default 1) scale and vary a run; docs/reliability.md has the long run.

mod harness;
mod mutate;

use harness::{campaign, campaign_at, Mutator, Verdict};
use mutate::{mutate_binary, mutate_text};
use residency_core::kv::KvGroupsFile;
use residency_core::model::Model;
use residency_core::plan::Plan;
use residency_core::profile::HardwareProfile;
use residency_formats::heat::{write_heat, Heat, HeatContext, HeatFormat, HeatTable};
use residency_formats::inputs::{InputPaths, Inputs};
use residency_solver::SolveOptions;
use residency_testkit::{write_tiny_inputs, TINY_KV, TINY_PROFILE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A tiny DeepSeek-shaped model whose experts do not all fit the tiny
/// card, so the solver has a choice to make.
const TINY_MODEL: &str = residency_testkit::SMALL_DEEPSEEK;

/// The tiny model's files, written once per campaign beside the input.
struct Fixture {
    _dir: tempfile::TempDir,
    profile: PathBuf,
    model: PathBuf,
    heat: PathBuf,
    kv: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let [profile, model, kv] = write_tiny_inputs(dir.path());
    let heat = dir.path().join("heat.json");
    write_tiny_heat(&heat, HeatFormat::Json);
    Fixture {
        _dir: dir,
        profile,
        model,
        heat,
        kv,
    }
}

/// Skewed heat for the tiny model (3 MoE layers of 4 experts) in `format`.
fn write_tiny_heat(path: &Path, format: HeatFormat) {
    let model = Model::from_yaml_str(TINY_MODEL, Path::new("tiny")).unwrap();
    let counts = vec![
        vec![40.0, 30.0, 20.0, 10.0],
        vec![5.0, 50.0, 25.0, 20.0],
        vec![70.0, 10.0, 10.0, 10.0],
    ];
    let heat = Heat {
        model: Some(model.name().to_string()),
        format,
        source_layers: 3,
        total: HeatTable {
            counts,
            tokens: Some(vec![50, 50, 50]),
        },
        categories: BTreeMap::new(),
    };
    write_heat(
        &heat,
        path,
        format,
        &HeatContext::for_model(&model),
        &mut Vec::new(),
    )
    .unwrap();
}

/// What `residency plan` does with these inputs: load and validate them,
/// build the instance, solve, write the plan and read its placement back.
/// Refusals come back as their message; a plan whose times are not finite
/// and positive, or that does not read back as itself, is invalid.
fn plan(paths: &InputPaths, out: &Path) -> Verdict {
    let refused = |e: residency_core::PlannerError| Verdict::Refused(e.to_string());
    let mut inputs = match Inputs::load(paths) {
        Ok(i) => i,
        Err(e) => return refused(e),
    };
    let inst = match inputs.instance() {
        Ok(i) => i,
        Err(e) => return refused(e),
    };
    let options = SolveOptions {
        time_limit_seconds: 0.05,
        ..SolveOptions::default()
    };
    let solution = match residency_solver::solve(&inst, options) {
        Ok(s) => s,
        Err(e) => return refused(e),
    };
    let seconds = inst.evaluate(&solution.placement).token_seconds;
    if !(seconds.is_finite() && seconds > 0.0) {
        return Verdict::Invalid(format!("the plan's token time is {seconds} s"));
    }
    let plan = Plan::new(&inst, &solution, inputs.refs, 0.05);
    plan.write(out).unwrap();
    let back = Plan::read(out).and_then(|p| p.placement(&inst, out));
    match back {
        Ok(p) if p == solution.placement => Verdict::Accepted,
        Ok(_) => Verdict::Invalid("the plan reads back as another placement".into()),
        Err(e) => Verdict::Invalid(format!("the plan does not read back: {e}")),
    }
}

fn repo_files(dir: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[test]
fn hardware_profiles() {
    let f = fixture();
    let out = f._dir.path().join("plan.json");
    let mut seeds = repo_files("profiles/hardware");
    seeds.push(TINY_PROFILE.as_bytes().to_vec());
    campaign("profile", "profile.yaml", seeds, mutate_text, &|p| {
        // The repository's profiles are read alone (their cards dwarf the
        // tiny model); accepted ones plan it.
        if let Err(e) = HardwareProfile::from_yaml_file(p) {
            return Verdict::Refused(e.to_string());
        }
        let paths = InputPaths {
            profile: Some(p.to_path_buf()),
            model: Some(f.model.clone()),
            heat: Some(f.heat.clone()),
            ..InputPaths::default()
        };
        plan(&paths, &out)
    });
}

#[test]
fn model_descriptions() {
    let f = fixture();
    let out = f._dir.path().join("plan.json");
    let mut seeds = repo_files("profiles/models");
    seeds.push(TINY_MODEL.as_bytes().to_vec());
    seeds.push(residency_testkit::tiny_mixtral(8).into_bytes());
    // The repository's models are planned on its largest box.
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/hardware/h200-node.yaml");
    campaign("model", "model.yaml", seeds, mutate_text, &|p| {
        let paths = InputPaths {
            profile: Some(profile.clone()),
            model: Some(p.to_path_buf()),
            ..InputPaths::default()
        };
        plan(&paths, &out)
    });
}

/// `seeds` (heat of the tiny model in `format`, written by our writer
/// when `None`) mutated and planned with the tiny profile and model.
fn heat_campaign(name: &'static str, file_name: &str, format: HeatFormat, seeds: Option<&str>) {
    let f = fixture();
    let out = f._dir.path().join("plan.json");
    let seeds = match seeds {
        Some(text) => vec![text.as_bytes().to_vec()],
        None => {
            let seed_path = f._dir.path().join(file_name);
            write_tiny_heat(&seed_path, format);
            vec![std::fs::read(&seed_path).unwrap()]
        }
    };
    campaign(name, file_name, seeds, mutate_text, &|p| {
        let paths = InputPaths {
            profile: Some(f.profile.clone()),
            model: Some(f.model.clone()),
            heat: Some(p.to_path_buf()),
            heat_format: Some(format),
            ..InputPaths::default()
        };
        plan(&paths, &out)
    });
}

#[test]
fn heat_json() {
    heat_campaign("heat-json", "heat.json", HeatFormat::Json, None);
}

#[test]
fn heat_csv() {
    heat_campaign("heat-csv", "heat.csv", HeatFormat::Csv, None);
}

#[test]
fn heat_sglang() {
    // One row of 4 experts per MoE layer of the tiny model.
    let seed = r#"{"logical_count": [[40, 30, 20, 10], [5, 50, 25, 20], [70, 10, 10, 10]]}"#;
    heat_campaign(
        "heat-sglang",
        "expert_distribution.json",
        HeatFormat::SglangJson,
        Some(seed),
    );
}

#[test]
fn heat_vllm() {
    // Six physical slots a layer: the 4 experts, then a copy of expert 0
    // and an empty slot (-1).
    let seed = r#"{"expert_load_window": [[20, 30, 20, 10, 20, 0], [5, 50, 25, 20, 0, 0], [35, 10, 10, 10, 35, 0]],
"physical_to_logical_map": [[0, 1, 2, 3, 0, -1], [0, 1, 2, 3, 0, -1], [0, 1, 2, 3, 0, -1]]}"#;
    heat_campaign("heat-vllm", "eplb.json", HeatFormat::VllmEplb, Some(seed));
}

#[test]
fn heat_qwen3() {
    let seed = "Layer,Language,Expert_0,Expert_1,Expert_2,Expert_3
0,en,0.8,0.6,0.4,0.2
1,en,0.1,1.0,0.5,0.4
2,en,1.4,0.2,0.2,0.2
";
    heat_campaign(
        "heat-qwen3",
        "moe_all_layers_analysis_arc_avg_activation.csv",
        HeatFormat::Qwen3Csv,
        Some(seed),
    );
}

/// llama-bench's `-o json` of two decode tests and a prompt test.
const LLAMA_BENCH: &str = r#"[
{"build_commit": "abc", "gpu_info": "card", "model_filename": "m.gguf", "model_size": 1000000,
 "n_threads": 8, "n_gpu_layers": 99, "n_cpu_moe": 2, "tensor_buft_overrides": "blk\\.1\\.ffn_.*_exps=CPU",
 "tensor_split": "0.00", "n_prompt": 0, "n_gen": 64, "n_depth": 0, "samples_ns": [640000000, 650000000]},
{"model_filename": "m.gguf", "model_size": 1000000, "n_threads": 8, "n_gpu_layers": 0,
 "n_prompt": 0, "n_gen": 32, "samples_ns": [900000000]},
{"model_filename": "m.gguf", "model_size": 1000000, "n_threads": 8, "n_gpu_layers": 0,
 "n_prompt": 512, "n_gen": 0, "samples_ns": [100000000]}
]"#;

#[test]
fn llama_bench_outputs() {
    let jsonl: String = serde_json::from_str::<Vec<serde_json::Value>>(LLAMA_BENCH)
        .unwrap()
        .iter()
        .map(|t| format!("{t}\n"))
        .collect();
    let seeds = vec![LLAMA_BENCH.as_bytes().to_vec(), jsonl.into_bytes()];
    campaign("llama-bench", "bench.json", seeds, mutate_text, &|p| {
        use residency_formats::llama_bench::runs::read_runs;
        let runs = match read_runs(p) {
            Ok(r) => r,
            Err(e) => return Verdict::Refused(e.to_string()),
        };
        for run in &runs {
            let seconds = run.token_seconds();
            if !(seconds.is_finite() && seconds > 0.0) {
                return Verdict::Invalid(format!("a test measures {seconds} s a token"));
            }
            if let Err(e) = run.overrides() {
                return Verdict::Refused(e.to_string());
            }
        }
        Verdict::Accepted
    });
}

/// A Colibri log with every line `profile calibrate --from-log` reads.
const COLIBRI_LOG: &str = "loaded in 1.23s
[PROF] expert I/O: 0.480 GB fetched (12.0 MB/token, 1.10 GB/s over the run) | hit 81.2% (900 pin + 400 lru / 120 load) | 525.0 loads/token | 3.1s read service / 0.5s felt wait
PROFILE: expert-disk 0.40s service, 0.10s wait
[timers] decode: 63 tokens
[timers] qtier: take 1.37 ms/token
[timers] expert kernel: compute 38.04 ms/token
[timers] step() total: 50 ms (outside the phases: 1.5 ms)
[timers] decode: 63 tokens
[timers] qtier: take 1.63 ms/token
[timers] step() total: 52 ms (outside the phases: 1.3 ms)
";

#[test]
fn colibri_logs() {
    use residency_hwprofile::{calibrate_from_log, ProfileDoc};
    let mut seeds = vec![COLIBRI_LOG.as_bytes().to_vec()];
    if let Some(raw) = residency_testkit::shared_data("colibri/qwen36_raw") {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(raw)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() < 1 << 20))
            .collect();
        logs.sort();
        seeds.extend(logs.iter().take(3).map(|p| std::fs::read(p).unwrap()));
    }
    let model = Model::from_yaml_str(TINY_MODEL, Path::new("tiny")).unwrap();
    campaign("colibri-log", "run.log", seeds, mutate_text, &|p| {
        let doc = ProfileDoc::parse(TINY_PROFILE, Path::new("tiny.yaml")).unwrap();
        match calibrate_from_log(doc, p, Some(&model)) {
            // What `--out` writes must read back as the profile.
            Ok(c) => match c.doc.to_yaml_checked(Path::new("out.yaml")) {
                Ok(_) => Verdict::Accepted,
                Err(e) => Verdict::Invalid(format!("the calibrated profile: {e}")),
            },
            Err(e) => Verdict::Refused(e.to_string()),
        }
    });
}

#[test]
fn oracle_general_traces() {
    // 24-byte records (u32 time, u64 id, u32 size, i64 next access):
    // objects 0, 1, 0, 2, 1 of 4 KiB.
    let ids = [0u64, 1, 0, 2, 1];
    let next = [2i64, 4, -1, -1, -1];
    let mut seed = Vec::new();
    for (t, (&id, &n)) in ids.iter().zip(&next).enumerate() {
        seed.extend((t as u32).to_le_bytes());
        seed.extend(id.to_le_bytes());
        seed.extend(4096u32.to_le_bytes());
        seed.extend(n.to_le_bytes());
    }
    campaign(
        "oracle-general",
        "trace.oracleGeneral",
        vec![seed],
        mutate_binary,
        &|p| match residency_sim::oracle::read_oracle_general(p) {
            Ok(_) => Verdict::Accepted,
            Err(e) => Verdict::Refused(e.to_string()),
        },
    );
}

#[test]
fn mooncake_traces() {
    let seed = r#"{"timestamp": 0, "input_length": 40, "output_length": 8, "hash_ids": [0, 1, 2]}
{"timestamp": 5, "input_length": 60, "output_length": 4, "hash_ids": [0, 1, 3, 4]}
{"timestamp": 9, "input_length": 20, "output_length": 16, "hash_ids": [5, 6]}
"#;
    campaign(
        "mooncake",
        "trace.jsonl",
        vec![seed.as_bytes().to_vec()],
        mutate_text,
        &|p| match residency_lab::kv::trace::read_mooncake(p, 16) {
            Ok(t) if t.total_tokens() < u64::MAX => Verdict::Accepted,
            Ok(_) => Verdict::Invalid("the trace's token total overflows".into()),
            Err(e) => Verdict::Refused(e.to_string()),
        },
    );
}

/// A generated checkpoint of the tiny model; `file` of it mutated and the
/// checkpoint opened (config.json and every shard's header read).
fn checkpoint_campaign(name: &'static str, file: &str, mutate: Mutator) {
    let dir = tempfile::tempdir().unwrap();
    residency_testkit::tiny_checkpoint(dir.path());
    let ckpt = dir.path().join("ckpt");
    let path = if file == "shard" {
        let mut shards: Vec<PathBuf> = std::fs::read_dir(&ckpt)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .collect();
        shards.sort();
        shards[0].clone()
    } else {
        ckpt.join(file)
    };
    let seeds = vec![std::fs::read(&path).unwrap()];
    campaign_at(name, &path, &ckpt, seeds, mutate, &|_| {
        match residency_runtime::checkpoint::Checkpoint::open(&ckpt) {
            Ok(_) => Verdict::Accepted,
            Err(e) => Verdict::Refused(e.to_string()),
        }
    });
}

#[test]
fn checkpoint_configs() {
    checkpoint_campaign("config-json", "config.json", mutate_text);
}

#[test]
fn safetensors_headers() {
    checkpoint_campaign("safetensors", "shard", mutate_binary);
}

#[test]
fn kv_groups() {
    let f = fixture();
    let out = f._dir.path().join("plan.json");
    let json = serde_json::to_vec_pretty(&KvGroupsFile::read(&f.kv).unwrap()).unwrap();
    let seeds = vec![TINY_KV.as_bytes().to_vec(), json];
    campaign("kv", "kv.yaml", seeds, mutate_text, &|p| {
        let paths = InputPaths {
            profile: Some(f.profile.clone()),
            model: Some(f.model.clone()),
            heat: Some(f.heat.clone()),
            kv: Some(p.to_path_buf()),
            ..InputPaths::default()
        };
        plan(&paths, &out)
    });
}

#[test]
fn plan_files() {
    let f = fixture();
    let paths = InputPaths {
        profile: Some(f.profile.clone()),
        model: Some(f.model.clone()),
        heat: Some(f.heat.clone()),
        kv: Some(f.kv.clone()),
        ..InputPaths::default()
    };
    let seed_plan = f._dir.path().join("seed-plan.json");
    assert!(matches!(plan(&paths, &seed_plan), Verdict::Accepted));
    let seeds = vec![std::fs::read(&seed_plan).unwrap()];
    campaign("plan", "plan.json", seeds, mutate_text, &|p| {
        // What `explain` and `diff` read: the plan's placement for the
        // inputs given now, priced.
        let plan = match Plan::read(p) {
            Ok(plan) => plan,
            Err(e) => return Verdict::Refused(e.to_string()),
        };
        let mut inputs = Inputs::load(&paths).unwrap();
        let mut inst = inputs.instance().unwrap();
        if inst.kv_ids.is_empty() {
            inst.add_kv_groups(&plan.kv_groups());
        }
        match plan.placement(&inst, p) {
            Ok(placement) => {
                let seconds = inst.evaluate(&placement).token_seconds;
                if seconds.is_finite() && seconds > 0.0 {
                    Verdict::Accepted
                } else {
                    Verdict::Invalid(format!("the placement's token time is {seconds} s"))
                }
            }
            Err(e) => Verdict::Refused(e.to_string()),
        }
    });
}

#[test]
fn gguf_headers() {
    let f = fixture();
    let seed_path = f._dir.path().join("seed.gguf");
    residency_testkit::gguf::qwen3moe(3).write(&seed_path);
    let seeds = vec![std::fs::read(&seed_path).unwrap()];
    campaign("gguf", "model.gguf", seeds, mutate_binary, &|p| {
        if let Err(e) = residency_formats::gguf::read_model(p) {
            return Verdict::Refused(e.to_string());
        }
        let paths = InputPaths {
            profile: Some(f.profile.clone()),
            model: Some(p.to_path_buf()),
            ..InputPaths::default()
        };
        plan_gguf(&paths)
    });
}

#[test]
fn gguf_split_shards() {
    // The second shard of a split model mutated; the model read from the
    // first, as `--model m-00001-of-00002.gguf` does. A refusal may name
    // either shard.
    let dir = tempfile::tempdir().unwrap();
    let [first, rest] = residency_testkit::gguf::qwen3moe_split();
    let head = dir.path().join("m-00001-of-00002.gguf");
    let tail = dir.path().join("m-00002-of-00002.gguf");
    first.write(&head);
    rest.write(&tail);
    let seeds = vec![std::fs::read(&tail).unwrap()];
    campaign_at(
        "gguf-split",
        &tail,
        dir.path(),
        seeds,
        mutate_binary,
        &|_| match residency_formats::gguf::read_model(&head) {
            Ok(_) => Verdict::Accepted,
            Err(e) => Verdict::Refused(e.to_string()),
        },
    );
}

/// `plan` on a GGUF model: the CLI reads the model from the file's header.
fn plan_gguf(paths: &InputPaths) -> Verdict {
    let (model, sha256, _) =
        match residency_formats::gguf::read_model(paths.model.as_ref().unwrap()) {
            Ok(m) => m,
            Err(e) => return Verdict::Refused(e.to_string()),
        };
    let loaded = residency_formats::inputs::LoadedModel { model, sha256 };
    let mut inputs = match Inputs::load_with_model(paths, Some(loaded)) {
        Ok(i) => i,
        Err(e) => return Verdict::Refused(e.to_string()),
    };
    match inputs.instance() {
        Ok(inst) => {
            let solution = residency_solver::solve(
                &inst,
                SolveOptions {
                    time_limit_seconds: 0.05,
                    ..SolveOptions::default()
                },
            );
            match solution {
                Ok(s) if inst.evaluate(&s.placement).token_seconds.is_finite() => Verdict::Accepted,
                Ok(s) => Verdict::Invalid(format!(
                    "the plan's token time is {} s",
                    inst.evaluate(&s.placement).token_seconds
                )),
                Err(e) => Verdict::Refused(e.to_string()),
            }
        }
        Err(e) => Verdict::Refused(e.to_string()),
    }
}
