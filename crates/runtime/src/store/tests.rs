//! Store tests. The loader here fills each object with a pattern derived
//! from its index (so every lease's bytes can be checked independently),
//! and can fail or hold a load on demand; the checkpoint loader over real
//! files is tested with the checkpoint and storage modules.

use super::*;
use residency_core::rng::Rng;
use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::thread;

struct PatternLoader {
    size_bytes: Vec<u64>,
    loads: AtomicUsize,
    failing: Mutex<HashSet<ObjectIndex>>,
    /// Objects whose next load panics (once each).
    panicking: Mutex<HashSet<ObjectIndex>>,
    /// While true, loads wait (to pile up joiners).
    hold: Mutex<bool>,
    released: Condvar,
}

fn byte(o: ObjectIndex, i: usize) -> u8 {
    (o as usize * 31 + i * 7) as u8
}

impl PatternLoader {
    fn new(size_bytes: Vec<u64>) -> Arc<PatternLoader> {
        Arc::new(PatternLoader {
            size_bytes,
            loads: AtomicUsize::new(0),
            failing: Mutex::new(HashSet::new()),
            panicking: Mutex::new(HashSet::new()),
            hold: Mutex::new(false),
            released: Condvar::new(),
        })
    }

    fn release(&self) {
        *self.hold.lock().unwrap() = false;
        self.released.notify_all();
    }
}

impl Loader for PatternLoader {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.size_bytes[o as usize]
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let mut hold = self.hold.lock().unwrap();
        while *hold {
            hold = self.released.wait(hold).unwrap();
        }
        drop(hold);
        if self.panicking.lock().unwrap().remove(&o) {
            panic!("the test loader panics reading object {o}");
        }
        if self.failing.lock().unwrap().contains(&o) {
            return Err(format!("short read of object {o}"));
        }
        let bytes: Vec<u8> = (0..self.size_bytes(o) as usize)
            .map(|i| byte(o, i))
            .collect();
        Ok(Box::new(bytes))
    }
}

fn pattern_ok(lease: &Lease) -> bool {
    lease
        .host()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &b)| b == byte(lease.object(), i))
}

/// One RAM place of `capacity` bytes, `objects` objects of `size` bytes.
fn store(
    loader: &Arc<PatternLoader>,
    capacity: u64,
    policy: PolicyKind,
    pinned: &[ObjectIndex],
    wait: Duration,
) -> Store {
    let objects = loader.size_bytes.len();
    let homes = Homes {
        place: vec![0; objects],
        pinned: (0..objects as ObjectIndex)
            .map(|o| pinned.contains(&o))
            .collect(),
    };
    let config = StoreConfig {
        places: vec![PlaceConfig {
            name: "ram:0".into(),
            capacity_bytes: capacity,
            tier: "ram".into(),
            policy,
            pin_share_bytes: None,
        }],
        tier_capacity_bytes: vec![],
        staging_bytes: 25,
        wait,
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    Store::new(loader.clone(), homes, &config).unwrap()
}

fn used(store: &Store, budget: &str) -> u64 {
    store
        .telemetry()
        .budgets
        .iter()
        .find(|b| b.place == budget)
        .unwrap()
        .used_bytes
}

#[test]
fn lifecycle_hits_and_pins() {
    // 100 bytes, objects of 10; 0 and 1 pinned, so LRU gets 80 bytes.
    let loader = PatternLoader::new(vec![10; 12]);
    let s = store(&loader, 100, PolicyKind::Lru, &[0, 1], Duration::ZERO);
    assert_eq!(s.state(0), ObjectState::Absent);
    s.prefetch(0).unwrap();
    assert_eq!(s.state(0), ObjectState::Evictable);
    let a = s.acquire(0).unwrap();
    assert!(pattern_ok(&a) && a.is_resident());
    assert_eq!(s.state(0), ObjectState::InUse);
    drop(a);
    // 10 unpinned objects through 8 LRU slots: 2..=9 fill it, 10 evicts 2,
    // 11 evicts 3; pins are never victims.
    for o in 2..12 {
        drop(s.acquire(o).unwrap());
    }
    assert_eq!(s.state(2), ObjectState::Absent);
    assert_eq!(s.state(3), ObjectState::Absent);
    assert_eq!(s.state(0), ObjectState::Evictable);
    let t = s.telemetry();
    assert_eq!(t.physical_misses, 11);
    assert_eq!(t.tier_hits, vec![("ram:0".to_string(), 1)]);
    assert_eq!(t.evictions, 2);
    // Pin 1 was never requested, so it holds no bytes yet: 0 + 8 cached.
    assert_eq!(used(&s, "ram:0"), 90);
    assert_eq!(used(&s, "ram"), 90);
}

#[test]
fn try_acquire_leases_only_what_is_resident() {
    // Objects of 10 in 20 bytes under LRU.
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 20, PolicyKind::Lru, &[], Duration::ZERO);
    // Absent: nothing leased, nothing loaded, nothing counted.
    assert!(s.try_acquire(0).unwrap().is_none());
    assert_eq!(loader.loads.load(Ordering::SeqCst), 0);
    assert_eq!(s.state(0), ObjectState::Absent);
    s.prefetch(0).unwrap();
    s.prefetch(1).unwrap();
    // Resident: leased as a hit, and the hit refreshes 0 for LRU, so
    // loading 2 evicts 1, not 0.
    let lease = s.try_acquire(0).unwrap().expect("0 is resident");
    assert!(pattern_ok(&lease));
    assert_eq!(s.state(0), ObjectState::InUse);
    drop(lease);
    assert_eq!(s.telemetry().tier_hits, vec![("ram:0".to_string(), 1)]);
    drop(s.acquire(2).unwrap());
    assert_eq!(s.state(1), ObjectState::Absent);
    assert_eq!(s.state(0), ObjectState::Evictable);
    assert!(matches!(
        s.try_acquire(9),
        Err(StoreError::NoSuchObject { object: 9, .. })
    ));
}

#[test]
fn a_copy_s_lease_is_not_a_request() {
    // Objects of 10 in 20 bytes under LRU, 0 then 1 loaded (0 the least
    // recent). Absent: no lease, no load.
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 20, PolicyKind::Lru, &[], Duration::ZERO);
    assert!(s.lease_for_copy(0).unwrap().is_none());
    assert_eq!(loader.loads.load(Ordering::SeqCst), 0);
    s.prefetch(0).unwrap();
    s.prefetch(1).unwrap();
    // Resident: its bytes, no hit counted, and LRU not told, so loading
    // 2 (once the copy's lease is gone) still evicts 0, where a hit
    // (the test above) would have kept it.
    let lease = s.lease_for_copy(0).unwrap().expect("0 is resident");
    assert!(pattern_ok(&lease));
    assert_eq!(s.state(0), ObjectState::InUse);
    drop(lease);
    assert_eq!(s.telemetry().tier_hits, vec![("ram:0".to_string(), 0)]);
    drop(s.acquire(2).unwrap());
    assert_eq!(s.state(0), ObjectState::Absent);
    assert_eq!(s.state(1), ObjectState::Evictable);
}

/// One RAM place of 40 bytes with a pinned share of 20 (LRU gets 20),
/// objects of 10, nothing pinned yet.
fn store_with_pin_share(loader: &Arc<PatternLoader>) -> Store {
    let objects = loader.size_bytes.len();
    let config = StoreConfig {
        places: vec![PlaceConfig {
            name: "ram:0".into(),
            capacity_bytes: 40,
            tier: "ram".into(),
            policy: PolicyKind::Lru,
            pin_share_bytes: Some(20),
        }],
        tier_capacity_bytes: vec![],
        staging_bytes: 25,
        wait: Duration::from_secs(5),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    let homes = Homes {
        place: vec![0; objects],
        pinned: vec![false; objects],
    };
    Store::new(loader.clone(), homes, &config).unwrap()
}

#[test]
fn repins_promote_from_the_cache_or_disk_and_demote_into_room() {
    let loader = PatternLoader::new(vec![10; 6]);
    let s = store_with_pin_share(&loader);
    drop(s.acquire(0).unwrap());
    // 0 is cached: promoting it takes it over without a read; 1 is read.
    assert_eq!(s.repin(&[0, 1], &[]).unwrap(), 10);
    assert!(s.is_pinned(0) && s.is_pinned(1));
    assert_eq!(loader.loads.load(Ordering::SeqCst), 2);
    let t = s.telemetry();
    assert_eq!((t.migrations, t.migration_bytes), (1, 10));
    // The cache (20 bytes) is empty again: 2 and 3 fill it.
    drop(s.acquire(2).unwrap());
    drop(s.acquire(3).unwrap());
    assert_eq!(used(&s, "ram:0"), 40);
    // Demoting 0 with the cache full drops it. An explicit eviction of 3
    // makes room (and the policy forgets 3), so demoting 1 keeps it cached.
    s.repin(&[], &[0]).unwrap();
    assert_eq!(s.state(0), ObjectState::Absent);
    assert!(s.evict(3));
    s.repin(&[], &[1]).unwrap();
    assert!(!s.is_pinned(1));
    assert_eq!(s.state(1), ObjectState::Evictable);
    // 1 is an ordinary cached object now: a hit, then LRU's to evict (2 is
    // older, so 4 evicts 2, and 5 evicts 1).
    drop(s.try_acquire(1).unwrap().expect("cached"));
    drop(s.acquire(4).unwrap());
    assert_eq!(s.state(2), ObjectState::Absent);
    assert_eq!(s.state(1), ObjectState::Evictable);
    drop(s.acquire(5).unwrap());
    assert_eq!(s.state(1), ObjectState::Absent);
    // The place never held more than its 40 bytes.
    assert!(used(&s, "ram:0") <= 40);
}

#[test]
fn a_hit_on_a_leased_victim_keeps_it_for_the_policy() {
    // 20 bytes, objects of 10, LRU. 0 is leased when 2's miss makes LRU
    // evict it, so it is marked to go at its last release and 2 waits for
    // its bytes. A hit on 0 then re-admits it (LRU evicts 1, which makes
    // room for 2): the store must keep 0 when the leases go, or the policy
    // would count bytes the store dropped.
    let loader = PatternLoader::new(vec![10; 4]);
    let s = store(&loader, 20, PolicyKind::Lru, &[], Duration::from_secs(5));
    let first = s.acquire(0).unwrap();
    drop(s.acquire(1).unwrap());
    let waiting = {
        let s = s.clone();
        thread::spawn(move || drop(s.acquire(2).unwrap()))
    };
    while s.state(0) != ObjectState::Demoting {
        thread::yield_now();
    }
    let second = s.acquire(0).unwrap();
    waiting.join().unwrap();
    assert_eq!(s.state(1), ObjectState::Absent);
    drop((first, second));
    assert_eq!(s.state(0), ObjectState::Evictable);
    assert_eq!(used(&s, "ram:0"), 20);
    // LRU order is 2, then 0: a miss on 3 evicts 2 and keeps 0.
    drop(s.acquire(3).unwrap());
    assert_eq!(s.state(2), ObjectState::Absent);
    assert_eq!(s.state(0), ObjectState::Evictable);
}

#[test]
fn concurrent_misses_join_one_load() {
    let loader = PatternLoader::new(vec![64; 4]);
    let s = store(&loader, 1000, PolicyKind::Lru, &[], Duration::from_secs(5));
    *loader.hold.lock().unwrap() = true;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || pattern_ok(&s.acquire(2).unwrap()))
        })
        .collect();
    while s.telemetry().single_flight_joins < 7 {
        thread::sleep(Duration::from_millis(1));
    }
    loader.release();
    assert!(threads.into_iter().all(|t| t.join().unwrap()));
    assert_eq!(loader.loads.load(Ordering::SeqCst), 1);
    assert_eq!(s.telemetry().single_flight_joins, 7);
}

#[test]
fn a_leased_victim_stays_until_released_and_the_load_waits() {
    // Two slots of 10 bytes. 0 and 1 resident, 0 leased; loading 2 makes
    // LRU evict 0, which must wait for its lease.
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 20, PolicyKind::Lru, &[], Duration::from_secs(5));
    let lease0 = s.acquire(0).unwrap();
    drop(s.acquire(1).unwrap());
    let s2 = s.clone();
    let loader_of_2 = thread::spawn(move || pattern_ok(&s2.acquire(2).unwrap()));
    while s.state(0) != ObjectState::Demoting {
        thread::sleep(Duration::from_millis(1));
    }
    // 0 is still readable and the budget is still full, not over.
    assert!(pattern_ok(&lease0));
    assert_eq!(used(&s, "ram:0"), 20);
    drop(lease0);
    assert!(loader_of_2.join().unwrap());
    assert_eq!(s.state(0), ObjectState::Absent);
    assert_eq!(used(&s, "ram:0"), 20);
    assert_eq!(s.telemetry().lease_waits, 1);
}

/// The replay's stall at a one-expert budget, made deterministic with
/// unequal sizes: a load waits for room, a later miss makes the policy evict
/// it before it got any, and the later miss's bytes fit at once. The waiting
/// load must not keep waiting for those bytes: the policy keeps their
/// object, and nothing but another access would ever evict it.
#[test]
fn a_load_the_policy_evicts_while_it_waits_for_room_runs_from_staging() {
    // 10 bytes under LRU; 0 and 2 are 5 bytes, 1 is all 10. Leasing 0,
    // then missing 1 evicts 0 (leased, so only marked: 1 waits for 0's 5
    // bytes); missing 2 evicts 1 (still loading) and takes the other 5.
    let loader = PatternLoader::new(vec![5, 10, 5]);
    let s = store(&loader, 10, PolicyKind::Lru, &[], Duration::from_secs(5));
    let lease0 = s.acquire(0).unwrap();
    let s1 = s.clone();
    let loader_of_1 = thread::spawn(move || s1.acquire(1));
    while s.state(0) != ObjectState::Demoting {
        thread::sleep(Duration::from_millis(1));
    }
    let lease2 = s.acquire(2).unwrap();
    assert!(lease2.is_resident());
    drop((lease0, lease2));
    // No lease is held now, and 2 stays (the policy keeps it), so the place
    // never has the 10 free bytes 1 waits for: without the fix, 1 fails
    // when its 5 s wait runs out.
    let lease1 = loader_of_1.join().unwrap().unwrap();
    assert!(pattern_ok(&lease1) && !lease1.is_resident());
    // 0 went at its release; 2's 5 bytes in the place, 1's 10 in staging.
    assert_eq!(s.state(0), ObjectState::Absent);
    assert_eq!(s.state(2), ObjectState::Evictable);
    assert_eq!((used(&s, "ram:0"), used(&s, "staging")), (5, 10));
    // Three misses, all admitted by LRU; 1 alone ran from staging because
    // its place was full of a leased object: one bypass, no rejection.
    let t = s.telemetry();
    assert_eq!(
        (t.physical_misses, t.admissions, t.bypasses, t.rejections),
        (3, 3, 1, 0)
    );
    drop(lease1);
    assert_eq!(s.state(1), ObjectState::Absent);
    assert_eq!(used(&s, "staging"), 0);
}

#[test]
fn a_load_that_cannot_get_room_fails_naming_the_budget() {
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 20, PolicyKind::Lru, &[], Duration::from_millis(30));
    let _a = s.acquire(0).unwrap();
    let _b = s.acquire(1).unwrap();
    let e = s.acquire(2).err().unwrap();
    assert!(e.to_string().contains("budget `ram:0` stayed full"), "{e}");
    assert_eq!(s.state(2), ObjectState::Absent);
    assert_eq!(used(&s, "ram:0"), 20);
}

#[test]
fn declined_misses_run_from_staging_and_leave_nothing_behind() {
    // `plan` with no residents declines everything: each miss is a
    // transient slot in the 25-byte staging budget.
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(
        &loader,
        20,
        PolicyKind::Plan,
        &[],
        Duration::from_millis(30),
    );
    let a = s.acquire(1).unwrap();
    assert!(pattern_ok(&a) && !a.is_resident());
    let b = s.acquire(2).unwrap();
    assert_eq!(used(&s, "staging"), 20);
    // A third would need 30 > 25 bytes of staging.
    assert!(s
        .acquire(0)
        .err()
        .unwrap()
        .to_string()
        .contains("`staging`"));
    drop((a, b));
    assert_eq!(used(&s, "staging"), 0);
    assert_eq!(s.state(1), ObjectState::Absent);
    // Three declines (the third failed in staging), none a bypass: the
    // policy never admitted them.
    assert_eq!((s.telemetry().rejections, s.telemetry().bypasses), (3, 0));
}

#[test]
fn a_failed_load_publishes_nothing_and_can_be_retried() {
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 30, PolicyKind::Lru, &[], Duration::ZERO);
    loader.failing.lock().unwrap().insert(1);
    let e = s.acquire(1).err().unwrap();
    assert!(e.to_string().contains("short read of object 1"), "{e}");
    assert_eq!(s.state(1), ObjectState::Absent);
    assert_eq!(used(&s, "ram:0"), 0);
    loader.failing.lock().unwrap().clear();
    assert!(pattern_ok(&s.acquire(1).unwrap()));
}

#[test]
fn a_loader_that_panics_fails_its_joiners_and_the_object_loads_again() {
    // Before the single-flight guard, the slot stayed `Loading` and every
    // joiner waited forever.
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 30, PolicyKind::Lru, &[], Duration::ZERO);
    loader.panicking.lock().unwrap().insert(1);
    *loader.hold.lock().unwrap() = true;
    let requests: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            thread::spawn(move || s.acquire(1).map(|_| ()))
        })
        .collect();
    while s.telemetry().single_flight_joins < 3 {
        thread::sleep(Duration::from_millis(1));
    }
    loader.release();
    // Whichever request came first led the load: the panic reaches its
    // caller, and the three that joined get an error.
    let (panicked, returned): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .map(|r| r.join())
        .partition(|r| r.is_err());
    assert_eq!(panicked.len(), 1);
    for r in returned {
        let e = r.unwrap().unwrap_err();
        assert!(
            e.to_string()
                .contains("loading object 1 failed: the loader panicked"),
            "{e}"
        );
    }
    assert_eq!(s.state(1), ObjectState::Absent);
    // The reservation went back while the panic unwound.
    assert_eq!(used(&s, "ram:0"), 0);
    assert!(pattern_ok(&s.acquire(1).unwrap()));
    assert_eq!(loader.loads.load(Ordering::SeqCst), 2);
}

#[test]
fn stress_never_exceeds_budgets_and_never_serves_wrong_bytes() {
    // 200 objects of 1..=40 bytes, a 1500-byte place with 10 pinned
    // objects, 8 threads acquiring (holding up to 2 leases), evicting,
    // prefetching and re-pinning (one pin for an object no larger, so the
    // pinned bytes never grow) at random; some loads fail.
    let sizes: Vec<u64> = (0..200).map(|o| 1 + (o * 13 % 40)).collect();
    let loader = PatternLoader::new(sizes.clone());
    let pins: Vec<ObjectIndex> = (0..10).collect();
    for policy in [PolicyKind::Lru, PolicyKind::Frequency, PolicyKind::S3Fifo] {
        let s = store(&loader, 1500, policy, &pins, Duration::from_millis(20));
        let pinned = Arc::new(Mutex::new(pins.clone()));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (s, loader, pinned, sizes) =
                    (s.clone(), loader.clone(), pinned.clone(), sizes.clone());
                thread::spawn(move || {
                    let mut rng = Rng::seeded(t + 1);
                    let mut held: Vec<Lease> = Vec::new();
                    for _ in 0..2000 {
                        let x = rng.next_u64();
                        let o = (x % 200) as ObjectIndex;
                        match x % 10 {
                            0 if x.is_multiple_of(3) => {
                                let mut pinned = pinned.lock().unwrap();
                                let swap = pinned
                                    .iter()
                                    .position(|&p| sizes[p as usize] >= sizes[o as usize]);
                                if let Some(i) = swap.filter(|_| !pinned.contains(&o)) {
                                    let demoted = std::mem::replace(&mut pinned[i], o);
                                    let _ = s.repin(&[o], &[demoted]);
                                }
                            }
                            0 => {
                                s.evict(o);
                            }
                            1 => {
                                let _ = s.prefetch(o);
                            }
                            2 => {
                                held.clear();
                            }
                            _ => {
                                if x % 50 == 3 {
                                    loader.failing.lock().unwrap().insert(o);
                                } else if x % 50 == 4 {
                                    loader.failing.lock().unwrap().remove(&o);
                                }
                                if let Ok(lease) = s.acquire(o) {
                                    assert!(pattern_ok(&lease), "wrong bytes for {o}");
                                    held.push(lease);
                                    if held.len() > 2 {
                                        held.remove(0);
                                    }
                                }
                            }
                        }
                        for b in s.telemetry().budgets {
                            assert!(b.used_bytes <= b.budget_bytes, "{b:?}");
                        }
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        loader.failing.lock().unwrap().clear();
        // Re-pins happened, and loaded what was not cached.
        assert!(s.telemetry().migrations > 0);
        // Every lease is gone: whatever is published fits the place.
        assert_eq!(used(&s, "staging"), 0);
        assert!(used(&s, "ram:0") <= 1500);
    }
}

#[test]
fn telemetry_speaks_json_and_prometheus() {
    let loader = PatternLoader::new(vec![10; 3]);
    let s = store(&loader, 30, PolicyKind::Lru, &[], Duration::ZERO);
    for o in [0, 1, 0, 0] {
        drop(s.acquire(o).unwrap());
    }
    let t = s.telemetry();
    // Requests 0 1 0 0 at clock 0..3: distances 2 (bucket [2,4)) and 1.
    assert_eq!(t.reuse_distance, vec![(1, 1), (2, 1)]);
    assert_eq!(t.to_json()["physical_misses"], 2);
    let text = t.to_prometheus();
    for line in [
        "residency_tier_hits{place=\"ram:0\"} 2",
        "residency_physical_misses 2",
        "residency_reuse_distance_bucket{le=\"3\"} 2",
        "residency_used_bytes{place=\"ram:0\"} 20",
        "residency_budget_bytes{place=\"staging\"} 25",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
}

/// Two places of 40 bytes (objects 0..8 and 8..16, 10 bytes each) in one
/// RAM tier of 80, under `policy`: the per-layer budgets of `replay`.
fn layered_store(loader: &Arc<PatternLoader>, policy: PolicyKind) -> Store {
    let place = |name: &str| PlaceConfig {
        name: name.into(),
        capacity_bytes: 40,
        tier: "ram".into(),
        policy,
        pin_share_bytes: None,
    };
    let config = StoreConfig {
        places: vec![place("layer:0"), place("layer:1")],
        tier_capacity_bytes: vec![("ram".into(), 80)],
        staging_bytes: 40,
        wait: Duration::from_secs(5),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    let homes = Homes {
        place: (0..16).map(|o| o / 8).collect(),
        pinned: vec![false; 16],
    };
    Store::new(loader.clone(), homes, &config).unwrap()
}

#[test]
fn shrinking_a_place_evicts_its_coldest_and_bad_capacities_change_nothing() {
    // Layer 0 loads 0 1 2 3 (LRU: 0 coldest), then 0 again: order 0 3 2 1.
    // Shrinking it to 20 evicts 1 then 2; layer 1 grows to 60.
    let loader = PatternLoader::new(vec![10; 16]);
    let s = layered_store(&loader, PolicyKind::Lru);
    for o in [0, 1, 2, 3, 0] {
        drop(s.acquire(o).unwrap());
    }
    assert_eq!(s.set_capacities(&[40, 50]).unwrap_err().to_string(),
        "the places of tier ram would hold 90 bytes, more than its 80; give capacities that sum to at most the tier's");
    assert!(matches!(
        s.set_capacities(&[40]),
        Err(StoreError::Capacities {
            given: 1,
            places: 2
        })
    ));
    assert_eq!(used(&s, "layer:0"), 40);
    s.set_capacities(&[20, 60]).unwrap();
    let states: Vec<ObjectState> = (0..4).map(|o| s.state(o)).collect();
    use ObjectState::{Absent, Evictable};
    assert_eq!(states, vec![Evictable, Absent, Absent, Evictable]);
    assert_eq!(used(&s, "layer:0"), 20);
    // Layer 1 now holds 6 objects.
    for o in 8..14 {
        drop(s.acquire(o).unwrap());
    }
    assert_eq!(used(&s, "layer:1"), 60);
    assert!((8..14).all(|o| s.state(o) == Evictable));
    // A policy that cannot resize is refused before anything moves.
    let s = layered_store(&loader, PolicyKind::Arc);
    let e = s.set_capacities(&[30, 50]).unwrap_err().to_string();
    assert!(e.contains("`arc` cannot change its capacity"), "{e}");
}

/// Serves a drift through `layered_store` with the online allocator
/// moving its places' capacities: traffic on layer 0 (3 experts a token
/// cycling over 6, which LRU needs 6 slots for) and one expert of layer 1,
/// moving to layer 1 after 60 tokens; a pass every 4 tokens, applied while
/// the token's last lease is still held, so shrinks meet leased victims.
/// Checks after every acquire and every move that the tier holds at most
/// 80 bytes and the places' capacities sum to at most 80, and at the end,
/// with no lease held, that every place holds at most its capacity.
/// Returns the capacities after each move and the store's misses.
fn drift_through_layered_store(policy: PolicyKind) -> (Vec<Vec<u64>>, u64) {
    use residency_policy::online::{LayerShape, OnlineAllocator, OnlineParams};
    let loader = PatternLoader::new(vec![10; 16]);
    let s = layered_store(&loader, policy);
    let shape = LayerShape {
        slot_bytes: 10,
        experts: 8,
        miss_seconds: 1.0,
        leased_at_once: 0,
    };
    let params = OnlineParams {
        window_accesses: 64,
        every_tokens: 4,
        ..OnlineParams::default()
    };
    let mut allocator = OnlineAllocator::new(params, vec![shape.clone(), shape], 80).unwrap();
    let capacities = |s: &Store| -> (u64, u64, Vec<(u64, u64)>) {
        let t = s.telemetry();
        let of = |name: &str| t.budgets.iter().find(|b| b.place == name).unwrap();
        let places: Vec<(u64, u64)> = ["layer:0", "layer:1"]
            .iter()
            .map(|n| (of(n).used_bytes, of(n).budget_bytes))
            .collect();
        (
            of("ram").used_bytes,
            places.iter().map(|p| p.1).sum(),
            places,
        )
    };
    let mut moves = Vec::new();
    for t in 0..120u64 {
        let hot = usize::from(t >= 60);
        let mut route: Vec<(usize, ObjectIndex)> =
            (0..3).map(|i| (hot, ((3 * t + i) % 6) as u32)).collect();
        route.push((1 - hot, 0));
        // Each lease is released before the next acquire (a holder of
        // leases must not wait for a load: `residency_lab::replay`'s `layer`).
        let mut last = None;
        for (l, e) in route {
            drop(last.take());
            last = Some(s.acquire((l * 8) as u32 + e).unwrap());
            allocator.record(l, e);
            let (tier_used, capacity, _) = capacities(&s);
            assert!(
                tier_used <= 80 && capacity <= 80,
                "{policy}: {tier_used} {capacity}"
            );
        }
        if allocator.due(t + 1) && allocator.pass(t + 1).moved {
            s.set_capacities(&allocator.capacities_bytes()).unwrap();
            moves.push(allocator.capacities_bytes());
        }
        let (tier_used, capacity, _) = capacities(&s);
        assert!(
            tier_used <= 80 && capacity <= 80,
            "{policy}: {tier_used} {capacity}"
        );
        drop(last);
    }
    let (_, _, places) = capacities(&s);
    assert!(
        places.iter().all(|&(used, capacity)| used <= capacity),
        "{policy}: {places:?}"
    );
    assert_eq!(
        allocator.slots()[1],
        6,
        "{policy}: layer 1 took the slots it needs"
    );
    (moves, s.telemetry().physical_misses)
}

#[test]
fn budgets_are_never_exceeded_while_the_online_allocator_moves_them() {
    for policy in [PolicyKind::Lru, PolicyKind::Sieve, PolicyKind::S3Fifo] {
        let (moves, _) = drift_through_layered_store(policy);
        assert!(moves.len() >= 2, "{policy}: the drift moved budgets");
    }
}

#[test]
fn the_same_traffic_moves_the_same_budgets_and_misses_the_same() {
    // One thread, the same routes: the allocations after every move and
    // the misses must repeat exactly.
    for policy in [PolicyKind::Lru, PolicyKind::S3Fifo] {
        assert_eq!(
            drift_through_layered_store(policy),
            drift_through_layered_store(policy)
        );
    }
}
