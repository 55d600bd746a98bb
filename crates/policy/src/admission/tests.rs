//! Tests of `admission`.

use super::super::testing::{misses, replay, setup, unit};
use super::*;
use Outcome::{Admitted as A, Bypassed as B, Hit as H};

#[test]
fn frequency_admits_only_above_ratio_times_the_lru_victim() {
    // Capacity 2 slots, ratio 1.10, a=0 b=1 c=2; order most recent first.
    // t0 a, t1 b: free room: [b a]
    // t2 c f=1 vs LRU a f=1: 1 > 1.1 fails: bypassed
    // t3 c f=2 > 1.1: evict a: [c b]
    // t4 a f=2 vs b f=1: 2 > 1.1: evict b: [a c]
    // t5 b f=2 vs c f=2: 2 > 2.2 fails: bypassed
    // t6 c hit: [c a]
    // t7 b f=3 vs a f=2: 3 > 2.2: evict a
    let r = replay(
        &mut Admission::frequency(&setup(2, 3)),
        &unit(&[0, 1, 2, 2, 0, 1, 2, 1]),
    );
    let expected = [
        (A, vec![]),
        (A, vec![]),
        (B, vec![]),
        (A, vec![0]),
        (A, vec![1]),
    ];
    assert_eq!(r[..5], expected);
    assert_eq!(r[5..], [(B, vec![]), (H, vec![]), (A, vec![0])]);
    assert_eq!(misses(&r), 7);
}

#[test]
fn frequency_sums_the_victims_and_adds_the_prior() {
    // Capacity 10, N = 10 ticks, prior rates 0.1 0.1 0.25 0: prior
    // counts a 1, b 1, c 2.5, d 0. Sizes a=5 b=5 c=10 d=5.
    // t0 a (f 2), t1 b (f 2): free room.
    // t2 c f=3.5 needs a and b: 3.5 > 1.1 * (2 + 2) = 4.4 fails: bypassed.
    // t3 c f=4.5 > 4.4: evicts a then b (LRU end first). Without the
    //    prior c's 2 would not beat 1.1 * 2.
    // t4 d f=1 vs c 4.5: bypassed.
    let mut s = setup(10, 4);
    s.params.halve_every_ticks = 10;
    s.knowledge.prior_rate = vec![0.1, 0.1, 0.25, 0.0];
    let mut policy = Admission::frequency(&s);
    let r = replay(&mut policy, &[(0, 5), (1, 5), (2, 10), (2, 10), (3, 5)]);
    let expected = [
        (A, vec![]),
        (A, vec![]),
        (B, vec![]),
        (A, vec![0, 1]),
        (B, vec![]),
    ];
    assert_eq!(r, expected);
    assert_eq!(policy.used_bytes(), 10);
}

fn cost_setup(capacity: u64, miss_seconds: Vec<f64>) -> PolicySetup {
    let mut s = setup(capacity, miss_seconds.len());
    s.params.halve_every_ticks = 10;
    s.knowledge.hit_seconds = vec![0.0; miss_seconds.len()];
    s.knowledge.miss_seconds = miss_seconds;
    s
}

#[test]
fn cost_evicts_the_lowest_utility_and_admits_only_above_it() {
    // Capacity 2 slots, N = 10 (rate = count / 10), miss a=1 b=1 c=4.
    // t0 a (u .1), t1 b (u .1): free room.
    // t2 c u = .1 * 4 = .4: lowest are a and b (.1), a less recent:
    //    .4 > .1: evict a. {b .1, c .4}
    // t3 a u .2 > b .1: evict b. {c .4, a .2}
    // t4 b u .2 vs a .2: not above: bypassed.
    // t5 b u .3 > .2: evict a.
    let r = replay(
        &mut Admission::cost(&cost_setup(2, vec![1.0, 1.0, 4.0])),
        &unit(&[0, 1, 2, 0, 1, 1]),
    );
    let expected = [
        (A, vec![]),
        (A, vec![]),
        (A, vec![0]),
        (A, vec![1]),
        (B, vec![]),
        (A, vec![0]),
    ];
    assert_eq!(r, expected);
}

#[test]
fn cost_byte_weighted_pays_the_move_and_the_hysteresis() {
    // Capacity 10, N = 10; a=0 (5 B, miss 2), b=1 (5 B, miss 1),
    // c=2 (10 B, miss 12, hit 2: saves 10), d=3 (5 B, miss 3).
    // Move .5 s/B over H = 10 ticks: .05; hysteresis .02.
    // t0 a u = .1 * 2 / 5 = .04, t1 b u = .1 * 1 / 5 = .02: free room
    //    (admitted though below the move cost).
    // t2 c u = .1 * 10 / 10 = .1 needs b and a (max .04):
    //    .1 - .05 = .05 > .04 + .02 fails: bypassed (without the move
    //    cost it would pass).
    // t3 c u .2: .15 > .06: evicts b (.02) then a (.04).
    // t4 d u = .1 * 3 / 5 = .06 - .05 vs c .2: bypassed.
    let mut s = cost_setup(10, vec![2.0, 1.0, 12.0, 3.0]);
    s.knowledge.hit_seconds[2] = 2.0;
    s.params.move_seconds_per_byte = 0.5;
    s.params.horizon_ticks = 10.0;
    s.params.hysteresis = 0.02;
    let mut policy = Admission::cost(&s);
    let r = replay(&mut policy, &[(0, 5), (1, 5), (2, 10), (2, 10), (3, 5)]);
    let expected = [
        (A, vec![]),
        (A, vec![]),
        (B, vec![]),
        (A, vec![1, 0]),
        (B, vec![]),
    ];
    assert_eq!(r, expected);
    assert!(policy.contains(2) && policy.used_bytes() == 10);
}

#[test]
fn cost_rekeys_after_a_halving_because_the_prior_does_not_halve() {
    // Capacity 2 slots, N = 4, miss a=1 b=1 c=3, prior a .5/tick (2 per
    // window). u = (count + prior) / 4 * miss.
    // t0 b (u .25), t1 b hit (.5), t2 a (1 + 2: .75), t3 b hit (.75).
    // t4 halving: a 1 -> 0 (u .5), b 3 -> 1 (u .25); c u = 1/4 * 3 = .75
    //    beats the lowest, b: evict b. Without re-keying the lowest would
    //    be a at .75 (tie with b, less recent) and c would be refused.
    let mut s = cost_setup(2, vec![1.0, 1.0, 3.0]);
    s.params.halve_every_ticks = 4;
    s.knowledge.prior_rate = vec![0.5, 0.0, 0.0];
    let r = replay(&mut Admission::cost(&s), &unit(&[1, 1, 0, 1, 2]));
    assert_eq!(r[4], (A, vec![1]));
    assert_eq!(misses(&r), 3);
}
