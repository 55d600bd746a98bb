//! Lock helpers that take over a lock whose holder panicked, over
//! whichever primitives the parent module names (std's, or loom's in the
//! model-checked build).

use super::{Condvar, Mutex, MutexGuard};

/// Locks `mutex`, taking over the data of a holder that panicked: the
/// store's state is kept consistent at each unlock point it reaches, and
/// a panic (in a loader or a policy) is cleaned up by the single-flight
/// guard, not by refusing every later request.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`Condvar::wait`], tolerating poison as [`lock`] does.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`Condvar::wait_timeout`], tolerating poison as [`lock`] does.
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: std::time::Duration,
) -> MutexGuard<'a, T> {
    condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .0
}
