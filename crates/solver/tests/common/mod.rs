//! Helpers shared by the solver's integration tests. Each test crate
//! uses some of them, so the others are dead code there.
#![allow(dead_code)]

use residency_core::cost::Instance;
use residency_core::kv::KvGroup;
use residency_core::model::Model;
use residency_core::units::{Bytes, Seconds};
use residency_solver::{solve, Solution, SolveOptions};
use residency_testkit::OneFormatModel;
use std::path::Path;

/// A deterministic generator (64-bit LCG), so every run checks the same cases.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Per MoE layer, 3 use rates summing to top_k = 2.
pub fn rates(rng: &mut Lcg, layers: usize) -> Vec<Vec<f64>> {
    (0..layers)
        .map(|_| {
            let w: Vec<f64> = (0..3).map(|_| 0.05 + rng.next()).collect();
            let sum: f64 = w.iter().sum();
            w.iter().map(|x| 2.0 * x / sum).collect()
        })
        .collect()
}

/// Two KV groups of 50-250 MB saving 0.05-5 ms per token on a GPU: as
/// much as an expert's place is worth, so KV and experts compete; from
/// RAM the 2.5-25 ms upload at 10-20 GB/s often cancels the saving.
pub fn kv_groups(rng: &mut Lcg) -> Vec<KvGroup> {
    (0..2)
        .map(|k| KvGroup {
            name: format!("g{k}"),
            bytes: Bytes((50.0 + 200.0 * rng.next()).round() as u64 * 1_000_000),
            reuses_per_token: 0.05 + 0.45 * rng.next(),
            prefill_seconds: Seconds(0.001 + 0.009 * rng.next()),
        })
        .collect()
}

/// Solves `inst` within `seconds`, which must give a plan the instance
/// finds feasible.
pub fn solve_feasible(inst: &Instance, seconds: f64) -> Solution {
    let solution = solve(
        inst,
        SolveOptions {
            time_limit_seconds: seconds,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    inst.check_feasible(&solution.placement).unwrap();
    solution
}

/// `layers` MoE layers of `experts` experts (100 MB each, `top_k` a
/// token), attention (150 MB) on the first layer and a head (200 MB):
/// `layers * experts + 2` objects.
pub fn moe_with_attention_and_head(
    name: &str,
    layers: usize,
    experts: usize,
    top_k: usize,
) -> Model {
    let moe_layers: Vec<String> = (0..layers).map(|l| l.to_string()).collect();
    let text = OneFormatModel::new(name, layers, &format!("[{}]", moe_layers.join(", ")))
        .experts(experts, top_k)
        .width(64)
        .expert_size("100 MB")
        .yaml(
            "  - { name: attn, layers: [0], bytes: 150 MB, stage: dense }
  - { name: lm_head, bytes: 200 MB, stage: head }
",
        );
    Model::from_yaml_str(&text, Path::new(&format!("{name}.yaml"))).unwrap()
}

/// Calls `visit` with every placement of `inst` that it finds feasible
/// (an odometer over the places): the exhaustive search the bounds and
/// plans are checked against.
pub fn for_each_feasible(inst: &Instance, mut visit: impl FnMut(&[usize])) {
    let (n, places) = (inst.objects.len(), inst.places.len());
    let mut placement = vec![0usize; n];
    loop {
        if inst.check_feasible(&placement).is_ok() {
            visit(&placement);
        }
        let mut i = 0;
        loop {
            if i == n {
                return;
            }
            placement[i] += 1;
            if placement[i] < places {
                break;
            }
            placement[i] = 0;
            i += 1;
        }
    }
}

/// Gives each MoE layer's experts the rates of the same layer reversed:
/// the heat moved as far as it can, for the re-plans.
pub fn reverse_expert_rates(inst: &mut Instance) {
    let reversed: Vec<Vec<f64>> = inst
        .expert_ids
        .iter()
        .map(|ids| {
            ids.iter()
                .rev()
                .map(|&o| inst.objects[o].use_rate)
                .collect()
        })
        .collect();
    inst.set_expert_rates(&reversed);
}
