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
//! KV prefix blocks (DESIGN 8): `residency_kv_open` a block store,
//! `residency_kv_block_keys` of a request's tokens, `residency_kv_lookup`
//! its longest cached prefix (leases), `residency_kv_insert` the blocks it
//! prefilled after it, `residency_kv_release` the leases, close.
//!
//! Objects in device memory: `residency_acquire_*` sets `*out_ptr` to the
//! host address of the bytes when they are in host memory, and to NULL when
//! they are on a GPU; `residency_lease_device` then gives the device ordinal
//! and address. The length is set either way.

use crate::apply::{apply, Applied, ApplyError, ApplyOptions};
use crate::checkpoint::Checkpoint;
use crate::identity::ObjectKey;
use crate::serve::heat::LiveHeat;
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
            heat: Mutex::new(LiveHeat::new(
                &vec![experts; moe_layers.len()],
                halve_every_tokens,
            )),
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
        heat.report_route(moe_layer as usize, experts)
            .map_err(|e| Failure::new(RESIDENCY_ERR_ARGUMENT, e.to_string()))
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

// ---------------------------------------------------------------------
// KV prefix blocks (DESIGN 8): an engine's paged prefix cache.
// ---------------------------------------------------------------------

/// `ResidencyKvOptions.policy`: least recently used block.
pub const RESIDENCY_KV_POLICY_LRU: u32 = 0;
/// Least recently used leaf of the prefix tree (SGLang's radix cache).
pub const RESIDENCY_KV_POLICY_LRU_LEAF: u32 = 1;
/// Lowest `P(reuse) * prefill seconds avoided / bytes`, learned online.
pub const RESIDENCY_KV_POLICY_UTILITY: u32 = 2;
/// Bytes of a `ResidencyKvKey`.
pub const RESIDENCY_KV_KEY_BYTES: usize = 16;
// A literal above, since cbindgen cannot follow a path to its value.
const _: () = assert!(RESIDENCY_KV_KEY_BYTES == crate::kv::key::KEY_BYTES);

/// The key of one KV block: 128 bits of a chained SHA-256 of the parent's
/// key, the block's tokens and the identity (`residency_kv_block_keys`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidencyKvKey {
    pub bytes: [u8; RESIDENCY_KV_KEY_BYTES],
}

/// Everything besides the tokens that changes a block's KV. Each string is
/// NUL-terminated UTF-8, or NULL for none; compared exactly, so give each a
/// canonical spelling (the model's content hash, the template's hash,
/// `rope theta=1e6 scaling=yarn factor=4`, ...). `multimodal[i]` points to
/// `multimodal_lens[i]` bytes (a payload's hash); `tenant_salt` to
/// `tenant_salt_len` bytes, mixed into a request's first block so tenants
/// never share one (NULL with length 0: no salt).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResidencyKvIdentity {
    pub model: *const c_char,
    pub tokenizer: *const c_char,
    pub chat_template: *const c_char,
    pub rope: *const c_char,
    pub kv_version: *const c_char,
    pub adapter: *const c_char,
    pub multimodal: *const *const u8,
    pub multimodal_lens: *const usize,
    pub multimodal_count: usize,
    pub tenant_salt: *const u8,
    pub tenant_salt_len: usize,
}

/// Options of `residency_kv_open`. A zero field takes its default where it
/// has one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResidencyKvOptions {
    /// Tokens per block (0: 64).
    pub block_tokens: u32,
    /// KV bytes of one token, all layers (required).
    pub kv_bytes_per_token: u64,
    /// Blocks host RAM holds (required).
    pub ram_blocks: u64,
    /// Directory of the disk tier, created if needed; NULL: no disk tier.
    pub disk_dir: *const c_char,
    /// Blocks the disk tier holds.
    pub disk_blocks: u64,
    /// `RESIDENCY_KV_POLICY_*`.
    pub policy: u32,
    /// The prefill speed `utility` prices blocks with (0: 10000).
    pub prefill_tokens_per_second: f64,
}

/// What a KV store has done since it was opened, and holds now.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidencyKvCounters {
    pub lookups: u64,
    pub ram_hit_blocks: u64,
    pub disk_hit_blocks: u64,
    pub inserted_blocks: u64,
    pub deduplicated_inserts: u64,
    pub ram_evicted_blocks: u64,
    pub demoted_blocks: u64,
    pub disk_evicted_blocks: u64,
    /// Disk blocks that failed verification at a read (never served).
    pub discarded_blocks: u64,
    pub disk_errors: u64,
    pub ram_blocks: u64,
    pub disk_blocks: u64,
}

/// A KV block store (RAM and disk tiers). Opaque.
pub struct ResidencyKv(crate::kv::BlockStore);

/// Leases on a chain of blocks from a request's first: found by
/// `residency_kv_lookup`, grown by `residency_kv_insert`. Opaque.
pub struct ResidencyKvPrefix(crate::kv::Prefix);

impl From<crate::kv::KvError> for Failure {
    fn from(e: crate::kv::KvError) -> Failure {
        use crate::kv::KvError;
        let status = match &e {
            KvError::Full { .. } => RESIDENCY_ERR_BUDGET,
            KvError::Argument(_) => RESIDENCY_ERR_ARGUMENT,
            KvError::File { .. } | KvError::TraceLine { .. } => RESIDENCY_ERR_INPUT,
        };
        Failure::new(status, e.to_string())
    }
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

/// Opens a KV block store; with `disk_dir`, the directory is created or
/// reopened (temporary files removed, every block verified, the corrupt
/// ones deleted).
///
/// # Safety
/// `options` is NULL or points to a `ResidencyKvOptions` whose `disk_dir`
/// is NULL or NUL-terminated; `out_kv` is NULL or points to writable
/// storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_open(
    options: *const ResidencyKvOptions,
    out_kv: *mut *mut ResidencyKv,
) -> c_int {
    use crate::kv::{BlockStore, DiskConfig, EvictionPolicy, KvStoreConfig};
    status(guard(|| {
        // SAFETY (both): the function's contract.
        let out_kv = unsafe { out(out_kv, "out_kv") }?;
        *out_kv = ptr::null_mut();
        let o = unsafe { arg(options, "options") }?;
        let argument = |m: String| Failure::new(RESIDENCY_ERR_ARGUMENT, m);
        let policy = match o.policy {
            RESIDENCY_KV_POLICY_LRU => EvictionPolicy::Lru,
            RESIDENCY_KV_POLICY_LRU_LEAF => EvictionPolicy::LruLeaf,
            RESIDENCY_KV_POLICY_UTILITY => EvictionPolicy::Utility,
            p => {
                return Err(argument(format!(
                    "policy {p}: give a RESIDENCY_KV_POLICY_* value (0, 1 or 2)"
                )))
            }
        };
        if o.kv_bytes_per_token == 0 || o.ram_blocks == 0 {
            return Err(argument(
                "kv_bytes_per_token and ram_blocks are 0; give the model's KV bytes per token and the blocks RAM may hold".into(),
            ));
        }
        let disk = match o.disk_dir.is_null() {
            true => None,
            false => Some(DiskConfig {
                // SAFETY: non-NULL; NUL-terminated by the contract.
                dir: Path::new(OsStr::from_bytes(
                    unsafe { c_str(o.disk_dir, "disk_dir") }?.to_bytes(),
                ))
                .to_path_buf(),
                blocks: o.disk_blocks as usize,
            }),
        };
        let (store, report) = BlockStore::open(KvStoreConfig {
            block_tokens: if o.block_tokens == 0 {
                64
            } else {
                o.block_tokens
            },
            kv_bytes_per_token: o.kv_bytes_per_token,
            ram_blocks: o.ram_blocks as usize,
            disk,
            policy,
            prefill_tokens_per_second: if o.prefill_tokens_per_second == 0.0 {
                10_000.0
            } else {
                o.prefill_tokens_per_second
            },
        })?;
        // Said once, as residency_open does; the engine's stderr is the log.
        for discarded in report.iter().flat_map(|r| &r.discarded) {
            eprintln!("residency: note: discarded a corrupt KV block: {discarded}");
        }
        *out_kv = Box::into_raw(Box::new(ResidencyKv(store)));
        Ok(())
    }))
}

/// The keys of the full blocks of `tokens[0..token_count]` under
/// `identity`, `block_tokens` tokens each (a partial last block has none).
/// Writes up to `key_capacity` keys to `out_keys` (NULL when 0) and sets
/// `*out_key_count` to the number of full blocks, as snprintf does.
///
/// # Safety
/// `identity` is NULL or a `ResidencyKvIdentity` whose pointers follow its
/// contract; `tokens` is NULL or points to `token_count` values; `out_keys`
/// to `key_capacity` writable keys; `out_key_count` to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_block_keys(
    identity: *const ResidencyKvIdentity,
    tokens: *const u32,
    token_count: usize,
    block_tokens: u32,
    out_keys: *mut ResidencyKvKey,
    key_capacity: usize,
    out_key_count: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_key_count = unsafe { out(out_key_count, "out_key_count") }?;
        *out_key_count = 0;
        let id = unsafe { arg(identity, "identity") }?;
        let tokens = unsafe { slice(tokens, token_count, "tokens") }?;
        if block_tokens == 0 {
            return Err(Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                "block_tokens is 0; give the store's tokens per block",
            ));
        }
        let payloads = unsafe { slice(id.multimodal, id.multimodal_count, "multimodal") }?;
        let lens = unsafe { slice(id.multimodal_lens, id.multimodal_count, "multimodal_lens") }?;
        let multimodal = payloads
            .iter()
            .zip(lens)
            .map(|(&p, &len)| unsafe { slice(p, len, "multimodal[i]") }.map(<[u8]>::to_vec))
            .collect::<Result<Vec<_>, _>>()?;
        let identity = crate::kv::KvIdentity {
            model: unsafe { text(id.model, "model") }?.into(),
            tokenizer: unsafe { text(id.tokenizer, "tokenizer") }?.into(),
            chat_template: unsafe { text(id.chat_template, "chat_template") }?.into(),
            rope: unsafe { text(id.rope, "rope") }?.into(),
            kv_version: unsafe { text(id.kv_version, "kv_version") }?.into(),
            adapter: unsafe { text(id.adapter, "adapter") }?.into(),
            multimodal,
        };
        let salt = unsafe { slice(id.tenant_salt, id.tenant_salt_len, "tenant_salt") }?;
        let keys = crate::kv::block_keys(&identity.digest(), salt, tokens, block_tokens as usize);
        if key_capacity > 0 {
            // SAFETY: `key_capacity` writable keys by the contract.
            let out_keys = unsafe { out(out_keys, "out_keys") }?;
            let out_keys = unsafe { std::slice::from_raw_parts_mut(out_keys, key_capacity) };
            for (slot, key) in out_keys.iter_mut().zip(&keys) {
                slot.bytes = key.0;
            }
        }
        *out_key_count = keys.len();
        Ok(())
    }))
}

/// Leases the longest cached prefix of `keys[0..key_count]` (a request's
/// block keys, first to last), reading blocks from the disk tier back into
/// RAM on the way; `*out_prefix` holds the leases (release it with
/// `residency_kv_release`) and `*out_blocks` is their number (0 is a
/// valid, empty prefix). Thread-safe.
///
/// # Safety
/// `kv` is NULL or from `residency_kv_open` and not closed; `keys` is NULL
/// or points to `key_count` keys; the outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_lookup(
    kv: *const ResidencyKv,
    keys: *const ResidencyKvKey,
    key_count: usize,
    out_prefix: *mut *mut ResidencyKvPrefix,
    out_blocks: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_prefix = unsafe { out(out_prefix, "out_prefix") }?;
        let out_blocks = unsafe { out(out_blocks, "out_blocks") }?;
        (*out_prefix, *out_blocks) = (ptr::null_mut(), 0);
        let kv = unsafe { arg(kv, "kv") }?;
        let keys = unsafe { slice(keys, key_count, "keys") }?;
        let keys: Vec<crate::kv::BlockKey> =
            keys.iter().map(|k| crate::kv::BlockKey(k.bytes)).collect();
        let prefix = kv.0.lookup(&keys);
        *out_blocks = prefix.len();
        *out_prefix = Box::into_raw(Box::new(ResidencyKvPrefix(prefix)));
        Ok(())
    }))
}

/// Block `index` of a prefix: the host address of its KV and its length
/// (`tokens x kv_bytes_per_token` bytes), valid until the prefix is
/// released.
///
/// # Safety
/// `prefix` is NULL or from `residency_kv_lookup` and not released; the
/// outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_prefix_block(
    prefix: *const ResidencyKvPrefix,
    index: usize,
    out_ptr: *mut *const u8,
    out_len: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_ptr = unsafe { out(out_ptr, "out_ptr") }?;
        let out_len = unsafe { out(out_len, "out_len") }?;
        (*out_ptr, *out_len) = (ptr::null(), 0);
        let prefix = unsafe { arg(prefix, "prefix") }?;
        let block = prefix.0.blocks().get(index).ok_or_else(|| {
            Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                format!("index {index}: the prefix has {} blocks", prefix.0.len()),
            )
        })?;
        (*out_ptr, *out_len) = (block.bytes().as_ptr(), block.bytes().len());
        Ok(())
    }))
}

/// Inserts the block `key` of `tokens` tokens after the last block of
/// `prefix` (its parent; an empty prefix: a request's first block), with
/// `bytes[0..len]` (copied; `tokens x kv_bytes_per_token` bytes), and
/// appends its lease to `prefix`. A key cached already is leased as it is.
/// `RESIDENCY_ERR_BUDGET` when every RAM block is leased.
///
/// # Safety
/// `kv` is NULL or from `residency_kv_open` and not closed; `prefix` is
/// NULL or from `residency_kv_lookup` on the same store and not released
/// (and not used by another thread meanwhile); `key` is NULL or points to
/// a key; `bytes` is NULL or points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_insert(
    kv: *const ResidencyKv,
    prefix: *mut ResidencyKvPrefix,
    key: *const ResidencyKvKey,
    tokens: u32,
    bytes: *const u8,
    len: usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let kv = unsafe { arg(kv, "kv") }?;
        let prefix = unsafe { out(prefix, "prefix") }?;
        let key = crate::kv::BlockKey(unsafe { arg(key, "key") }?.bytes);
        let bytes = unsafe { slice(bytes, len, "bytes") }?;
        let lease = kv.0.insert(prefix.0.last(), key, tokens, bytes)?;
        prefix.0.push(lease);
        Ok(())
    }))
}

/// Releases a prefix's leases, its last block first (so its first block
/// ends most recent). NULL does nothing.
///
/// # Safety
/// `prefix` is NULL or from `residency_kv_lookup` and not released before.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_release(prefix: *mut ResidencyKvPrefix) -> c_int {
    status(guard(|| {
        if !prefix.is_null() {
            // SAFETY: from `Box::into_raw` in `residency_kv_lookup`, once.
            drop(unsafe { Box::from_raw(prefix) });
        }
        Ok(())
    }))
}

/// The store's counters and current block counts.
///
/// # Safety
/// `kv` is NULL or from `residency_kv_open` and not closed; `out_counters`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_counters(
    kv: *const ResidencyKv,
    out_counters: *mut ResidencyKvCounters,
) -> c_int {
    status(guard(|| {
        // SAFETY (both): the function's contract.
        let out_counters = unsafe { out(out_counters, "out_counters") }?;
        let kv = unsafe { arg(kv, "kv") }?;
        let c = kv.0.counters();
        let (ram, disk) = kv.0.blocks();
        *out_counters = ResidencyKvCounters {
            lookups: c.lookups,
            ram_hit_blocks: c.ram_hit_blocks,
            disk_hit_blocks: c.disk_hit_blocks,
            inserted_blocks: c.inserted_blocks,
            deduplicated_inserts: c.deduplicated_inserts,
            ram_evicted_blocks: c.ram_evicted_blocks,
            demoted_blocks: c.demoted_blocks,
            disk_evicted_blocks: c.disk_evicted_blocks,
            discarded_blocks: c.discarded_blocks,
            disk_errors: c.disk_errors,
            ram_blocks: ram as u64,
            disk_blocks: disk as u64,
        };
        Ok(())
    }))
}

/// Closes a KV store. Prefixes still out stay valid until released. NULL
/// does nothing.
///
/// # Safety
/// `kv` is NULL or from `residency_kv_open` and not closed before; no other
/// call on it runs or follows.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_close(kv: *mut ResidencyKv) -> c_int {
    status(guard(|| {
        if !kv.is_null() {
            // SAFETY: from `Box::into_raw` in `residency_kv_open`, once.
            drop(unsafe { Box::from_raw(kv) });
        }
        Ok(())
    }))
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
    fn kv_blocks_are_looked_up_inserted_and_released_through_the_abi() {
        let dir = tempfile::tempdir().unwrap();
        let disk = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let options = ResidencyKvOptions {
            block_tokens: 4,
            kv_bytes_per_token: 2,
            ram_blocks: 8,
            disk_dir: disk.as_ptr(),
            disk_blocks: 8,
            policy: RESIDENCY_KV_POLICY_UTILITY,
            prefill_tokens_per_second: 0.0,
        };
        let salt = *b"tenant";
        let image = *b"sha256:image";
        let payloads = [image.as_ptr()];
        let lens = [image.len()];
        let identity = ResidencyKvIdentity {
            model: c"sha256:model".as_ptr(),
            tokenizer: ptr::null(),
            chat_template: c"chatml".as_ptr(),
            rope: ptr::null(),
            kv_version: ptr::null(),
            adapter: ptr::null(),
            multimodal: payloads.as_ptr(),
            multimodal_lens: lens.as_ptr(),
            multimodal_count: 1,
            tenant_salt: salt.as_ptr(),
            tenant_salt_len: salt.len(),
        };
        let tokens: Vec<u32> = (0..10).collect();
        let mut keys = [ResidencyKvKey::default(); 4];
        let (mut count, mut blocks) = (0usize, 0usize);
        let mut kv = ptr::null_mut();
        let mut prefix = ptr::null_mut();
        // SAFETY: every pointer is valid for its contract.
        unsafe {
            assert_eq!(residency_kv_open(&options, &mut kv), RESIDENCY_OK);
            // Capacity 1 of 2 keys: one written, the count says 2.
            let code = residency_kv_block_keys(
                &identity,
                tokens.as_ptr(),
                10,
                4,
                keys.as_mut_ptr(),
                1,
                &mut count,
            );
            assert_eq!((code, count), (RESIDENCY_OK, 2));
            assert_eq!(
                residency_kv_block_keys(
                    &identity,
                    tokens.as_ptr(),
                    10,
                    4,
                    keys.as_mut_ptr(),
                    4,
                    &mut count
                ),
                RESIDENCY_OK
            );
            // The same keys as the Rust API's.
            let expected = crate::kv::block_keys(
                &crate::kv::KvIdentity {
                    model: "sha256:model".into(),
                    chat_template: "chatml".into(),
                    multimodal: vec![image.to_vec()],
                    ..Default::default()
                }
                .digest(),
                &salt,
                &tokens,
                4,
            );
            assert_eq!(
                keys[..2].iter().map(|k| k.bytes).collect::<Vec<_>>(),
                expected.iter().map(|k| k.0).collect::<Vec<_>>()
            );
            // Cold: an empty prefix; insert both blocks after it.
            assert_eq!(
                residency_kv_lookup(kv, keys.as_ptr(), 2, &mut prefix, &mut blocks),
                RESIDENCY_OK
            );
            assert_eq!(blocks, 0);
            let first = [1u8; 8];
            let second = [2u8; 8];
            assert_eq!(
                residency_kv_insert(kv, prefix, &keys[0], 4, first.as_ptr(), 8),
                RESIDENCY_OK
            );
            assert_eq!(
                residency_kv_insert(kv, prefix, &keys[1], 4, second.as_ptr(), 8),
                RESIDENCY_OK
            );
            let code = residency_kv_insert(kv, prefix, &keys[2], 4, second.as_ptr(), 7);
            assert_eq!(code, RESIDENCY_ERR_ARGUMENT);
            assert!(
                last_error().contains("7 bytes for 4 tokens"),
                "{}",
                last_error()
            );
            assert_eq!(residency_kv_release(prefix), RESIDENCY_OK);
            // Warm: both found, their bytes served.
            assert_eq!(
                residency_kv_lookup(kv, keys.as_ptr(), 2, &mut prefix, &mut blocks),
                RESIDENCY_OK
            );
            assert_eq!(blocks, 2);
            let (mut bytes, mut len) = (ptr::null(), 0usize);
            assert_eq!(
                residency_kv_prefix_block(prefix, 1, &mut bytes, &mut len),
                RESIDENCY_OK
            );
            assert_eq!(std::slice::from_raw_parts(bytes, len), second);
            assert_eq!(
                residency_kv_prefix_block(prefix, 2, &mut bytes, &mut len),
                RESIDENCY_ERR_ARGUMENT
            );
            assert_eq!(last_error(), "index 2: the prefix has 2 blocks");
            assert!(bytes.is_null() && len == 0);
            assert_eq!(residency_kv_release(prefix), RESIDENCY_OK);
            let mut counters = ResidencyKvCounters::default();
            assert_eq!(residency_kv_counters(kv, &mut counters), RESIDENCY_OK);
            assert_eq!(
                (
                    counters.lookups,
                    counters.ram_hit_blocks,
                    counters.inserted_blocks,
                    counters.ram_blocks
                ),
                (2, 2, 2, 2)
            );
            assert_eq!(residency_kv_close(kv), RESIDENCY_OK);
            // NULLs are refused by name; releasing and closing NULL is fine.
            assert_eq!(
                residency_kv_lookup(ptr::null(), keys.as_ptr(), 2, &mut prefix, &mut blocks),
                RESIDENCY_ERR_ARGUMENT
            );
            assert!(last_error().contains("`kv` is NULL"));
            assert_eq!(
                residency_kv_block_keys(
                    &identity,
                    ptr::null(),
                    3,
                    4,
                    keys.as_mut_ptr(),
                    4,
                    &mut count
                ),
                RESIDENCY_ERR_ARGUMENT
            );
            assert!(last_error().contains("`tokens` is NULL"));
            let bad = ResidencyKvOptions {
                policy: 7,
                ..options
            };
            assert_eq!(residency_kv_open(&bad, &mut kv), RESIDENCY_ERR_ARGUMENT);
            assert!(kv.is_null());
            assert_eq!(residency_kv_release(ptr::null_mut()), RESIDENCY_OK);
            assert_eq!(residency_kv_close(ptr::null_mut()), RESIDENCY_OK);
        }
    }
}
