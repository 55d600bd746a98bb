//! The object store's C ABI: `residency_open` applies a plan to its
//! checkpoint, `residency_acquire_expert` and `residency_acquire_trunk`
//! lease objects, `residency_release` ends a lease, `residency_report_route`
//! feeds live heat, the heat and telemetry come out as text, and
//! `residency_close` closes the handle.
//!
//! Objects in device memory: `residency_acquire_*` sets `*out_ptr` to the
//! host address of the bytes when they are in host memory, and to NULL when
//! they are on a GPU; `residency_lease_device` then gives the device ordinal
//! and address. The length is set either way.

#[cfg(test)]
mod tests;

use super::{
    c_str, guard, handles, out, status, Failure, RESIDENCY_ERR_ARGUMENT, RESIDENCY_ERR_BUDGET,
    RESIDENCY_ERR_INPUT, RESIDENCY_ERR_LOAD, RESIDENCY_ERR_NOT_FOUND,
};
use residency_core::plan::Plan;
use residency_runtime::apply::{apply, Applied, ApplyError, ApplyOptions};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::identity::ObjectKey;
use residency_runtime::serve::heat::LiveHeat;
use residency_runtime::storage::{open_backend, BackendKind};
use residency_runtime::store::{Lease, StoreError};
use std::ffi::{c_char, c_int, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, PoisonError};

/// Live heat's default decay: every counter halved every 1024 tokens, as
/// Colibri's VRAM tier does (docs/formats.md section 4).
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

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        let status = match &e {
            StoreError::Budget(_)
            | StoreError::PinsTooLarge { .. }
            | StoreError::OverTier { .. } => RESIDENCY_ERR_BUDGET,
            StoreError::Load { .. } => RESIDENCY_ERR_LOAD,
            StoreError::NoSuchObject { .. } => RESIDENCY_ERR_NOT_FOUND,
            StoreError::Policy { .. }
            | StoreError::Capacities { .. }
            | StoreError::CannotResize { .. } => RESIDENCY_ERR_INPUT,
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
        *out_handle = handles::give(handle);
        Ok(())
    }))
}

/// Acquires the object `key()` names and writes the lease, the host address
/// of its bytes (NULL when they are in device memory) and their length; on
/// failure the outputs are NULL and 0.
///
/// # Safety
/// `handle` is any value (NULL, one closed already or not from
/// `residency_open` is refused); each `out_*` is
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
        let handle = handles::live(handle, "handle")?;
        let lease = handle.acquire(&key)?;
        *out_ptr = lease.host().map_or(ptr::null(), <[u8]>::as_ptr);
        *out_len = lease.len();
        *out_lease = handles::give(ResidencyLease(lease));
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
/// `handle` is any value (NULL, one closed already or not from
/// `residency_open` is refused); each `out_*` is
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
/// `lease` is any value (NULL or one released already is refused);
/// `out_device` and
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
        let lease = handles::live(lease, "lease")?;
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
/// `lease` is any value: NULL does nothing, and one released already, or
/// not from an acquire, is refused.
#[no_mangle]
pub unsafe extern "C" fn residency_release(lease: *mut ResidencyLease) -> c_int {
    status(guard(|| handles::take(lease, "lease")))
}

/// Reports the experts `experts[0..count]` one token was routed to in MoE
/// layer `moe_layer` (an ordinal from 0, as in heat tables, not a
/// transformer layer): live heat. Nothing is counted when an argument is
/// out of range. `experts` may be NULL when `count` is 0. Thread-safe.
///
/// # Safety
/// `handle` is any value (NULL or one closed already is refused); `experts` is
/// NULL or points to `count` readable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn residency_report_route(
    handle: *const ResidencyHandle,
    moe_layer: u32,
    experts: *const u32,
    count: usize,
) -> c_int {
    status(guard(|| {
        let handle = handles::live(handle, "handle")?;
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
/// `handle` is any value (NULL or one closed already gives NULL).
unsafe fn text_of(
    handle: *const ResidencyHandle,
    text: impl FnOnce(&ResidencyHandle) -> String,
) -> *const c_char {
    guard(|| {
        let handle = handles::live(handle, "handle")?;
        Ok(handle.hand_out(text(&handle)))
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
/// `handle` is any value (NULL or one closed already gives NULL).
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

/// The store's telemetry (docs/design.md §7) as one line of JSON. The string belongs
/// to the handle, as `residency_heat_json`'s does. NULL on failure.
///
/// # Safety
/// `handle` is any value (NULL or one closed already gives NULL).
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
/// `handle` is any value (NULL or one closed already gives NULL).
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
/// `handle` is any value: NULL does nothing, and a second close, or a
/// handle not from `residency_open`, is refused. A call on it still
/// running keeps it until that call returns; later calls are refused.
#[no_mangle]
pub unsafe extern "C" fn residency_close(handle: *mut ResidencyHandle) -> c_int {
    status(guard(|| handles::take(handle, "handle")))
}
