//! Tests of `arc`.

use super::super::testing::{misses, replay, setup, unit};
use super::*;

#[test]
fn ghost_hits_adapt_p_and_enter_t2() {
    // Capacity 3, unit sizes, a=0 .. e=4. Lists front..tail.
    //  1-3 a b c: T1 [c b a].  4 a hit: T2 [a], T1 [c b].
    //  5 d: |T1|+|B1|+1 = 3, not > 3; all lists 3 < 6: REPLACE:
    //    T1 2 > p 0: b -> B1 [b]. T1 [d c].
    //  6 b: in B1: p += max(0/1, 1) = 1. REPLACE: T1 2 > 1: c -> B1 [c].
    //    b enters T2 [b a].
    //  7 e: T1 1 + B1 1 + 1 = 3, not > 3; all 4 < 6: REPLACE: T1 1 is not
    //    > p 1 (and not a B2 hit): T2's tail a -> B2 [a]. T1 [e d].
    //  8 a: in B2: p -= max(1/1, 1) = 0. REPLACE: T1 2 > 0: d -> B1 [d c].
    //    T2 [a b].
    //  9 c: in B1: p += max(0/2, 1) = 1; B1 [d]. REPLACE: T1 [e] 1 = p but
    //    not a B2 hit: b -> B2 [b]. T2 [c a].
    // 10 b: in B2: p -= max(1/1, 1) = 0. REPLACE: T1 1 > 0: e -> B1.
    //    T2 [b c a].
    let trace = unit(&[0, 1, 2, 0, 3, 1, 4, 0, 2, 1]);
    let mut arc = Arc::new(&setup(3, 5));
    let r = replay(&mut arc, &trace);
    assert_eq!(misses(&r), 9);
    let evicted: Vec<_> = r[4..].iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(evicted, [[1], [2], [0], [3], [1], [4]].map(|e| e.to_vec()));
    assert_eq!(arc.p, 0.0);
    assert_eq!(
        arc.t2.order.iter_from_back().collect::<Vec<_>>(),
        vec![0, 2, 1]
    );
    assert_eq!(
        arc.b1.order.iter_from_back().collect::<Vec<_>>(),
        vec![3, 4]
    );
}

#[test]
fn byte_weighted_cases_of_a_cold_miss() {
    // Capacity 10; a=0(4) b=1(4) c=2(4) d=3(5) e=4(11) f=5(2).
    //  1-2 a b: T1 [b a] 8.
    //  3 c: T1 8 + B1 0 + 4 > 10 and B1 empty: a evicted, no ghost.
    //    T1 [c b] 8.
    //  4 b hit: T2 [b] 4, T1 [c] 4.
    //  5 d: 8 + 5 > 10; T1 4 + B1 0 + 5 = 9 <= 10; all 8 < 20: REPLACE:
    //    T1 4 > p 0: c -> B1 [c] 4. T1 [d] 5, used 9.
    //  6 e(11): larger than the cache: bypassed.
    //  7 f: 9 + 2 > 10; T1 5 + B1 4 + 2 = 11 > 10, B1 not empty: forget
    //    c, REPLACE: d -> B1 [d] 5. T1 [f] 2, used 6.
    //  8 d: in B1: p = 0 + max(0/5, 1) = 1. 6 + 5 > 10: REPLACE: T1 2 > 1:
    //    f -> B1 [f]. T2 [d b] 9.
    //  9 c: forgotten, a cold miss. 9 + 4 > 10; T1 0 + B1 2 + 4 <= 10;
    //    all 11 < 20: REPLACE: T1 empty, T2's tail b -> B2. T1 [c] 4.
    let trace = [
        (0, 4),
        (1, 4),
        (2, 4),
        (1, 4),
        (3, 5),
        (4, 11),
        (5, 2),
        (3, 5),
        (2, 4),
    ];
    let mut arc = Arc::new(&setup(10, 6));
    let r = replay(&mut arc, &trace);
    let expect: [(Outcome, &[ObjectIndex]); 9] = [
        (Outcome::Admitted, &[]),
        (Outcome::Admitted, &[]),
        (Outcome::Admitted, &[0]),
        (Outcome::Hit, &[]),
        (Outcome::Admitted, &[2]),
        (Outcome::Bypassed, &[]),
        (Outcome::Admitted, &[3]),
        (Outcome::Admitted, &[5]),
        (Outcome::Admitted, &[1]),
    ];
    assert_eq!(r, expect.map(|(o, e)| (o, e.to_vec())));
    assert_eq!(arc.p, 1.0);
    assert_eq!(arc.used_bytes(), 9);
    assert!(arc.b2.order.contains(1) && !arc.b1.order.contains(0));
}
