//! Byte budgets (design §7): per GPU, per NUMA node, per tier and for
//! staging. A reservation is taken before any allocation and returned when
//! its guard drops, so the used bytes of a budget never exceed its capacity
//! under any interleaving. A reservation that does not fit waits, bounded,
//! for others to be returned, or fails with an error naming the budget.

use crate::sync::{lock, wait_timeout, Condvar, Mutex};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Budget {
    name: String,
    capacity_bytes: u64,
    used_bytes: Mutex<u64>,
    returned: Condvar,
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Budget({}, {} of {} bytes)",
            self.name,
            self.used_bytes(),
            self.capacity_bytes
        )
    }
}

/// Why bytes could not be reserved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("{bytes} bytes can never fit in budget `{budget}` of {capacity_bytes} bytes; raise that budget or use a smaller object")]
    TooLarge {
        budget: String,
        bytes: u64,
        capacity_bytes: u64,
    },
    #[error("budget `{budget}` stayed full for {waited_ms} ms ({used_bytes} of {capacity_bytes} bytes used, {bytes} wanted); release leases sooner or raise that budget")]
    Timeout {
        budget: String,
        bytes: u64,
        used_bytes: u64,
        capacity_bytes: u64,
        waited_ms: u128,
    },
}

impl Budget {
    pub fn new(name: impl Into<String>, capacity_bytes: u64) -> Arc<Budget> {
        Arc::new(Budget {
            name: name.into(),
            capacity_bytes,
            used_bytes: Mutex::new(0),
            returned: Condvar::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        *lock(&self.used_bytes)
    }

    /// Wakes the reservations waiting here so that they ask their
    /// `give_up` again (see [`reserve_unless`]). It takes the lock a waiter
    /// holds between asking and waiting, so a `give_up` made true before
    /// this call cannot be missed.
    pub fn wake(&self) {
        let _used = lock(&self.used_bytes);
        self.returned.notify_all();
    }

    fn give_back(&self, bytes: u64) {
        let mut used = lock(&self.used_bytes);
        *used -= bytes;
        self.returned.notify_all();
    }
}

/// Bytes held in one or more budgets at once (a GPU and its tier, say);
/// returned to all of them on drop.
#[derive(Debug)]
pub struct Reservation {
    budgets: Vec<Arc<Budget>>,
    bytes: u64,
    waited: bool,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether taking it had to wait for bytes to come back.
    pub fn waited(&self) -> bool {
        self.waited
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        for b in &self.budgets {
            b.give_back(self.bytes);
        }
    }
}

/// Reserves `bytes` in every budget of `budgets` (all or none), waiting up
/// to `wait` for room. Budgets are taken in the order given; callers give
/// them in one global order (place, then tier) so two reservations never
/// wait on each other crosswise.
pub fn reserve(
    budgets: &[Arc<Budget>],
    bytes: u64,
    wait: Duration,
) -> Result<Reservation, BudgetError> {
    let never = || false;
    Ok(reserve_unless(budgets, bytes, wait, &never)?.expect("`never` never gives up"))
}

/// [`reserve`], except that where it would wait for room it first asks
/// `give_up`, and if that is true returns `Ok(None)` holding nothing. Whoever
/// makes `give_up` true then calls [`Budget::wake`] on `budgets`, or a
/// reservation already waiting would only notice at the next returned bytes.
pub fn reserve_unless(
    budgets: &[Arc<Budget>],
    bytes: u64,
    wait: Duration,
    give_up: &dyn Fn() -> bool,
) -> Result<Option<Reservation>, BudgetError> {
    if let Some(b) = budgets.iter().find(|b| bytes > b.capacity_bytes) {
        return Err(BudgetError::TooLarge {
            budget: b.name.clone(),
            bytes,
            capacity_bytes: b.capacity_bytes,
        });
    }
    let deadline = Instant::now() + wait;
    let mut held = Reservation {
        budgets: Vec::with_capacity(budgets.len()),
        bytes,
        waited: false,
    };
    for b in budgets {
        let mut used = lock(&b.used_bytes);
        while *used + bytes > b.capacity_bytes {
            if give_up() {
                // `held` goes out of scope here: its bytes go back.
                return Ok(None);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BudgetError::Timeout {
                    budget: b.name.clone(),
                    bytes,
                    used_bytes: *used,
                    capacity_bytes: b.capacity_bytes,
                    waited_ms: wait.as_millis(),
                });
            }
            held.waited = true;
            used = wait_timeout(&b.returned, used, deadline - now);
        }
        *used += bytes;
        drop(used);
        // From here on, dropping `held` (on a later failure) returns these bytes.
        held.budgets.push(Arc::clone(b));
    }
    Ok(Some(held))
}

#[cfg(test)]
mod tests {
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
}
