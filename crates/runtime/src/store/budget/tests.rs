//! Tests of `budget`.

use super::*;
use std::thread;

#[test]
fn reservations_are_all_or_nothing_and_returned_on_drop() {
    let gpu = Budget::new("gpu:0", 100);
    let tier = Budget::new("gpu", 150);
    let a = reserve(&[gpu.clone(), tier.clone()], 60, Duration::ZERO).unwrap();
    assert_eq!((gpu.used_bytes(), tier.used_bytes()), (60, 60));
    // 60 more fit the tier (120 <= 150) but not the card (120 > 100):
    // nothing stays taken anywhere.
    let e = reserve(&[gpu.clone(), tier.clone()], 60, Duration::ZERO).unwrap_err();
    assert!(matches!(e, BudgetError::Timeout { ref budget, .. } if budget == "gpu:0"));
    assert_eq!((gpu.used_bytes(), tier.used_bytes()), (60, 60));
    drop(a);
    assert_eq!((gpu.used_bytes(), tier.used_bytes()), (0, 0));
    let e = reserve(std::slice::from_ref(&gpu), 101, Duration::from_secs(5)).unwrap_err();
    assert!(
        e.to_string().contains("can never fit in budget `gpu:0`"),
        "{e}"
    );
}

#[test]
fn a_waiting_reservation_proceeds_when_bytes_come_back() {
    let ram = Budget::new("ram:0", 10);
    let first = reserve(std::slice::from_ref(&ram), 8, Duration::ZERO).unwrap();
    let r = ram.clone();
    let waiter =
        thread::spawn(move || reserve(&[r], 5, Duration::from_secs(10)).map(|x| x.bytes()));
    thread::sleep(Duration::from_millis(20));
    assert_eq!(ram.used_bytes(), 8);
    drop(first);
    assert_eq!(waiter.join().unwrap(), Ok(5));
    assert_eq!(ram.used_bytes(), 0);
}

#[test]
fn a_waiting_reservation_gives_up_when_woken_and_holds_nothing() {
    // The card has room, the tier does not: the reservation holds the
    // card's 5 bytes while it waits for the tier's.
    let gpu = Budget::new("gpu:0", 10);
    let tier = Budget::new("gpu", 10);
    let full = reserve(std::slice::from_ref(&tier), 10, Duration::ZERO).unwrap();
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (g, t, f) = (gpu.clone(), tier.clone(), flag.clone());
    let waiter = thread::spawn(move || {
        let give_up = || f.load(std::sync::atomic::Ordering::Relaxed);
        reserve_unless(&[g, t], 5, Duration::from_secs(10), &give_up).map(|r| r.is_some())
    });
    while gpu.used_bytes() != 5 {
        thread::sleep(Duration::from_millis(1));
    }
    flag.store(true, std::sync::atomic::Ordering::Relaxed);
    // Nothing comes back to the tier: only the wake ends the wait (well
    // before the 10 s it would otherwise last).
    tier.wake();
    assert_eq!(waiter.join().unwrap(), Ok(false));
    assert_eq!((gpu.used_bytes(), tier.used_bytes()), (0, 10));
    drop(full);
}

#[test]
fn never_exceeded_under_contention() {
    let ram = Budget::new("ram:0", 64);
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (ram, peak) = (ram.clone(), peak.clone());
            thread::spawn(move || {
                for i in 0..2000u64 {
                    let bytes = 1 + (i * 7 + t) % 20;
                    if let Ok(r) =
                        reserve(std::slice::from_ref(&ram), bytes, Duration::from_millis(50))
                    {
                        peak.fetch_max(ram.used_bytes(), std::sync::atomic::Ordering::Relaxed);
                        drop(r);
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert!(peak.load(std::sync::atomic::Ordering::Relaxed) <= 64);
    assert_eq!(ram.used_bytes(), 0);
}
