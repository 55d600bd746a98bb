//! The C ABI (docs/design.md §7 "C ABI"): what an engine written in C or C++ calls
//! to open a plan and its checkpoint, acquire objects (a lease, a pointer and
//! a length), release them, report routes (live heat), read telemetry and
//! close (`store`), and to cache KV prefix blocks (`kv`).
//! `crates/capi/include/residency.h` is generated from this module by
//! cbindgen; `tests/c_abi.rs` fails when the committed header drifts and
//! builds and runs C programs against it and the static library. This file
//! owns what every entry point shares: the status codes, the failure a
//! body returns, the panic guard, and the argument helpers (pointers,
//! slices, C strings); `last_error` keeps the thread's last failure line.
//!
//! Conventions, for every `residency_*` function:
//! - it returns a `RESIDENCY_*` status (`RESIDENCY_OK` is 0) or a pointer
//!   (NULL on failure); a failure leaves one line for `residency_last_error`
//!   on the calling thread;
//! - no panic crosses the boundary: the body runs under `catch_unwind`, and a
//!   panic (a bug) becomes `RESIDENCY_ERR_PANIC` with its message;
//! - a NULL pointer is refused with `RESIDENCY_ERR_ARGUMENT`, except that
//!   releasing or closing NULL does nothing, as `free(NULL)` does; so is a
//!   handle closed or released already, or not from residency (`handles`);
//! - objects are named as in the checkpoint (transformer layer numbers);
//!   routes use MoE ordinals (0 = the first MoE layer), as heat tables do
//!   (docs/design.md §3.3), so reported heat feeds the planner as it is.

// cbindgen writes each kind of item (constants, types, functions) in the
// order it reads them: this file's first, then the modules in the order
// they are declared here, which is the header's: the life of a handle, the
// last error, the KV cache. Keep the declarations apart so that rustfmt
// does not sort them.
mod store;

mod last_error;

mod kv;

mod handles;

pub use kv::*;
pub use last_error::residency_last_error;
pub use store::*;

use last_error::set_last_error;
use std::ffi::{c_char, c_int, CStr};
use std::panic::{self, AssertUnwindSafe};

/// Success.
pub const RESIDENCY_OK: c_int = 0;
/// A NULL pointer, a string that is not UTF-8, a layer or expert outside the
/// model.
pub const RESIDENCY_ERR_ARGUMENT: c_int = 1;
/// The plan has no such object, or a lease in host memory was asked for its
/// device address.
pub const RESIDENCY_ERR_NOT_FOUND: c_int = 2;
/// A budget could not make room in time; the message names it.
pub const RESIDENCY_ERR_BUDGET: c_int = 3;
/// Reading or validating an object's bytes failed (the drive, a truncated
/// shard).
pub const RESIDENCY_ERR_LOAD: c_int = 4;
/// The plan or the checkpoint is wrong or unreadable, or they do not belong
/// together; the message names the file, the place and the fix.
pub const RESIDENCY_ERR_INPUT: c_int = 5;
/// A bug in residency: a panic, caught at the boundary.
pub const RESIDENCY_ERR_PANIC: c_int = 6;

/// A failed call: the status to return and the line for
/// `residency_last_error`.
struct Failure {
    status: c_int,
    message: String,
}

impl Failure {
    fn new(status: c_int, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    fn null(name: &str) -> Failure {
        Failure::new(
            RESIDENCY_ERR_ARGUMENT,
            format!("`{name}` is NULL; pass a valid pointer"),
        )
    }
}

/// Runs an entry point's body: a panic becomes `RESIDENCY_ERR_PANIC`, and
/// any failure leaves its line for `residency_last_error`.
fn guard<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, c_int> {
    // AssertUnwindSafe: after a panic the store may hold a poisoned lock;
    // the next call through it panics again and is reported the same way.
    let result = panic::catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        Err(Failure::new(
            RESIDENCY_ERR_PANIC,
            format!("internal error in residency (a bug; please report it): {what}"),
        ))
    });
    result.map_err(|failure| {
        set_last_error(&failure.message);
        failure.status
    })
}

fn status(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(RESIDENCY_OK)
}

/// `p` as a reference, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or points to a valid `T` that outlives `'a`.
unsafe fn arg<'a, T>(p: *const T, name: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::null(name))
}

/// `p` as a mutable reference, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or points to writable, aligned storage for a `T` that
/// nothing else touches during `'a`.
unsafe fn out<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or_else(|| Failure::null(name))
}

/// A NUL-terminated C string, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a CStr, Failure> {
    if p.is_null() {
        return Err(Failure::null(name));
    }
    // SAFETY: non-NULL here; NUL-terminated and alive by the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// `count` values at `p`; NULL is refused unless `count` is 0.
///
/// # Safety
/// `p` is NULL or points to `count` readable values that outlive `'a`.
unsafe fn slice<'a, T>(p: *const T, count: usize, name: &str) -> Result<&'a [T], Failure> {
    match count {
        0 => Ok(&[]),
        // SAFETY: non-NULL here; `count` readable values by the contract.
        _ if !p.is_null() => Ok(unsafe { std::slice::from_raw_parts(p, count) }),
        _ => Err(Failure::null(name)),
    }
}

/// An optional UTF-8 C string: NULL is "".
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
unsafe fn text<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Ok("");
    }
    // SAFETY: the caller's contract.
    unsafe { c_str(p, name) }?.to_str().map_err(|_| {
        Failure::new(
            RESIDENCY_ERR_ARGUMENT,
            format!("`{name}` is not UTF-8; pass UTF-8 text"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `residency_last_error` as a Rust string.
    pub(super) fn last_error() -> String {
        // SAFETY: never NULL, NUL-terminated, valid until the next failure here.
        unsafe { CStr::from_ptr(residency_last_error()) }
            .to_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_panic_becomes_a_status_and_one_line_on_this_thread_only() {
        let result: Result<(), c_int> = guard(|| panic!("two\nlines"));
        assert_eq!(result, Err(RESIDENCY_ERR_PANIC));
        let line = last_error();
        assert!(line.starts_with("internal error in residency"), "{line}");
        assert!(line.ends_with("two lines"), "{line}");
        let other = std::thread::spawn(last_error).join().unwrap();
        assert_eq!(other, "");
        // A success leaves the last failure in place, as errno does.
        assert_eq!(guard(|| Ok(7)), Ok(7));
        assert!(last_error().ends_with("two lines"));
    }
}
