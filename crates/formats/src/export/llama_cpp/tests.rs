//! Tests of the `llama-cpp` export (and of the layer buffers it shares
//! with ktransformers).

use super::*;
use crate::export::tests::{
    assert_mentions, instance, placement, plan_of, scenario_a, DISK, G0, G1, RAM,
};

/// The llama.cpp export of `placement`: its warnings and the
/// `--override-tensor` rules file.
fn exported_rules(inst: &Instance, placement: Vec<usize>) -> (Export, String) {
    let plan = plan_of(inst, placement);
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, inst, dir.path(), ModelFacts::default()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
    (out, text)
}

/// Whether llama.cpp's `std::regex_search(name, regex)` finds `pattern` in
/// `name`: our patterns use only anchors, literals, escaped dots, groups
/// and alternation, on which ECMAScript and Rust's `regex` agree.
fn matches(pattern: &str, name: &str) -> bool {
    regex::Regex::new(pattern).unwrap().is_match(name)
}

/// The `(regex, buffer)` of each `-ot 'REGEX=BUFFER'` line.
fn ot_rules(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|l| {
            let quoted = l
                .strip_prefix("-ot '")
                .and_then(|l| l.strip_suffix('\''))
                .unwrap();
            let (r, b) = quoted.rsplit_once('=').unwrap();
            (r.to_string(), b.to_string())
        })
        .collect()
}

#[test]
fn export_llama_cpp_puts_each_layer_where_most_of_its_mass_is() {
    let inst = instance();
    let plan = plan_of(&inst, scenario_a());
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, &inst, dir.path(), ModelFacts::default()).unwrap();
    let ot = dir.path().join(LLAMA_OT_FILE);
    let args = dir.path().join(LLAMA_ARGS_FILE);
    assert_eq!(
        out.files,
        [
            "llama_cpp_override_tensor.txt",
            "llama_cpp_args.txt",
            "llama_cpp_command.txt",
            "llama_cpp_memory_plan.json"
        ]
        .map(|f| dir.path().join(f))
        .to_vec()
    );
    // Mass per layer: L1 (l0) CUDA0 .9+.5 = 1.4 vs CPU .6 -> CUDA0;
    // L2 (l1) CUDA0 .8 vs CPU 1.2 -> CPU; L3 (l2) CUDA0 .7+.6 = 1.3 vs
    // CPU (disk .1 + ram .6) .7 -> CUDA0. But CUDA0 would then hold
    // layers 1 and 3 (8 x 1 MB) + attn L0-L1 (2 x 2 MB) = 12,000,000
    // bytes > 10,000,000: L3, with less planned gpu:0 mass (1.3 < 1.4),
    // goes to CPU, leaving 8,000,000. Trunk: attn L0-L1 CUDA0, L2-L3
    // CPU; dense_ffn L0, shared L1-L3 CPU; lm_head CUDA1. Two cards: every
    // rule is written, CUDA0 too. Layer slots L0-L3 and the output:
    // CUDA0, CUDA0, (CPU), (CPU), CUDA1; the CPU ones go with L1, so
    // `-ts 4,1` (llama.cpp: slot il on CUDA0 while il / 5 < 4 / 5).
    let attn = r"(attn_|ffn_norm\.|ffn_gate_inp\.|exp_probs_b\.|post_attention_norm\.|post_ffw_norm\.|layer_output_norm\.)";
    let want = [
        r"^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0".to_string(),
        r"^blk\.(2|3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU".into(),
        format!(r"^blk\.(0|1)\.{attn}=CUDA0"),
        format!(r"^blk\.(2|3)\.{attn}=CPU"),
        r"^blk\.(0)\.ffn_(gate|up|down|gate_up)\.=CPU".into(),
        r"^blk\.(1|2|3)\.ffn_(gate|up|down|gate_inp)_shexp\.=CPU".into(),
        r"^(output|output_norm|rope_freqs)\.=CUDA1".into(),
    ];
    let text = std::fs::read_to_string(&ot).unwrap();
    // Each line one shell word after -ot: quoted, with no quote inside.
    let lines: Vec<String> = want.iter().map(|r| format!("-ot '{r}'")).collect();
    assert_eq!(text, lines.join("\n") + "\n");
    let rules = ot_rules(&text);
    let fragment = std::fs::read_to_string(&args).unwrap();
    assert_eq!(
        fragment,
        format!("-ngl 999 -sm layer -ts 4,1 -ot '{}'\n", want.join(","))
    );
    assert!(!rules
        .iter()
        .any(|(r, _)| r.contains(',') || r.contains(';') || r.contains('=') || r.contains('\'')));
    // The command file: llama-server joins with `,`, llama-bench with `;`.
    let commands = std::fs::read_to_string(dir.path().join("llama_cpp_command.txt")).unwrap();
    assert!(
        commands.contains(&format!(
            "llama-server -m MODEL.gguf -ngl 999 -sm layer -ts 4,1 -ot '{}'\n",
            want.join(",")
        )),
        "{commands}"
    );
    assert!(
        commands.contains(&format!(
            "llama-bench -m MODEL.gguf -ngl 999 -sm layer -ts 4/1 -ot '{}' -p 0 -n 128\n",
            want.join(";")
        )),
        "{commands}"
    );

    every_gguf_name_goes_to_its_buffer(&rules);
    the_lost_decisions_are_priced(&out.warnings, &inst, &plan);
}

/// Every GGUF name of layers 0-3 (and 11, 13, 21, 31, which must not
/// match `blk.1.` or `blk.3.`) goes to exactly the intended buffer of
/// `export_llama_cpp_puts_each_layer_where_most_of_its_mass_is`.
fn every_gguf_name_goes_to_its_buffer(rules: &[(String, String)]) {
    let suffixes = [
        "attn_norm.weight",
        "attn_q.weight",
        "attn_kv_a_mqa.weight",
        "attn_kv_b.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
        "ffn_gate_inp.weight",
        "exp_probs_b.bias",
        "ffn_gate_exps.weight",
        "ffn_up_exps.weight",
        "ffn_down_exps.weight",
        "ffn_gate_shexp.weight",
        "ffn_up_shexp.weight",
        "ffn_down_shexp.weight",
    ];
    let mut names = vec![
        "token_embd.weight".to_string(),
        "output_norm.weight".into(),
        "output.weight".into(),
    ];
    for n in [0, 1, 2, 3, 11, 13, 21, 31] {
        names.extend(suffixes.iter().map(|s| format!("blk.{n}.{s}")));
    }
    let expected = |name: &str| -> Option<&str> {
        if name == "output.weight" || name == "output_norm.weight" {
            return Some("CUDA1");
        }
        let rest = name.strip_prefix("blk.")?;
        let (n, t) = rest.split_once('.')?;
        let n: usize = n.parse().ok()?;
        let exps = [
            "ffn_gate_exps.weight",
            "ffn_up_exps.weight",
            "ffn_down_exps.weight",
        ];
        let dense = ["ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"];
        let shexp = [
            "ffn_gate_shexp.weight",
            "ffn_up_shexp.weight",
            "ffn_down_shexp.weight",
        ];
        let with_attention = t.starts_with("attn_")
            || ["ffn_norm.weight", "ffn_gate_inp.weight", "exp_probs_b.bias"].contains(&t);
        match n {
            0 | 1 if with_attention => Some("CUDA0"),
            2 | 3 if with_attention => Some("CPU"),
            1 if exps.contains(&t) => Some("CUDA0"),
            2 | 3 if exps.contains(&t) => Some("CPU"),
            0 if dense.contains(&t) => Some("CPU"),
            1..=3 if shexp.contains(&t) => Some("CPU"),
            _ => None,
        }
    };
    for name in &names {
        let hits: Vec<&str> = rules
            .iter()
            .filter(|(r, _)| matches(r, name))
            .map(|(_, b)| b.as_str())
            .collect();
        assert!(hits.len() <= 1, "{name} matches {hits:?}");
        assert_eq!(hits.first().copied(), expected(name), "{name}");
    }
}

/// The warnings of the same test: the moves priced by hand, the card's
/// overflow, and what llama.cpp cannot express.
fn the_lost_decisions_are_priced(warnings: &[String], inst: &Instance, plan: &Plan) {
    // Moved by hand: l0e2 .4, l0e3 .2 (ram -> CUDA0), l1e0 .8, l2e0 .7,
    // l2e2 .6 (gpu:0 -> CPU): 5 experts, mass 2.7 of 6.0 = 45%. The disk
    // expert l2e1 stays with its layer on the CPU.
    let all = warnings.join("\n");
    assert_mentions(&all, "3 of 3 MoE layers mix places in the plan, and 5 experts whose per-expert decision cannot be expressed move (use-rate mass 2.700 of 6.000 per token, 45.0%; ");
    assert_mentions(
        &all,
        " ms): 3 gpu:0 -> CPU (mass 2.100), 2 ram:0 -> CUDA0 (mass 0.600)",
    );
    assert_mentions(&all, "CUDA0 cannot hold the whole layers of its majority: 11.44 MiB (12000000 bytes) with its trunk, more than gpu:0's capacity 9.54 MiB (10000000 bytes); the routed experts of the layers with the least of the plan's gpu:0 mass go to the next buffer of their mass with room instead: layer(s) 3 to CPU");
    // What llama.cpp runs, by hand: L1 all on gpu:0, L2 and L3 on the
    // CPU (their gpu:0 experts in RAM, the disk one still streamed).
    let exported = placement(
        [
            [G0, G0, G0, G0],
            [RAM, RAM, RAM, RAM],
            [RAM, DISK, RAM, RAM],
        ],
        [G0, G0, RAM, RAM],
        G1,
    );
    let ms = |t: f64| format!("{:.3}", t * 1e3);
    assert!(
        all.contains(&format!(
            "the cost model gives {} ms per token as exported, the plan {} ms",
            ms(inst.evaluate(&exported).token_seconds),
            ms(plan.objective.token_seconds)
        )),
        "{all}"
    );
    assert_mentions(&all, "trunk component(s) `router_bias`");
    assert_mentions(&all, "no disk tier: the 1 experts");
    assert_mentions(&all, "mmap");
    assert!(!all.contains("CUDA1"), "{all}");
    assert_mentions(&all, "`-m MODEL.gguf` stands for it");
    assert_mentions(
        &all,
        "-c is left out: the model description has no kv_bytes_per_token",
    );
    assert_eq!(warnings.len(), 6, "{all}");
}

#[test]
fn export_llama_cpp_is_silent_when_layers_are_whole() {
    let inst = instance();
    // Every layer's experts in one buffer: L1 on gpu:0, L2 in RAM, L3 on
    // gpu:1; nothing on disk, nothing unknown placed (router_bias is
    // still unknown: one warning).
    let placement = placement([[G0; 4], [RAM; 4], [G1; 4]], [G0, G1, RAM, RAM], G1);
    let plan = plan_of(&inst, placement);
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, &inst, dir.path(), ModelFacts::default()).unwrap();
    // One warning for router_bias, one for the model file's stand-in, one
    // for `-c` without the KV bytes per token.
    assert_eq!(out.warnings.len(), 3, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("`router_bias`"));
    let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
    assert!(text.contains(r"-ot '^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0'"));
    assert!(text.contains(r"-ot '^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1'"));
    assert!(text.contains(r"-ot '^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CPU'"));
    assert!(text.contains(r"-ot '^blk\.(1)\.(attn_|"));
}

#[test]
fn export_llama_cpp_moves_an_overflowing_layer_to_a_card_with_room() {
    let inst = instance();
    // L1 (l0): gpu:0 .9 + .2 = 1.1, gpu:1 .5 + .4 = .9 -> CUDA0.
    // L2 (l1): gpu:0 .8 + .6 = 1.4, CPU .6 -> CUDA0. L3 all RAM -> CPU.
    // CUDA0 would hold 2 layers (8 MB) + attn L0-L1 (4 MB) = 12 MB > 10 MB:
    // L1 has less planned gpu:0 mass (1.1 < 1.4) and goes to its next
    // buffer by mass, CUDA1 (.9), which has room (0 + 4 MB <= 10 MB).
    let placement = placement(
        [[G0, G1, G1, G0], [G0, G0, RAM, RAM], [RAM; 4]],
        [G0, G0, RAM, RAM],
        RAM,
    );
    let (out, text) = exported_rules(&inst, placement);
    assert_mentions(
        &text,
        r"-ot '^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0'",
    );
    assert_mentions(
        &text,
        r"-ot '^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1'",
    );
    assert_mentions(
        &text,
        r"-ot '^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU'",
    );
    let all = out.warnings.join("\n");
    assert_mentions(&all, "with room instead: layer(s) 1 to CUDA1");
    // Moved: l0e0 .9, l0e3 .2 (gpu:0 -> CUDA1), l1e2 .3, l1e3 .3 (ram -> CUDA0).
    assert_mentions(
        &all,
        "2 gpu:0 -> CUDA1 (mass 1.100), 2 ram:0 -> CUDA0 (mass 0.600)",
    );
    assert!(!all.contains("out-of-memory"), "{all}");
}

/// Every tensor of every planned architecture is moved by the rule of the
/// family the GGUF reader counts it in, and by no other: sizes and rules
/// agree on what a component is.
#[test]
fn each_architectures_tensors_match_the_rule_of_their_family() {
    use crate::gguf::arch_tensors::arch_tensors;
    use crate::gguf::tensors::{classify, Family};
    let layers = BTreeSet::from([1]);
    let families = [
        (Family::RoutedExperts, Tensors::RoutedExperts),
        (Family::Attention, Tensors::Attention),
        (Family::DenseFfn, Tensors::DenseFfn),
        (Family::SharedExperts, Tensors::SharedExperts),
        (Family::ChunkExperts, Tensors::ChunkExperts),
        (Family::Head, Tensors::Output),
    ];
    for (arch, names) in arch_tensors() {
        for name in names.iter() {
            let (_, family) = classify(name).unwrap();
            let hits: Vec<Family> = families
                .iter()
                .filter(|(_, t)| matches(&t.pattern(&layers), name))
                .map(|(f, _)| *f)
                .collect();
            let want: Vec<Family> = match family {
                // llama.cpp keeps the embeddings in host memory: no rule.
                Family::Embeddings => vec![],
                f => vec![f],
            };
            assert_eq!(hits, want, "{arch}: {name}");
        }
    }
}

/// The `-ts` line of a command file: the proportions after `-sm layer -ts`.
fn tensor_split_of(commands: &str) -> Option<&str> {
    let server = commands.lines().find(|l| l.starts_with("llama-server"))?;
    let rest = server.split_once(" -sm layer -ts ")?.1;
    Some(rest.split_once(' ').map_or(rest, |(ts, _)| ts))
}

#[test]
fn llama_cpp_maps_layer_slots_to_cards_in_runs_of_the_split() {
    // By hand, llama.cpp's arithmetic: the split points are the running
    // sums of `-ts` over their total, and slot il goes to the first point
    // above il / slots. `-ts 20,29` over 49 slots (48 layers and the
    // output): points 20/49 and 1, so slots 0-19 on card 0, 20-48 on 1.
    let cards = split::llama_slot_cards(&[20, 29], 49);
    assert_eq!(cards, [vec![0; 20], vec![1; 29]].concat());
    // A card with no slot is skipped: 3 slots, `-ts 0,3` -> all card 1.
    assert_eq!(split::llama_slot_cards(&[0, 3], 3), vec![1, 1, 1]);
    // Exact in f32 for every split of up to 300 slots over three cards.
    for slots in [2usize, 7, 49, 62, 95, 300] {
        for a in 0..=slots {
            let b = (slots - a) / 2;
            let c = slots - a - b;
            let want: Vec<usize> = [vec![0; a], vec![1; b], vec![2; c]].concat();
            assert_eq!(split::llama_slot_cards(&[a, b, c], slots), want);
        }
    }
}

#[test]
fn export_llama_cpp_splits_layers_where_their_attention_is() {
    let inst = instance();
    // Attention L0 CUDA0, L1-L3 CUDA1, head CUDA1: slots 0, 1, 1, 1, 1,
    // `-ts 1,4`, each layer's default card its attention's (by hand: slot
    // 1 at 1/5 is not below the first point 1/5, so CUDA1).
    let plan = plan_of(
        &inst,
        placement([[G0; 4], [RAM; 4], [RAM; 4]], [G0, G1, G1, G1], G1),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, &inst, dir.path(), ModelFacts::default()).unwrap();
    let commands = std::fs::read_to_string(dir.path().join(LLAMA_COMMAND_FILE)).unwrap();
    assert_eq!(tensor_split_of(&commands), Some("1,4"), "{commands}");
    assert_mentions(
        &commands,
        "llama-bench -m MODEL.gguf -ngl 999 -sm layer -ts 1/4 -ot '",
    );
    let all = out.warnings.join("\n");
    assert!(!all.contains("split mode"), "{all}");

    // Attention L0 CUDA0, L1 CUDA1, L2 CUDA0, L3 CPU, head CUDA1: slots
    // 0, 1, 0, (0), 1 -> `-ts 3,2`, which llama.cpp runs as 0, 0, 0, 1, 1:
    // layer 1's attention is on CUDA1 but its default card CUDA0.
    let plan = plan_of(&inst, placement([[RAM; 4]; 3], [G0, G1, G0, RAM], G1));
    let out = llama_cpp(&plan, &inst, dir.path(), ModelFacts::default()).unwrap();
    let commands = std::fs::read_to_string(dir.path().join(LLAMA_COMMAND_FILE)).unwrap();
    assert_eq!(tensor_split_of(&commands), Some("3,2"), "{commands}");
    let all = out.warnings.join("\n");
    assert_mentions(&all, "(-sm layer -ts 3,2), but the plan's attention is not in such runs: layer(s) 1 (CUDA1, default CUDA0) have their KV cache");
    // The rules still pin every attention tensor where the plan has it.
    let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
    assert_mentions(&text, r"-ot '^blk\.(0|2)\.(attn_|");
    assert_mentions(&text, r"-ot '^blk\.(1)\.(attn_|");
}

#[test]
fn export_llama_cpp_sizes_the_context_by_the_tightest_cards_kv_room() {
    let inst = instance();
    // Attention L0-L1 CUDA0, L2-L3 and the head CUDA1, experts in RAM:
    // `-ts 2,3`, so CUDA0 holds the KV cache of layers 0-1, CUDA1 of 2-3.
    // By hand, 4,000 KV bytes per token over 4 layers is 1,000 a layer:
    // CUDA0 keeps 10 MB - 2 x 2 MB = 6,000,000 bytes, 3,000 tokens of its
    // 2 layers (2,000 bytes a token); CUDA1 keeps 10 MB - 2 x 2 MB - 4 MB =
    // 2,000,000, 1,000 tokens: the tightest, rounded down to 256 = 768.
    let plan = plan_of(&inst, placement([[RAM; 4]; 3], [G0, G0, G1, G1], G1));
    let dir = tempfile::tempdir().unwrap();
    let facts = |context_tokens| ModelFacts {
        file: None,
        kv_bytes_per_token: Some(4_000),
        context_tokens,
    };
    let server = |out: &Export| {
        let commands = std::fs::read_to_string(dir.path().join(LLAMA_COMMAND_FILE)).unwrap();
        let args = std::fs::read_to_string(dir.path().join(LLAMA_ARGS_FILE)).unwrap();
        let line = commands
            .lines()
            .find(|l| l.starts_with("llama-server"))
            .unwrap()
            .to_string();
        // The fragment is the server line's, and llama-bench has no `-c`.
        assert!(line.ends_with(args.trim_end()), "{line}\n{args}");
        let bench = commands
            .lines()
            .find(|l| l.starts_with("llama-bench"))
            .unwrap();
        assert!(!bench.contains(" -c "), "{bench}");
        (line, out.warnings.join("\n"))
    };
    let out = llama_cpp(&plan, &inst, dir.path(), facts(Some(40_960))).unwrap();
    let (line, all) = server(&out);
    assert!(
        line.starts_with("llama-server -m MODEL.gguf -ngl 999 -sm layer -ts 2,3 -c 768 -ot '"),
        "{line}"
    );
    assert_mentions(&all, "-c 768, less than the model's context of 40960 tokens: CUDA1 keeps 1.91 MiB (2000000 bytes) beside the rules' weights, and a token's KV cache of its 2 layer(s) is 2000 bytes");
    // A context below the room is the model's own, with no note.
    let out = llama_cpp(&plan, &inst, dir.path(), facts(Some(500))).unwrap();
    let (line, all) = server(&out);
    assert_mentions(&line, " -ts 2,3 -c 500 -ot '");
    assert!(!all.contains("-c "), "{all}");

    // The head on CUDA0 too (4 + 4 = 8 MB there, 4 on CUDA1) moves the
    // output slot there: slots 0, 0, 1, 1, 0 are not one run per card,
    // `-ts 3,2` makes layer 2 CUDA0's, so CUDA0 holds 3 layers' cache in
    // 2,000,000 bytes: 666 tokens, 512; CUDA1 1 layer in 6,000,000.
    let plan = plan_of(&inst, placement([[RAM; 4]; 3], [G0, G0, G1, G1], G0));
    let out = llama_cpp(&plan, &inst, dir.path(), facts(None)).unwrap();
    let (line, all) = server(&out);
    assert_mentions(&line, " -sm layer -ts 3,2 -c 512 -ot '");
    assert_mentions(&all, "layer(s) 2 (CUDA1, default CUDA0)");
    assert!(!all.contains("-c 512"), "{all}");
}

#[test]
fn export_llama_cpp_starts_with_the_reserved_context() {
    // The placement above whose room gives `-c 768`; with a context
    // reserved by the plan (`--context-tokens`), its KV cache is already
    // off the capacities, so `-c` is that context, whatever room is left.
    let mut inst = instance();
    let plan = plan_of(&inst, placement([[RAM; 4]; 3], [G0, G0, G1, G1], G1));
    let dir = tempfile::tempdir().unwrap();
    let facts = || ModelFacts {
        file: None,
        kv_bytes_per_token: Some(4_000),
        context_tokens: Some(40_960),
    };
    let server_line = || {
        let commands = std::fs::read_to_string(dir.path().join(LLAMA_COMMAND_FILE)).unwrap();
        let line = commands.lines().find(|l| l.starts_with("llama-server"));
        line.unwrap().to_string()
    };
    for (tokens, padded) in [(4096, None), (1000, Some(1024))] {
        inst.resources.context = Some(residency_core::context::ContextReservation {
            tokens,
            gpu_bytes: vec![tokens * 2_000; 2],
        });
        let out = llama_cpp(&plan, &inst, dir.path(), facts()).unwrap();
        let line = server_line();
        assert_mentions(&line, &format!(" -ts 2,3 -c {tokens} -ot '"));
        let all = out.warnings.join("\n");
        assert!(!all.contains("less than the model's context"), "{all}");
        // llama.cpp pads -c to 256 tokens: the extra cache is not reserved.
        match padded {
            None => assert!(!all.contains("pads the context"), "{all}"),
            Some(p) => assert!(
                all.contains(&format!(
                    "-c {tokens}: llama.cpp pads the context to {p} tokens"
                )),
                "{all}"
            ),
        }
    }
}

/// A pin the engine cannot hold is said, and a layer kept whole is
/// written where the plan put it with no note on lost decisions.
#[test]
fn export_llama_cpp_says_which_pins_it_cannot_hold() {
    use residency_core::constraints::{parse_keep_whole, parse_pin, Sourced};
    let mut inst = instance();
    let sourced = |c| Sourced {
        constraint: c,
        source: "c.yaml".into(),
    };
    inst.constrain(&[
        sourced(parse_pin("L1.experts.3=gpu:0").unwrap()),
        sourced(parse_keep_whole("L2").unwrap()),
    ])
    .unwrap();
    // L1 (l0): gpu:1 .9 + .5 + .4 = 1.8 against gpu:0 .2 -> CUDA1, so its
    // expert 3, pinned to gpu:0, cannot stay. L2 whole on gpu:0 -> CUDA0
    // (4 MB + attn L0, L1 4 MB <= 10 MB). L3 all RAM -> CPU.
    let placement = placement(
        [[G1, G1, G1, G0], [G0; 4], [RAM; 4]],
        [G0, G0, RAM, RAM],
        RAM,
    );
    let (out, text) = exported_rules(&inst, placement);
    assert_mentions(
        &text,
        r"-ot '^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0'",
    );
    let all = out.warnings.join("\n");
    assert_mentions(&all, "1 pinned expert(s) cannot stay where pinned, e.g. expert 3 of MoE layer 0 (pinned to gpu:0) on CUDA1");
    // The only expert moved is that one (mass .2): layer 2 is not split.
    assert_mentions(&all, "1 gpu:0 -> CUDA1 (mass 0.200)");
}
