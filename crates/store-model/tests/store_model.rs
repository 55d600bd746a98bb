//! Model-checked tests of the object store: loom runs each scenario under
//! every interleaving of the store's locks, condition variables and
//! atomics, where the store's stress test samples some. Each asserts what must hold whichever thread
//! wins: bytes right, budgets never over, state and budgets agreeing,
//! nobody waiting forever (loom fails a run that deadlocks).

use residency_policy::{ObjectIndex, PolicyKind, PolicyParams};
use residency_store_model::store::{
    Homes, Lease, Loader, ObjectBytes, ObjectState, PlaceConfig, Store, StoreConfig,
};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

const SIZE_BYTES: u64 = 10;

/// Fills object `o` with a pattern of its own, so that a lease on the
/// wrong bytes shows. Plain std state: loom never preempts inside it.
struct PatternLoader {
    objects: usize,
    loads: AtomicUsize,
    /// Objects whose next load panics.
    panicking: Mutex<HashSet<ObjectIndex>>,
}

const PANIC_MESSAGE: &str = "the model's loader panics";

fn byte(o: ObjectIndex, i: usize) -> u8 {
    (o as usize * 31 + i * 7) as u8
}

impl Loader for PatternLoader {
    fn size_bytes(&self, _: ObjectIndex) -> u64 {
        SIZE_BYTES
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.panicking.lock().unwrap().remove(&o) {
            panic!("{PANIC_MESSAGE}");
        }
        Ok(Box::new(
            (0..SIZE_BYTES as usize)
                .map(|i| byte(o, i))
                .collect::<Vec<u8>>(),
        ))
    }
}

fn bytes_right(lease: &Lease) -> bool {
    let host = lease.host().unwrap();
    host.len() == SIZE_BYTES as usize
        && host
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(lease.object(), i))
}

/// One RAM place holding `capacity_objects` objects under LRU; the pin
/// share (for `repin`) is one object when `repinnable`.
fn store(objects: usize, capacity_objects: u64, repinnable: bool) -> (Store, Arc<PatternLoader>) {
    let loader = Arc::new(PatternLoader {
        objects,
        loads: AtomicUsize::new(0),
        panicking: Mutex::new(HashSet::new()),
    });
    let config = StoreConfig {
        places: vec![PlaceConfig {
            name: "ram:0".into(),
            capacity_bytes: capacity_objects * SIZE_BYTES,
            tier: "ram".into(),
            policy: PolicyKind::Lru,
            pin_share_bytes: repinnable.then_some(SIZE_BYTES),
        }],
        tier_capacity_bytes: vec![],
        staging_bytes: SIZE_BYTES,
        // loom never times a wait out: a load waits until bytes come back.
        wait: Duration::from_secs(60),
        params: PolicyParams::default(),
        knowledge: Default::default(),
    };
    let homes = Homes {
        place: vec![0; loader.objects],
        pinned: vec![false; loader.objects],
    };
    let store = Store::new(loader.clone(), homes, &config).unwrap();
    (store, loader)
}

fn used_bytes(store: &Store, budget: &str) -> u64 {
    let telemetry = store.telemetry();
    let b = telemetry
        .budgets
        .iter()
        .find(|b| b.place == budget)
        .unwrap();
    assert!(
        b.used_bytes <= b.budget_bytes,
        "{budget} over budget: {b:?}"
    );
    b.used_bytes
}

/// The bytes the place must hold for the objects' states: one object's
/// worth for each resident one, and nothing held over once no lease lives.
fn resident_bytes(store: &Store, objects: usize) -> u64 {
    (0..objects as ObjectIndex)
        .filter(|&o| !matches!(store.state(o), ObjectState::Absent))
        .count() as u64
        * SIZE_BYTES
}

/// Every interleaving, without a preemption bound: the scenarios are small
/// enough (from 21 to about 17,000 runs, under 2 s in all in release).
fn model(scenario: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = None;
    builder.check(scenario);
}

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> loom::thread::JoinHandle<T> {
    loom::thread::spawn(f)
}

#[test]
fn concurrent_misses_share_one_load() {
    model(|| {
        let (s, loader) = store(1, 1, false);
        let requests: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                spawn(move || bytes_right(&s.acquire(0).unwrap()))
            })
            .collect();
        assert!(requests.into_iter().all(|r| r.join().unwrap()));
        // Whoever came second joined the load or hit what it published.
        assert_eq!(loader.loads.load(Ordering::SeqCst), 1);
        assert_eq!(s.state(0), ObjectState::Evictable);
        assert_eq!(used_bytes(&s, "ram:0"), SIZE_BYTES);
    });
}

#[test]
fn a_loader_panic_fails_the_joiners_and_the_object_loads_again() {
    quiet_model_panics();
    model(|| {
        let (s, loader) = store(1, 1, false);
        loader.panicking.lock().unwrap().insert(0);
        let requests: Vec<_> = (0..2)
            .map(|_| {
                let s = s.clone();
                spawn(move || {
                    catch_unwind(AssertUnwindSafe(|| s.acquire(0).map(|l| bytes_right(&l))))
                })
            })
            .collect();
        let outcomes: Vec<_> = requests.into_iter().map(|r| r.join().unwrap()).collect();
        // One request led the load that panicked; the other joined it (an
        // error) or came after the guard cleared the slot (a fresh load).
        assert_eq!(outcomes.iter().filter(|o| o.is_err()).count(), 1);
        for outcome in outcomes.into_iter().flatten() {
            match outcome {
                Ok(right) => assert!(right),
                Err(e) => assert!(e.to_string().contains("the loader panicked"), "{e}"),
            }
        }
        assert_eq!(used_bytes(&s, "ram:0"), resident_bytes(&s, 1));
        assert!(bytes_right(&s.acquire(0).unwrap()));
    });
}

#[test]
fn a_miss_that_needs_a_leased_victim_waits_for_its_release() {
    model(|| {
        // Room for one object: each request evicts the other's object,
        // leased or not, and a load waits until the victim's bytes return.
        let (s, _) = store(2, 1, false);
        let requests: Vec<_> = (0..2)
            .map(|o| {
                let s = s.clone();
                spawn(move || bytes_right(&s.acquire(o).unwrap()))
            })
            .collect();
        assert!(requests.into_iter().all(|r| r.join().unwrap()));
        assert_eq!(used_bytes(&s, "ram:0"), resident_bytes(&s, 2));
        assert_eq!(used_bytes(&s, "staging"), 0);
    });
}

#[test]
fn an_explicit_eviction_never_drops_a_leased_object() {
    model(|| {
        let (s, _) = store(1, 1, false);
        let reader = {
            let s = s.clone();
            spawn(move || {
                let lease = s.acquire(0).unwrap();
                // Evicted or not, a lease keeps its bytes until it drops.
                loom::thread::yield_now();
                bytes_right(&lease)
            })
        };
        let evictor = {
            let s = s.clone();
            spawn(move || s.evict(0))
        };
        assert!(reader.join().unwrap());
        let evicted = evictor.join().unwrap();
        assert_eq!(s.state(0) == ObjectState::Absent, evicted);
        assert_eq!(used_bytes(&s, "ram:0"), resident_bytes(&s, 1));
        assert!(bytes_right(&s.acquire(0).unwrap()));
    });
}

#[test]
fn a_repin_during_a_miss_leaves_the_object_pinned_and_counted_once() {
    model(|| {
        // Pin share one object, cache one object.
        let (s, _) = store(1, 2, true);
        let promoter = {
            let s = s.clone();
            spawn(move || s.repin(&[0], &[]).unwrap())
        };
        let reader = {
            let s = s.clone();
            spawn(move || bytes_right(&s.acquire(0).unwrap()))
        };
        assert!(reader.join().unwrap());
        promoter.join().unwrap();
        assert!(s.is_pinned(0));
        assert_ne!(s.state(0), ObjectState::Absent);
        assert_eq!(used_bytes(&s, "ram:0"), SIZE_BYTES);
    });
}

/// The loader's panic unwinds through the store in every explored run;
/// its message is expected, any other panic is printed as usual.
fn quiet_model_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = info
                .payload()
                .downcast_ref::<String>()
                .is_some_and(|m| m == PANIC_MESSAGE);
            if !expected {
                default(info);
            }
        }));
    });
}
