//! The handles C holds (a store, a lease, a KV store, a prefix), owned
//! here: each is an `Arc` in one table, keyed by the number C is given as
//! its (opaque, never dereferenced) pointer. Numbers are never reused, so
//! a stale pointer cannot name a handle opened after it was closed.
//! A call finds its handle in the table and holds a clone for its length,
//! so a handle closed meanwhile is freed when the last call on it ends; a
//! handle closed before, released twice, of another kind or never given
//! out is not in the table and is refused with `RESIDENCY_ERR_ARGUMENT`.
//! The table's lock is held only to look up, add or remove, never across
//! a call's work (an acquire that waits for budget must not keep the
//! release that frees it out).

use super::{Failure, RESIDENCY_ERR_ARGUMENT};
use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

type Handle = Arc<dyn Any + Send + Sync>;

static TABLE: Mutex<Option<HashMap<usize, Handle>>> = Mutex::new(None);

fn table() -> MutexGuard<'static, Option<HashMap<usize, Handle>>> {
    // Nothing panics while the table is held; a poisoned one is whole.
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Gives `value` to C: the pointer it knows the handle by, a number of
/// its own, aligned as a pointer to anything.
pub(super) fn give<T: Any + Send + Sync>(value: T) -> *mut T {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    let number = NEXT.fetch_add(1, Ordering::Relaxed) * 16;
    table()
        .get_or_insert_with(HashMap::new)
        .insert(number, Arc::new(value));
    std::ptr::without_provenance_mut(number)
}

/// The open handle `p` (the argument `name`): NULL, or an address not in
/// the table as a `T`, is refused.
pub(super) fn live<T: Any + Send + Sync>(p: *const T, name: &str) -> Result<Arc<T>, Failure> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    let found = table().as_ref().and_then(|t| t.get(&p.addr()).cloned());
    found
        .and_then(|h| h.downcast::<T>().ok())
        .ok_or_else(|| not_open(name))
}

/// Takes the handle `p` back from C (close, release); NULL does nothing.
/// It is freed here, or by the last call still using it.
pub(super) fn take<T: Any + Send + Sync>(p: *mut T, name: &str) -> Result<(), Failure> {
    if p.is_null() {
        return Ok(());
    }
    let taken = {
        let mut table = table();
        let table = table.get_or_insert_with(HashMap::new);
        match table.get(&p.addr()) {
            Some(h) if h.is::<T>() => table.remove(&p.addr()),
            _ => None,
        }
    };
    // Dropped after the table's lock: a store's drop may take a while.
    taken.map(drop).ok_or_else(|| not_open(name))
}

fn not_open(name: &str) -> Failure {
    Failure::new(
        RESIDENCY_ERR_ARGUMENT,
        format!(
            "`{name}` is not open: it was closed or released already, or is not a handle of its kind from residency"
        ),
    )
}
