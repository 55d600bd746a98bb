//! The last failure of each thread: the line a failed call leaves and
//! `residency_last_error` hands out.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Leaves `message` for `residency_last_error`, on one line and without NUL
/// bytes (a C string ends at the first).
pub(super) fn set_last_error(message: &str) {
    let line: String = message
        .chars()
        .filter(|&c| c != '\0')
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let line = CString::new(line).unwrap_or_default();
    // A thread being torn down has no thread-local left: nothing to keep.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = line);
}

/// The message of the last failed call on this thread, one line; "" when
/// none failed. Valid until the next failure on this thread. Never NULL.
#[no_mangle]
pub extern "C" fn residency_last_error() -> *const c_char {
    let empty = c"".as_ptr();
    panic::catch_unwind(|| {
        // The buffer stays in the thread-local after the borrow ends, until
        // the next failure on this thread replaces it.
        LAST_ERROR
            .try_with(|last| last.borrow().as_ptr())
            .unwrap_or(empty)
    })
    .unwrap_or(empty)
}
