//! Tests of `sieve`.

use super::super::testing::{misses, remove, replay, setup, unit};
use super::*;

#[test]
fn the_hand_keeps_its_place_and_survivors_stay_put() {
    // Capacity 3, a=0 .. f=5. Queue head..tail with visited bits; ^ is
    // the hand (none: the tail).
    //  1-3 a b c: c0 b0 a0
    //  4 a hit: c0 b0 a1
    //  5 d: from the tail: a1 -> a0, on to b0: evicted, hand -> c.
    //       d0 ^c0 a0
    //  6 b: the hand is on c0: evicted (FIFO-reinsertion would take the
    //       tail a), hand -> d. b0 ^d0 a0
    //  7 a hit: a1.
    //  8 e: d0 evicted, hand -> b. e0 ^b0 a1
    //  9 a hit (a1).  10 f: b0 evicted, hand -> e. f0 ^e0 a1
    // 11 a hit: a was never evicted.
    let trace = unit(&[0, 1, 2, 0, 3, 1, 0, 4, 0, 5, 0]);
    let r = replay(&mut Sieve::new(&setup(3, 6)), &trace);
    assert_eq!(misses(&r), 7);
    let evicted: Vec<_> = r.iter().flat_map(|(_, e)| e.clone()).collect();
    assert_eq!(evicted, vec![1, 2, 3, 1]);
    assert_eq!(r[4].1, vec![1]);
    assert_eq!(r[9].1, vec![1]);
    assert!([3, 6, 8, 10].iter().all(|&i| r[i].0 == Outcome::Hit));
}

#[test]
fn byte_weighted_wraps_around_and_skips_the_oversized() {
    // Capacity 10; a=0(4) b=1(3) c=2(3) d=3(6) x=4(11) e=5(1) f=6(2).
    //  1-3 a b c: c0 b0 a0, used 10.  4 b hit, 5 c hit: c1 b1 a0.
    //  6 d(6): from the tail: a0 evicted (6 used), hand -> b; 6+6 > 10:
    //    b1 -> b0, c1 -> c0, c is the head: wrap to the tail b0: evicted
    //    (3 used), hand -> c. d0 ^c0, used 9.
    //  7 x(11): bypassed, nothing evicted.
    //  8 c hit: c1.  9 e(1): 9+1 fits. e0 d0 ^c1, used 10.
    // 10 f(2): c1 -> c0, on to d0: evicted, hand -> e. f0 ^e0 c0, used 6.
    let trace = [
        (0, 4),
        (1, 3),
        (2, 3),
        (1, 3),
        (2, 3),
        (3, 6),
        (4, 11),
        (2, 3),
        (5, 1),
        (6, 2),
    ];
    let mut sieve = Sieve::new(&setup(10, 7));
    let r = replay(&mut sieve, &trace);
    assert_eq!(r[5], (Outcome::Admitted, vec![0, 1]));
    assert_eq!(r[6], (Outcome::Bypassed, vec![]));
    assert_eq!(r[7], (Outcome::Hit, vec![]));
    assert_eq!(r[8], (Outcome::Admitted, vec![]));
    assert_eq!(r[9], (Outcome::Admitted, vec![3]));
    assert_eq!(sieve.used_bytes(), 6);
    assert!(sieve.contains(2) && sieve.contains(5));
}

#[test]
fn removing_the_object_under_the_hand_moves_the_hand_towards_the_head() {
    // Capacity 3, a=0 .. i=8. Queue head..tail with visited bits; ^ is
    // the hand (none: the tail).
    //  1-3 a b c: c0 b0 a0.  4 a hit: c0 b0 a1.
    //  5 d: a1 -> a0, b0 evicted, hand -> c. d0 ^c0 a0
    //  remove c (under the hand): the hand moves to d, where it would
    //       rest had c been evicted. ^d0 a0, used 2.
    //  6 e: fits. e0 ^d0 a0.
    //  7 f: the hand is on d0: evicted (not the tail a), hand -> e.
    //       f0 ^e0 a0
    //  remove f (the head, not under the hand): ^e0 a0.
    //  remove e (under the hand, now the head): no neighbour towards
    //       the head, so the hand goes back to the tail. a0
    //  8 g, 9 h: fit. h0 g0 a0.  10 a hit: a1.
    // 11 i: from the tail: a1 -> a0, g0 evicted, hand -> h.
    let mut sieve = Sieve::new(&setup(3, 9));
    let r = replay(&mut sieve, &unit(&[0, 1, 2, 0, 3]));
    assert_eq!(r[4].1, vec![1]);
    assert_eq!(sieve.hand, Some(2));
    assert_eq!(remove(&mut sieve, 2), 1);
    assert_eq!(sieve.hand, Some(3));
    let r = replay(&mut sieve, &unit(&[4, 5]));
    assert_eq!(
        r,
        [(Outcome::Admitted, vec![]), (Outcome::Admitted, vec![3])]
    );
    assert_eq!(sieve.hand, Some(4));
    assert_eq!(remove(&mut sieve, 5), 1);
    assert_eq!(sieve.hand, Some(4));
    assert_eq!(remove(&mut sieve, 4), 1);
    assert_eq!((sieve.hand, sieve.used_bytes()), (None, 1));
    let r = replay(&mut sieve, &unit(&[6, 7, 0, 8]));
    let evicted: Vec<_> = r.iter().flat_map(|(_, e)| e.clone()).collect();
    assert_eq!(evicted, vec![6]);
    assert_eq!(r[2].0, Outcome::Hit);
    assert_eq!(sieve.hand, Some(7));
    assert!(sieve.contains(0) && sieve.contains(7) && sieve.contains(8));
}

#[test]
fn resize_evicts_with_the_hand() {
    // Capacity 3: a b c, then a hit on a: queue head..tail c0 b0 a1.
    // Shrinking to 2: the hand starts at the tail, clears a, evicts b and
    // rests on c; shrinking to 1 then evicts c there: a is kept.
    let mut p = Sieve::new(&setup(3, 4));
    replay(&mut p, &unit(&[0, 1, 2, 0]));
    let mut evicted = Vec::new();
    assert!(p.resize(2, &mut evicted));
    assert_eq!(evicted, vec![1]);
    assert!(p.resize(1, &mut evicted));
    assert_eq!(evicted, vec![1, 2]);
    assert!(p.contains(0) && p.used_bytes() == 1);
}
