//! Solver quality on real routing heat (design §4; the target: within 0.5 % of a
//! valid lower bound with 1-2 GPUs, 1-2 NUMA nodes, 1-2 drives, with and
//! without I/O overlap). Each case reads a real data set from
//! `../shared/data` and is skipped, with the reason printed, where it is absent.

mod common;

use common::solve_feasible;

use residency_core::profile::HardwareProfile;
use residency_formats::inputs::{InputPaths, Inputs};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn shared(path: &str) -> Option<PathBuf> {
    let p = Path::new(ROOT).join("../../../shared/data").join(path);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent", p.display());
        None
    }
}

/// A box with two GPUs on two NUMA nodes and a drive on each: the 6-GPU
/// server's profile keeping its first card on each node.
fn two_node_box() -> HardwareProfile {
    let path = Path::new(ROOT).join("../../profiles/hardware/dual-socket-6gpu.yaml");
    let mut p = HardwareProfile::from_yaml_file(&path).unwrap();
    let first_on = |node: usize| p.gpus.iter().find(|g| g.numa == node).cloned().unwrap();
    let mut gpus = vec![first_on(0), first_on(1)];
    for (i, g) in gpus.iter_mut().enumerate() {
        g.id = i;
    }
    p.gpus = gpus;
    assert_eq!(
        (p.numa.len(), p.drives.len()),
        (2, 2),
        "the server profile has two nodes and two drives"
    );
    p.validate(&path).unwrap();
    p
}

fn check(profile: &str, model: &str, heat: &str, overlap: bool) {
    let Some(heat) = shared(heat) else { return };
    let paths = InputPaths {
        profile: (profile != "two-node")
            .then(|| Path::new(ROOT).join(format!("../../profiles/hardware/{profile}.yaml"))),
        model: Some(Path::new(ROOT).join(format!("../../profiles/models/{model}.yaml"))),
        heat: Some(heat),
        ..InputPaths::default()
    };
    let mut inputs = Inputs::load(&paths).unwrap();
    if profile == "two-node" {
        inputs.profile = two_node_box();
    }
    inputs.profile.io_overlaps_compute = overlap;
    inputs.profile.felt_fraction = None;
    let inst = inputs.instance().unwrap();
    let solution = solve_feasible(&inst, 10.0);
    let recomputed = inst.evaluate(&solution.placement).token_seconds;
    let case = format!("{model} on {profile}, overlap {overlap}");
    assert!(
        (recomputed - solution.token_seconds).abs() <= 1e-12 * recomputed,
        "{case}"
    );
    assert!(
        solution.token_seconds <= solution.greedy_token_seconds * (1.0 + 1e-12),
        "{case}: worse than greedy"
    );
    assert!(
        solution.gap() <= 0.005,
        "{case}: plan {} bound {} ({}) gap {:.3} %",
        solution.token_seconds,
        solution.lower_bound_seconds,
        solution.bound_method,
        solution.gap() * 100.0
    );
    eprintln!(
        "{case}: gap {:.4} % in {:.2} s",
        solution.gap() * 100.0,
        solution.solve_seconds
    );
}

const BOX: &str = "threadripper-3945wx-rtx3070-quadro4000";
const DESKTOP: &str = "desktop-1gpu-8gb";

#[test]
fn deepseek_v2_lite_esft_on_two_unequal_gpus() {
    check(
        BOX,
        "deepseek-v2-lite",
        "traces/esft_deepseek_v2_lite",
        true,
    );
    check(
        BOX,
        "deepseek-v2-lite",
        "traces/esft_deepseek_v2_lite",
        false,
    );
}

#[test]
fn deepseek_v2_lite_esft_on_two_nodes() {
    check(
        "two-node",
        "deepseek-v2-lite",
        "traces/esft_deepseek_v2_lite",
        true,
    );
}

#[test]
fn qwen3_30b_cross_lang() {
    check(
        BOX,
        "qwen3-30b-a3b",
        "traces/qwen3_30b_a3b_cross_lang",
        true,
    );
    check(
        DESKTOP,
        "qwen3-30b-a3b",
        "traces/qwen3_30b_a3b_cross_lang",
        false,
    );
    check(
        "two-node",
        "qwen3-30b-a3b",
        "traces/qwen3_30b_a3b_cross_lang",
        false,
    );
}

#[test]
fn mixtral_speculative_moe() {
    check(
        BOX,
        "mixtral-8x7b",
        "traces/mixtral_8x7b_speculative_moe",
        true,
    );
    check(
        DESKTOP,
        "mixtral-8x7b",
        "traces/mixtral_8x7b_speculative_moe",
        false,
    );
}

#[test]
fn llama4_maverick_mmlu() {
    check(
        DESKTOP,
        "llama4-maverick",
        "traces/llama4_maverick_mmlu",
        true,
    );
    check(BOX, "llama4-maverick", "traces/llama4_maverick_mmlu", false);
}
