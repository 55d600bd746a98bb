//! Tests of the `ktransformers` export: its rules read back.

use super::*;
use crate::export::tests::{
    assert_mentions, instance, placement, plan_of, scenario_a, G0, G1, RAM,
};
use residency_core::cost::Place;

/// The layer of each MoE ordinal's experts rule in a ktransformers file,
/// read back: `(generate_device, out_device)` of the first rule whose
/// pattern names the layer (ktransformers applies the first match).
fn kt_devices(rules: &[KtRule], layer: usize) -> (String, String) {
    let name = format!("model.layers.{layer}.mlp.experts");
    let rule = rules
        .iter()
        .find(|r| {
            let p = &r.matches.name;
            let alt = p
                .strip_prefix(r"^model\.layers\.(")
                .and_then(|p| p.strip_suffix(r")\.mlp\.experts$"));
            alt.is_some_and(|alt| {
                alt.split('|')
                    .any(|l| format!("model.layers.{l}.mlp.experts") == name)
            })
        })
        .unwrap_or_else(|| panic!("no rule for {name}"));
    assert_eq!(rule.replace.class, KT_EXPERTS_CLASS);
    assert_eq!(rule.recursive, Some(false));
    let kw = &rule.replace.kwargs;
    (kw["generate_device"].clone(), kw["out_device"].clone())
}

#[test]
fn export_ktransformers_rules_parse_back_to_one_device_per_layer() {
    let inst = instance();
    // Scenario A: as for llama.cpp, L1 -> cuda:0, L2 -> CPU (more mass
    // in RAM), L3 -> CPU (demoted: gpu:0 would hold 12 MB > 10 MB). CPU
    // layers send their output to the first card (their attention is in
    // RAM).
    let plan = plan_of(&inst, scenario_a());
    let dir = tempfile::tempdir().unwrap();
    let out = ktransformers(&plan, &inst, dir.path()).unwrap();
    let path = dir.path().join(KT_RULES_FILE);
    assert_eq!(out.files, vec![path.clone()]);
    let rules: Vec<KtRule> =
        serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let cuda0 = ("cuda:0".to_string(), "cuda:0".to_string());
    let cpu = ("cpu".to_string(), "cuda:0".to_string());
    assert_eq!(kt_devices(&rules, 1), cuda0);
    assert_eq!(kt_devices(&rules, 2), cpu);
    assert_eq!(kt_devices(&rules, 3), cpu);
    let ops: Vec<&str> = rules[..2]
        .iter()
        .map(|r| r.replace.kwargs["generate_op"].as_str())
        .collect();
    assert_eq!(ops, ["KExpertsMarlin", "KExpertsCPU"]);
    // Trunk rules after the experts, in model order; router_bias has no
    // module name.
    let trunk: Vec<(&str, &str)> = rules[2..]
        .iter()
        .map(|r| {
            assert_eq!(r.replace.class, "default");
            (
                r.matches.name.as_str(),
                r.replace.kwargs["generate_device"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        trunk,
        [
            (r"^model\.layers\.(0|1)\.self_attn$", "cuda:0"),
            (r"^model\.layers\.(2|3)\.self_attn$", "cpu"),
            (r"^model\.layers\.(0)\.mlp$", "cpu"),
            (r"^model\.layers\.(1|2|3)\.mlp\.shared_experts$", "cpu"),
            (r"^lm_head$", "cuda:1"),
        ]
    );
    // The same lost decisions as llama.cpp: 5 experts, mass 2.7 of 6.0.
    let all = out.warnings.join("\n");
    assert_mentions(&all, "ktransformers replaces the routed experts of a layer as one module (model.layers.N.mlp.experts), so a layer has one buffer: 3 of 3 MoE layers mix places in the plan, and 5 experts whose per-expert decision cannot be expressed move (use-rate mass 2.700 of 6.000 per token, 45.0%; ");
    assert_mentions(&all, "layer(s) 3 to CPU");
    assert_mentions(&all, "`router_bias`");
    assert_mentions(&all, "no disk tier: the 1 experts");
    assert_eq!(out.warnings.len(), 4, "{all}");
}

#[test]
fn export_ktransformers_round_trips_whole_layers_silently() {
    let inst = instance();
    let placement = placement([[G0; 4], [RAM; 4], [G1; 4]], [G0, G1, RAM, RAM], G1);
    let plan = plan_of(&inst, placement);
    let dir = tempfile::tempdir().unwrap();
    let out = ktransformers(&plan, &inst, dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(KT_RULES_FILE)).unwrap();
    let rules: Vec<KtRule> = serde_norway::from_str(&text).unwrap();
    // Every expert of the plan is where its layer's rule puts it; L2's
    // CPU experts hand their output to attn L2's place: RAM, so cuda:0.
    let device = |p: usize| match inst.places[p] {
        Place::Gpu(g) => format!("cuda:{g}"),
        _ => "cpu".into(),
    };
    for (l, layer) in [1, 2, 3].into_iter().enumerate() {
        for e in 0..4 {
            assert_eq!(
                kt_devices(&rules, layer).0,
                device(plan.experts[l][e]),
                "L{layer} e{e}"
            );
        }
    }
    assert_eq!(kt_devices(&rules, 2).1, "cuda:0");
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(out.warnings[0].contains("`router_bias`"));
}
