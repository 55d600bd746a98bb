//! Tests of `pool`.

use super::*;

#[test]
fn nodes_include_one_at_least() {
    let nodes = numa_nodes();
    assert!(!nodes.is_empty());
    // This machine's sysfs lists node0 (and a one-node machine just works).
    assert_eq!(nodes[0], 0);
}

#[test]
fn freed_regions_are_reused_up_to_the_limit() {
    let pool = HostPool::new(Some(numa_nodes()[0]), 3 * 4096);
    let a = pool.take(2 * 4096);
    let b = pool.take(2 * 4096);
    let a_ptr = a.ptr;
    pool.give(a);
    // The second would exceed 3 pages retained: unmapped instead.
    pool.give(b);
    assert_eq!(pool.retained_bytes(), 2 * 4096);
    let again = pool.take(2 * 4096);
    assert_eq!(again.ptr, a_ptr);
    assert_eq!(pool.retained_bytes(), 0);
    // Another size is a new mapping.
    let other = pool.take(4096);
    assert_ne!(other.ptr, a_ptr);
    pool.give(again);
    pool.give(other);
}

/// Counts pins and unpins by address.
#[derive(Default)]
struct Counting(Mutex<Vec<(usize, bool)>>);

impl Pinner for Counting {
    fn pin(&self, ptr: *mut u8, _len_bytes: usize) -> bool {
        self.0.lock().unwrap().push((ptr as usize, true));
        true
    }
    fn unpin(&self, ptr: *mut u8) {
        self.0.lock().unwrap().push((ptr as usize, false));
    }
}

#[test]
fn regions_are_pinned_once_and_unpinned_before_unmapping() {
    let pinner = Arc::new(Counting::default());
    let pool = HostPool::pinned_by(None, 4096, Some(pinner.clone()));
    let a = pool.take(4096);
    let a_addr = a.ptr.as_ptr() as usize;
    pool.give(a);
    // Recycled: no second pin.
    let a = pool.take(4096);
    let b = pool.take(4096);
    let b_addr = b.ptr.as_ptr() as usize;
    pool.give(a);
    // Over the one page retained: b is unpinned and unmapped.
    pool.give(b);
    assert_eq!(
        *pinner.0.lock().unwrap(),
        vec![(a_addr, true), (b_addr, true), (b_addr, false)]
    );
    drop(pool);
    assert_eq!(pinner.0.lock().unwrap().last(), Some(&(a_addr, false)));
}
