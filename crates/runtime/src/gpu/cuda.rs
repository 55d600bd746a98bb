//! The CUDA tier: one [`CudaDevice`] per GPU through cudarc's driver API,
//! with libcuda loaded at run time.
//!
//! A device owns a stream, two pinned staging buffers (write-combined: the
//! host only writes them) with an event each, and the device's
//! stream-ordered memory pool, told to keep what is freed so that objects
//! evicted and loaded again reuse memory instead of mapping it anew (the
//! store's budgets bound what the pool holds). An upload fills one staging
//! buffer while the DMA engine drains the other, then waits for the last
//! copy: the store publishes an object only once all of it is on the device.

use super::{
    device_label, fill_staging, staged_chunks, Backend, Device, DeviceBuffer, DeviceMemory,
    DeviceObject, GpuError, GpuOptions, Opened,
};
use crate::storage::Pinner;
use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError,
    PinnedHostSlice,
};
use std::sync::{Arc, Mutex};

pub struct CudaDevice {
    ordinal: u32,
    name: String,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    staging: Mutex<Staging>,
}

/// Page-locks host regions with `cuMemHostRegister` (portable: every
/// context may DMA from them).
struct CudaPinner {
    ctx: Arc<CudaContext>,
}

impl Pinner for CudaPinner {
    fn pin(&self, ptr: *mut u8, len_bytes: usize) -> bool {
        // SAFETY: `ptr..ptr+len_bytes` is a live mapping the pool owns; the
        // driver only records and locks its pages.
        self.ctx.bind_to_thread().is_ok()
            && unsafe {
                sys::cuMemHostRegister_v2(ptr.cast(), len_bytes, sys::CU_MEMHOSTREGISTER_PORTABLE)
            } == sys::CUresult::CUDA_SUCCESS
    }

    fn unpin(&self, ptr: *mut u8) {
        // SAFETY: `ptr` was registered by `pin` and is still mapped.
        if self.ctx.bind_to_thread().is_ok() {
            unsafe { sys::cuMemHostUnregister(ptr.cast()) };
        }
    }
}

/// Whether `bytes` lie in page-locked (registered or pinned) host memory.
fn is_pinned(bytes: &[u8]) -> bool {
    let mut flags = 0;
    // SAFETY: the driver only looks the address up in its registrations.
    !bytes.is_empty()
        && unsafe { sys::cuMemHostGetFlags(&mut flags, bytes.as_ptr() as *mut _) }
            == sys::CUresult::CUDA_SUCCESS
}

struct Staging {
    buffers: [PinnedHostSlice<u8>; 2],
    /// `drained[k]` is recorded after the copy out of `buffers[k]`.
    drained: [CudaEvent; 2],
}

/// Opens every CUDA device (each `Ok`, or why it would not open); an error
/// when there is no driver or no device at all.
pub fn open_all(options: &GpuOptions) -> Opened {
    let unavailable = |reason: String| GpuError::Unavailable {
        backend: Backend::Cuda,
        reason,
    };
    // SAFETY: only tries to dlopen libcuda under its usual names; every
    // other cudarc call panics when the library is missing, so this comes
    // first.
    if !unsafe { sys::is_culib_present() } {
        return Err(unavailable(
            "the CUDA driver (libcuda.so) was not found; install the NVIDIA driver to use the GPUs"
                .into(),
        ));
    }
    let count = CudaContext::device_count()
        .map_err(|e| unavailable(format!("{}; check the driver with nvidia-smi", describe(e))))?;
    if count <= 0 {
        return Err(unavailable("the driver sees no device".into()));
    }
    Ok((0..count as u32)
        .map(|ordinal| CudaDevice::open(ordinal, options).map(|d| Arc::new(d) as Arc<dyn Device>))
        .collect())
}

impl CudaDevice {
    pub(crate) fn open(ordinal: u32, options: &GpuOptions) -> Result<CudaDevice, GpuError> {
        let ctx =
            CudaContext::new(ordinal as usize).map_err(failed(ordinal, "opening the context"))?;
        let name = ctx.name().map_err(failed(ordinal, "reading the name"))?;
        if ctx.has_async_alloc() {
            keep_freed_memory(&ctx).map_err(failed(ordinal, "configuring the memory pool"))?;
        }
        let stream = ctx
            .new_stream()
            .map_err(failed(ordinal, "creating a stream"))?;
        let chunk = options.staging_chunk_bytes.max(1);
        let pinned = || {
            // SAFETY: staging bytes are only copied to the device after
            // `fill_staging` wrote them, so their initial contents are never
            // read.
            unsafe { ctx.alloc_pinned::<u8>(chunk) }
                .map_err(failed(ordinal, "allocating pinned staging memory"))
        };
        let event = || {
            ctx.new_event(None)
                .map_err(failed(ordinal, "creating an event"))
        };
        Ok(CudaDevice {
            ordinal,
            name,
            ctx: ctx.clone(),
            staging: Mutex::new(Staging {
                buffers: [pinned()?, pinned()?],
                drained: [event()?, event()?],
            }),
            stream,
        })
    }
}

impl Device for CudaDevice {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn upload(&self, bytes: &[u8]) -> Result<Arc<dyn DeviceBuffer>, GpuError> {
        let mut staging = self.staging.lock().unwrap();
        let Staging { buffers, drained } = &mut *staging;
        let chunk = buffers[0].len();
        // SAFETY: the loop below writes every byte before the buffer is
        // handed out (CUDA cannot allocate 0 bytes: an empty object gets 1).
        let mut memory = unsafe { self.stream.alloc::<u8>(bytes.len().max(1)) }.map_err(failed(
            self.ordinal,
            &format!("allocating {} bytes", bytes.len()),
        ))?;
        let copying = failed(self.ordinal, "copying to the device");
        self.ctx.bind_to_thread().map_err(&copying)?;
        if is_pinned(bytes) {
            // Page-locked already (a pinned pool's slab): one DMA, no staging.
            self.stream
                .memcpy_htod(bytes, &mut memory)
                .map_err(&copying)?;
            self.stream.synchronize().map_err(&copying)?;
            return Ok(self.buffer(bytes.len(), memory));
        }
        for (k, range) in staged_chunks(bytes.len(), chunk) {
            drained[k].synchronize().map_err(&copying)?;
            let staged = &mut buffers[k].as_mut_slice().map_err(&copying)?[..range.len()];
            fill_staging(staged, &bytes[range.clone()]);
            // `staged` is pinned, so this copy runs asynchronously although
            // cudarc sees a plain slice: the buffer is written again only
            // after `drained[k]`, recorded behind the copy, has completed.
            self.stream
                .memcpy_htod(&*staged, &mut memory.slice_mut(range))
                .map_err(&copying)?;
            drained[k].record(&self.stream).map_err(&copying)?;
        }
        self.stream.synchronize().map_err(&copying)?;
        Ok(self.buffer(bytes.len(), memory))
    }

    fn pinner(&self) -> Option<Arc<dyn Pinner>> {
        Some(Arc::new(CudaPinner {
            ctx: self.ctx.clone(),
        }))
    }
}

impl CudaDevice {
    fn buffer(&self, len: usize, memory: CudaSlice<u8>) -> Arc<dyn DeviceBuffer> {
        let address = memory.device_ptr(&self.stream).0;
        Arc::new(DeviceObject {
            ordinal: self.ordinal,
            len,
            address,
            memory,
        })
    }
}

/// A CUDA object's memory goes back to the device's pool on drop.
impl DeviceMemory for CudaSlice<u8> {
    fn read_back(&self, ordinal: u32, len: usize) -> Result<Vec<u8>, GpuError> {
        let reading = failed(ordinal, "reading back");
        let mut bytes = vec![0u8; len];
        if len > 0 {
            let stream = self.stream();
            stream
                .memcpy_dtoh(&self.slice(..len), &mut bytes)
                .map_err(&reading)?;
            stream.synchronize().map_err(&reading)?;
        }
        Ok(bytes)
    }
}

/// Sets the release threshold of the device's default memory pool to
/// "never": freed blocks stay mapped for the next allocation.
fn keep_freed_memory(ctx: &CudaContext) -> Result<(), DriverError> {
    let mut threshold_bytes = u64::MAX;
    // SAFETY: `cu_device` comes from a live context; the release threshold
    // attribute takes a `u64`, which `threshold_bytes` is and outlives the call.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device())?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold_bytes as *mut u64).cast(),
        )
    }
}

/// Turns a driver error met while doing `action` on device `ordinal` into
/// one line with a fix.
fn failed(ordinal: u32, action: &str) -> impl Fn(DriverError) -> GpuError {
    let action = action.to_string();
    move |e| GpuError::Failed {
        device: device_label(Backend::Cuda, ordinal),
        action: action.clone(),
        problem: describe(e),
        fix: if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            "free device memory, or plan with the memory this GPU really has free"
        } else {
            "check the device and driver with nvidia-smi"
        }
        .into(),
    }
}

/// `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`.
pub fn describe(e: DriverError) -> String {
    let text =
        |s: Result<&std::ffi::CStr, DriverError>| s.map(|s| s.to_string_lossy().into_owned()).ok();
    match (text(e.error_name()), text(e.error_string())) {
        (Some(name), Some(string)) => format!("{name} ({string})"),
        _ => format!("{:?}", e.0),
    }
}
