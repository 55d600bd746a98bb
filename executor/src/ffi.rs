//! The C ABI (DESIGN 7 "C ABI"): what an engine written in C or C++ calls
//! to open a plan and its checkpoint, acquire objects (a lease, a pointer and
//! a length), release them, report routes (live heat), read telemetry and
//! close. `executor/include/residency.h` is generated from this file by
//! cbindgen; `tests/c_abi.rs` fails when the committed header drifts and
//! builds and runs a C program against it and the static library.
//!
//! Conventions, for every `residency_*` function:
//! - it returns a `RESIDENCY_*` status (`RESIDENCY_OK` is 0) or a pointer
//!   (NULL on failure); a failure leaves one line for `residency_last_error`
//!   on the calling thread;
//! - no panic crosses the boundary: the body runs under `catch_unwind`, and a
//!   panic (a bug) becomes `RESIDENCY_ERR_PANIC` with its message;
//! - a NULL pointer is refused with `RESIDENCY_ERR_ARGUMENT`, except that
//!   releasing or closing NULL does nothing, as `free(NULL)` does;
//! - objects are named as in the checkpoint (transformer layer numbers);
//!   routes use MoE ordinals (0 = the first MoE layer), as heat tables do
//!   (DESIGN 3.3), so reported heat feeds the planner as it is.
//!
//! Objects in device memory: `residency_acquire_*` sets `*out_ptr` to the
//! host address of the bytes when they are in host memory, and to NULL when
//! they are on a GPU; `residency_lease_device` then gives the device ordinal
//! and address. The length is set either way.

use crate::apply::{apply, Applied, ApplyError, ApplyOptions};
use crate::checkpoint::Checkpoint;
use crate::identity::ObjectKey;
use crate::policy::counts::DecayedCounts;
use crate::policy::{Knowledge, PolicyParams, PolicySetup};
use crate::storage::{open_backend, BackendKind};
use crate::store::{Lease, StoreError};
use residency_planner::plan::Plan;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, PoisonError};

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

/// Live heat's default decay: every counter halved every 1024 tokens, as
/// Colibri's VRAM tier does (colibri-formats.md section 4).
pub const RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS: u64 = 1024;

/// Options of `residency_open`. A zero field takes its default, so
/// `ResidencyOptions options = {0};` is the defaults.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ResidencyOptions {
    /// Objects loaded at once while the plan is applied (0: 8).
    pub load_threads: u32,
    /// Live heat: each MoE layer's counters are halved every this many
    /// tokens reported for that layer (0:
    /// `RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS`).
    pub heat_halve_every_tokens: u64,
}

/// An applied plan: the store with its residents, and live heat. Opaque.
pub struct ResidencyHandle {
    applied: Applied,
    /// Transformer layer of each MoE ordinal, for messages.
    moe_layers: Vec<usize>,
    experts: usize,
    /// The model's name as the plan records it, for the heat table.
    model: String,
    heat: Mutex<LiveHeat>,
    /// The last string handed out by a text function, kept until the next
    /// one or `residency_close`.
    text: Mutex<CString>,
}

/// A lease on one object: its bytes stay where they are until it is
/// released. Opaque.
pub struct ResidencyLease(Lease);

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

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        let status = match &e {
            StoreError::Budget(_) | StoreError::PinsTooLarge { .. } => RESIDENCY_ERR_BUDGET,
            StoreError::Load { .. } => RESIDENCY_ERR_LOAD,
            StoreError::NoSuchObject { .. } => RESIDENCY_ERR_NOT_FOUND,
            StoreError::Policy { .. } => RESIDENCY_ERR_INPUT,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<ApplyError> for Failure {
    fn from(e: ApplyError) -> Failure {
        match e {
            ApplyError::Mismatch { .. } => Failure::new(RESIDENCY_ERR_INPUT, e.to_string()),
            ApplyError::Storage(_) => Failure::new(RESIDENCY_ERR_LOAD, e.to_string()),
            ApplyError::Store(e) => e.into(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Leaves `message` for `residency_last_error`, on one line and without NUL
/// bytes (a C string ends at the first).
fn set_last_error(message: &str) {
    let line: String = message
        .chars()
        .filter(|&c| c != '\0')
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    let line = CString::new(line).unwrap_or_default();
    // A thread being torn down has no thread-local left: nothing to keep.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = line);
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

impl ResidencyHandle {
    fn open(
        plan_path: &Path,
        checkpoint_dir: &Path,
        options: &ResidencyOptions,
    ) -> Result<ResidencyHandle, Failure> {
        let input = |message: String| Failure::new(RESIDENCY_ERR_INPUT, message);
        let plan = Plan::read(plan_path).map_err(|e| input(e.to_string()))?;
        let checkpoint = Checkpoint::open(checkpoint_dir).map_err(|e| input(e.to_string()))?;
        let mut apply_options = ApplyOptions::default();
        if options.load_threads > 0 {
            apply_options.threads = options.load_threads as usize;
        }
        let applied = apply(
            &plan,
            plan_path,
            &checkpoint,
            &apply_options,
            open_backend(BackendKind::Direct),
            &|_| {},
        )?;
        // Said once, as the command line does; the engine's stderr is the log.
        for note in &applied.notes {
            eprintln!("residency: note: {note}");
        }
        let moe_layers = checkpoint.config.moe_layers();
        let experts = checkpoint.config.experts;
        let halve_every_tokens = match options.heat_halve_every_tokens {
            0 => RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS,
            n => n,
        };
        Ok(ResidencyHandle {
            heat: Mutex::new(LiveHeat::new(moe_layers.len(), experts, halve_every_tokens)),
            applied,
            moe_layers,
            experts,
            model: plan.inputs.model.name,
            text: Mutex::default(),
        })
    }

    fn acquire(&self, key: &ObjectKey) -> Result<Lease, Failure> {
        let Some(&object) = self.applied.index.get(key) else {
            return Err(Failure::new(
                RESIDENCY_ERR_NOT_FOUND,
                format!(
                    "the plan has no {key}; it places experts 0..{} of transformer layers {:?} and the trunk components listed in its `trunk`",
                    self.experts, self.moe_layers
                ),
            ));
        };
        Ok(self.applied.store.acquire(object)?)
    }

    /// Keeps `text` as the handle's current string and returns its address.
    fn hand_out(&self, text: String) -> *const c_char {
        let text = CString::new(text).expect("JSON and Prometheus text hold no NUL byte");
        // A panic elsewhere cannot leave a CString half-written: take it as is.
        let mut slot = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = text;
        slot.as_ptr()
    }
}

/// Live heat from reported routes: per MoE layer, a decayed count per
/// expert (DESIGN 3.3 counts), halved as Colibri's tier halves its heat.
/// Each layer's clock is the tokens reported for it, so a caller never has
/// to say where a token ends.
struct LiveHeat {
    layers: Vec<LayerHeat>,
    experts: usize,
}

struct LayerHeat {
    counts: DecayedCounts,
    tokens: u64,
}

impl LiveHeat {
    fn new(moe_layers: usize, experts: usize, halve_every_tokens: u64) -> LiveHeat {
        // The policies' own decayed counters, over a layer's experts.
        let setup = PolicySetup {
            capacity_bytes: 0,
            objects: experts,
            knowledge: Knowledge::default(),
            params: PolicyParams {
                halve_every_ticks: halve_every_tokens,
                ..PolicyParams::default()
            },
        };
        LiveHeat {
            layers: (0..moe_layers)
                .map(|_| LayerHeat {
                    counts: DecayedCounts::new(&setup, false),
                    tokens: 0,
                })
                .collect(),
            experts,
        }
    }

    /// Counts one token of MoE ordinal `moe_layer` routed to `experts`;
    /// counts nothing when any of them is outside the model.
    fn record(&mut self, moe_layer: u32, experts: &[u32]) -> Result<(), Failure> {
        let layers = self.layers.len();
        let Some(layer) = self.layers.get_mut(moe_layer as usize) else {
            return Err(Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                format!("moe_layer {moe_layer}: the model has {layers} MoE layers (ordinals from 0, not transformer layers)"),
            ));
        };
        if let Some(e) = experts.iter().find(|&&e| e as usize >= self.experts) {
            return Err(Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                format!(
                    "expert {e} in a route of moe_layer {moe_layer}: the model has {} experts per layer",
                    self.experts
                ),
            ));
        }
        for &e in experts {
            layer.counts.record(e, layer.tokens);
        }
        layer.tokens += 1;
        Ok(())
    }

    /// Our `json` heat format (DESIGN 3.3), readable by `residency plan
    /// --heat`. Without `tokens`: decayed counts are not counts over a
    /// number of tokens, so the planner takes `top_k * c / sum c`.
    fn to_json(&self, model: &str) -> String {
        let layers: Vec<Vec<u32>> = self
            .layers
            .iter()
            .map(|l| {
                (0..self.experts as u32)
                    .map(|e| l.counts.count(e))
                    .collect()
            })
            .collect();
        serde_json::json!({ "model": model, "layers": layers }).to_string()
    }
}

/// Reads the plan at `plan_path` (from `residency plan`), applies it to the
/// checkpoint in `checkpoint_dir` (loading every planned resident before it
/// returns) and sets `*out_handle`. `options` may be NULL (the defaults).
///
/// # Safety
/// `plan_path` and `checkpoint_dir` are NULL or NUL-terminated strings;
/// `options` is NULL or points to a `ResidencyOptions`; `out_handle` is NULL
/// or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn residency_open(
    plan_path: *const c_char,
    checkpoint_dir: *const c_char,
    options: *const ResidencyOptions,
    out_handle: *mut *mut ResidencyHandle,
) -> c_int {
    status(guard(|| {
        // SAFETY (all four): the function's contract.
        let out_handle = unsafe { out(out_handle, "out_handle") }?;
        *out_handle = ptr::null_mut();
        let plan_path = unsafe { c_str(plan_path, "plan_path") }?;
        let checkpoint_dir = unsafe { c_str(checkpoint_dir, "checkpoint_dir") }?;
        let options = unsafe { options.as_ref() }.copied().unwrap_or_default();
        // Paths are bytes on Unix: no UTF-8 needed.
        let handle = ResidencyHandle::open(
            Path::new(OsStr::from_bytes(plan_path.to_bytes())),
            Path::new(OsStr::from_bytes(checkpoint_dir.to_bytes())),
            &options,
        )?;
        *out_handle = Box::into_raw(Box::new(handle));
        Ok(())
    }))
}

/// Acquires the object `key()` names and writes the lease, the host address
/// of its bytes (NULL when they are in device memory) and their length; on
/// failure the outputs are NULL and 0.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed; each `out_*` is
/// NULL or points to writable storage of its type.
unsafe fn acquire(
    handle: *const ResidencyHandle,
    key: impl FnOnce() -> Result<ObjectKey, Failure>,
    out_lease: *mut *mut ResidencyLease,
    out_ptr: *mut *const u8,
    out_len: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all four): the function's contract.
        let out_lease = unsafe { out(out_lease, "out_lease") }?;
        let out_ptr = unsafe { out(out_ptr, "out_ptr") }?;
        let out_len = unsafe { out(out_len, "out_len") }?;
        (*out_lease, *out_ptr, *out_len) = (ptr::null_mut(), ptr::null(), 0);
        let key = key()?;
        let handle = unsafe { arg(handle, "handle") }?;
        let lease = handle.acquire(&key)?;
        *out_ptr = lease.host().map_or(ptr::null(), <[u8]>::as_ptr);
        *out_len = lease.len();
        *out_lease = Box::into_raw(Box::new(ResidencyLease(lease)));
        Ok(())
    }))
}

/// Acquires routed expert `expert` of transformer layer `layer` (the
/// checkpoint's numbering): `*out_lease` pins it until
/// `residency_release`; `*out_ptr` and `*out_len` are its bytes (`*out_ptr`
/// is NULL when they are on a GPU: see `residency_lease_device`). Loads it
/// first when it is not resident. Thread-safe.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed; each `out_*` is
/// NULL or points to writable storage of its type.
#[no_mangle]
pub unsafe extern "C" fn residency_acquire_expert(
    handle: *const ResidencyHandle,
    layer: u32,
    expert: u32,
    out_lease: *mut *mut ResidencyLease,
    out_ptr: *mut *const u8,
    out_len: *mut usize,
) -> c_int {
    let key = || Ok(ObjectKey::Expert { layer, expert });
    // SAFETY: the same contract.
    unsafe { acquire(handle, key, out_lease, out_ptr, out_len) }
}

/// Acquires the trunk component `name` (`attn`, `lm_head`, ...) of
/// transformer layer `layer`, or the unlayered one when `layer` is -1; as
/// `residency_acquire_expert` otherwise.
///
/// # Safety
/// As `residency_acquire_expert`; `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn residency_acquire_trunk(
    handle: *const ResidencyHandle,
    name: *const c_char,
    layer: i64,
    out_lease: *mut *mut ResidencyLease,
    out_ptr: *mut *const u8,
    out_len: *mut usize,
) -> c_int {
    let key = || {
        // SAFETY: the function's contract.
        let name = unsafe { c_str(name, "name") }?.to_str().map_err(|_| {
            Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                "`name` is not UTF-8; trunk names are ASCII",
            )
        })?;
        let layer = match layer {
            -1 => None,
            l => Some(u32::try_from(l).map_err(|_| {
                Failure::new(
                    RESIDENCY_ERR_ARGUMENT,
                    format!(
                        "layer {l}: give a transformer layer, or -1 for an unlayered component"
                    ),
                )
            })?),
        };
        Ok(ObjectKey::Trunk {
            name: name.to_string(),
            layer,
        })
    };
    // SAFETY: the same contract.
    unsafe { acquire(handle, key, out_lease, out_ptr, out_len) }
}

/// For a lease whose bytes are in device memory: the device ordinal and the
/// device address. `RESIDENCY_ERR_NOT_FOUND` when they are in host memory
/// (use the pointer the acquire gave).
///
/// # Safety
/// `lease` is NULL or from an acquire and not released; `out_device` and
/// `out_address` are NULL or point to writable storage of their type.
#[no_mangle]
pub unsafe extern "C" fn residency_lease_device(
    lease: *const ResidencyLease,
    out_device: *mut u32,
    out_address: *mut u64,
) -> c_int {
    status(guard(|| {
        // SAFETY (all three): the function's contract.
        let out_device = unsafe { out(out_device, "out_device") }?;
        let out_address = unsafe { out(out_address, "out_address") }?;
        let lease = unsafe { arg(lease, "lease") }?;
        let (device, address) = lease.0.device().ok_or_else(|| {
            Failure::new(
                RESIDENCY_ERR_NOT_FOUND,
                "the object is in host memory; use the pointer the acquire returned",
            )
        })?;
        (*out_device, *out_address) = (device, address);
        Ok(())
    }))
}

/// Ends a lease: the object may be evicted or moved again. NULL does
/// nothing. A lease may outlive its handle's `residency_close`.
///
/// # Safety
/// `lease` is NULL or from an acquire and not released before.
#[no_mangle]
pub unsafe extern "C" fn residency_release(lease: *mut ResidencyLease) -> c_int {
    status(guard(|| {
        if !lease.is_null() {
            // SAFETY: from `Box::into_raw` in `acquire`, released once.
            drop(unsafe { Box::from_raw(lease) });
        }
        Ok(())
    }))
}

/// Reports the experts `experts[0..count]` one token was routed to in MoE
/// layer `moe_layer` (an ordinal from 0, as in heat tables, not a
/// transformer layer): live heat. Nothing is counted when an argument is
/// out of range. `experts` may be NULL when `count` is 0. Thread-safe.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed; `experts` is
/// NULL or points to `count` readable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn residency_report_route(
    handle: *const ResidencyHandle,
    moe_layer: u32,
    experts: *const u32,
    count: usize,
) -> c_int {
    status(guard(|| {
        // SAFETY: the function's contract.
        let handle = unsafe { arg(handle, "handle") }?;
        let experts: &[u32] = match count {
            0 => &[],
            // SAFETY: non-NULL here; `count` readable values by the contract.
            _ if !experts.is_null() => unsafe { std::slice::from_raw_parts(experts, count) },
            _ => return Err(Failure::null("experts")),
        };
        let mut heat = handle.heat.lock().unwrap_or_else(PoisonError::into_inner);
        heat.record(moe_layer, experts)
    }))
}

/// Calls `text` on the handle and hands out the string it makes.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed.
unsafe fn text_of(
    handle: *const ResidencyHandle,
    text: impl FnOnce(&ResidencyHandle) -> String,
) -> *const c_char {
    guard(|| {
        // SAFETY: the function's contract.
        let handle = unsafe { arg(handle, "handle") }?;
        Ok(handle.hand_out(text(handle)))
    })
    .unwrap_or(ptr::null())
}

/// Live heat as our `json` heat format (`{"model":..,"layers":[[..],..]}`,
/// decayed counts per MoE ordinal and expert), which `residency plan
/// --heat` reads. The string belongs to the handle: valid until the next
/// `residency_heat_json` or `residency_telemetry_*` call on it, or
/// `residency_close`; call these from one thread at a time. NULL on
/// failure.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed.
#[no_mangle]
pub unsafe extern "C" fn residency_heat_json(handle: *const ResidencyHandle) -> *const c_char {
    // SAFETY: the same contract.
    unsafe {
        text_of(handle, |h| {
            let heat = h.heat.lock().unwrap_or_else(PoisonError::into_inner);
            heat.to_json(&h.model)
        })
    }
}

/// The store's telemetry (DESIGN 7) as one line of JSON. The string belongs
/// to the handle, as `residency_heat_json`'s does. NULL on failure.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed.
#[no_mangle]
pub unsafe extern "C" fn residency_telemetry_json(handle: *const ResidencyHandle) -> *const c_char {
    // SAFETY: the same contract.
    unsafe {
        text_of(handle, |h| {
            h.applied.store.telemetry().to_json().to_string()
        })
    }
}

/// The store's telemetry in the Prometheus text format (metrics
/// `residency_*`). The string belongs to the handle, as
/// `residency_heat_json`'s does. NULL on failure.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed.
#[no_mangle]
pub unsafe extern "C" fn residency_telemetry_prometheus(
    handle: *const ResidencyHandle,
) -> *const c_char {
    // SAFETY: the same contract.
    unsafe { text_of(handle, |h| h.applied.store.telemetry().to_prometheus()) }
}

/// Closes a handle: frees the store's residents once no lease holds them
/// (leases still out stay valid until released). NULL does nothing.
///
/// # Safety
/// `handle` is NULL or from `residency_open` and not closed before; no
/// other call on it runs or follows.
#[no_mangle]
pub unsafe extern "C" fn residency_close(handle: *mut ResidencyHandle) -> c_int {
    status(guard(|| {
        if !handle.is_null() {
            // SAFETY: from `Box::into_raw` in `residency_open`, closed once.
            drop(unsafe { Box::from_raw(handle) });
        }
        Ok(())
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: never NULL, NUL-terminated, valid until the next failure here.
        unsafe { CStr::from_ptr(residency_last_error()) }
            .to_str()
            .unwrap()
            .to_string()
    }

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

    #[test]
    fn live_heat_halves_each_layer_on_its_own_tokens() {
        let mut heat = LiveHeat::new(2, 4, 2);
        for route in [&[0, 1][..], &[0, 2]] {
            assert!(heat.record(0, route).is_ok());
        }
        assert!(heat.record(1, &[3]).is_ok());
        let counts = |heat: &LiveHeat| -> serde_json::Value {
            serde_json::from_str::<serde_json::Value>(&heat.to_json("m")).unwrap()["layers"].clone()
        };
        assert_eq!(
            counts(&heat),
            serde_json::json!([[2, 1, 1, 0], [0, 0, 0, 1]])
        );
        // Layer 0's third token halves it first (2 1 1 -> 1 0 0); layer 1,
        // one token in, keeps its count.
        assert!(heat.record(0, &[0]).is_ok());
        assert_eq!(
            counts(&heat),
            serde_json::json!([[2, 0, 0, 0], [0, 0, 0, 1]])
        );
        // Out of range: an error, and nothing counted.
        let bad_layer = heat.record(2, &[0]).unwrap_err();
        assert_eq!(bad_layer.status, RESIDENCY_ERR_ARGUMENT);
        assert!(
            bad_layer.message.contains("2 MoE layers"),
            "{}",
            bad_layer.message
        );
        let bad_expert = heat.record(1, &[1, 4]).unwrap_err();
        assert!(
            bad_expert.message.contains("expert 4"),
            "{}",
            bad_expert.message
        );
        assert_eq!(
            counts(&heat),
            serde_json::json!([[2, 0, 0, 0], [0, 0, 0, 1]])
        );
        let doc: serde_json::Value = serde_json::from_str(&heat.to_json("m")).unwrap();
        assert_eq!(doc["model"], "m");
    }
}
