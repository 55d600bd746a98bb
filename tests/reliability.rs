//! One test per class of bad input that fuzzing found (the campaigns of
//! tests/fuzz/, and a first campaign run by hand): the hand-made bad
//! input is refused in one line naming the file and the place, before
//! anything is allocated from it or priced with it.

mod common;

use common::{assert_bad_input, one_error_line, run_ok, s};
use residency_core::kv::KvGroupsFile;
use residency_core::model::Model;
use residency_core::plan::Plan;
use residency_core::profile::HardwareProfile;
use residency_formats::heat::{read_heat, HeatContext, HeatFormat};
use residency_formats::inputs::{InputPaths, Inputs};
use residency_testkit::gguf::{qwen3moe, Kv};
use residency_testkit::{write_tiny_inputs, TINY_PROFILE};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MODEL: &str = residency_testkit::SMALL_DEEPSEEK;

/// The refusal of `text` as a file named `name` by `read`, checked to be
/// one line naming the file and containing `place`.
fn refused<T>(name: &str, text: &str, place: &str, read: impl Fn(&Path) -> Result<T, String>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let message = match read(&path) {
        Ok(_) => panic!("{name} accepted:\n{text}"),
        Err(m) => m,
    };
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains(place), "{message}");
}

fn profile(text: &str, place: &str) {
    refused("profile.yaml", text, place, |p| {
        HardwareProfile::from_yaml_file(p).map_err(|e| e.to_string())
    });
}

fn model(text: &str, place: &str) {
    refused("model.yaml", text, place, |p| {
        Model::from_yaml_file(p).map_err(|e| e.to_string())
    });
}

const PROFILE: &str = "\
name: p
numa:
  - { id: 0, ram: 4 GiB, cores: 4, gemv_bandwidth: GEMV }
gpus:
  - { id: 0, name: c, vram: 1 GiB, numa: 0, gemv_bandwidth: 200 GB/s, upload_bandwidth: 12 GB/s, sync_overhead: SYNC }
";

#[test]
fn a_rate_of_1e_minus_300_bytes_per_second_is_refused() {
    // Found as a NaN inside the solver's lower bound, then a clamp panic.
    let text = PROFILE
        .replace("GEMV", "1e-300 B/s")
        .replace("SYNC", "30 us");
    profile(&text, "numa[0].gemv_bandwidth");
}

#[test]
fn a_sync_overhead_of_1e300_seconds_is_refused() {
    let text = PROFILE
        .replace("GEMV", "20 GB/s")
        .replace("SYNC", "1e300 s");
    profile(&text, "gpus[0].sync_overhead");
}

#[test]
fn a_layer_range_to_u64_max_is_refused_before_it_is_expanded() {
    // Expanded, this range asked for 2^67 bytes.
    let text = MODEL.replace("\"0..=3\"", "\"0..=18446744073709551615\"");
    model(&text, "trunk[0]");
}

#[test]
fn four_billion_experts_are_refused_before_any_table_is_sized() {
    // The planner's per-expert tables asked for 32 GiB.
    model(
        &MODEL.replace("experts: 4", "experts: 4294967296"),
        "experts",
    );
}

#[test]
fn four_billion_layers_are_refused() {
    model(&MODEL.replace("layers: 4", "layers: 4294967296"), "layers");
}

#[test]
fn a_heat_count_of_1e308_is_refused() {
    // Summed with the rest of its layer it overflowed to infinity, and the
    // solver's lower bound turned it into NaN.
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("model.yaml");
    std::fs::write(&model_path, MODEL).unwrap();
    let heat =
        r#"{"tokens": 50, "layers": [[40, 30, 1e308, 10], [5, 50, 25, 20], [70, 10, 10, 10]]}"#;
    refused("heat.json", heat, "MoE layer 0 expert 2", |p| {
        let paths = InputPaths {
            model: Some(model_path.clone()),
            heat: Some(p.to_path_buf()),
            ..InputPaths::default()
        };
        Inputs::load(&paths)
            .and_then(|mut i| i.instance())
            .map_err(|e| e.to_string())
    });
}

#[test]
fn a_kv_group_prefill_of_1e308_ms_is_refused() {
    let text = "\
format: residency-kv-groups
groups:
  - { name: a, bytes: 64 KiB, reuses_per_token: 0.01, prefill_seconds: 1e308 ms }
";
    refused("kv.yaml", text, "groups[0].prefill_seconds", |p| {
        KvGroupsFile::read(p).map_err(|e| e.to_string())
    });
}

#[test]
fn a_kv_group_reused_1e308_times_a_token_is_refused() {
    let text = "\
format: residency-kv-groups
groups:
  - { name: a, bytes: 64 KiB, reuses_per_token: 1e308, prefill_seconds: 2 ms }
";
    refused("kv.yaml", text, "groups[0].reuses_per_token", |p| {
        KvGroupsFile::read(p).map_err(|e| e.to_string())
    });
}

// ---------------------------------------------------------------------
// Plans: every command that takes one checks it first.

/// The tiny profile, model and KV groups in `dir`, and two plans of them
/// made by `residency plan`: `with-kv.json` (both KV groups) and
/// `no-kv.json`.
struct Planned {
    dir: tempfile::TempDir,
    profile: PathBuf,
    model: PathBuf,
    with_kv: PathBuf,
    no_kv: PathBuf,
}

fn planned() -> Planned {
    let dir = tempfile::tempdir().unwrap();
    let [profile, model, kv] = write_tiny_inputs(dir.path());
    let with_kv = dir.path().join("with-kv.json");
    let no_kv = dir.path().join("no-kv.json");
    let head = ["plan", "--profile", s(&profile), "--model", s(&model)];
    let tail = ["--time-limit", "1", "--out"];
    run_ok(&[&head[..], &["--kv", s(&kv)], &tail, &[s(&with_kv)]].concat());
    run_ok(&[&head[..], &tail, &[s(&no_kv)]].concat());
    Planned {
        dir,
        profile,
        model,
        with_kv,
        no_kv,
    }
}

impl Planned {
    /// The plan with KV groups, changed by `edit`, written as `name`.
    fn edited(&self, name: &str, edit: impl Fn(&mut Value)) -> PathBuf {
        let mut plan: Value =
            serde_json::from_str(&std::fs::read_to_string(&self.with_kv).unwrap()).unwrap();
        edit(&mut plan);
        let path = self.dir.path().join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
        path
    }

    /// `command` on `plan` with this profile and model (`validate`,
    /// `explain`; `diff` takes two plans).
    fn args<'a>(&'a self, command: &'a str, plans: &[&'a Path]) -> Vec<&'a str> {
        let mut args = vec![command];
        args.extend(plans.iter().map(|p| s(p)));
        args.extend(["--profile", s(&self.profile), "--model", s(&self.model)]);
        args
    }

    fn no_output(&self) -> PathBuf {
        self.dir.path().join("never-written")
    }
}

/// `Plan::read` refuses `plan` in one line naming it and `place`, and so
/// does `apply` (which reads nothing else before it).
fn plan_refused(p: &Planned, plan: &Path, place: &str) {
    let message = Plan::read(plan).unwrap_err().to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(message.contains(&plan.display().to_string()), "{message}");
    assert!(message.contains(place), "{message}");
    let args = ["apply", "--plan", s(plan), "--checkpoint", "no-such-dir"];
    assert_bad_input(&args, plan, place, &p.no_output());
}

#[test]
fn a_plan_with_a_place_no_profile_has_is_refused_before_apply_loads_it() {
    // `apply` printed the refusal, or panicked indexing `places`, and
    // exited 0.
    let p = planned();
    let upper = p.edited("upper.json", |v| v["places"][0] = json!("GPU:0"));
    plan_refused(&p, &upper, "places[0]");
    // gpu:7 in `places`, gpu:0 still in `usage`.
    let seventh = p.edited("seventh.json", |v| v["places"][0] = json!("gpu:7"));
    plan_refused(&p, &seventh, "usage");
    let twice = p.edited("twice.json", |v| v["places"][1] = json!("gpu:0"));
    plan_refused(&p, &twice, "places[1]");
}

#[test]
fn a_plan_with_an_empty_expert_row_or_an_index_past_its_places_is_refused() {
    let p = planned();
    let empty = p.edited("empty.json", |v| v["experts"][1] = json!([]));
    plan_refused(&p, &empty, "experts[1]");
    // The tiny profile has 3 places (gpu:0, ram:0, disk:0): index 3 is past them.
    let past = p.edited("past.json", |v| v["experts"][2][3] = json!(3));
    plan_refused(&p, &past, "experts[2][3]");
}

#[test]
fn a_trunk_component_listed_twice_is_refused() {
    let p = planned();
    let twice = p.edited("twice.json", |v| {
        let first = v["trunk"][0].clone();
        v["trunk"].as_array_mut().unwrap().push(first);
    });
    // SMALL_DEEPSEEK's trunk: attn x4, dense_ffn x1, shared_expert x3,
    // lm_head x1 = 9 components; the copy is trunk[9].
    plan_refused(&p, &twice, "trunk[9]");
    for command in ["validate", "explain"] {
        assert_bad_input(
            &p.args(command, &[&twice]),
            &twice,
            "trunk[9]",
            &p.no_output(),
        );
    }
}

#[test]
fn a_trunk_component_with_changed_bytes_is_refused_by_every_command() {
    let p = planned();
    let changed = p.edited("changed.json", |v| v["trunk"][0]["bytes"] = json!(1));
    let none: &[&str] = &[];
    for args in [
        p.args("validate", &[&changed]),
        p.args("explain", &[&changed]),
        p.args("diff", &[&p.with_kv, &changed]),
        [&p.args("plan", &[])[..], &["--from", s(&changed)], none].concat(),
    ] {
        assert_bad_input(&args, &changed, "trunk[0].bytes", &p.no_output());
    }
}

#[test]
fn a_kv_group_of_no_bytes_or_negative_reuse_is_refused() {
    let p = planned();
    let empty = p.edited("empty.json", |v| v["kv"][0]["bytes"] = json!(0));
    plan_refused(&p, &empty, "kv[0].bytes");
    let negative = p.edited("negative.json", |v| {
        v["kv"][1]["reuses_per_token"] = json!(-0.5)
    });
    plan_refused(&p, &negative, "kv[1].reuses_per_token");
    assert_bad_input(
        &p.args("explain", &[&negative]),
        &negative,
        "kv[1].reuses_per_token",
        &p.no_output(),
    );
}

#[test]
fn diff_of_a_plan_with_fewer_kv_groups_is_refused() {
    // Both placements were priced on the first plan's instance: the second
    // one's was two objects short, and the cost model indexed past it.
    let p = planned();
    let line = one_error_line(&p.args("diff", &[&p.with_kv, &p.no_kv]), &p.no_output());
    assert!(line.contains(&p.no_kv.display().to_string()), "{line}");
    // TINY_KV has two groups; the plan without --kv none.
    assert!(line.contains("has 0 KV groups"), "{line}");
    assert!(line.contains("has 2"), "{line}");
}

#[test]
fn apply_refuses_expert_rows_that_do_not_fit_the_checkpoint() {
    // A row of 3 places for the checkpoint's 4 experts loaded 3 and said
    // nothing; a longer one panicked.
    let dir = tempfile::tempdir().unwrap();
    let yaml = dir.path().join("model.yaml");
    std::fs::write(&yaml, MODEL).unwrap();
    let ckpt = dir.path().join("ckpt");
    let generate = ["gen-checkpoint", "--model", s(&yaml), "--out", s(&ckpt)];
    run_ok(&[&generate[..], &["--layers", "2", "--dtype", "int4"]].concat());
    let plan = dir.path().join("plan.json");
    run_ok(&[
        "plan",
        "--model",
        s(&ckpt),
        "--time-limit",
        "1",
        "--out",
        s(&plan),
    ]);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["experts"][0].as_array_mut().unwrap().pop();
    std::fs::write(&plan, v.to_string()).unwrap();
    let out = dir.path().join("apply.json");
    let args = [
        "apply",
        "--plan",
        s(&plan),
        "--checkpoint",
        s(&ckpt),
        "--json",
        s(&out),
    ];
    let line = one_error_line(&args, &out);
    assert!(line.contains(&plan.display().to_string()), "{line}");
    assert!(line.contains("experts[0]: places 3 experts"), "{line}");
}

// ---------------------------------------------------------------------
// Text files: looked at before they are read whole.

#[test]
fn a_gguf_given_as_a_model_description_is_refused_from_its_magic() {
    // Read whole as text, a 2 GiB GGUF took 2.1 GB of memory before "not
    // valid UTF-8".
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.yaml");
    qwen3moe(1).write(&path);
    let e = Model::from_yaml_file(&path).unwrap_err().to_string();
    assert!(e.contains("start: is a GGUF model file, not text"), "{e}");
}

#[test]
fn binary_bytes_in_a_profiles_first_kib_are_refused() {
    profile("name: a\0b\n", "a NUL byte at byte 7");
    // 0xff can start no UTF-8 character.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.yaml");
    std::fs::write(&path, b"name: \xff\xff\n").unwrap();
    let e = HardwareProfile::from_yaml_file(&path)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not UTF-8 text (at byte 6)"), "{e}");
}

#[test]
fn a_document_over_64_mib_is_refused_without_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plan.json");
    let file = std::fs::File::create(&path).unwrap();
    // Sparse: 64 MiB + 1 byte of holes.
    file.set_len((64 << 20) + 1).unwrap();
    let e = Plan::read(&path).unwrap_err().to_string();
    assert!(
        e.contains("size: is 67108865 bytes, more than the 67108864"),
        "{e}"
    );
}

// ---------------------------------------------------------------------
// YAML nesting: bounded before the parser sees it.

#[test]
fn eighty_thousand_nested_brackets_are_refused_at_once() {
    // The YAML parser took 30 s on these.
    let started = Instant::now();
    let text = format!("name: {}\n", "[".repeat(80_000));
    // The 129th bracket passes the limit of 128, on line 1.
    profile(&text, "line 1: nests deeper than 128 levels");
    model(
        &format!("name: x\ntrunk: {}", "{a: ".repeat(80_000)),
        "line 2",
    );
    refused("kv.yaml", &text, "line 1", |p| {
        KvGroupsFile::read(p).map_err(|e| e.to_string())
    });
    refused("plan.yaml", &text, "line 1", |p| {
        Plan::read(p).map_err(|e| e.to_string())
    });
    assert!(started.elapsed().as_secs_f64() < 2.0);
}

#[test]
fn eighty_thousand_nested_dashes_are_refused() {
    // `- - - x` nests a sequence per dash on one line.
    let text = format!("name: a\nnuma:\n{}x\n", "- ".repeat(80_000));
    // 513 columns of `- ` pass the limit of 512.
    profile(&text, "line 3: is indented");
}

#[test]
fn brackets_inside_quotes_and_comments_do_not_count() {
    // 200 brackets, but in a quoted string and a comment: a valid profile.
    let text = TINY_PROFILE.replace(
        "name: tiny",
        &format!("name: \"{}\" # {}", "[".repeat(200), "{".repeat(200)),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    let p = HardwareProfile::from_yaml_file(&path).unwrap();
    assert_eq!(p.name.len(), 200);
}

// ---------------------------------------------------------------------
// GGUF metadata and tensor infos.

fn gguf_refused(g: residency_testkit::gguf::Gguf, place: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    g.write(&path);
    let e = match residency_formats::gguf::read_model(&path) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(e.contains(place), "{e}");
}

#[test]
fn a_gguf_with_a_metadata_key_twice_is_refused() {
    // llama.cpp refuses it; which value counted was a guess.
    gguf_refused(
        qwen3moe(1).kv("qwen3moe.expert_used_count", Kv::U32(4)),
        "repeats the metadata key `qwen3moe.expert_used_count`",
    );
}

#[test]
fn a_gguf_with_a_tensor_name_twice_is_refused() {
    gguf_refused(
        qwen3moe(1).tensor("output_norm.weight", &[64], residency_testkit::gguf::F32),
        "repeats the tensor `output_norm.weight`",
    );
}

#[test]
fn a_negative_value_length_is_refused_not_defaulted() {
    // Read as missing, -1 fell back to the head size and changed the KV reserve.
    gguf_refused(
        qwen3moe(1).kv("qwen3moe.attention.value_length", Kv::I64(-1)),
        "qwen3moe.attention.value_length: is -1, not a whole number",
    );
}

#[test]
fn a_block_count_of_four_billion_is_refused_before_the_plan_sizes_tables() {
    let mut g = qwen3moe(1);
    g.kv.retain(|(k, _)| k != "qwen3moe.block_count");
    gguf_refused(
        g.kv("qwen3moe.block_count", Kv::U32(u32::MAX)),
        "qwen3moe.block_count: is 4294967295, not a whole number from 0 to 16777216",
    );
}

// ---------------------------------------------------------------------
// Messages: one line of what the file says, escaped and cut.

#[test]
fn control_bytes_in_an_echoed_value_are_escaped() {
    // ESC and NUL reached the terminal raw. The value is refused as a size.
    let text = PROFILE
        .replace("GEMV", "20 GB/s")
        .replace("SYNC", "30 us")
        .replace("vram: 1 GiB", r#"vram: "1 \e[31mGiB""#);
    profile(&text, "\\u{1b}[31mGiB");
}

#[test]
fn a_long_echoed_value_is_cut_at_80_characters() {
    let long = "x".repeat(100_000);
    let text = PROFILE
        .replace("GEMV", "20 GB/s")
        .replace("SYNC", "30 us")
        .replace("vram: 1 GiB", &format!("vram: {long}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.yaml");
    std::fs::write(&path, text).unwrap();
    let e = HardwareProfile::from_yaml_file(&path)
        .unwrap_err()
        .to_string();
    // The echoed run is the opening backtick and 79 x: 80 characters.
    assert!(e.contains(&format!("`{}…", "x".repeat(79))), "{e}");
    assert!(!e.contains(&"x".repeat(80)));
    // The file's name, place, cut problem and fix: far under a kilobyte.
    assert!(e.len() < 1000, "{} bytes", e.len());
}

#[test]
fn an_unknown_field_in_a_packed_format_names_the_nearest() {
    // `bitz` was taken for nothing (an untagged enum ignored it).
    model(
        &MODEL.replace(
            "int4: { bits: 4, group: 16 }",
            "int4: { bits: 4, group: 16, bitz: 3 }",
        ),
        "unknown field `bitz`, did you mean `bits`?",
    );
}

#[test]
fn an_unknown_field_anywhere_names_the_nearest_known_one() {
    // `gemv_bandwith` is one edit from `gemv_bandwidth`; serde lists the
    // known names and the message leads with the nearest.
    profile(
        &PROFILE
            .replace("GEMV", "50 GB/s")
            .replace("SYNC", "10 us")
            .replace("cores: 4, gemv_bandwidth", "cores: 4, gemv_bandwith"),
        "unknown field `gemv_bandwith`, did you mean `gemv_bandwidth`?",
    );
}

#[test]
fn an_infeasible_plan_names_the_profile() {
    // The tiny model's trunk alone is 4 x 40000 + 36864 + 3 x 24576 +
    // 12800 = 283,392 bytes; the card keeps 1024 - 1000 = 24 KiB and the
    // node 1024 - 900 - 16 = 108 KiB: 132 KiB = 135,168 bytes in all.
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.yaml");
    let model = dir.path().join("model.yaml");
    std::fs::write(&model, MODEL).unwrap();
    let text = TINY_PROFILE
        .replace(
            "ram: 4 MiB, reserved: 1 MiB, staging: 256 KiB",
            "ram: 1 MiB, reserved: 900 KiB, staging: 16 KiB",
        )
        .replace("reserved: 800 KiB", "reserved: 1000 KiB");
    std::fs::write(&profile, text).unwrap();
    let out = dir.path().join("plan.json");
    let args = [
        "plan",
        "--profile",
        s(&profile),
        "--model",
        s(&model),
        "--out",
        s(&out),
    ];
    let line = one_error_line(&args, &out);
    assert!(
        line.starts_with(&format!("error: infeasible: {}", profile.display())),
        "{line}"
    );
}

// ---------------------------------------------------------------------
// llama-bench and vLLM files.

const BENCH: &str = r#"[{"model_filename": "m.gguf", "model_size": 1000, "n_threads": 8,
"n_gpu_layers": 99, "n_cpu_moe": NCMOE, "n_prompt": 0, "n_gen": 64, "samples_ns": SAMPLES}]"#;

fn bench_refused(ncmoe: &str, samples: &str, place: &str) {
    let text = BENCH.replace("NCMOE", ncmoe).replace("SAMPLES", samples);
    refused("bench.json", &text, place, |p| {
        residency_formats::llama_bench::runs::read_runs(p).map_err(|e| e.to_string())
    });
}

#[test]
fn llama_bench_samples_of_zero_or_below_are_refused() {
    // All zero measured "inf tok/s".
    bench_refused("0", "[0, 0, 0]", "[0].samples_ns[0]");
    bench_refused("0", "[1000, -5]", "[0].samples_ns[1]");
}

#[test]
fn a_negative_n_cpu_moe_is_refused() {
    bench_refused("-1", "[1000]", "[0].n_cpu_moe: is -1");
}

fn vllm_refused(load: &str, map: &str, place: &str) {
    let text = format!(r#"{{"expert_load_window": {load}, "physical_to_logical_map": {map}}}"#);
    let dir = tempfile::tempdir().unwrap();
    let model_path = dir.path().join("model.yaml");
    std::fs::write(&model_path, MODEL).unwrap();
    let model = Model::from_yaml_file(&model_path).unwrap();
    refused("eplb.json", &text, place, |p| {
        read_heat(
            p,
            Some(HeatFormat::VllmEplb),
            &HeatContext::for_model(&model),
            &mut Vec::new(),
        )
        .map_err(|e| e.to_string())
    });
}

#[test]
fn vllm_eplb_negative_loads_and_bad_map_entries_are_refused() {
    let ok_map = "[[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]";
    let load = |row: &str| format!("[{row}, [1, 2, 3, 4], [1, 2, 3, 4]]");
    vllm_refused(
        &load("[1, -2, 3, 4]"),
        ok_map,
        "physical_to_logical_map[0][1]",
    );
    // -1 is an empty slot; -2 is nothing.
    let map = "[[0, 1, 2, -2], [0, 1, 2, 3], [0, 1, 2, 3]]";
    vllm_refused(
        &load("[1, 2, 3, 4]"),
        map,
        "physical_to_logical_map[0][3]: is -2",
    );
    // 1e9 sized an 8 GB row of expert ids.
    let map = "[[0, 1, 2, 1000000000], [0, 1, 2, 3], [0, 1, 2, 3]]";
    vllm_refused(
        &load("[1, 2, 3, 4]"),
        map,
        "physical_to_logical_map[0][3]: is 1000000000",
    );
}

#[test]
fn a_log_figure_of_minus_1e308_blames_the_log() {
    // The profile calibrated from it was refused naming the profile being
    // written, which did not exist yet.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.yaml");
    std::fs::write(&base, TINY_PROFILE).unwrap();
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "[timers] decode: 63 tokens\n[timers] step() total: 5 ms (outside the phases: -1e308 ms)\n",
    )
    .unwrap();
    let out = dir.path().join("calibrated.yaml");
    let args = [
        "profile",
        "calibrate",
        s(&base),
        "--from-log",
        s(&log),
        "--out",
        s(&out),
    ];
    let line = one_error_line(&args, &out);
    assert!(
        line.starts_with(&format!("error: {}:", log.display())),
        "{line}"
    );
    assert!(
        line.contains("line 2: `outside the phases` is -1e308 ms"),
        "{line}"
    );
}

#[test]
fn a_gguf_string_length_near_four_gib_is_refused_without_allocating_it() {
    // "GGUF", version 3, no tensors, one key of length 2^32 - 1 in a
    // 36-byte file: the length is past the file's end, so nothing is
    // allocated from it.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(u64::from(u32::MAX).to_le_bytes());
    bytes.extend(b"abcd");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, bytes).unwrap();
    let e = residency_formats::gguf::read_model(&path)
        .unwrap_err()
        .to_string();
    // 4 + 4 + 8 + 8 + 8 = byte 32, where the key's bytes would start.
    assert!(
        e.contains("byte 32: ends inside the header (metadata key)"),
        "{e}"
    );
}

#[test]
fn a_config_json_of_sixteen_million_experts_is_refused_before_tensors_are_listed() {
    // Found by the config.json campaign: 1.4 GB asked for at once.
    let dir = tempfile::tempdir().unwrap();
    residency_testkit::tiny_checkpoint(dir.path());
    let config = dir.path().join("ckpt/config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    // 2^24 experts pass the bound on one count; times the MoE layers they
    // are over the 2^20 routed experts the planner takes.
    v["num_local_experts"] = json!(1u64 << 24);
    std::fs::write(&config, v.to_string()).unwrap();
    let e = residency_runtime::checkpoint::Checkpoint::open(&dir.path().join("ckpt"))
        .unwrap_err()
        .to_string();
    assert!(e.contains(&config.display().to_string()), "{e}");
    assert!(e.contains("`num_local_experts`: makes"), "{e}");
    assert!(e.contains("routed experts over the MoE layers"), "{e}");
}

#[test]
fn colibri_prof_figures_out_of_range_are_refused() {
    let line = |misses: &str, felt: &str| {
        format!("[PROF] expert I/O: 0.480 GB fetched (12.0 MB/token) | hit 81.2% (900 pin + 400 lru / {misses} load) | 3.1s read service / {felt}s felt wait\n")
    };
    let read = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap();
        residency_sim::felt::prof_totals(&text, p).map_err(|e| e.to_string())
    };
    refused(
        "run.log",
        &line("120", "-1e308"),
        "line 1: `felt wait` is -1e308",
        read,
    );
    // Two lines of 2^64 - 1 misses wrapped to a small count.
    let max = u64::MAX.to_string();
    let text = line(&max, "0.5") + &line(&max, "0.5");
    refused("run.log", &text, "line 2", read);
}

/// `calibrate_from_log` of the tiny profile with the tiny model on `log`
/// (the `[timers]` lines of one decode run), refused naming the log and
/// holding `expected`. Found by the colibri-log campaign as panics in the
/// profile writer's rounding.
fn log_refused(log: &str, expected: &str) {
    use residency_hwprofile::{calibrate_from_log, ProfileDoc};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    std::fs::write(&path, log).unwrap();
    let model = Model::from_yaml_str(MODEL, Path::new("tiny")).unwrap();
    let doc = ProfileDoc::parse(TINY_PROFILE, Path::new("tiny.yaml")).unwrap();
    let e = match calibrate_from_log(doc, &path, Some(&model)) {
        Ok(_) => panic!("accepted:\n{log}"),
        Err(e) => e.to_string(),
    };
    assert!(!e.contains('\n'), "{e}");
    assert!(e.starts_with(&format!("{}: ", path.display())), "{e}");
    assert!(e.contains(expected), "{e}");
}

#[test]
fn a_log_compute_time_of_zero_or_almost_is_refused() {
    let log = |compute: &str| {
        format!("[timers] decode: 63 tokens\n[timers] expert kernel: compute {compute} ms/token\n")
    };
    // Bytes over 0 ms was an infinite rate.
    log_refused(&log("0"), "line 2: `compute` is 0.0 ms");
    // Over 1e-300 ms it is as infinite: the profile it makes is refused.
    log_refused(&log("1e-300"), "numa[0].gemv_bandwidth");
}

#[test]
fn a_log_wait_of_nan_is_refused() {
    // wait / service of NaN left no figure to take a median of.
    log_refused(
        "PROFILE: expert-disk 0.40s service, nans wait\n",
        "line 1: `wait / service` is NaN",
    );
}
