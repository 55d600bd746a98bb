//! Tests of the `coli-place` export, with a small COLI_PLACE parser written
//! from docs/formats.md section 7.

use super::warm_start::{coli_fill, coli_heat_values, gib_text, ALLOWANCE_SLACK};
use super::*;
use crate::export::tests::{
    assert_mentions, instance, model_yaml, plan_of, scenario_a, scenario_b, G0, G1, PROFILE, RAM,
};
use crate::heat::read_heat;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_testkit::OneFormatModel;

fn env_vars(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect()
}

type Parsed = Vec<(String, Vec<(ColiTarget, Option<usize>)>)>;

/// A small COLI_PLACE parser, written from docs/formats.md section 7:
/// `item ("," item)*`, `item := component "=" (target | split)`,
/// `split := dev ":" n ("+" dev ":" n)*`.
fn parse_coli_place(value: &str) -> Parsed {
    value
        .split(',')
        .map(|item| {
            let (name, spec) = item.split_once('=').expect("component=spec");
            let segments = spec
                .split('+')
                .map(|seg| {
                    let (t, n) = match seg.split_once(':') {
                        Some((t, n)) => (t, Some(n.parse::<usize>().unwrap())),
                        None => (seg, None),
                    };
                    let t = match t {
                        "cpu" => ColiTarget::Cpu,
                        d => ColiTarget::Dev(d.parse().unwrap()),
                    };
                    (t, n)
                })
                .collect();
            (name.to_string(), segments)
        })
        .collect()
}

/// Where the parsed list puts `component` in model layer `layer`: the
/// first n layers on the first device, the next on the second, ...; past
/// the last segment or unnamed, the CPU.
fn lookup(parsed: &Parsed, component: &str, layer: usize) -> ColiTarget {
    let Some((_, segments)) = parsed.iter().find(|(n, _)| n == component) else {
        return ColiTarget::Cpu;
    };
    let mut start = 0;
    for &(t, n) in segments {
        let Some(n) = n else { return t };
        if (start..start + n).contains(&layer) {
            return t;
        }
        start += n;
    }
    ColiTarget::Cpu
}

/// Checks that COLI_PLACE puts every trunk component where the plan does.
fn assert_round_trip(inst: &Instance, placement: &[usize], value: &str) {
    let parsed = parse_coli_place(value);
    for (o, name, layer) in inst.trunk() {
        let coli = if name == "lm_head" { "lmhead" } else { name };
        let want = match inst.places[placement[o]] {
            Place::Gpu(g) => ColiTarget::Dev(g),
            _ => ColiTarget::Cpu,
        };
        assert_eq!(
            lookup(&parsed, coli, layer.unwrap_or(0)),
            want,
            "{name} layer {layer:?} in {value}"
        );
    }
}

#[test]
fn export_splits_encode_runs_of_model_layers() {
    use ColiTarget::{Cpu, Dev};
    // attn L0-L1 on 0, L2-L3 on the CPU: "0:2" (past the split is the CPU).
    // A leading CPU run is written cpu:n: L0 cpu, L1 on 1, L2-L3 on 0.
    // Gaps join the run before them: layers 1 (0), 2 and 5 (1): the first
    // segment starts at layer 0 and ends before 2 (2 layers), the second
    // covers 2..=5 (4 layers).
    let cases: [(&[(usize, ColiTarget)], &str); 4] = [
        (&[(0, Dev(0)), (1, Dev(0)), (2, Cpu), (3, Cpu)], "0:2"),
        (
            &[(0, Cpu), (1, Dev(1)), (2, Dev(0)), (3, Dev(0))],
            "cpu:1+1:1+0:2",
        ),
        (&[(1, Dev(0)), (2, Dev(1)), (5, Dev(1))], "0:2+1:4"),
        (&[(3, Dev(1)), (4, Dev(1))], "1"),
    ];
    for (layers, want) in cases {
        let item = ColiItem::from_layers("dnproj", layers);
        assert_eq!(item.spec(), want);
        let parsed = parse_coli_place(&coli_place_string(std::slice::from_ref(&item)));
        for &(l, t) in layers {
            assert_eq!(lookup(&parsed, "dnproj", l), t, "{want} layer {l}");
            assert_eq!(item.target_of(l), t, "{want} layer {l}");
        }
    }
}

#[test]
fn export_allowance_text_never_lands_short() {
    // gib_text rounds (bytes + slack) up to a millionth of a GiB (1074
    // bytes), so Colibri's atof * 2^30 gives at least the bytes and at most
    // slack + 1074 + 1 more. 6 GiB - 1024 + 1024 is exactly "6.000000".
    for b in [
        0,
        1,
        999_999,
        5_000_000,
        6 * (1 << 30) - 1024,
        123_456_789_012,
    ] {
        let text = gib_text(b + ALLOWANCE_SLACK);
        let got = coli_allowance_bytes(&text);
        assert!(
            got >= b && got <= b + ALLOWANCE_SLACK + 1075,
            "{b}: {text} -> {got}"
        );
    }
    assert_eq!(gib_text(6 * (1 << 30)), "6.000000");
    // 5,001,024 * 1e6 / 2^30 = 4657.56 -> 4658.
    assert_eq!(gib_text(5_000_000 + ALLOWANCE_SLACK), "0.004658");
}

#[test]
fn export_coli_place_pins_experts_and_ranks_gpu_experts_first() {
    let inst = instance();
    let placement = scenario_a();
    let plan = plan_of(&inst, placement.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = coli_place(&plan, &inst, dir.path()).unwrap();
    let env_path = dir.path().join(COLI_ENV_FILE);
    let heat_path = dir.path().join(COLI_HEAT_FILE);
    assert_eq!(out.files, vec![env_path.clone(), heat_path.clone()]);

    let env = env_vars(&env_path);
    assert_eq!(env["COLI_CUDA"], "1");
    // Experts on gpu:0 only -> experts=0; lm_head -> lmhead=1; attn L0-L1
    // on 0 -> attn=0:2; the others in RAM -> cpu, in model order.
    assert_eq!(
        env["COLI_PLACE"],
        "experts=0,lmhead=1,attn=0:2,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
    );
    assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
    assert_eq!(
        lookup(&parse_coli_place(&env["COLI_PLACE"]), "experts", 0),
        ColiTarget::Dev(0)
    );
    // The expert card first, then the trunk card.
    assert_eq!(env["COLI_GPUS"], "0,1");
    // gpu:0 needs 5 experts x 1 MB = 5,000,000 bytes (attn is not a
    // Colibri component, so nothing is charged); gpu:1 needs lm_head's
    // 4,000,000. (5,000,000 + 1024) / 2^30 = 0.0046575.. -> 0.004658 GiB
    // = 5,001,489 bytes: room for 5 experts, not 6.
    assert_eq!(env["CUDA_EXPERT_GB"], "0.004658");
    let allowance = coli_allowance_bytes(&env["CUDA_EXPERT_GB"]);
    assert!((5_000_000..6_000_000).contains(&allowance), "{allowance}");
    assert_eq!(
        Path::new(&env["HEAT_FILE"]),
        std::fs::canonicalize(&heat_path).unwrap()
    );

    // Heat by hand: the 7 experts off the GPU rank 1..=7 by p (ties: the
    // higher slot is colder): l2e1 .1, l0e3 .2, l1e3 .3, l1e2 .3, l0e2 .4,
    // l2e3 .6, l1e1 .6; the 5 GPU experts 8..=12: l0e1 .5, l2e2 .6,
    // l2e0 .7, l1e0 .8, l0e0 .9. Values are ranks x 16.
    let mut w = Vec::new();
    let heat = read_heat(
        &heat_path,
        Some(HeatFormat::ColiHeat),
        &HeatContext::default(),
        &mut w,
    )
    .unwrap();
    let want = vec![
        vec![192.0, 128.0, 80.0, 32.0],
        vec![176.0, 112.0, 64.0, 48.0],
        vec![160.0, 16.0, 144.0, 96.0],
    ];
    assert_eq!(heat.total.counts, want);
    // After Colibri's `>> 1` (and even `>> 4`) the five hottest are
    // exactly the plan's GPU experts, and every GPU expert is strictly
    // above every other.
    for shift in [0, 1, 4] {
        let mut slots: Vec<(u32, usize)> = heat
            .total
            .counts
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, &c)| ((c as u32) >> shift, i))
            .collect();
        slots.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let top: BTreeSet<usize> = slots[..5].iter().map(|s| s.1).collect();
        assert_eq!(top, BTreeSet::from([0, 1, 4, 8, 10]), ">> {shift}");
        assert!(slots[4].0 > slots[5].0, ">> {shift}");
    }

    // Colibri's fill with these settings loads exactly the plan's experts.
    let resident: Vec<bool> = placement.iter().map(|&q| q <= G1).collect();
    let values = coli_heat_values(&inst, &resident).unwrap();
    let loaded = coli_fill(&inst, &values, &[0], &[allowance]);
    for (l, row) in loaded.iter().enumerate() {
        for (e, &card) in row.iter().enumerate() {
            let planned = (placement[4 * l + e] == G0).then_some(0);
            assert_eq!(card, planned, "l{l} e{e}");
        }
    }

    let all = out.warnings.join("\n");
    assert!(!all.contains("COLI_GPUS:"), "{all}");
    assert!(!all.contains("warm start"), "{all}");
    assert_mentions(
        &all,
        "`attn`, `dense_ffn`, `shared_expert`, `router_bias` passed through",
    );
    assert_mentions(&all, "RAM: 1 experts are on disk");
    assert_eq!(out.warnings.len(), 2, "{all}");
}

#[test]
fn export_coli_place_says_what_colibri_does_with_experts_off_their_home() {
    let inst = instance();
    let placement = scenario_b(RAM);
    let plan = plan_of(&inst, placement.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = coli_place(&plan, &inst, dir.path()).unwrap();
    let env = env_vars(&dir.path().join(COLI_ENV_FILE));
    // Two expert cards: no experts item, they follow COLI_GPUS.
    assert_eq!(env["COLI_GPUS"], "0,1");
    assert_eq!(
        env["COLI_PLACE"],
        "lmhead=cpu,attn=cpu,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
    );
    assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
    // gpu:0 needs 3 experts = 3,000,000 bytes, gpu:1 2,000,000:
    // (3,000,000 + 1024) / 2^30 = 0.00279494.. -> 0.002795 GiB =
    // 3,001,108 bytes, three experts on each card.
    assert_eq!(env["CUDA_EXPERT_GB"], "0.002795");
    // Fill, hottest first, home e % 2: l0e0 .9 -> 0, l1e0 .8 -> 0,
    // l2e0 .7 -> 0 (card 0 full), l1e1 .6 -> 1, l0e1 .5 -> 1; then the
    // hottest others: l2e2 .6 (home 0, full), l2e3 .6 -> 1 (full).
    // Planned card kept: l0e0, l2e0, l0e1 (3); moved: l1e0 to 0, l1e1 to
    // 1 (2); none left in RAM; 1 added (l2e3).
    let all = out.warnings.join("\n");
    assert_mentions(&all, "gives expert e the home card [0, 1][e % 2] and cannot choose a card per expert: 2 of the plan's 5 GPU experts are planned on another card than their home");
    assert_mentions(&all, "load 3 of the plan's 5 GPU experts on the planned card, 2 on another card, leave 0 in RAM, and add 1 experts");
    assert!(!all.contains("out of expert placement"), "{all}");
    let resident: Vec<bool> = placement.iter().map(|&q| q <= G1).collect();
    let values = coli_heat_values(&inst, &resident).unwrap();
    let allowance = coli_allowance_bytes(&env["CUDA_EXPERT_GB"]);
    let loaded = coli_fill(&inst, &values, &[0, 1], &[allowance; 2]);
    assert_eq!(loaded[1][0], Some(0));
    assert_eq!(loaded[1][1], Some(1));
    assert_eq!(loaded[2][2], None);
    assert_eq!(loaded[2][3], Some(1));
}

#[test]
fn export_coli_place_models_the_role_split_of_a_trunk_card() {
    let inst = instance();
    // As B, with lm_head on gpu:1: Colibri takes card 1 out of expert
    // placement (card 0 is left), so all experts home on card 0.
    let placement = scenario_b(G1);
    let plan = plan_of(&inst, placement.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = coli_place(&plan, &inst, dir.path()).unwrap();
    let env = env_vars(&dir.path().join(COLI_ENV_FILE));
    assert_eq!(
        env["COLI_PLACE"],
        "lmhead=1,attn=cpu,dense_ffn=cpu,shared_expert=cpu,router_bias=cpu"
    );
    assert_round_trip(&inst, &placement, &env["COLI_PLACE"]);
    // gpu:1 needs 2 experts + lm_head = 6,000,000 bytes, the most:
    // (6,000,000 + 1024) / 2^30 = 0.0055890.. -> 0.005589 GiB. Card 0's
    // budget (nothing charged) holds 6 experts: the 5 GPU experts and the
    // hottest other, l2e2 (.6, the lower slot of the two .6 ties).
    // Planned card kept: l0e0, l1e1, l2e0 (3); moved to card 0: l0e1,
    // l1e0 (2); added: 1.
    assert_eq!(env["CUDA_EXPERT_GB"], "0.005589");
    let all = out.warnings.join("\n");
    assert_mentions(&all, "puts every expert on card 0 and cannot choose a card per expert: 2 of the plan's 5 GPU experts");
    assert_mentions(&all, "takes card(s) 1 out of expert placement because COLI_PLACE gives them lmhead/dnproj/dnout/attnproj");
    assert_mentions(&all, "load 3 of the plan's 5 GPU experts on the planned card, 2 on another card, leave 0 in RAM, and add 1 experts");
}

#[test]
fn export_coli_place_flags_what_its_grammar_cannot_hold() {
    let profile = HardwareProfile::from_yaml_str(PROFILE, Path::new("p")).unwrap();
    let model = Model::from_yaml_str(
        &OneFormatModel::new("wide", 10, "[1, 2]").yaml(
            r#"  - { name: attn, layers: "0..=9", bytes: 1 MB, stage: dense }
  - { name: lm_head, bytes: 1 MB, stage: head }
  - { name: a1, bytes: 1 MB, stage: head }
  - { name: a2, bytes: 1 MB, stage: head }
  - { name: a3, bytes: 1 MB, stage: head }
  - { name: a4, bytes: 1 MB, stage: head }
  - { name: a5, bytes: 1 MB, stage: head }
  - { name: a6, bytes: 1 MB, stage: head }
  - { name: a7, bytes: 1 MB, stage: head }
"#,
        ),
        Path::new("m"),
    )
    .unwrap();
    let inst = Instance::new(&profile, &model, &[vec![0.5; 4], vec![0.5; 4]]);
    // Experts 0..=7 and lm_head, a1..a7 in RAM; attn alternates gpu:0
    // (even layers) and RAM (odd): 10 runs, the trailing CPU one dropped,
    // 9 segments. No expert and no Colibri component on a GPU: experts=cpu,
    // the tier is off. Items: experts, lmhead, attn, a1..a7 = 10 > 8.
    let mut p = vec![RAM; 8];
    p.extend((0..10).map(|l| if l % 2 == 0 { G0 } else { RAM }));
    p.extend([RAM; 8]);
    let plan = plan_of(&inst, p.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = coli_place(&plan, &inst, dir.path()).unwrap();
    let env = env_vars(&dir.path().join(COLI_ENV_FILE));
    assert_eq!(env["COLI_CUDA"], "0");
    assert!(!env.contains_key("COLI_GPUS") && !env.contains_key("CUDA_EXPERT_GB"));
    assert_eq!(
        env["COLI_PLACE"],
        "experts=cpu,lmhead=cpu,attn=0:1+cpu:1+0:1+cpu:1+0:1+cpu:1+0:1+cpu:1+0:1,a1=cpu,a2=cpu,a3=cpu,a4=cpu,a5=cpu,a6=cpu,a7=cpu"
    );
    assert_round_trip(&inst, &p, &env["COLI_PLACE"]);
    let all = out.warnings.join("\n");
    assert_mentions(
        &all,
        "COLI_PLACE has 10 items; Colibri reads the first 8 and keeps `a6`, `a7` at the default",
    );
    // The first 8 segments cover layers 0..8; layer 8's gpu:0 is lost.
    assert_mentions(&all, "`attn` changes place 8 times over the layers, which is not expressible as a split Colibri reads (8 segments, 63 characters): it keeps at most the first 8 segments, and layers from 8 on may stay on the CPU");

    // Different expert counts per layer cannot be a HEAT_FILE.
    let uneven = Model::from_yaml_str(
        &format!(
            "{}per_layer:\n  - {{ layer: 2, experts: 2 }}\n",
            model_yaml()
        ),
        Path::new("m"),
    )
    .unwrap();
    let inst = Instance::new(
        &profile,
        &uneven,
        &[vec![0.5; 4], vec![1.0; 2], vec![0.5; 4]],
    );
    let mut p = vec![RAM; 10];
    p.extend([RAM; 10]);
    let plan = plan_of(&inst, p);
    let err = coli_place(&plan, &inst, dir.path())
        .unwrap_err()
        .to_string();
    assert_mentions(
        &err,
        "2 or 4 experts; a HEAT_FILE holds the same number in every layer",
    );
}
