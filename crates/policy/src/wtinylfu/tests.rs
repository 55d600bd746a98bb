//! Tests of `wtinylfu`.

use super::super::testing::{replay, setup};
use super::*;

/// Hand-computed estimates assume exact counts: each object must own its
/// counter in at least one row among the objects of the test.
fn assert_no_full_collision(sketch: &FrequencySketch, objects: &[ObjectIndex]) {
    for &o in objects {
        let alone = (0..ROWS).any(|row| {
            let mine = sketch.slot(o, row);
            objects
                .iter()
                .all(|&x| x == o || sketch.slot(x, row) != mine)
        });
        assert!(alone, "object {o} collides in every row: choose other ids");
    }
}

#[test]
fn sketch_saturates_at_15_and_halves_after_ten_times_expected() {
    // Expected 2 objects: width 64, halving after 20 increments.
    // 16 increments of 0: its counters stop at 15; the 16th raises none,
    // so it is not counted: 15 increments. 5 of 1: the 20th halves:
    // 0 -> 15 / 2 = 7, 1 -> 5 / 2 = 2, increments 20 / 2 = 10.
    let mut s = FrequencySketch::new(2);
    assert_no_full_collision(&s, &[0, 1]);
    (0..16).for_each(|_| s.increment(0));
    assert_eq!((s.estimate(0), s.increments), (15, 15));
    (0..5).for_each(|_| s.increment(1));
    assert_eq!((s.estimate(0), s.estimate(1), s.increments), (7, 2, 10));
}

#[test]
fn main_admits_only_candidates_more_frequent_than_the_victim() {
    // Capacity 1000: window 10, main 990 = probation 198 + protected
    // 792. a=0 .. g=6 are 198 bytes: larger than the window, each goes
    // straight to main.
    //  1 a: probation [a].  2-3 b c: probation full, protected [c b].
    //  4 d: used 594 >= 500: the sketch is built, for
    //    ceil(1000 * 3 / 594) = 6 objects; counts start here: d 1.
    //    Protected [d c b].  5 e: e 1, protected [e d c b] 792, main full.
    //  6 a hit (a 1): probation -> protected, which overflows: its tail b
    //    moves down to probation [b].  7 a hit (a 2): stays on top.
    //  8 f (1): main full; victim b has 0 (seen before the sketch):
    //    1 > 0, b evicted, f in probation.
    //  9 g (1): victim f (1): 1 > 1 fails: g bypassed, nothing evicted.
    // 10 g (2): 2 > 1: f evicted, g admitted.
    let big = |o| (o, 198);
    let trace: Vec<_> = [0, 1, 2, 3, 4, 0, 0, 5, 6, 6].map(big).to_vec();
    let mut w = WTinyLfu::new(&setup(1000, 7));
    assert_no_full_collision(&FrequencySketch::new(6), &[0, 1, 2, 3, 4, 5, 6]);
    let r = replay(&mut w, &trace);
    assert!(r[..5].iter().all(|x| *x == (Outcome::Admitted, vec![])));
    assert_eq!(w.sketch.as_ref().map(|s| s.halve_after), Some(60));
    assert_eq!((r[5].0, r[6].0), (Outcome::Hit, Outcome::Hit));
    assert_eq!(r[7], (Outcome::Admitted, vec![1]));
    assert_eq!(r[8], (Outcome::Bypassed, vec![]));
    assert_eq!(r[9], (Outcome::Admitted, vec![5]));
    assert_eq!(w.used_bytes(), 990);
}

#[test]
fn byte_weighted_window_overflow_and_all_or_nothing_admission() {
    // Capacity 1000: window 10, main 990 (probation 198, protected 792).
    // z=0(1001) y=1(199) w1=2(10) w2=3(10) a..d=4..7(198) e=8(188)
    // f=9(195) w3=10(10).
    //  1 z: larger than the cache, 2 y: larger than probation: bypassed.
    //  3 w1: window [w1] 10.  4 w2: window 20 > 10: w1 offered, main has
    //    room: probation [w1] 10.
    //  5-7 a b c: probation is full for 198: protected [c b a] 594.
    //  8 d: used 10 + 10 + 594 = 614 >= 500: sketch for
    //    ceil(1000 * 5 / 614) = 9 objects; d 1. Protected [d c b a] 792.
    //  9 e (1): 802 + 188 = 990 fits: probation [e w1] 198.
    // 10 f (1): needs 195: victims w1 (0) then e (1): 1 > 1 fails, so
    //    nothing is evicted and f is bypassed.
    // 11 f (2): beats w1 (0) and e (1), 10 + 188 >= 195: both evicted,
    //    probation [f] 195.
    // 12 w3: window [w3 w2] 20: w2 (0, seen before the sketch) offered,
    //    main needs 7: victim f (2) wins: w2 evicted.
    // 13 w2 (1): window [w2 w3]: w3 (1) offered, loses to f (2): evicted.
    let trace = [
        (0, 1001),
        (1, 199),
        (2, 10),
        (3, 10),
        (4, 198),
        (5, 198),
        (6, 198),
        (7, 198),
        (8, 188),
        (9, 195),
        (9, 195),
        (10, 10),
        (3, 10),
    ];
    let mut w = WTinyLfu::new(&setup(1000, 11));
    assert_no_full_collision(&FrequencySketch::new(9), &(0..11).collect::<Vec<_>>());
    let r = replay(&mut w, &trace);
    assert_eq!(
        r[..2],
        [(Outcome::Bypassed, vec![]), (Outcome::Bypassed, vec![])]
    );
    assert!(r[2..10].iter().all(|x| x.1.is_empty()));
    assert_eq!(r[9].0, Outcome::Bypassed);
    assert_eq!(r[10], (Outcome::Admitted, vec![2, 8]));
    assert_eq!(r[11], (Outcome::Admitted, vec![3]));
    assert_eq!(r[12], (Outcome::Admitted, vec![10]));
    assert_eq!(w.used_bytes(), 10 + 195 + 792);
    assert!(w.window.contains(3) && w.main.contains(9));
}
