//! The Vulkan tier: one [`VulkanDevice`] per GPU through ash, with the
//! Vulkan loader opened at run time (an error, not a panic, where it is
//! missing).
//!
//! Each object gets its own DEVICE_LOCAL buffer with a buffer device
//! address (Vulkan 1.2), which is what `ObjectBytes::device` reports. A
//! device owns one HOST_VISIBLE | HOST_COHERENT staging buffer, mapped
//! once, in two halves with a command buffer and a fence each, on a
//! transfer queue (a dedicated DMA queue family where the device has one):
//! the host fills one half while the queue copies out of the other. The
//! buffers are created EXCLUSIVE to the transfer queue's family; an engine
//! that reads them on another family transfers ownership first.

use super::{
    device_label, fill_staging, staged_chunks, Backend, Device, DeviceBuffer, DeviceMemory,
    DeviceObject, GpuError, GpuOptions, Opened,
};
use ash::vk;
use std::sync::{Arc, Mutex};

/// How long one copy may take before the device is taken to be hung.
const COPY_TIMEOUT_NS: u64 = 60_000_000_000;

pub struct VulkanDevice {
    ordinal: u32,
    name: String,
    shared: Arc<Shared>,
}

/// What the device and its buffers share; destroyed with the last of them.
struct Shared {
    device: ash::Device,
    memory: vk::PhysicalDeviceMemoryProperties,
    transfer: Mutex<Transfer>,
    chunk_bytes: usize,
    /// Dropped after `device` is destroyed (fields drop after `Drop::drop`).
    _instance: Arc<Instance>,
}

struct Instance {
    instance: ash::Instance,
    /// Keeps libvulkan loaded while the instance lives.
    _entry: ash::Entry,
}

/// The transfer queue and the staging buffer, used under the mutex.
struct Transfer {
    queue: vk::Queue,
    pool: vk::CommandPool,
    commands: [vk::CommandBuffer; 2],
    /// `fences[k]` signals when the copy through half `k` has finished.
    fences: [vk::Fence; 2],
    staging: vk::Buffer,
    staging_memory: vk::DeviceMemory,
    mapped: *mut u8,
}

// SAFETY: `mapped` points into the staging memory, which lives as long as
// the `Shared` holding this `Transfer`; it is only dereferenced under the
// mutex around it.
unsafe impl Send for Transfer {}

/// Opens every Vulkan GPU (CPU implementations too with
/// `options.vulkan_cpu`), each `Ok` or why it would not open; an error when
/// there is no loader or no device at all.
pub fn open_all(options: &GpuOptions) -> Opened {
    let unavailable = |reason: String| GpuError::Unavailable {
        backend: Backend::Vulkan,
        reason,
    };
    // SAFETY: dlopens the Vulkan loader and resolves its entry points; ash
    // returns an error where the library or a symbol is missing.
    let entry = unsafe { ash::Entry::load() }.map_err(|e| {
        unavailable(format!(
            "the Vulkan loader (libvulkan.so.1) was not found ({e}); install libvulkan1 and the GPU's driver"
        ))
    })?;
    let app = vk::ApplicationInfo::default()
        .application_name(c"residency")
        .api_version(vk::API_VERSION_1_2);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: `info` and what it points to outlive the call.
    let instance = unsafe { entry.create_instance(&info, None) }.map_err(|e| {
        unavailable(format!(
            "creating an instance: {e}; install the GPU's Vulkan driver (ICD)"
        ))
    })?;
    let instance = Arc::new(Instance {
        instance,
        _entry: entry,
    });
    // SAFETY: the instance is live; properties are plain data.
    let candidates: Vec<_> = unsafe {
        let physical = instance
            .instance
            .enumerate_physical_devices()
            .map_err(|e| unavailable(format!("listing devices: {e}")))?;
        physical
            .into_iter()
            .map(|p| (p, instance.instance.get_physical_device_properties(p)))
            .filter(|(_, props)| {
                options.vulkan_cpu || props.device_type != vk::PhysicalDeviceType::CPU
            })
            .collect()
    };
    if candidates.is_empty() {
        return Err(unavailable(
            "the loader sees no GPU (CPU implementations are not a GPU tier)".into(),
        ));
    }
    Ok(candidates
        .into_iter()
        .enumerate()
        .map(|(ordinal, (physical, props))| {
            VulkanDevice::open(&instance, physical, &props, ordinal as u32, options)
                .map(|d| Arc::new(d) as Arc<dyn Device>)
        })
        .collect())
}

impl VulkanDevice {
    /// Opens `physical` as device `ordinal`: checks what the tier needs,
    /// creates the device on a transfer queue and sets up its staging.
    fn open(
        instance: &Arc<Instance>,
        physical: vk::PhysicalDevice,
        props: &vk::PhysicalDeviceProperties,
        ordinal: u32,
        options: &GpuOptions,
    ) -> Result<VulkanDevice, GpuError> {
        let opening = failed(ordinal, "opening");
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if props.api_version < vk::API_VERSION_1_2 {
            return Err(unusable(
                ordinal,
                format!(
                    "it offers Vulkan {}.{}; buffer device addresses need 1.2",
                    vk::api_version_major(props.api_version),
                    vk::api_version_minor(props.api_version)
                ),
            ));
        }
        let vk_instance = &instance.instance;
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        // SAFETY: the instance is live and 1.2; `features` points to `v12`
        // for the duration of the call.
        let (families, memory) = unsafe {
            let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
            vk_instance.get_physical_device_features2(physical, &mut features);
            (
                vk_instance.get_physical_device_queue_family_properties(physical),
                vk_instance.get_physical_device_memory_properties(physical),
            )
        };
        if v12.buffer_device_address == vk::FALSE {
            return Err(unusable(ordinal, "it lacks bufferDeviceAddress".into()));
        }
        let family = transfer_family(&families)
            .ok_or_else(|| unusable(ordinal, "it has no queue that copies".into()))?
            as u32;
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut enable = vk::PhysicalDeviceVulkan12Features::default().buffer_device_address(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut enable);
        // SAFETY: `info` and what it points to outlive the call; the feature
        // it enables was checked above.
        let device =
            unsafe { vk_instance.create_device(physical, &info, None) }.map_err(&opening)?;
        let mut shared = Shared::new(device, family, memory, options, instance);
        shared.set_up_transfer(family, &opening)?;
        Ok(VulkanDevice {
            ordinal,
            name,
            shared: Arc::new(shared),
        })
    }
}

/// The queue family copies go to, if the device has one.
fn transfer_family(families: &[vk::QueueFamilyProperties]) -> Option<usize> {
    // Graphics and compute families can copy too; a family that can do
    // nothing else is the DMA engine, free of other work.
    let copies = vk::QueueFlags::TRANSFER | vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE;
    families
        .iter()
        .position(|f| f.queue_flags & copies == vk::QueueFlags::TRANSFER)
        .or_else(|| {
            families
                .iter()
                .position(|f| f.queue_flags.intersects(copies))
        })
}

impl Shared {
    /// The shared state of `device`, created with one queue of `family`,
    /// its transfer handles not created yet.
    fn new(
        device: ash::Device,
        family: u32,
        memory: vk::PhysicalDeviceMemoryProperties,
        options: &GpuOptions,
        instance: &Arc<Instance>,
    ) -> Shared {
        // Every handle starts null, so that `Shared`'s drop frees exactly
        // what was created when a step of `set_up_transfer` fails.
        Shared {
            // SAFETY: family `family` was created with one queue.
            transfer: Mutex::new(Transfer {
                queue: unsafe { device.get_device_queue(family, 0) },
                pool: vk::CommandPool::null(),
                commands: [vk::CommandBuffer::null(); 2],
                fences: [vk::Fence::null(); 2],
                staging: vk::Buffer::null(),
                staging_memory: vk::DeviceMemory::null(),
                mapped: std::ptr::null_mut(),
            }),
            device,
            memory,
            chunk_bytes: options.staging_chunk_bytes.max(1),
            _instance: Arc::clone(instance),
        }
    }

    /// Creates the staging buffer (mapped, in two halves), the command pool
    /// on `family` (the queue's), and a command buffer and a fence per half;
    /// on an error, what was created is freed when `self` drops.
    fn set_up_transfer(
        &mut self,
        family: u32,
        opening: &impl Fn(vk::Result) -> GpuError,
    ) -> Result<(), GpuError> {
        let staging_bytes = 2 * self.chunk_bytes as u64;
        let (staging, staging_memory) = self.allocate(
            staging_bytes,
            vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
            vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT,
        );
        let device = &self.device;
        let transfer = self.transfer.get_mut().unwrap();
        transfer.staging = staging.map_err(&opening)?;
        transfer.staging_memory = staging_memory.map_err(&opening)?;
        // SAFETY: the handles passed are live and belong to `device`; the
        // create infos outlive the calls.
        unsafe {
            transfer.mapped = device
                .map_memory(
                    transfer.staging_memory,
                    0,
                    staging_bytes,
                    vk::MemoryMapFlags::empty(),
                )
                .map_err(&opening)?
                .cast();
            transfer.pool = device
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(family)
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .map_err(&opening)?;
            let commands = device
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(transfer.pool)
                        .command_buffer_count(2),
                )
                .map_err(&opening)?;
            transfer.commands = [commands[0], commands[1]];
            for fence in &mut transfer.fences {
                // Signalled: both halves start free.
                *fence = device
                    .create_fence(
                        &vk::FenceCreateInfo::default().flags(vk::FenceCreateFlags::SIGNALED),
                        None,
                    )
                    .map_err(&opening)?;
            }
        }
        Ok(())
    }

    /// A buffer of `size_bytes` bound to new memory of the first type with
    /// `properties` (the spec orders types so that the first match has the
    /// fewest extra properties: plain DEVICE_LOCAL before DEVICE_LOCAL |
    /// HOST_VISIBLE). The buffer is returned even when its memory failed,
    /// so that the caller frees it.
    fn allocate(
        &self,
        size_bytes: u64,
        usage: vk::BufferUsageFlags,
        properties: vk::MemoryPropertyFlags,
    ) -> (
        Result<vk::Buffer, vk::Result>,
        Result<vk::DeviceMemory, vk::Result>,
    ) {
        let info = vk::BufferCreateInfo::default()
            .size(size_bytes)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: the device is live; the create and allocate infos (and
        // the flags chained to them) outlive the calls; the memory is bound
        // once, at offset 0, to the buffer it was sized for.
        unsafe {
            let buffer = match self.device.create_buffer(&info, None) {
                Ok(b) => b,
                Err(e) => return (Err(e), Err(e)),
            };
            let needs = self.device.get_buffer_memory_requirements(buffer);
            let Some(memory_type) = (0..self.memory.memory_type_count).find(|&t| {
                needs.memory_type_bits & (1 << t) != 0
                    && self.memory.memory_types[t as usize]
                        .property_flags
                        .contains(properties)
            }) else {
                return (Ok(buffer), Err(vk::Result::ERROR_FEATURE_NOT_PRESENT));
            };
            let mut flags = vk::MemoryAllocateFlagsInfo::default()
                .flags(vk::MemoryAllocateFlags::DEVICE_ADDRESS);
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(needs.size)
                .memory_type_index(memory_type)
                .push_next(&mut flags);
            let memory = self.device.allocate_memory(&alloc, None).and_then(|m| {
                match self.device.bind_buffer_memory(buffer, m, 0) {
                    Ok(()) => Ok(m),
                    Err(e) => {
                        self.device.free_memory(m, None);
                        Err(e)
                    }
                }
            });
            (Ok(buffer), memory)
        }
    }
}

impl Transfer {
    /// Waits until the copy last submitted through half `k` has finished.
    fn wait(&self, device: &ash::Device, k: usize) -> Result<(), vk::Result> {
        // SAFETY: the fence belongs to `device`.
        unsafe { device.wait_for_fences(&[self.fences[k]], true, COPY_TIMEOUT_NS) }
    }

    /// Submits one copy through command buffer `k`, signalling fence `k`.
    fn copy(
        &self,
        device: &ash::Device,
        k: usize,
        from: vk::Buffer,
        to: vk::Buffer,
        region: vk::BufferCopy,
    ) -> Result<(), vk::Result> {
        let commands = [self.commands[k]];
        // The copy's writes made visible to the host: a read-back reads the
        // staging memory next (an upload does not need it; it costs nothing).
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        // SAFETY: every handle belongs to `device`; fence `k` is signalled
        // (the caller waited), so command buffer `k` is not in flight and
        // may be re-recorded; the queue is used only under the mutex.
        unsafe {
            device.reset_fences(&[self.fences[k]])?;
            device.begin_command_buffer(
                commands[0],
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )?;
            device.cmd_copy_buffer(commands[0], from, to, &[region]);
            device.cmd_pipeline_barrier(
                commands[0],
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &to_host,
                &[],
                &[],
            );
            device.end_command_buffer(commands[0])?;
            device.queue_submit(
                self.queue,
                &[vk::SubmitInfo::default().command_buffers(&commands)],
                self.fences[k],
            )
        }
    }

    /// The first `len` bytes of staging half `k`.
    fn half(&mut self, k: usize, chunk_bytes: usize, len: usize) -> &mut [u8] {
        assert!(k < 2 && len <= chunk_bytes);
        // SAFETY: `mapped` maps 2 * chunk_bytes coherent bytes for the life
        // of `self`; half `k` is not being copied (its fence was waited on)
        // and `&mut self` keeps anyone else from it.
        unsafe { std::slice::from_raw_parts_mut(self.mapped.add(k * chunk_bytes), len) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let t = self.transfer.get_mut().unwrap_or_else(|p| p.into_inner());
        // SAFETY: every buffer holds an `Arc<Shared>`, so none is left;
        // waiting for idle ends any copy before what it uses is destroyed.
        // Null handles (a failed open) are ignored by Vulkan.
        unsafe {
            let _ = self.device.device_wait_idle();
            for fence in t.fences {
                self.device.destroy_fence(fence, None);
            }
            self.device.destroy_command_pool(t.pool, None);
            self.device.destroy_buffer(t.staging, None);
            self.device.free_memory(t.staging_memory, None);
            self.device.destroy_device(None);
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device made from it holds an `Arc<Instance>` and
        // was destroyed before the last one went.
        unsafe { self.instance.destroy_instance(None) }
    }
}

impl Device for VulkanDevice {
    fn backend(&self) -> Backend {
        Backend::Vulkan
    }

    fn ordinal(&self) -> u32 {
        self.ordinal
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn upload(&self, bytes: &[u8]) -> Result<Arc<dyn DeviceBuffer>, GpuError> {
        let shared = &self.shared;
        // Vulkan has no empty buffers: an empty object gets 1 byte.
        let (buffer, allocated) = shared.allocate(
            bytes.len().max(1) as u64,
            vk::BufferUsageFlags::TRANSFER_SRC
                | vk::BufferUsageFlags::TRANSFER_DST
                | vk::BufferUsageFlags::STORAGE_BUFFER
                | vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS,
            vk::MemoryPropertyFlags::DEVICE_LOCAL,
        );
        let allocating = failed(self.ordinal, &format!("allocating {} bytes", bytes.len()));
        let mut memory = VulkanMemory {
            buffer: buffer.map_err(&allocating)?,
            memory: vk::DeviceMemory::null(),
            shared: Arc::clone(shared),
        };
        memory.memory = allocated.map_err(&allocating)?;
        // SAFETY: the buffer was created with SHADER_DEVICE_ADDRESS and bound
        // to memory allocated with DEVICE_ADDRESS.
        let address = unsafe {
            shared.device.get_buffer_device_address(
                &vk::BufferDeviceAddressInfo::default().buffer(memory.buffer),
            )
        };
        let object = DeviceObject {
            ordinal: self.ordinal,
            len: bytes.len(),
            address,
            memory,
        };
        let mut transfer = shared.transfer.lock().unwrap();
        let mut sent = Ok(());
        for (k, range) in staged_chunks(bytes.len(), shared.chunk_bytes) {
            sent = transfer.wait(&shared.device, k).and_then(|()| {
                fill_staging(
                    transfer.half(k, shared.chunk_bytes, range.len()),
                    &bytes[range.clone()],
                );
                let region = vk::BufferCopy {
                    src_offset: (k * shared.chunk_bytes) as u64,
                    dst_offset: range.start as u64,
                    size: range.len() as u64,
                };
                transfer.copy(
                    &shared.device,
                    k,
                    transfer.staging,
                    object.memory.buffer,
                    region,
                )
            });
            if sent.is_err() {
                break;
            }
        }
        // Both halves drained before the buffer is published, or, after an
        // error, before it is freed.
        let drained = (0..2).try_for_each(|k| transfer.wait(&shared.device, k));
        sent.and(drained)
            .map_err(failed(self.ordinal, "copying to the device"))?;
        Ok(Arc::new(object))
    }
}

/// A Vulkan object's buffer and the memory bound to it; both freed on drop.
struct VulkanMemory {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    shared: Arc<Shared>,
}

impl DeviceMemory for VulkanMemory {
    fn read_back(&self, ordinal: u32, len: usize) -> Result<Vec<u8>, GpuError> {
        let shared = &self.shared;
        let mut bytes = vec![0u8; len];
        let mut transfer = shared.transfer.lock().unwrap();
        // One chunk at a time: verification, not a hot path.
        for (k, range) in staged_chunks(len, shared.chunk_bytes) {
            let region = vk::BufferCopy {
                src_offset: range.start as u64,
                dst_offset: (k * shared.chunk_bytes) as u64,
                size: range.len() as u64,
            };
            transfer
                .wait(&shared.device, k)
                .and_then(|()| {
                    transfer.copy(&shared.device, k, self.buffer, transfer.staging, region)
                })
                .and_then(|()| transfer.wait(&shared.device, k))
                .map_err(failed(ordinal, "reading back"))?;
            bytes[range.clone()].copy_from_slice(transfer.half(k, shared.chunk_bytes, range.len()));
        }
        Ok(bytes)
    }
}

impl Drop for VulkanMemory {
    fn drop(&mut self) {
        // SAFETY: no copy into or out of the buffer is in flight (uploads
        // and read-backs wait for theirs); null memory is ignored.
        unsafe {
            self.shared.device.destroy_buffer(self.buffer, None);
            self.shared.device.free_memory(self.memory, None);
        }
    }
}

/// Why device `ordinal` cannot serve as a GPU tier.
fn unusable(ordinal: u32, problem: String) -> GpuError {
    GpuError::Failed {
        device: device_label(Backend::Vulkan, ordinal),
        action: "opening".into(),
        problem,
        fix: "update the GPU's Vulkan driver, or use CUDA".into(),
    }
}

/// Turns a Vulkan error met while doing `action` on device `ordinal` into
/// one line with a fix.
fn failed(ordinal: u32, action: &str) -> impl Fn(vk::Result) -> GpuError {
    let action = action.to_string();
    move |e| GpuError::Failed {
        device: device_label(Backend::Vulkan, ordinal),
        action: action.clone(),
        problem: e.to_string(),
        fix: match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                "free memory, or plan with the memory this GPU really has free"
            }
            vk::Result::ERROR_TOO_MANY_OBJECTS => {
                "the driver caps the number of allocations; use the CUDA tier"
            }
            vk::Result::ERROR_FEATURE_NOT_PRESENT => {
                "the device has no memory of the kind needed; use another device"
            }
            vk::Result::TIMEOUT => "a copy did not finish within 60 s; check the device",
            _ => "check the device with vulkaninfo",
        }
        .into(),
    }
}
