//! Tests of the `llama-cpp` export (and of the layer buffers it shares
//! with ktransformers).

use super::*;
use crate::export::tests::{instance, placement, plan_of, scenario_a, DISK, G0, G1, RAM};

/// The literal prefixes a pattern of ours matches under `regex_search`
/// with a leading `^`: `\x` is a literal, `(a|b)` an alternation of
/// literals; any other regex syntax fails the test.
fn expand(pattern: &str) -> Vec<String> {
    let body = pattern.strip_prefix('^').expect("anchored with ^");
    let mut prefixes = vec![String::new()];
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        let options: Vec<String> = match c {
            '\\' => vec![chars.next().unwrap().to_string()],
            '(' => {
                let mut group = String::new();
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                    group.push(c);
                }
                group.split('|').map(|a| a.replace('\\', "")).collect()
            }
            '.' | '*' | '+' | '?' | '[' | ']' | '{' | '}' | '$' | '|' | ')' => {
                panic!("unescaped `{c}` in {pattern}")
            }
            c => vec![c.to_string()],
        };
        prefixes = prefixes
            .iter()
            .flat_map(|p| options.iter().map(move |o| format!("{p}{o}")))
            .collect();
    }
    prefixes
}

#[test]
fn export_llama_cpp_puts_each_layer_where_most_of_its_mass_is() {
    let inst = instance();
    let plan = plan_of(&inst, scenario_a());
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
    let ot = dir.path().join(LLAMA_OT_FILE);
    let args = dir.path().join(LLAMA_ARGS_FILE);
    assert_eq!(out.files, vec![ot.clone(), args.clone()]);
    // Mass per layer: L1 (l0) CUDA0 .9+.5 = 1.4 vs CPU .6 -> CUDA0;
    // L2 (l1) CUDA0 .8 vs CPU 1.2 -> CPU; L3 (l2) CUDA0 .7+.6 = 1.3 vs
    // CPU (disk .1 + ram .6) .7 -> CUDA0. But CUDA0 would then hold
    // layers 1 and 3 (8 x 1 MB) + attn L0-L1 (2 x 2 MB) = 12,000,000
    // bytes > 10,000,000: L3, with less planned gpu:0 mass (1.3 < 1.4),
    // goes to CPU, leaving 8,000,000. Trunk: attn L0-L1 CUDA0, L2-L3
    // CPU; dense_ffn L0, shared L1-L3 CPU; lm_head CUDA1.
    let want = [
        r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0",
        r"-ot ^blk\.(2|3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU",
        r"-ot ^blk\.(0|1)\.attn_=CUDA0",
        r"-ot ^blk\.(2|3)\.attn_=CPU",
        r"-ot ^blk\.(0)\.ffn_(gate|up|down)\.=CPU",
        r"-ot ^blk\.(1|2|3)\.ffn_(gate|up|down)_shexp\.=CPU",
        r"-ot ^output\.=CUDA1",
    ];
    let text = std::fs::read_to_string(&ot).unwrap();
    assert_eq!(text, want.join("\n") + "\n");
    let rules: Vec<(&str, &str)> = want
        .iter()
        .map(|l| l.strip_prefix("-ot ").unwrap().rsplit_once('=').unwrap())
        .collect();
    let fragment = std::fs::read_to_string(&args).unwrap();
    let joined = join(rules.iter().map(|(r, b)| format!("{r}={b}")), ",");
    assert_eq!(fragment, format!("-ngl 999 -ot '{joined}'\n"));
    assert!(!rules
        .iter()
        .any(|(r, _)| r.contains(',') || r.contains('=')));

    // Every GGUF name of layers 0-3 (and 11, 13, 21, 31, which must not
    // match `blk.1.` or `blk.3.`) goes to exactly the intended buffer.
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
        if name == "output.weight" {
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
        match n {
            0 | 1 if t.starts_with("attn_") => Some("CUDA0"),
            2 | 3 if t.starts_with("attn_") => Some("CPU"),
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
            .filter(|(r, _)| expand(r).iter().any(|p| name.starts_with(p.as_str())))
            .map(|(_, b)| *b)
            .collect();
        assert!(hits.len() <= 1, "{name} matches {hits:?}");
        assert_eq!(hits.first().copied(), expected(name), "{name}");
    }

    // Moved by hand: l0e2 .4, l0e3 .2 (ram -> CUDA0), l1e0 .8, l2e0 .7,
    // l2e2 .6 (gpu:0 -> CPU): 5 experts, mass 2.7 of 6.0 = 45%. The disk
    // expert l2e1 stays with its layer on the CPU.
    let all = out.warnings.join("\n");
    assert!(
        all.contains("3 of 3 MoE layers mix places in the plan, and 5 experts whose per-expert decision cannot be expressed move (use-rate mass 2.700 of 6.000 per token, 45.0%; "),
        "{all}"
    );
    assert!(
        all.contains(" ms): 3 gpu:0 -> CPU (mass 2.100), 2 ram:0 -> CUDA0 (mass 0.600)"),
        "{all}"
    );
    assert!(
        all.contains("CUDA0 cannot hold the whole layers of its majority: 11.44 MiB (12000000 bytes) with its trunk, more than gpu:0's capacity 9.54 MiB (10000000 bytes); the routed experts of the layers with the least of the plan's gpu:0 mass go to the next buffer of their mass with room instead: layer(s) 3 to CPU"),
        "{all}"
    );
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
    assert!(all.contains("trunk component(s) `router_bias`"), "{all}");
    assert!(all.contains("no disk tier: the 1 experts"), "{all}");
    assert!(all.contains("mmap"), "{all}");
    assert!(!all.contains("CUDA1"), "{all}");
    assert_eq!(out.warnings.len(), 4, "{all}");
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
    let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("`router_bias`"));
    let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
    assert!(text.contains(r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0"));
    assert!(text.contains(r"-ot ^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1"));
    assert!(text.contains(r"-ot ^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CPU"));
    assert!(text.contains(r"-ot ^blk\.(1)\.attn_=CUDA1"));
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
    let plan = plan_of(&inst, placement);
    let dir = tempfile::tempdir().unwrap();
    let out = llama_cpp(&plan, &inst, dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(LLAMA_OT_FILE)).unwrap();
    assert!(
        text.contains(r"-ot ^blk\.(2)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA0"),
        "{text}"
    );
    assert!(
        text.contains(r"-ot ^blk\.(1)\.ffn_(gate|up|down|gate_up)_exps\.=CUDA1"),
        "{text}"
    );
    assert!(
        text.contains(r"-ot ^blk\.(3)\.ffn_(gate|up|down|gate_up)_exps\.=CPU"),
        "{text}"
    );
    let all = out.warnings.join("\n");
    assert!(
        all.contains("with room instead: layer(s) 1 to CUDA1"),
        "{all}"
    );
    // Moved: l0e0 .9, l0e3 .2 (gpu:0 -> CUDA1), l1e2 .3, l1e3 .3 (ram -> CUDA0).
    assert!(
        all.contains("2 gpu:0 -> CUDA1 (mass 1.100), 2 ram:0 -> CUDA0 (mass 0.600)"),
        "{all}"
    );
    assert!(!all.contains("out-of-memory"), "{all}");
}
