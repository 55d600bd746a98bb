//! The VRAM tier's tests: Colibri's rule, the allowance, late and
//! skipped copies, `dynamic` budgets, `plan`, `belady` and `replan`, and
//! the budget kept by every policy.

use super::*;
use residency_core::cost::{Place, Resources};
use residency_policy::online::{LayerShape, OnlineParams};
use residency_policy::PolicyParams;

/// RAM to a card that uploads `bytes_per_s`.
pub(crate) fn upload_link(bytes_per_s: f64) -> MoveLink {
    let resources = Resources {
        gpu_gemv_bytes_per_s: vec![1e12],
        gpu_sync_seconds: vec![0.0],
        gpu_gemv_seconds: vec![0.0],
        gpu_upload_bytes_per_s: vec![bytes_per_s],
        gpu_capacity_bytes: vec![1 << 40],
        cpu_gemv_bytes_per_s: vec![1e9],
        cpu_stage_seconds: vec![0.0],
        ram_capacity_bytes: vec![1 << 40],
        drive_numa: vec![],
        drive_read_bytes_per_s: vec![],
        drive_latency_seconds: vec![],
        felt_fraction: 1.0,
        fixed_token_seconds: 0.0,
        gpu_hosts: vec![],
        llama_cpp: None,
        context: None,
    };
    MoveLink {
        resources,
        from: Place::Ram(0),
        to: Place::Gpu(0),
    }
}

/// What a tier knows of experts trained `train_counts` times, each
/// saving `cpu_seconds` a request, uploaded at 1 GB/s, re-planned
/// every token with no minimum age or interval, over no future.
pub(crate) fn knowing(train_counts: &[u64], cpu_seconds: f64) -> CardKnowledge {
    CardKnowledge {
        train_counts: train_counts.to_vec(),
        cpu_seconds: vec![cpu_seconds; train_counts.len()],
        link: upload_link(1e9),
        future: Vec::new(),
        replan: ReplanParams {
            every_tokens: 1,
            ..ReplanParams::card()
        },
        heat_halve_every_tokens: 1024,
    }
}

/// `policy`'s tier of `capacity` bytes over experts of `sizes` in one
/// layer, knowing `knowledge`, the largest expert's bytes of
/// allowance a token.
fn tier_of(
    policy: VramPolicy,
    capacity: u64,
    sizes: Vec<u64>,
    knowledge: &CardKnowledge,
) -> VramResidency {
    let allowance = sizes.iter().copied().max().unwrap_or(1);
    let params = (PolicyParams::default(), None);
    VramResidency::of_policy(
        policy,
        capacity,
        sizes,
        Vec::new(),
        params,
        knowledge,
        allowance,
    )
    .unwrap()
}

fn tier(capacity: u64, experts: usize, allowance: u64) -> VramResidency {
    VramResidency::new(
        PolicyKind::Lfru,
        capacity,
        vec![1; experts],
        PolicyParams::default(),
        allowance,
    )
    .unwrap()
}

/// Uploads `moves` and lands them at once, as a copy that finishes
/// within its token.
fn land_all(t: &mut VramResidency, moves: &VramMoves) {
    for &o in &moves.uploads {
        assert!(!t.landed(o));
    }
}

/// Copies in flight, each landing (or skipped) 0-3 tokens after it
/// started.
#[derive(Default)]
struct Flights(Vec<(u64, ObjectIndex)>);

impl Flights {
    /// Starts `moves`' uploads at token `now`, then lands every copy
    /// due by then.
    fn step(
        &mut self,
        t: &mut VramResidency,
        moves: &VramMoves,
        now: u64,
        rng: &mut residency_core::rng::Rng,
    ) {
        for &o in &moves.uploads {
            self.0.push((now + rng.next_u64() % 4, o));
        }
        self.0.retain(|&(due, o)| {
            if due > now {
                return true;
            }
            // One in eight skipped: its host copy had left RAM.
            if rng.next_u64().is_multiple_of(8) {
                t.skipped(o);
            } else {
                t.landed(o);
            }
            false
        });
    }
}

#[test]
fn colibri_s_rule_promotes_on_the_sixth_request_over_a_coldest_of_one() {
    // Room for two unit experts, one upload a token. Experts 0 and 1
    // fill the free room without the test (one request each: heat 1).
    // Then expert 2 needs hot > 1 + 1/4 + 4 = 5 against the coldest,
    // so its sixth request promotes it, evicting 0 (heat ties go to the
    // least recently used) and freeing 0's landed copy.
    let mut t = tier(2, 3, 1);
    for o in [0, 1] {
        let moves = t.after_token(&[o]);
        assert_eq!(moves.uploads, vec![o]);
        land_all(&mut t, &moves);
    }
    for k in 1..=5 {
        let moves = t.after_token(&[2]);
        assert_eq!(moves, VramMoves::default(), "request {k} of 2");
    }
    let moves = t.after_token(&[2]);
    assert_eq!(
        moves,
        VramMoves {
            uploads: vec![2],
            frees: vec![0]
        }
    );
    assert!(!t.on_device(2) && t.on_device(1) && !t.on_device(0));
    land_all(&mut t, &moves);
    assert!(t.on_device(2));
    assert_eq!(t.device_bytes(), 2);
}

#[test]
fn a_skipped_upload_frees_its_bytes_and_goes_up_when_routed_again() {
    // LRU (admits every miss) with room for one unit expert. 0 is
    // admitted and its upload skipped: nothing on the device, no
    // bytes counted, no upload the next token either (0 not routed).
    let mut t =
        VramResidency::new(PolicyKind::Lru, 1, vec![1; 3], PolicyParams::default(), 1).unwrap();
    assert_eq!(t.after_token(&[0]).uploads, vec![0]);
    t.skipped(0);
    assert!(!t.on_device(0));
    assert_eq!(t.device_bytes(), 0);
    assert_eq!(t.after_token(&[]), VramMoves::default());
    // Routed again (a hit for the policy): queued and uploaded.
    let moves = t.after_token(&[0]);
    assert_eq!(moves.uploads, vec![0]);
    land_all(&mut t, &moves);
    assert!(t.on_device(0));
    assert_eq!(t.device_bytes(), 1);
    // Skipped while evicted in flight: simply gone. 1 evicts 0 (a
    // landed copy, freed), 2 evicts 1 while 1 is in flight.
    let moves = t.after_token(&[1]);
    assert_eq!(moves.frees, vec![0]);
    assert_eq!(moves.uploads, vec![1]);
    let moves = t.after_token(&[2]);
    assert!(moves.uploads.is_empty(), "1's bytes still count: no room");
    t.skipped(1);
    assert_eq!(t.device_bytes(), 0);
    // 2 was queued behind 1's bytes and now goes up; 1, evicted, is
    // not queued again when routed (a miss the policy admits anew).
    assert_eq!(t.after_token(&[]).uploads, vec![2]);
}

#[test]
fn the_allowance_spreads_uploads_over_tokens_oldest_first() {
    // Three admissions in one token, one expert's bytes a token: 3,
    // then 1, then 4, one a token; nothing is on the device until it
    // lands, so the token after the admissions computes all three on
    // the CPU.
    let mut t = tier(10, 5, 1);
    let first = t.after_token(&[3, 1, 4]);
    assert_eq!(first.uploads, vec![3]);
    assert!(!t.on_device(3));
    land_all(&mut t, &first);
    assert_eq!(t.after_token(&[]).uploads, vec![1]);
    assert_eq!(t.after_token(&[]).uploads, vec![4]);
    assert_eq!(t.after_token(&[]).uploads, Vec::<ObjectIndex>::new());
}

#[test]
fn an_expert_larger_than_the_allowance_still_goes_up() {
    // Experts of 3 bytes, 1 byte a token: the credit grows to 3 (the
    // largest expert) by the third token, which uploads it.
    let mut t =
        VramResidency::new(PolicyKind::Lru, 6, vec![3; 2], PolicyParams::default(), 1).unwrap();
    assert!(t.after_token(&[0]).uploads.is_empty());
    assert!(t.after_token(&[]).uploads.is_empty());
    assert_eq!(t.after_token(&[]).uploads, vec![0]);
}

#[test]
fn an_expert_evicted_in_flight_is_freed_when_it_lands() {
    // LRU of one unit expert: 0 is admitted and starts uploading; the
    // next token's 1 evicts it while in flight. Its byte stays counted,
    // so 1 cannot start until 0 lands and is freed.
    let mut t =
        VramResidency::new(PolicyKind::Lru, 1, vec![1; 2], PolicyParams::default(), 1).unwrap();
    assert_eq!(t.after_token(&[0]).uploads, vec![0]);
    let moves = t.after_token(&[1]);
    assert_eq!(moves, VramMoves::default());
    assert_eq!(t.device_bytes(), 1);
    assert!(t.landed(0), "doomed in flight: free it");
    assert_eq!(t.device_bytes(), 0);
    assert_eq!(t.after_token(&[]).uploads, vec![1]);
}

/// A layer of 8 unit experts, one a token, a miss priced at 1 s.
const UNIT_LAYER: LayerShape = LayerShape {
    slot_bytes: 1,
    experts: 8,
    miss_seconds: 1.0,
    leased_at_once: 1,
};

/// Two layers of 8 unit experts on a card of 8 bytes, LRU inside each
/// layer, passes every token over a window of 48 requests.
fn two_layers() -> VramResidency {
    let online = OnlineParams {
        window_accesses: 48,
        every_tokens: 1,
        ..OnlineParams::default()
    };
    VramResidency::per_layer(
        PolicyKind::Lru,
        8,
        vec![1; 16],
        vec![UNIT_LAYER; 2],
        PolicyParams::default(),
        online,
        8,
    )
    .unwrap()
}

/// A token that cycles `busy` (layer 0 or 1) over 6 of its experts and
/// asks the other layer for its expert 0 only.
fn token(busy: usize, t: u32) -> Vec<ObjectIndex> {
    let cycling = busy as u32 * 8 + t % 6;
    let still = (1 - busy as u32) * 8;
    vec![cycling, still]
}

#[test]
fn dynamic_budgets_follow_traffic_from_one_layer_to_the_other() {
    // Uniform start: 4 bytes a layer. A layer cycling over 6 experts
    // hits only with 6 slots; the other needs 1. Once layer 0 cycles,
    // the allocator gives it the room, and after the traffic moves to
    // layer 1 the budget follows within 50 passes (one a token); the
    // budgets never sum above the card's 8 bytes, nor do the bytes on
    // the card, with every copy landing at once.
    let mut t = two_layers();
    assert_eq!(t.capacities_bytes(), vec![4, 4]);
    let run = |t: &mut VramResidency, busy: usize, tokens: u32| {
        for k in 0..tokens {
            let moves = t.after_token(&token(busy, k));
            for &o in &moves.uploads {
                t.landed(o);
            }
            assert!(t.capacities_bytes().iter().sum::<u64>() <= 8);
            assert!(t.device_bytes() <= 8);
        }
    };
    run(&mut t, 0, 100);
    let c = t.capacities_bytes();
    assert!(c[0] >= 6 && c[0] > c[1], "{c:?}");
    run(&mut t, 1, 50);
    let c = t.capacities_bytes();
    assert!(c[1] >= 6 && c[1] > c[0], "{c:?}");
}

#[test]
fn dynamic_needs_a_policy_that_resizes() {
    let e = VramResidency::per_layer(
        PolicyKind::Arc,
        8,
        vec![1; 16],
        vec![UNIT_LAYER; 2],
        PolicyParams::default(),
        OnlineParams::default(),
        8,
    )
    .err()
    .unwrap();
    assert!(
        e.contains("--vram-policy arc") && e.contains("lru, fifo, sieve, s3fifo, lfu or lfru"),
        "{e}"
    );
}

#[test]
fn dynamic_keeps_the_budget_and_its_seed_while_budgets_move() {
    // Random traffic that shifts between the layers every 40 tokens,
    // copies landing 0-3 tokens late: the bytes on the card and the
    // caches' budgets stay within 8, landed experts are ones their
    // layer's cache holds, and a seed gives the same moves.
    let run = |seed: u64| {
        let mut rng = residency_core::rng::Rng(seed);
        let mut t = two_layers();
        let mut flights = Flights::default();
        let mut log = Vec::new();
        for step in 0..600u64 {
            let busy = (step / 40 % 2) as usize;
            let spread =
                |rng: &mut residency_core::rng::Rng, n| (rng.next_u64() % n) as ObjectIndex;
            let routes = vec![
                busy as ObjectIndex * 8 + spread(&mut rng, 7),
                (1 - busy) as ObjectIndex * 8 + spread(&mut rng, 2),
            ];
            let moves = t.after_token(&routes);
            assert!(t.device_bytes() <= 8, "step {step}");
            assert!(t.capacities_bytes().iter().sum::<u64>() <= 8, "step {step}");
            flights.step(&mut t, &moves, step, &mut rng);
            for o in 0..16u32 {
                assert!(!t.on_device(o) || t.decided(o), "step {step}");
            }
            log.push((moves, t.capacities_bytes()));
        }
        log
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn plan_uploads_the_training_knapsack_before_serving_and_keeps_it() {
    // Four unit experts trained 5, 1, 9 and 0 times, room for two:
    // the knapsack by CPU seconds saved per byte is 2 and 0. They go
    // up at start-up (in index order), outside the allowance, and
    // routes of 1 and 3 change nothing: `plan` admits nothing.
    let mut t = tier_of(
        VramPolicy::Plan,
        2,
        vec![1; 4],
        &knowing(&[5, 1, 9, 0], 1.0),
    );
    let startup = t.startup();
    assert_eq!(startup, vec![0, 2]);
    land_all(
        &mut t,
        &VramMoves {
            uploads: startup,
            frees: vec![],
        },
    );
    for _ in 0..10 {
        assert_eq!(t.after_token(&[1, 3]), VramMoves::default());
    }
    assert!(t.on_device(2) && t.on_device(0) && !t.on_device(1));
    assert_eq!(t.device_bytes(), 2);
}

#[test]
fn belady_keeps_what_comes_back_sooner() {
    // Room for one unit expert; routes 0, 1, 0, 1, 0. Belady's future:
    // at tick 1, 1's next request (tick 3) is later than resident 0's
    // (tick 2), so 1 is bypassed and 0 stays on the card the whole
    // time; LRU swaps them every token and never hits a landed copy.
    let routes = [0, 1, 0, 1, 0];
    let mut knowledge = knowing(&[0, 0], 1.0);
    knowledge.future = routes.to_vec();
    let count_on_device = |policy: VramPolicy| {
        let mut t = tier_of(policy, 1, vec![1; 2], &knowledge);
        let mut on_device = 0;
        for &o in &routes {
            on_device += t.on_device(o) as u32;
            let moves = t.after_token(&[o]);
            land_all(&mut t, &moves);
        }
        on_device
    };
    // Belady: 0 admitted at t0, lands; hits at t2 and t4.
    assert_eq!(count_on_device(VramPolicy::Belady), 2);
    // LRU: each token evicts the other expert; nothing it routes is
    // on the card when routed.
    assert_eq!(count_on_device(VramPolicy::Lru), 0);
    assert!(VramPolicy::Belady.label().starts_with("belady (offline"));
}

#[test]
fn replan_moves_to_live_heat_once_the_move_pays() {
    // Four unit experts, room for one, trained on expert 0 alone: 0
    // goes up at start-up. Live traffic then routes 1 only. The first
    // pass (after token 1) sees 1 at 1 count against 0 at 0: swapping
    // saves 1 s a request of rate 1/1536 a token over 512 tokens
    // (0.33 s), against a 1-byte upload at 1 GB/s x 2: it pays, so 0
    // is freed and 1 goes up.
    let mut t = tier_of(
        VramPolicy::Replan,
        1,
        vec![1; 4],
        &knowing(&[10, 0, 0, 0], 1.0),
    );
    let startup = t.startup();
    assert_eq!(startup, vec![0]);
    land_all(
        &mut t,
        &VramMoves {
            uploads: startup,
            frees: vec![],
        },
    );
    let moves = t.after_token(&[1]);
    assert_eq!(
        moves,
        VramMoves {
            uploads: vec![1],
            frees: vec![0]
        }
    );
    land_all(&mut t, &moves);
    assert!(t.on_device(1) && !t.on_device(0));
    // At 1 byte/s an upload takes 1 s, so a move must save more than
    // 2 s (hysteresis 2) over the 512-token horizon. 1 is up from the
    // start (trained) and live traffic routes 2 alone: after k tokens
    // 2's rate is k / 1536 a token, saving k / 3 s over the horizon,
    // which passes 2 s at k = 7 (k = 6 only equals it).
    let mut slow = knowing(&[0, 10, 0, 0], 1.0);
    slow.link = upload_link(1.0);
    let mut t = tier_of(VramPolicy::Replan, 1, vec![1; 4], &slow);
    let startup = t.startup();
    land_all(
        &mut t,
        &VramMoves {
            uploads: startup,
            frees: vec![],
        },
    );
    for k in 1..=6 {
        assert_eq!(t.after_token(&[2]), VramMoves::default(), "token {k}");
    }
    assert_eq!(
        t.after_token(&[2]),
        VramMoves {
            uploads: vec![2],
            frees: vec![1]
        }
    );
}

#[test]
fn every_policy_keeps_the_budget_and_its_seed_whenever_copies_land_late() {
    // Every `--vram-policy` over random routes of 30 experts of 1-4
    // bytes into 20 (S3-FIFO's small queue, a tenth, holds the small
    // ones), copies landing 0-3 tokens late and one in eight
    // skipped: the device's bytes never pass the budget, every landed
    // expert is one the decider holds, and a seed gives the same moves.
    let run = |policy: VramPolicy, seed: u64| {
        let mut rng = residency_core::rng::Rng(seed);
        let sizes: Vec<u64> = (0..30).map(|_| 1 + rng.next_u64() % 4).collect();
        let routes: Vec<Vec<ObjectIndex>> = (0..2000)
            .map(|_| {
                (0..3)
                    .map(|_| (rng.next_u64() % 30) as ObjectIndex)
                    .collect()
            })
            .collect();
        let train: Vec<u64> = (0..30).map(|_| rng.next_u64() % 50).collect();
        let mut knowledge = knowing(&train, 1e-3);
        knowledge.future = routes.concat();
        let mut t = tier_of(policy, 20, sizes, &knowledge);
        let mut flights = Flights::default();
        let startup = VramMoves {
            uploads: t.startup(),
            frees: vec![],
        };
        flights.step(&mut t, &startup, 0, &mut rng);
        let mut log = vec![startup];
        for (token, route) in routes.iter().enumerate() {
            let moves = t.after_token(route);
            assert!(t.device_bytes() <= 20, "{policy} token {token}");
            flights.step(&mut t, &moves, token as u64, &mut rng);
            for o in 0..30 {
                assert!(!t.on_device(o) || t.decided(o), "{policy} token {token}");
            }
            log.push(moves);
        }
        log
    };
    for policy in VramPolicy::ALL {
        assert_eq!(run(policy, 5), run(policy, 5), "{policy}");
        assert_ne!(run(policy, 5), run(policy, 6), "{policy}");
    }
}
