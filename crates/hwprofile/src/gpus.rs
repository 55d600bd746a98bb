//! GPUs for a profile: through the CUDA driver (name, memory, memory bus,
//! PCI bus id, and through sysfs the card's NUMA node and PCIe link), else
//! through Vulkan (discrete GPUs: name, device-local memory, PCI bus id
//! where the driver offers `VK_EXT_pci_bus_info`). Both libraries are
//! loaded at run time: without them there is no GPU, and the reason why.

use super::system::{pci_facts, PciFacts};
use ash::vk;
use cudarc::driver::sys::CUdevice_attribute as Attribute;
use cudarc::driver::{result, sys, CudaContext};
use residency_runtime::gpu::cuda::describe;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// One GPU as its driver and sysfs show it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFacts {
    /// `cuda:0`, `vulkan:1`.
    pub label: String,
    pub name: String,
    pub vram_bytes: u64,
    /// Memory in use when detected (other processes, and the context
    /// detection opened, about what an engine's own context takes), where
    /// the driver says.
    pub used_bytes: Option<u64>,
    /// Peak memory bandwidth, bytes per second, and how it was computed.
    pub peak_memory: Option<(f64, String)>,
    pub pci: Option<PciFacts>,
}

/// The GPUs: CUDA's when it has any, else Vulkan's discrete GPUs; and why
/// each backend gave none.
pub fn detect_gpus() -> (Vec<GpuFacts>, Vec<String>) {
    let mut reasons = Vec::new();
    for backend in [
        cuda_gpus as fn() -> Result<Vec<GpuFacts>, String>,
        vulkan_gpus,
    ] {
        match backend() {
            Ok(gpus) if !gpus.is_empty() => return (gpus, Vec::new()),
            Ok(_) => {}
            Err(reason) => reasons.push(reason),
        }
    }
    (Vec::new(), reasons)
}

fn cuda_gpus() -> Result<Vec<GpuFacts>, String> {
    // SAFETY: only tries to dlopen libcuda; every other cudarc call panics
    // when the library is missing, so this comes first.
    if !unsafe { sys::is_culib_present() } {
        return Err("CUDA: the driver (libcuda.so) was not found".into());
    }
    // cudarc panics where a symbol it binds lazily is missing (a driver
    // older than its bindings): that is a reason, not a crash.
    catch_unwind(AssertUnwindSafe(|| {
        result::init().map_err(|e| format!("CUDA: cuInit: {}", describe(e)))?;
        let count = result::device::get_count()
            .map_err(|e| format!("CUDA: counting devices: {}", describe(e)))?;
        if count == 0 {
            return Err("CUDA: the driver sees no device".into());
        }
        (0..count).map(cuda_gpu).collect()
    }))
    .unwrap_or_else(|_| {
        Err(
            "CUDA: the driver library failed (a symbol is missing); update the NVIDIA driver"
                .into(),
        )
    })
}

fn cuda_gpu(ordinal: i32) -> Result<GpuFacts, String> {
    let label = format!("cuda:{ordinal}");
    let failed = |what: &str| {
        let label = label.clone();
        let what = what.to_string();
        move |e| format!("{label}: {what}: {}", describe(e))
    };
    let dev = result::device::get(ordinal).map_err(failed("opening"))?;
    let name = result::device::get_name(dev).map_err(failed("reading the name"))?;
    // SAFETY: `dev` came from cuDeviceGet.
    let vram_bytes = unsafe { result::device::total_mem(dev) }
        .map_err(failed("reading the memory size"))? as u64;
    // SAFETY: as above; an attribute the driver lacks is an error, not UB.
    let attribute = |a: Attribute| unsafe { result::device::get_attribute(dev, a) }.ok();
    let pci = match (
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    ) {
        (Some(domain), Some(bus), Some(device)) => {
            Some(pci_facts(&format!("{domain:04x}:{bus:02x}:{device:02x}.0")))
        }
        _ => None,
    };
    let peak_memory = match (
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    ) {
        (Some(khz), Some(bits)) if khz > 0 && bits > 0 => Some((
            2.0 * khz as f64 * 1e3 * bits as f64 / 8.0,
            format!(
                "memory clock {} MHz x {bits}-bit bus x 2 (double data rate), from the CUDA driver",
                khz / 1000
            ),
        )),
        _ => None,
    };
    let used_bytes = CudaContext::new(ordinal as usize)
        .and_then(|ctx| ctx.mem_get_info())
        .ok()
        .map(|(free, total)| total.saturating_sub(free) as u64);
    Ok(GpuFacts {
        label,
        name,
        vram_bytes,
        used_bytes,
        peak_memory,
        pci,
    })
}

fn vulkan_gpus() -> Result<Vec<GpuFacts>, String> {
    // SAFETY: dlopens the Vulkan loader and resolves its entry points; ash
    // returns an error where the library or a symbol is missing.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| format!("Vulkan: no loader (libvulkan.so.1): {e}"))?;
    let app = vk::ApplicationInfo::default()
        .application_name(c"residency")
        .api_version(vk::API_VERSION_1_1);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: `info` and what it points to outlive the call.
    let instance = unsafe { entry.create_instance(&info, None) }
        .map_err(|e| format!("Vulkan: creating an instance: {e}"))?;
    let found = vulkan_devices(&instance);
    // SAFETY: nothing created from the instance outlives this point.
    unsafe { instance.destroy_instance(None) };
    found
}

fn vulkan_devices(instance: &ash::Instance) -> Result<Vec<GpuFacts>, String> {
    // SAFETY: the instance is live; what is queried is plain data.
    let physical = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| format!("Vulkan: listing devices: {e}"))?;
    let mut gpus = Vec::new();
    let mut passed_over = Vec::new();
    for (index, &device) in physical.iter().enumerate() {
        // SAFETY: `device` was listed by this live instance.
        let props = unsafe { instance.get_physical_device_properties(device) };
        let name = props
            .device_name_as_c_str()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Integrated GPUs and CPU implementations use system memory, which
        // the profile already counts as RAM.
        if props.device_type != vk::PhysicalDeviceType::DISCRETE_GPU {
            let kind = match props.device_type {
                vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
                vk::PhysicalDeviceType::CPU => "CPU",
                vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
                _ => "other",
            };
            passed_over.push(format!("{name} ({kind})"));
            continue;
        }
        // SAFETY: as above.
        let memory = unsafe { instance.get_physical_device_memory_properties(device) };
        let vram_bytes = memory.memory_heaps[..memory.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);
        gpus.push(GpuFacts {
            label: format!("vulkan:{index}"),
            name,
            vram_bytes,
            used_bytes: None,
            peak_memory: None,
            pci: vulkan_pci(instance, device, props.api_version),
        });
    }
    if gpus.is_empty() {
        let mut reason = "Vulkan: no discrete GPU".to_string();
        if !passed_over.is_empty() {
            reason.push_str(&format!(" (passed over: {})", passed_over.join(", ")));
        }
        return Err(reason);
    }
    Ok(gpus)
}

/// The device's PCI address through `VK_EXT_pci_bus_info`, where offered.
fn vulkan_pci(
    instance: &ash::Instance,
    device: vk::PhysicalDevice,
    api_version: u32,
) -> Option<PciFacts> {
    if api_version < vk::API_VERSION_1_1 {
        return None;
    }
    // SAFETY: `device` belongs to the live instance.
    let extensions = unsafe { instance.enumerate_device_extension_properties(device) }.ok()?;
    let offered = extensions.iter().any(|e| {
        e.extension_name_as_c_str()
            .is_ok_and(|n| n == ash::ext::pci_bus_info::NAME)
    });
    if !offered {
        return None;
    }
    let mut bus = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
    let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut bus);
    // SAFETY: the device offers the extension whose struct is chained, and
    // both structs outlive the call.
    unsafe { instance.get_physical_device_properties2(device, &mut props) };
    Some(pci_facts(&format!(
        "{:04x}:{:02x}:{:02x}.{}",
        bus.pci_domain, bus.pci_bus, bus.pci_device, bus.pci_function
    )))
}
