//! The object store's entry points refuse NULL arguments by name.

use super::*;
use crate::tests::last_error;
use crate::RESIDENCY_OK;

#[test]
fn null_pointers_are_refused_naming_the_argument() {
    let path = c"plan.json".as_ptr();
    let mut handle = ptr::null_mut();
    let mut lease = ptr::null_mut();
    let mut bytes = ptr::null();
    let mut len = 0usize;
    let (mut device, mut address) = (0u32, 0u64);
    let refused = |code: c_int, name: &str| {
        assert_eq!(code, RESIDENCY_ERR_ARGUMENT, "{name}");
        let line = last_error();
        assert!(line.contains(&format!("`{name}` is NULL")), "{line}");
    };
    // SAFETY: every pointer is NULL or valid, as the contracts ask.
    unsafe {
        refused(
            residency_open(ptr::null(), path, ptr::null(), &mut handle),
            "plan_path",
        );
        refused(
            residency_open(path, ptr::null(), ptr::null(), &mut handle),
            "checkpoint_dir",
        );
        refused(
            residency_open(path, path, ptr::null(), ptr::null_mut()),
            "out_handle",
        );
        let h = ptr::null();
        refused(
            residency_acquire_expert(h, 0, 0, &mut lease, &mut bytes, &mut len),
            "handle",
        );
        refused(
            residency_acquire_expert(h, 0, 0, ptr::null_mut(), &mut bytes, &mut len),
            "out_lease",
        );
        refused(
            residency_acquire_expert(h, 0, 0, &mut lease, ptr::null_mut(), &mut len),
            "out_ptr",
        );
        refused(
            residency_acquire_expert(h, 0, 0, &mut lease, &mut bytes, ptr::null_mut()),
            "out_len",
        );
        refused(
            residency_acquire_trunk(h, ptr::null(), -1, &mut lease, &mut bytes, &mut len),
            "name",
        );
        refused(
            residency_lease_device(ptr::null(), &mut device, &mut address),
            "lease",
        );
        refused(residency_report_route(h, 0, ptr::null(), 0), "handle");
        let texts: [unsafe extern "C" fn(*const ResidencyHandle) -> *const c_char; 3] = [
            residency_heat_json,
            residency_telemetry_json,
            residency_telemetry_prometheus,
        ];
        for text in texts {
            assert!(text(h).is_null());
            assert!(last_error().contains("`handle` is NULL"));
        }
        assert_eq!(residency_release(ptr::null_mut()), RESIDENCY_OK);
        assert_eq!(residency_close(ptr::null_mut()), RESIDENCY_OK);
    }
    assert!(handle.is_null() && lease.is_null() && bytes.is_null() && len == 0);
}
