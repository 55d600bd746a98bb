//! The cost model's arithmetic where a stage spans two cards: each card
//! pays its own bytes at its own rate, its GEMVs' overhead and one sync,
//! only where it computes something; the stage takes the slowest of the
//! cards, the node and the drive. Every expected number is worked by hand
//! in the comment above it from the formulas of docs/design.md §4.

use residency_core::cost::{Instance, Place};
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use std::path::Path;

/// Two mismatched cards: card 0 is twice as fast but pays 2.5 times the
/// sync and a per-GEMV overhead; one node; one drive.
const PROFILE: &str = r#"
name: two-cards
numa:
  - { id: 0, ram: 1 GB, cores: 4, gemv_bandwidth: 10 GB/s, stage_overhead: 200 us }
gpus:
  - { id: 0, name: fast, vram: 1 GB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us, gemv_overhead: 2 us }
  - { id: 1, name: slow, vram: 1 GB, numa: 0, gemv_bandwidth: 50 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 40 us }
drives:
  - { id: 0, name: d, numa: 0, read_bandwidth: 1 GB/s, read_latency: 100 us }
"#;

/// One MoE layer of four 1 MB experts (three projections each) with a
/// 2 MB shared expert in its experts stage.
const MODEL: &str = r#"
name: tiny
layers: 2
moe_layers: [1]
experts: 4
top_k: 2
hidden: 8
expert_intermediate: 8
formats: { q: 1 MB }
tiers: { gpu: q, ram: q, disk: q }
trunk:
  - { name: attn, layers: [0, 1], bytes: 2 MB, stage: dense }
  - { name: shared_expert, layers: [1], bytes: 2 MB, stage: experts }
  - { name: lm_head, bytes: 4 MB, stage: head }
"#;

/// Places in plan order.
const FAST: usize = 0;
const SLOW: usize = 1;
const RAM: usize = 2;
/// Stages in order: L0.dense, L1.dense, L1.experts, head.
const EXPERTS_STAGE: usize = 2;

fn instance() -> Instance {
    let profile = HardwareProfile::from_yaml_str(PROFILE, Path::new("p")).unwrap();
    let model = Model::from_yaml_str(MODEL, Path::new("m")).unwrap();
    Instance::new(&profile, &model, &[vec![1.0, 0.5, 0.3, 0.2]])
}

/// Objects: experts 0..3, then attn L0, attn L1, the shared expert, lm_head.
fn placement(experts: [usize; 4], shared: usize) -> Vec<usize> {
    let mut p = experts.to_vec();
    p.extend([FAST, FAST, shared, FAST]);
    p
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
}

#[test]
fn the_instance_has_both_cards_as_places() {
    let inst = instance();
    assert_eq!(
        inst.places,
        vec![Place::Gpu(0), Place::Gpu(1), Place::Ram(0), Place::Disk(0)]
    );
}

#[test]
fn a_stage_split_over_two_cards_takes_the_slower_card_each_with_its_own_sync() {
    let inst = instance();
    // Experts 0 and 1 on the fast card, 2 and 3 on the slow one, the
    // shared expert on the fast card.
    // Fast: shared 2e6/1e11 + 1 GEMV x 2e-6 = 2.2e-5; expert 0 at rate 1.0
    //   and expert 1 at 0.5: 1.5 x (1e6/1e11 + 3 x 2e-6) = 2.4e-5; sync
    //   1e-4: 1.46e-4.
    // Slow: (0.3 + 0.2) x 1e6/5e10 = 1e-5; sync 4e-5: 5e-5.
    let ev = inst.evaluate(&placement([FAST, FAST, SLOW, SLOW], FAST));
    assert!(close(ev.stage_seconds[EXPERTS_STAGE], 1.46e-4));
    assert_eq!(ev.bottlenecks[EXPERTS_STAGE], Place::Gpu(0));
}

#[test]
fn a_card_with_nothing_in_a_stage_pays_no_sync_there() {
    let inst = instance();
    // Everything of the experts stage on the slow card: the fast card has
    // no work there and pays nothing.
    // Slow: shared 2e6/5e10 = 4e-5; experts (1.0 + 0.5 + 0.3 + 0.2) x
    //   2e-5 = 4e-5; one sync 4e-5: 1.2e-4, below the split's 1.46e-4.
    let ev = inst.evaluate(&placement([SLOW; 4], SLOW));
    assert!(close(ev.stage_seconds[EXPERTS_STAGE], 1.2e-4));
    assert_eq!(ev.bottlenecks[EXPERTS_STAGE], Place::Gpu(1));
}

#[test]
fn shared_and_routed_experts_on_different_cards_run_at_once() {
    let inst = instance();
    // The default plan's signature: the shared expert (trunk) on the fast
    // card, the routed experts on the slow one. The stage is the max of
    // the two, not their sum.
    // Fast: 2e6/1e11 + 2e-6 + 1e-4 = 1.22e-4.
    // Slow: 2.0 x 2e-5 + 4e-5 = 8e-5.
    let ev = inst.evaluate(&placement([SLOW; 4], FAST));
    assert!(close(ev.stage_seconds[EXPERTS_STAGE], 1.22e-4));
    assert_eq!(ev.bottlenecks[EXPERTS_STAGE], Place::Gpu(0));
    // Summed, as one device running both in turn would: 2.02e-4.
    assert!(ev.stage_seconds[EXPERTS_STAGE] < 1.22e-4 + 8e-5);
}

#[test]
fn the_node_beside_two_cards_sets_the_stage_when_it_is_slowest() {
    let inst = instance();
    // Expert 3 (rate 0.2) in RAM, the rest split as in the first case.
    // Fast as there: 1.46e-4. Slow: 0.3 x 2e-5 + 4e-5 = 4.6e-5.
    // Node: 0.2 x 1e6/1e10 + stage overhead 2e-4 = 2.2e-4.
    let ev = inst.evaluate(&placement([FAST, FAST, SLOW, RAM], FAST));
    assert!(close(ev.stage_seconds[EXPERTS_STAGE], 2.2e-4));
    assert_eq!(ev.bottlenecks[EXPERTS_STAGE], Place::Ram(0));
}

#[test]
fn a_token_on_its_own_routes_pays_only_the_cards_it_reaches() {
    let inst = instance();
    let p = placement([FAST, FAST, SLOW, SLOW], FAST);
    // Other stages: L0.dense and L1.dense each attn on the fast card,
    // 2e6/1e11 + 2e-6 + 1e-4 = 1.22e-4; head 4e6/1e11 + 2e-6 + 1e-4 =
    // 1.42e-4: 3.86e-4 in all.
    // Token {0, 1}: fast 2.2e-5 (shared) + 2 x 1.6e-5 + 1e-4 = 1.54e-4;
    // the slow card has nothing: 3.86e-4 + 1.54e-4 = 5.4e-4.
    let one_card = inst.routed_token_seconds(&p, &[vec![], vec![], vec![0, 1], vec![]]);
    assert!(close(one_card, 5.4e-4), "{one_card}");
    // Token {2, 3}: fast 2.2e-5 + 1e-4 = 1.22e-4 (the shared expert);
    // slow 2 x 2e-5 + 4e-5 = 8e-5: the max 1.22e-4, so 5.08e-4.
    let both = inst.routed_token_seconds(&p, &[vec![], vec![], vec![2, 3], vec![]]);
    assert!(close(both, 5.08e-4), "{both}");
}
