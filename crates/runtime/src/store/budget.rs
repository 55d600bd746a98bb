//! Byte budgets (design §7): per GPU, per NUMA node, per tier and for
//! staging. A reservation is taken before any allocation and returned when
//! its guard drops, so the used bytes of a budget never exceed its capacity
//! under any interleaving. A reservation that does not fit waits, bounded,
//! for others to be returned, or fails with an error naming the budget.
//! A capacity may move while serving (per-layer budgets, `Store::set_capacities`):
//! a shrink below the bytes used only holds back new reservations until
//! the leased victims holding them are released.

use crate::sync::{lock, wait_timeout, Condvar, Mutex};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Budget {
    name: String,
    usage: Mutex<Usage>,
    returned: Condvar,
}

/// Bytes used and the capacity, under one lock so that a reservation sees
/// a moving capacity consistently.
#[derive(Debug, Clone, Copy)]
struct Usage {
    used_bytes: u64,
    capacity_bytes: u64,
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Budget({}, {} of {} bytes)",
            self.name,
            self.used_bytes(),
            self.capacity_bytes()
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
            usage: Mutex::new(Usage {
                used_bytes: 0,
                capacity_bytes,
            }),
            returned: Condvar::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn capacity_bytes(&self) -> u64 {
        lock(&self.usage).capacity_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        lock(&self.usage).used_bytes
    }

    /// Moves the capacity; waiting reservations look again. Bytes already
    /// reserved stay reserved (the caller evicts first when it shrinks).
    pub fn set_capacity_bytes(&self, capacity_bytes: u64) {
        lock(&self.usage).capacity_bytes = capacity_bytes;
        self.returned.notify_all();
    }

    /// Wakes the reservations waiting here so that they ask their
    /// `give_up` again (see [`reserve_unless`]). It takes the lock a waiter
    /// holds between asking and waiting, so a `give_up` made true before
    /// this call cannot be missed.
    pub fn wake(&self) {
        let _usage = lock(&self.usage);
        self.returned.notify_all();
    }

    fn give_back(&self, bytes: u64) {
        lock(&self.usage).used_bytes -= bytes;
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
    let deadline = Instant::now() + wait;
    let mut held = Reservation {
        budgets: Vec::with_capacity(budgets.len()),
        bytes,
        waited: false,
    };
    for b in budgets {
        let mut usage = lock(&b.usage);
        while usage.used_bytes + bytes > usage.capacity_bytes {
            if give_up() {
                // `held` goes out of scope here: its bytes go back.
                return Ok(None);
            }
            // Under the lock: a capacity that moves is seen as it is now.
            if bytes > usage.capacity_bytes {
                return Err(BudgetError::TooLarge {
                    budget: b.name.clone(),
                    bytes,
                    capacity_bytes: usage.capacity_bytes,
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(BudgetError::Timeout {
                    budget: b.name.clone(),
                    bytes,
                    used_bytes: usage.used_bytes,
                    capacity_bytes: usage.capacity_bytes,
                    waited_ms: wait.as_millis(),
                });
            }
            held.waited = true;
            usage = wait_timeout(&b.returned, usage, deadline - now);
        }
        usage.used_bytes += bytes;
        drop(usage);
        // From here on, dropping `held` (on a later failure) returns these bytes.
        held.budgets.push(Arc::clone(b));
    }
    Ok(Some(held))
}

#[cfg(test)]
mod tests;
