//! `--model FILE.gguf` end to end: a GGUF file the test kit writes is
//! planned, its expert bytes are the file's, and the llama.cpp export's
//! rules match the file's own tensor names.

mod common;

use common::*;
use residency_testkit::gguf::qwen3moe;

#[test]
fn a_gguf_file_is_planned_with_its_own_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    qwen3moe(4).write(&model);
    let plan = dir.path().join("plan.json");
    let o = run_ok(&[
        "plan",
        "--model",
        s(&model),
        "--time-limit",
        "2",
        "--out",
        s(&plan),
        "--export",
        "llama-cpp",
    ]);
    let out = stdout(&o);
    assert!(out.contains("tiny-qwen3moe"), "{out}");
    // What the user would type instead, priced beside the plan.
    for baseline in [
        "llama.cpp at the same VRAM",
        "--n-cpu-moe",
        "-ot exps=CPU",
        "--fit",
    ] {
        assert!(out.contains(baseline), "`{baseline}` missing:\n{out}");
    }
    // The notes say what the file's layout implies.
    assert!(
        stderr(&o).contains("token_embd") || out.contains("token_embd"),
        "{}",
        stderr(&o)
    );
    let plan = read_json(&plan);
    assert_eq!(plan["experts"].as_array().unwrap().len(), 4, "4 MoE layers");
    // The trunk as the file holds it (the test kit's layout, by hand):
    // attention with norms and router 5888 bytes a layer, the head 7056.
    let trunk: Vec<(String, u64)> = plan["trunk"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want: Vec<(String, u64)> = (0..4).map(|_| ("attn".to_string(), 5888)).collect();
    want.push(("lm_head".to_string(), 7056));
    assert_eq!(trunk, want);
    // Every byte placed: 16 experts of 3456 bytes (32 rows of 36 bytes for
    // gate and up, 64 rows of 18 for down) and that trunk.
    let used: u64 = plan["usage"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["used_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(used, 16 * 3456 + 4 * 5888 + 7056);
    assert!(dir.path().join("llama_cpp_override_tensor.txt").is_file());
    // The same file validates the plan.
    let v = run(&[
        "validate",
        s(&dir.path().join("plan.json")),
        "--model",
        s(&model),
    ]);
    assert!(v.status.success(), "{}", stderr(&v));
}

/// The one-card desktop profile with `vram` of VRAM, none reserved, in `dir`.
fn one_card(dir: &std::path::Path, vram: &str) -> std::path::PathBuf {
    cards(dir, &[vram])
}

/// The desktop profile with a card of each of `vrams` (the desktop's card
/// otherwise, none reserved), in `dir`.
fn cards(dir: &std::path::Path, vrams: &[&str]) -> std::path::PathBuf {
    let desktop = std::fs::read_to_string(profile("desktop-1gpu-8gb")).unwrap();
    let (head, rest) = desktop.split_once("gpus:\n").unwrap();
    let (card, tail) = rest.split_once("drives:\n").unwrap();
    let gpus: String = vrams
        .iter()
        .enumerate()
        .map(|(g, vram)| {
            card.replace("- id: 0", &format!("- id: {g}"))
                .replace("vram: 8 GiB", &format!("vram: {vram}"))
                .replace("reserved: 2.59 GB", "reserved: 0 B")
        })
        .collect();
    let path = dir.join("card.yaml");
    std::fs::write(&path, format!("{head}gpus:\n{gpus}drives:\n{tail}")).unwrap();
    path
}

/// `residency plan ARGS --export llama-cpp`, the export in `dir`.
fn plan_for_llama_cpp(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let export = [
        "--time-limit",
        "2",
        "--export",
        "llama-cpp",
        "--export-dir",
        s(dir),
    ];
    run_ok(&[&["plan"], args, &export].concat())
}

/// The rules of a plan of `file` on a one-card profile with `vram`, by
/// regex and buffer, and the directory with the export.
fn llama_rules_on_one_card(
    file: &residency_testkit::gguf::Gguf,
    vram: &str,
) -> (Vec<(regex::Regex, String)>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    file.write(&model);
    let card = one_card(dir.path(), vram);
    plan_for_llama_cpp(dir.path(), &["--model", s(&model), "--profile", s(&card)]);
    let text = std::fs::read_to_string(dir.path().join("llama_cpp_override_tensor.txt")).unwrap();
    let rules = text
        .lines()
        .map(|l| {
            let rule = l.strip_prefix("-ot '").unwrap().strip_suffix('\'').unwrap();
            let (r, b) = rule.rsplit_once('=').unwrap();
            (regex::Regex::new(r).unwrap(), b.to_string())
        })
        .collect();
    (rules, dir)
}

/// On one card the rules name only what goes to the CPU, and they move
/// exactly the tensors the memory plan counts there, by the file's own
/// tensor names (matched as llama.cpp's `std::regex_search` does).
#[test]
fn the_llama_cpp_rules_match_the_files_tensors_and_nothing_else() {
    // Hidden 2048, expert FF 768, 8 experts of Q4_0: 3 x 768 x 2048 x
    // 18/32 = 2,654,208 bytes an expert, 21.2 MB a layer, whose top-2
    // reads take the CPU (39 GB/s) about 136 us against the card's 34 us
    // sync: the card pays, and 48 MiB holds the trunk (4 x 4.5 MB of
    // attention) and one or two layers, not four.
    let file = residency_testkit::gguf::qwen3moe_sized(4, 2048, 768, 8);
    let (rules, dir) = llama_rules_on_one_card(&file, "48 MiB");
    assert!(
        !rules.is_empty() && rules.iter().all(|(_, b)| b == "CPU"),
        "{rules:?}"
    );
    let mut bytes = std::collections::BTreeMap::<String, u64>::new();
    for t in &file.tensors {
        let hits: Vec<&str> = rules
            .iter()
            .filter(|(r, _)| r.is_match(&t.name))
            .map(|(_, b)| b.as_str())
            .collect();
        assert!(hits.len() <= 1, "{} matches {hits:?}", t.name);
        if t.name == "token_embd.weight" {
            // llama.cpp keeps it in host memory; no rule touches it.
            assert!(hits.is_empty());
            continue;
        }
        let buffer = hits.first().copied().unwrap_or("CUDA0");
        *bytes.entry(buffer.to_string()).or_default() += residency_testkit::gguf::Gguf::bytes(t);
    }
    let memory = read_json(&dir.path().join("llama_cpp_memory_plan.json"));
    for (buffer, total) in &bytes {
        assert_eq!(
            memory["buffers"][buffer]["bytes"], *total,
            "{buffer}: {memory}"
        );
    }
    assert!(bytes["CUDA0"] <= 48 << 20 && bytes["CPU"] > 0, "{bytes:?}");
    let commands = std::fs::read_to_string(dir.path().join("llama_cpp_command.txt")).unwrap();
    let model = dir.path().join("m.gguf");
    // `-c`: the card's 48 MiB less what the rules put there, over a
    // token's KV cache of the 4 layers on it (by hand: 2 KV heads x (512 +
    // 512) x 2 bytes = 4,096 a layer, 16,384), in steps of 256 tokens; one
    // card gets no `-ts`.
    let context = ((48u64 << 20) - bytes["CUDA0"]) / 16_384 / 256 * 256;
    assert!(context > 0 && context < 32_768, "{context}");
    assert!(
        commands.contains(&format!(
            "llama-server -m '{}' -ngl 999 -c {context} -ot '",
            model.display()
        )),
        "{commands}"
    );
    // The tiny model runs faster on the CPU than one card sync per layer:
    // all on the CPU, `-ngl 0`, and no rule at all. The KV cache is in
    // RAM, whose gigabytes hold the file's whole context, 32,768 tokens.
    let (rules, dir) = llama_rules_on_one_card(&qwen3moe(4), "60 KiB");
    assert!(rules.is_empty(), "{rules:?}");
    let args = std::fs::read_to_string(dir.path().join("llama_cpp_args.txt")).unwrap();
    assert_eq!(args, "-ngl 0 -c 32768\n");
}

/// Heat in any format the planner reads applies to a GGUF model by its MoE
/// layers: with one expert of each layer routed far more than the others,
/// those four are the ones the plan keeps on the card.
#[test]
fn heat_maps_onto_a_gguf_model_by_layer() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    // 8 experts of 2,654,208 bytes a layer (see above); the 48 MiB card
    // holds the trunk and about eleven experts.
    residency_testkit::gguf::qwen3moe_sized(4, 2048, 768, 8).write(&model);
    let hot = [5usize, 0, 7, 2];
    let layers: Vec<Vec<u64>> = hot
        .iter()
        .map(|&h| (0..8).map(|e| if e == h { 1000 } else { 10 }).collect())
        .collect();
    let heat = dir.path().join("heat.json");
    std::fs::write(
        &heat,
        serde_json::json!({ "tokens": 1000, "layers": layers }).to_string(),
    )
    .unwrap();
    let profile_path = one_card(dir.path(), "48 MiB");
    let plan_path = dir.path().join("plan.json");
    let o = run_ok(&plan_with_heat(
        s(&model),
        &heat,
        &["--profile", s(&profile_path), "--time-limit", "2"],
        &plan_path,
    ));
    assert!(
        stdout(&o).contains("heat.json (1000 tokens)"),
        "{}",
        stdout(&o)
    );
    let plan = read_json(&plan_path);
    let gpu = plan["places"]
        .as_array()
        .unwrap()
        .iter()
        .position(|p| p == "gpu:0")
        .unwrap();
    for (l, &h) in hot.iter().enumerate() {
        assert_eq!(
            plan["experts"][l][h], gpu,
            "layer {l}: {}",
            plan["experts"][l]
        );
    }
}

/// The llama.cpp export never writes a layer choice slower than what the
/// user would type instead: on the default two-card box the plan projected
/// onto whole layers loses to `--n-cpu-moe 0`, so the rules write that, and
/// the summary prices the export at or above every baseline.
#[test]
fn the_llama_cpp_export_is_never_slower_than_its_baselines() {
    let dir = tempfile::tempdir().unwrap();
    let o = plan_for_llama_cpp(dir.path(), &[]);
    let out = stdout(&o);
    let tok_s = |line: &str| -> f64 {
        let before = line.split(" tok/s").next().unwrap();
        before.split_whitespace().last().unwrap().parse().unwrap()
    };
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("llama.cpp at the same VRAM"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert!(lines[0].contains("the plan as exported"), "{out}");
    let exported = tok_s(lines[0]);
    assert!(lines.len() >= 3, "{out}");
    for line in &lines[1..] {
        assert!(exported >= tok_s(line), "{line} beats the export:\n{out}");
    }
    assert!(
        stderr(&o).contains("so the rules write the faster, `-ngl 999 --n-cpu-moe 0`'s placement"),
        "{}",
        stderr(&o)
    );
}

/// `plan --context-tokens 1024` of the 4-layer model above (a token's KV
/// cache 16,384 bytes, by hand) on `vrams`: the plan file, the command
/// file, and stdout.
fn plan_with_context(vrams: &[&str]) -> (tempfile::TempDir, serde_json::Value, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    residency_testkit::gguf::qwen3moe_sized(4, 2048, 768, 8).write(&model);
    let card = cards(dir.path(), vrams);
    let plan = dir.path().join("plan.json");
    let o = plan_for_llama_cpp(
        dir.path(),
        &[
            "--model",
            s(&model),
            "--profile",
            s(&card),
            "--context-tokens",
            "1024",
            "--out",
            s(&plan),
        ],
    );
    let commands = std::fs::read_to_string(dir.path().join("llama_cpp_command.txt")).unwrap();
    (dir, read_json(&plan), commands, stdout(&o))
}

/// Each GPU's capacity and used bytes in a plan.
fn gpu_usage(plan: &serde_json::Value) -> Vec<(u64, u64)> {
    plan["usage"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["place"].as_str().unwrap().starts_with("gpu"))
        .map(|u| {
            (
                u["capacity_bytes"].as_u64().unwrap(),
                u["used_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// One card keeps the whole KV cache of the chosen context: 1024 tokens x
/// 16,384 bytes = 16 MiB of the 48 MiB card, so 32 MiB for weights (by
/// hand), and llama.cpp starts with exactly that context.
#[test]
fn context_tokens_keep_room_for_their_kv_cache_on_one_card() {
    let (dir, plan, commands, out) = plan_with_context(&["48 MiB"]);
    let usage = gpu_usage(&plan);
    assert_eq!(usage.len(), 1);
    let (capacity, used) = usage[0];
    assert_eq!(capacity, (48 << 20) - 1024 * 16_384);
    assert!(used <= capacity && used > 0, "{usage:?}");
    assert_eq!(plan["inputs"]["context_tokens"], 1024);
    assert!(
        out.contains("KV cache of 1024 tokens reserved: 16.00 MiB on gpu:0"),
        "{out}"
    );
    // The rules put no more on the card than the plan's capacity for
    // weights, so the 16 MiB of cache fits beside them.
    let memory = read_json(&dir.path().join("llama_cpp_memory_plan.json"));
    assert!(
        memory["buffers"]["CUDA0"]["bytes"].as_u64().unwrap() <= capacity,
        "{memory}"
    );
    assert!(commands.contains(" -ngl 999 -c 1024 "), "{commands}");
    // Re-planning from it keeps its context; validate reads the plan with
    // the capacities it was made with.
    let model = dir.path().join("m.gguf");
    let card = dir.path().join("card.yaml");
    let again = dir.path().join("again.json");
    let inputs = ["--model", s(&model), "--profile", s(&card)];
    run_ok(
        &[
            &[
                "plan",
                "--from",
                s(&dir.path().join("plan.json")),
                "--out",
                s(&again),
                "--time-limit",
                "2",
            ],
            &inputs[..],
        ]
        .concat(),
    );
    let again = read_json(&again);
    assert_eq!(again["inputs"]["context_tokens"], 1024);
    assert_eq!(gpu_usage(&again)[0].0, capacity);
    run_ok(&[&["validate", s(&dir.path().join("plan.json"))], &inputs[..]].concat());
    // Re-planning for 2048 tokens: 32 MiB of cache leaves 16 MiB, less
    // than the placement in use fills, which the re-plan repairs.
    let longer = dir.path().join("longer.json");
    run_ok(
        &[
            &[
                "plan",
                "--from",
                s(&dir.path().join("plan.json")),
                "--out",
                s(&longer),
            ],
            &["--time-limit", "2", "--context-tokens", "2048"][..],
            &inputs[..],
        ]
        .concat(),
    );
    let longer = read_json(&longer);
    assert_eq!(longer["inputs"]["context_tokens"], 2048);
    let (capacity, used) = gpu_usage(&longer)[0];
    assert_eq!(capacity, (48 << 20) - 2048 * 16_384);
    assert!(used <= capacity, "{used} > {capacity}");
    assert!(
        gpu_usage(&plan)[0].1 > capacity,
        "the first plan fits anyway"
    );
}

/// Over two cards the cache is split by capacity: 16 MiB over 48 + 16 MiB
/// is 12 MiB on gpu:0 and 4 MiB on gpu:1 (by hand), which leave 36 and 12
/// MiB for weights.
#[test]
fn context_tokens_split_their_kv_cache_over_the_cards_by_capacity() {
    let (_dir, plan, commands, out) = plan_with_context(&["48 MiB", "16 MiB"]);
    let usage = gpu_usage(&plan);
    let capacities: Vec<u64> = usage.iter().map(|&(c, _)| c).collect();
    assert_eq!(capacities, [36 << 20, 12 << 20]);
    assert!(usage.iter().all(|&(c, u)| u <= c), "{usage:?}");
    assert!(
        out.contains("KV cache of 1024 tokens reserved: 12.00 MiB on gpu:0, 4.00 MiB on gpu:1"),
        "{out}"
    );
    assert!(commands.contains(" -c 1024 "), "{commands}");
}

/// `plan --context-tokens TOKENS` of `model` on `card`, to `out`.
fn context_args<'a>(model: &'a str, card: &'a str, tokens: &'a str, out: &'a str) -> [&'a str; 9] {
    [
        "plan",
        "--model",
        model,
        "--profile",
        card,
        "--context-tokens",
        tokens,
        "--out",
        out,
    ]
}

/// A context that cannot be reserved is refused on one line, with the fix.
#[test]
fn context_tokens_that_cannot_be_reserved_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.gguf");
    residency_testkit::gguf::qwen3moe_sized(4, 2048, 768, 8).write(&model);
    let card = one_card(dir.path(), "48 MiB");
    let out = dir.path().join("plan.json");
    // More than the file's context_length of 32768.
    let args = context_args(s(&model), s(&card), "65536", s(&out));
    assert_bad_input(&args, &model, "context_tokens", &out);
    let e = stderr(&run(&args));
    assert!(e.contains("give --context-tokens 32768 or less"), "{e}");
    // A description without kv_bytes_per_token.
    let described = std::path::PathBuf::from(common::model("qwen3.6-35b-a3b"));
    let args = context_args(s(&described), s(&card), "1024", s(&out));
    assert_bad_input(&args, &described, "kv_bytes_per_token", &out);
    // 32768 tokens take 512 MiB of the 48 MiB card; 50,331,648 / 16,384 =
    // 3072 tokens would take all of it, so 3071 fit (by hand).
    let o = run(&context_args(s(&model), s(&card), "32768", s(&out)));
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| !l.starts_with("note:")).collect();
    assert_eq!(lines.len(), 1, "{e}");
    assert!(
        lines[0].ends_with(
            "at most 3071 tokens leave room for weights; give --context-tokens 3071 or less"
        ),
        "{e}"
    );
    assert!(!out.exists());
}

#[test]
fn an_imatrix_beside_the_gguf_is_heat_for_plan_heat_and_validate() {
    use residency_testkit::gguf::{imatrix, ImatrixWeight};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    qwen3moe(2).write(&model);
    // llama-imatrix's file for it: 2 MoE layers of 4 experts, top-2, one
    // chunk of 8 tokens (16 routes a layer).
    let mut weights = Vec::new();
    for (l, counts) in [[8.0, 4.0, 4.0, 0.0], [2.0, 6.0, 7.0, 1.0]]
        .iter()
        .enumerate()
    {
        for p in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
            weights.push(ImatrixWeight {
                name: format!("blk.{l}.{p}.weight"),
                row: 64,
                counts: counts.to_vec(),
            });
        }
    }
    let heat = dir.path().join("tiny.imatrix.gguf");
    imatrix(1, 8, &weights).write(&heat);
    let out = dir.path().join("heat.json");
    let o = run_ok(&["heat", s(&heat), "--model", s(&model), "--out", s(&out)]);
    assert!(stderr(&o).contains("prefill routes"), "{}", stderr(&o));
    let written = read_json(&out);
    assert_eq!(written["layers"][1], serde_json::json!([2, 6, 7, 1]));
    // -q: the same conversion without the note.
    let o = run_ok(&[
        "heat",
        s(&heat),
        "--model",
        s(&model),
        "--out",
        s(&out),
        "-q",
    ]);
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
    // Converted to the engines' files and read back: the counts above, per
    // MoE layer, whichever way they went.
    let sglang = dir.path().join("sglang.json");
    for (name, extra) in [
        ("heat.pt", &[][..]),
        ("heat.csv", &[][..]),
        ("sglang.json", &["--out-format", "sglang-json"][..]),
    ] {
        let file = dir.path().join(name);
        let args = ["heat", s(&heat), "--model", s(&model), "--to", s(&file)];
        run_ok(&[&args[..], extra].concat());
        let back = dir.path().join(format!("{name}.json"));
        run_ok(&["heat", s(&file), "--model", s(&model), "--out", s(&back)]);
        let layers = &read_json(&back)["layers"];
        assert_eq!(layers[0], serde_json::json!([8, 4, 4, 0]), "{name}");
        assert_eq!(layers[1], serde_json::json!([2, 6, 7, 1]), "{name}");
    }
    // SGLang's JSON has a row per transformer layer: this model has no
    // dense layer, so the two MoE layers, one step.
    assert_eq!(
        read_json(&sglang)["logical_count"],
        serde_json::json!([[[8, 4, 4, 0], [2, 6, 7, 1]]])
    );
    let v = run_ok(&["validate", s(&heat), "--model", s(&model)]);
    assert!(stdout(&v).contains("imatrix heat"), "{}", stdout(&v));
    let plan = dir.path().join("plan.json");
    let o = run_ok(&plan_with_heat(
        s(&model),
        &heat,
        &["--time-limit", "1"],
        &plan,
    ));
    let all = format!("{}{}", stdout(&o), stderr(&o));
    assert!(all.contains("prefill routes"), "{all}");
    let plan = read_json(&plan);
    assert_eq!(plan["inputs"]["heat"]["format"], "imatrix");
    assert_eq!(plan["inputs"]["heat"]["tokens"], 8);
}
