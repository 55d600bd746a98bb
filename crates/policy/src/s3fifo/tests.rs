//! Tests of `s3fifo`.

use super::super::testing::{misses, replay, setup};
use super::*;

#[test]
fn small_promotes_twice_hit_objects_and_main_reinserts_hit_ones() {
    // Capacity 100: small 10, main 90, ghost 90 bytes. a=0(5) b=1(5),
    // fillers 2..=11 (9 bytes each), x=12(5) y=13(5). Queues head..tail.
    //  1-2 a b: small [b a] 10.
    //  3-12 fillers: small is full and nothing was evicted yet: main
    //       [11 .. 2] 90. Used 100.
    // 13-14 a hit twice: freq(a) = 2.
    // 15 x: 105 > 100. Main is not over 90, small not empty: evict small:
    //    tail a has freq 2: to main's head (freq 0), small 5, main 95;
    //    tail b freq 0: evicted to the ghost [b], small 0. 95 + 5 fits:
    //    small [x]. Evicted [b].
    // 16 b: in the ghost: leaves it. 105 > 100, main 95 > 90: evict
    //    main: tail 2 (freq 0) evicted, main 86. 91 + 5 fits: b enters
    //    main [b a 11 .. 3] 91. Evicted [2].
    // 17 3 hit: freq 1.
    // 18 y: 101 > 100, main 91 > 90: tail 3 has freq 1: reinserted at the
    //    head with 0; tail 4 evicted, main 82. 87 + 5 fits: small [y x].
    // 19 3 hit: it survived.
    let mut trace = vec![(0, 5), (1, 5)];
    trace.extend((2..12).map(|o| (o, 9)));
    trace.extend([(0, 5), (0, 5), (12, 5), (1, 5), (3, 9), (13, 5), (3, 9)]);
    let mut s3 = S3Fifo::new(&setup(100, 14));
    let r = replay(&mut s3, &trace);
    assert!(r[..12].iter().all(|x| *x == (Outcome::Admitted, vec![])));
    assert_eq!((r[12].0, r[13].0), (Outcome::Hit, Outcome::Hit));
    assert_eq!(r[14], (Outcome::Admitted, vec![1]));
    assert_eq!(r[15], (Outcome::Admitted, vec![2]));
    assert_eq!(r[16].0, Outcome::Hit);
    assert_eq!(r[17], (Outcome::Admitted, vec![4]));
    assert_eq!(r[18].0, Outcome::Hit);
    assert_eq!(misses(&r), 15);
    assert_eq!(s3.used_bytes(), 10 + 82);
}

#[test]
fn byte_weighted_ghost_forgets_by_bytes_and_large_objects_bypass() {
    // Capacity 100: small 10, main 90, ghost 90 bytes.
    //  30(10): as large as small, not from the ghost: bypassed.
    //  31(200) larger than the cache, 32(11) larger than small: bypassed.
    //  p=0(5) q=1(5): small [q p]. Fillers 2..=11 (9 each): main, 90.
    //  12(9): 109 > 100: small's tail p evicted to the ghost [p] 5; still
    //    104 > 100: q to the ghost [q p] 10. small [12]. Evicted [p, q].
    //  13..=20 (9 each): each evicts the previous one from small to the
    //    ghost: ghost [19 .. 12 q p] 10 + 8 * 9 = 82.
    //  21(9): evicts 20: 82 + 9 > 90, the ghost forgets its tail p (77),
    //    then holds 20: [20 .. 12 q] 86.
    //  q(5): in the ghost: leaves it (81). 99 + 5 > 100: small's 21 goes
    //    to the ghost (81 + 9 = 90 fits, nothing forgotten). q enters
    //    main: 95. Evicted [21].
    //  p(5): forgotten, so a plain miss: small [p]; 95 + 5 fits.
    //  22(9): 109 > 100, main 95 > 90: main's tail 2 evicted (86).
    //    100 fits: small [22 p].
    //  12(9): in the ghost [21 .. 12]: leaves it (81). 109 > 100, main
    //    86 is within 90: small's p to the ghost (86); 104 > 100: 22 to
    //    the ghost: 95 > 90 forgets 13 (77), then 86. 12 enters main.
    let mut trace = vec![(30, 10), (31, 200), (32, 11), (0, 5), (1, 5)];
    trace.extend((2..=21).map(|o| (o, 9)));
    trace.extend([(1, 5), (0, 5), (22, 9), (12, 9)]);
    let mut s3 = S3Fifo::new(&setup(100, 33));
    let r = replay(&mut s3, &trace);
    assert!(r[..3].iter().all(|x| *x == (Outcome::Bypassed, vec![])));
    assert!(r[3..15].iter().all(|x| *x == (Outcome::Admitted, vec![])));
    assert_eq!(r[15], (Outcome::Admitted, vec![0, 1]));
    for (i, o) in (13..=21).enumerate() {
        assert_eq!(r[16 + i], (Outcome::Admitted, vec![o - 1]));
    }
    assert_eq!(r[25], (Outcome::Admitted, vec![21]));
    assert_eq!(r[26], (Outcome::Admitted, vec![]));
    assert_eq!(r[27], (Outcome::Admitted, vec![2]));
    assert_eq!(r[28], (Outcome::Admitted, vec![0, 22]));
    assert_eq!(s3.used_bytes(), 86 + 9);
    assert_eq!(s3.ghost.used_bytes, 86);
    assert!(s3.main.order.contains(1) && s3.main.order.contains(12));
}

#[test]
fn resize_shares_the_new_capacity_and_evicts_by_the_policy() {
    // Capacity 20, unit objects 0..20: 0 and 1 fill small (2 bytes); small
    // is then full with nothing evicted yet, so 2..=19 enter main (18).
    // Shrinking to 10: small 1, main 9, ghost 9. Main is over its share,
    // so its tail goes while it is (2, 3, .., 10, all at frequency 0):
    // main 9, used 11. Main is at its share and small is not empty: small's
    // tail 0 (frequency 0) leaves for the ghost. Used 10.
    let mut p = S3Fifo::new(&setup(20, 20));
    let all: Vec<(ObjectIndex, u64)> = (0..20).map(|o| (o, 1)).collect();
    replay(&mut p, &all);
    let mut evicted = Vec::new();
    assert!(p.resize(10, &mut evicted));
    let mut expect: Vec<ObjectIndex> = (2..=10).collect();
    expect.push(0);
    assert_eq!(evicted, expect);
    assert_eq!((p.used_bytes(), p.capacity_bytes()), (10, 10));
    assert!(p.ghost.order.contains(0));
}
