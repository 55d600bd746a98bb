//! Tests of `replan`.

use super::*;

/// Ten objects of 100 bytes, 1 ms per miss, read from a drive at
/// 100 kB/s into RAM (a move costs 1 ms), share of 3 objects.
fn replanner(params: ReplanParams, pinned: &[ObjectIndex]) -> Replanner {
    let resources = Resources {
        gpu_gemv_bytes_per_s: vec![],
        gpu_sync_seconds: vec![],
        gpu_gemv_seconds: vec![],
        gpu_upload_bytes_per_s: vec![],
        gpu_capacity_bytes: vec![],
        cpu_gemv_bytes_per_s: vec![1e9],
        cpu_stage_seconds: vec![0.0],
        ram_capacity_bytes: vec![300],
        drive_numa: vec![0],
        drive_read_bytes_per_s: vec![1e5],
        drive_latency_seconds: vec![0.0],
        felt_fraction: 1.0,
        fixed_token_seconds: 0.0,
        gpu_hosts: vec![],
        llama_cpp: None,
        context: None,
    };
    let link = MoveLink {
        resources,
        from: Place::Disk(0),
        to: Place::Ram(0),
    };
    Replanner::new(params, 300, vec![100; 10], vec![1e-3; 10], link, pinned)
}

#[test]
fn a_move_must_pay_for_itself_over_the_horizon() {
    // Pinned {0,1,2} at rates 0.10, 0.10, 0.05; object 3 rises to 0.06.
    // Swapping 2 for 3 saves (0.06 - 0.05) * 1 ms = 10 us per token;
    // over 512 tokens 5.12 ms against 1 ms x 2 (hysteresis): it pays.
    // At 0.051 it saves 1 us per token, 0.512 ms: it does not.
    let params = ReplanParams {
        min_age_tokens: 0,
        ..ReplanParams::default()
    };
    let mut rate = vec![0.0; 10];
    rate[..4].copy_from_slice(&[0.10, 0.10, 0.05, 0.051]);
    let mut r = replanner(params.clone(), &[0, 1, 2]);
    assert_eq!(r.pass(32, 0.0, &rate), Moves::default());
    rate[3] = 0.06;
    let mut r = replanner(params, &[0, 1, 2]);
    assert_eq!(
        r.pass(32, 0.0, &rate),
        Moves {
            promote: vec![3],
            demote: vec![2]
        }
    );
    assert_eq!(r.pinned(), vec![0, 1, 3]);
}

#[test]
fn the_same_heat_gives_the_same_moves() {
    // A seeded heat drifting over 40 passes: two re-planners fed the same
    // rates decide the same moves at every pass (no hidden state such as
    // hash order or time).
    let params = ReplanParams {
        min_age_tokens: 0,
        ..ReplanParams::default()
    };
    let (mut a, mut b) = (
        replanner(params.clone(), &[0, 1, 2]),
        replanner(params, &[0, 1, 2]),
    );
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut moved = 0;
    for pass in 1..=40u64 {
        let rate: Vec<f64> = (0..10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 1000) as f64 / 1000.0
            })
            .collect();
        let (ma, mb) = (a.pass(pass * 32, 0.0, &rate), b.pass(pass * 32, 0.0, &rate));
        moved += ma.promote.len();
        assert_eq!(ma, mb, "pass {pass}");
    }
    // The heat moved enough for pins to change.
    assert!(moved > 0);
}

#[test]
fn a_pass_is_due_after_tokens_or_seconds_whichever_first() {
    let params = ReplanParams {
        every_tokens: 100,
        every_seconds: Some(1.0),
        ..ReplanParams::default()
    };
    let mut r = replanner(params, &[0, 1, 2]);
    assert!(!r.due(1, 0.5));
    assert!(r.due(1, 1.0));
    r.pass(1, 1.0, &[0.0; 10]);
    assert!(!r.due(2, 1.5));
    assert!(r.due(2, 2.0));
    // Tokens alone still make it due.
    assert!(r.due(101, 1.2));
}

#[test]
fn drift_is_followed_within_the_budgets() {
    // Category A uses 0,1,2; then the heat moves to B: 7,8,9. With 2
    // promotions per pass and 100 bytes of allowance per token, the pins
    // follow in two passes; no pass promotes more than 2 objects, and
    // the pinned bytes never exceed the share.
    let params = ReplanParams {
        every_tokens: 10,
        min_age_tokens: 0,
        max_promotions: 2,
        bytes_per_token: 10,
        ..ReplanParams::default()
    };
    let mut r = replanner(params, &[0, 1, 2]);
    let mut rate = vec![0.0; 10];
    rate[7..].copy_from_slice(&[0.3, 0.3, 0.3]);
    let first = r.pass(10, 0.0, &rate);
    // 10 tokens x 10 bytes = 100 bytes of allowance: one promotion.
    assert_eq!(first.promote.len(), 1);
    let second = r.pass(30, 0.0, &rate);
    assert_eq!(second.promote.len(), 2);
    assert_eq!(r.pinned(), vec![7, 8, 9]);
    assert!(r.pinned_bytes() <= 300);
    // Settled: nothing more moves.
    assert_eq!(r.pass(60, 0.0, &rate), Moves::default());
}

#[test]
fn young_pins_and_recent_movers_stay_put() {
    let params = ReplanParams {
        min_age_tokens: 100,
        ..ReplanParams::default()
    };
    let mut r = replanner(params, &[0, 1, 2]);
    let mut rate = vec![0.0; 10];
    rate[5] = 1.0;
    // Pins are at most 40 tokens old at token 40: none may go, and the
    // share is full, so 5 waits.
    assert_eq!(r.pass(40, 0.0, &rate), Moves::default());
    assert_eq!(
        r.pass(100, 0.0, &rate),
        Moves {
            promote: vec![5],
            demote: vec![2]
        }
    );
}
