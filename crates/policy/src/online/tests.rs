//! Tests of `online`.

use super::*;

fn shape(experts: usize) -> LayerShape {
    LayerShape {
        slot_bytes: 1,
        experts,
        miss_seconds: 1.0,
        // No floor: these tests are about the window and the move rule.
        leased_at_once: 0,
    }
}

fn params(window_accesses: usize, every_tokens: u64) -> OnlineParams {
    OnlineParams {
        window_accesses,
        every_tokens,
        horizon_tokens: 512.0,
        hysteresis: 2.0,
        bytes_per_token: 1 << 20,
    }
}

/// Records `tokens` tokens of `token(t)` = `(layer, expert)` requests,
/// passing when due; returns every pass with the token it ran after.
fn serve(
    a: &mut OnlineAllocator,
    from: u64,
    tokens: u64,
    token: impl Fn(u64) -> Vec<(usize, ObjectIndex)>,
) -> Vec<(u64, Pass)> {
    let mut passes = Vec::new();
    for t in from..from + tokens {
        for (l, e) in token(t) {
            a.record(l, e);
        }
        if a.due(t + 1) {
            passes.push((t + 1, a.pass(t + 1)));
        }
    }
    passes
}

#[test]
fn the_window_keeps_the_last_requests_only() {
    // Window of 4: after 0 0 0 0 on layer 0 and then 1 2 1 2 on layer 1,
    // layer 0 has slid out: its curve is all zeros, layer 1's is that of
    // 1 2 1 2 over 3 experts: 4 misses with 0 or 1 slot, 2 (compulsory)
    // with 2 or more.
    let mut a = OnlineAllocator::new(params(4, 1), vec![shape(2), shape(3)], 2).unwrap();
    for e in [0, 0, 0, 0] {
        a.record(0, e);
    }
    for e in [1, 2, 1, 2] {
        a.record(1, e);
    }
    let curves = a.curves();
    assert_eq!(curves[0].misses, vec![0, 0, 0]);
    assert_eq!(curves[1].misses, vec![4, 4, 2, 2]);
}

#[test]
fn drift_is_followed_within_a_window_of_passes() {
    // Two layers of 8 one-byte experts, a budget of 8 slots; a token asks
    // the hot layer for 3 experts cycling over 6 (LRU needs 6 slots to
    // hit) and the cold layer for expert 0 (1 slot). Window 64 requests
    // = 16 tokens, a pass every 4 tokens. Water-filling gives the hot
    // layer 6 and the cold 1; the 8th slot saves nothing and stays with
    // the layer that had it (the cold one, from the uniform 4 + 4). Traffic
    // moves from layer 0 to layer 1 after token 40: by token 56 the window
    // holds only the new traffic, so within 16 / 4 = 4 passes after the
    // shift the slots must be (2, 6) (the spare slot stays in layer 0);
    // before the shift they are (6, 2).
    let mut a = OnlineAllocator::new(params(64, 4), vec![shape(8), shape(8)], 8).unwrap();
    assert_eq!(a.slots(), &[4, 4]);
    let token = |hot: usize| {
        move |t: u64| {
            let mut r: Vec<(usize, ObjectIndex)> =
                (0..3).map(|i| (hot, ((3 * t + i) % 6) as u32)).collect();
            r.push((1 - hot, 0));
            r
        }
    };
    serve(&mut a, 0, 40, token(0));
    assert_eq!(a.slots(), &[6, 2]);
    let passes = serve(&mut a, 40, 40, token(1));
    let followed = passes
        .iter()
        .position(|(_, p)| p.moved && p.target == vec![2, 6])
        .expect("the allocation follows the traffic");
    assert!(followed < 4, "followed after {} passes", followed + 1);
    assert_eq!(a.slots(), &[2, 6]);
}

#[test]
fn the_top_k_floor_holds_at_every_pass_while_budgets_move() {
    // The drift above with a floor of 3 slots a layer (both layers lease
    // 3 experts at once in a model whose tokens route top-3 everywhere).
    // Budget 8: floors 3 + 3 leave 2 bytes, and the hot layer gains only
    // at 6 slots (+3): no move ever, (4, 4) throughout, where without the
    // floor the cold layer went down to 2. Budget 9 (uniform 4 + 4, one
    // spare): 3 bytes above the floors buy the hot layer's 6, so (6, 3)
    // before the shift and (3, 6) after it; no layer is below 3 at any pass.
    let token = |hot: usize| {
        move |t: u64| {
            let mut r: Vec<(usize, ObjectIndex)> =
                (0..3).map(|i| (hot, ((3 * t + i) % 6) as u32)).collect();
            r.push((1 - hot, 0));
            r
        }
    };
    let floored = LayerShape {
        leased_at_once: 3,
        ..shape(8)
    };
    let run = |budget: u64| {
        let shapes = vec![floored.clone(), floored.clone()];
        let mut a = OnlineAllocator::new(params(64, 4), shapes, budget).unwrap();
        let mut passes = serve(&mut a, 0, 40, token(0));
        let before = a.slots().to_vec();
        passes.extend(serve(&mut a, 40, 40, token(1)));
        for (t, p) in &passes {
            assert!(p.target.iter().all(|&k| k >= 3), "token {t}: {p:?}");
        }
        (
            before,
            a.slots().to_vec(),
            passes.iter().any(|(_, p)| p.moved),
        )
    };
    assert_eq!(run(8), (vec![4, 4], vec![4, 4], false));
    assert_eq!(run(9), (vec![6, 3], vec![3, 6], true));
}

#[test]
fn a_gain_below_the_move_cost_times_the_hysteresis_moves_nothing() {
    // Window 100 holds all 30 requests of 10 tokens [A0, A1, B0]; slots
    // (1, 1) of a 2-slot budget; a miss of A costs 1 s, of B 0.5 s.
    // A (0 1 0 1 ..., 20 requests): 20 misses with 1 slot, 2 with 2;
    // B (0 0 ..., 10): 10 misses with 0 slots, 1 with 1. Water-filling:
    // A's second slot saves 18 s over 2 slots (9 s a slot), B's slot
    // 4.5 s: target (2, 0). Felt now 20 + 0.5 = 20.5 s, target 2 + 5 = 7 s
    // on 30 requests, 3 requests a token, horizon 1 token: gain
    // 13.5 / 30 * 3 = 1.35 s. The move fills one slot of A: 1 s. With
    // hysteresis 2 (2 s > 1.35 s) nothing moves; with 1 it moves; with no
    // allowance it never does.
    let run = |hysteresis: f64, bytes_per_token: u64| {
        let p = OnlineParams {
            window_accesses: 100,
            every_tokens: 10,
            horizon_tokens: 1.0,
            hysteresis,
            bytes_per_token,
        };
        let layers = vec![
            shape(2),
            LayerShape {
                miss_seconds: 0.5,
                leased_at_once: 0,
                ..shape(1)
            },
        ];
        let mut a = OnlineAllocator::new(p, layers, 2).unwrap();
        let passes = serve(&mut a, 0, 10, |_| vec![(0, 0), (0, 1), (1, 0)]);
        assert_eq!(passes.len(), 1);
        (passes[0].1.clone(), a.slots().to_vec())
    };
    let (pass, slots) = run(2.0, 1);
    assert_eq!(pass.target, vec![2, 0]);
    assert!(
        (pass.gain_seconds - 1.35).abs() < 1e-12,
        "{}",
        pass.gain_seconds
    );
    assert_eq!((pass.move_seconds, pass.move_bytes), (1.0, 1));
    assert!(!pass.moved);
    assert_eq!(slots, vec![1, 1]);
    let (pass, slots) = run(1.0, 1);
    assert!(pass.moved);
    assert_eq!(slots, vec![2, 0]);
    let (pass, slots) = run(0.0, 0);
    assert!(!pass.moved);
    assert_eq!(slots, vec![1, 1]);
}

#[test]
fn bad_parameters_are_one_line() {
    let p = OnlineParams {
        every_tokens: 0,
        ..OnlineParams::default()
    };
    let e = OnlineAllocator::new(p, vec![shape(2)], 2)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("period") && e.contains("positive") && !e.contains('\n'),
        "{e}"
    );
}
