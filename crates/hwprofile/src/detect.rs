//! `residency profile detect`: this machine as a hardware profile.
//!
//! `Facts::gather` reads the machine (`system`, `gpus`); `profile_of` turns
//! facts into a profile with a comment on every value, pure, so that tests
//! can feed it any machine (an H200 node, a CPU-only box). What detection
//! cannot read, rates above all, gets the documented defaults below,
//! marked `default`, for `calibrate` to measure.

use super::doc::{field, round_rate, round_size, Origin, ProfileDoc};
use super::gpus::{detect_gpus, GpuFacts};
use super::system::{self, BlockFacts, NodeFacts};
use super::ProfileError;
use residency_core::profile::{Drive, Gpu, HardwareProfile, NumaNode};
use residency_core::units::{Bytes, Seconds};
use std::path::{Path, PathBuf};

/// CPU expert GEMV per physical core when not measured: Colibri's ~1.4 GB/s
/// per Zen 2 core (EPYC 7402P), the lowest per-core figure in
/// profiles/README.md.
pub const CPU_GEMV_PER_CORE_BYTES_PER_S: f64 = 1.4e9;
/// Share of a GPU's peak memory bandwidth that a batch-1 int4 GEMV reaches
/// (profiles/README.md).
pub const GPU_GEMV_EFFICIENCY: f64 = 0.7;
/// GPU GEMV bandwidth when the driver reports no memory bus: a mid-range
/// card's (RTX 3070: 448 GB/s x 0.7 = 314 GB/s, rounded down).
pub const GPU_GEMV_FALLBACK_BYTES_PER_S: f64 = 300e9;
/// Share of the PCIe link's rate that pinned uploads reach (profiles/README.md).
pub const UPLOAD_EFFICIENCY: f64 = 0.8;
/// Upload bandwidth when the link is unknown: PCIe 3.0 x16 (15.75 GB/s) x 0.8.
pub const UPLOAD_FALLBACK_BYTES_PER_S: f64 = 12.6e9;
/// Per-stage launch-and-wait overhead of a GPU: Colibri's 34 us per layer
/// (cudaStreamSynchronize, 7950X + RTX 4070 Ti SUPER; profiles/README.md).
pub const SYNC_OVERHEAD_SECONDS: f64 = 34e-6;
/// RAM kept from planning for the OS, the engine, KV cache and activations,
/// and for transient slots and upload staging: 1/8 and 1/32 of a node's
/// RAM (8 GiB and 2 GiB of 64 GiB, as on the desktop profile).
pub const RAM_RESERVED_SHARE: u64 = 8;
pub const RAM_STAGING_SHARE: u64 = 32;
/// GPU memory kept for KV cache, activations and workspace, beyond what is
/// in use when detected: 1/16 of it.
pub const VRAM_RESERVED_SHARE: u64 = 16;

/// Drive rates by kind when not measured: (name, read bandwidth, read latency).
/// NVMe: PCIe 3.0 x4 class x 0.85 (profiles/README.md's efficiency); SATA
/// SSD: the 6 Gb/s link's ~550 MB/s, rounded down; a rotational disk's
/// sequential rate and seek plus half a turn at 7200 rpm.
const NVME: (&str, f64, f64) = ("NVMe", 3e9, 80e-6);
const SSD: (&str, f64, f64) = ("solid-state", 500e6, 100e-6);
const ROTATIONAL: (&str, f64, f64) = ("rotational", 150e6, 8e-3);

#[derive(Debug, Clone)]
pub struct DetectOptions {
    /// The directory the checkpoint is (or will be) in: its drive is the
    /// profile's drive.
    pub model_dir: PathBuf,
}

/// What was read from the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub host: String,
    pub nodes: Vec<NodeFacts>,
    pub gpus: Vec<GpuFacts>,
    /// Why there is no GPU (each backend's reason).
    pub no_gpu: Vec<String>,
    pub model_dir: PathBuf,
    /// The drive behind `model_dir`, or why there is none.
    pub drive: Result<BlockFacts, String>,
    /// What was left out, for the header.
    pub notes: Vec<String>,
}

impl Facts {
    pub fn gather(model_dir: &Path) -> Result<Facts, ProfileError> {
        let mut notes = Vec::new();
        let nodes = system::numa_nodes(&mut notes);
        if nodes.is_empty() {
            return Err(ProfileError::input(
                Path::new("/proc/meminfo"),
                "gives no memory size and sysfs no NUMA node",
                "run on Linux with /proc and /sys mounted",
            ));
        }
        let (gpus, no_gpu) = detect_gpus();
        Ok(Facts {
            host: system::hostname(),
            nodes,
            gpus,
            no_gpu,
            // Absolute, for the comment that names it.
            model_dir: std::fs::canonicalize(model_dir).unwrap_or_else(|_| model_dir.to_path_buf()),
            drive: system::block_device_of(model_dir),
            notes,
        })
    }
}

/// Detects this machine's profile.
pub fn detect(options: &DetectOptions) -> Result<ProfileDoc, ProfileError> {
    if !options.model_dir.is_dir() {
        return Err(ProfileError::input(
            &options.model_dir,
            "is not a directory",
            "give --model-dir the directory the checkpoint is (or will be) in",
        ));
    }
    Ok(profile_of(&Facts::gather(&options.model_dir)?))
}

/// The profile index of sysfs node `sysfs_id`, and the comment saying how
/// it was found (`what` is the device, for the comment).
fn node_of(
    nodes: &[NodeFacts],
    sysfs_id: Option<u32>,
    what: &str,
    source: &str,
) -> (usize, Origin) {
    match sysfs_id.and_then(|id| nodes.iter().position(|n| n.sysfs_id == id)) {
        Some(i) => (
            i,
            Origin::Detected(format!("{source} says node {}", nodes[i].sysfs_id)),
        ),
        None => (
            0,
            Origin::Default(match sysfs_id {
                Some(id) => format!("{what} is on node {id}, which is left out here: node 0"),
                None => format!("sysfs gives no NUMA node for {what}: node 0"),
            }),
        ),
    }
}

/// The profile of a machine, every value commented.
pub fn profile_of(facts: &Facts) -> ProfileDoc {
    let mut doc = ProfileDoc::new(HardwareProfile {
        name: facts.host.clone(),
        source: Some(format!(
            "residency profile detect on {}; each value's comment says where it came from",
            facts.host
        )),
        numa: Vec::new(),
        gpus: Vec::new(),
        drives: Vec::new(),
        io_overlaps_compute: true,
        felt_fraction: Some(0.0),
        fixed_token_seconds: Seconds(0.0),
        hosts: Vec::new(),
        llama_cpp: None,
    });
    doc.header = vec![
        format!(
            "Hardware profile of {}, written by `residency profile detect` (residency {}).",
            facts.host,
            env!("CARGO_PKG_VERSION")
        ),
        "Each value's comment says where it came from: `detected` (read from this machine),".into(),
        "`measured` (timed by `residency profile calibrate`, or derived from an engine log)".into(),
        "or `default` (an assumption from profiles/README.md that calibrate replaces).".into(),
    ];
    doc.header
        .extend(facts.notes.iter().map(|n| format!("Note: {n}")));
    doc.set(
        "name",
        Origin::Detected("host name (/proc/sys/kernel/hostname)".into()),
    );
    for (i, node) in facts.nodes.iter().enumerate() {
        add_node(&mut doc, i, node);
    }
    if facts.gpus.is_empty() {
        doc.set(
            "gpus",
            Origin::Detected(format!("no GPU: {}", facts.no_gpu.join("; "))),
        );
    }
    for (i, gpu) in facts.gpus.iter().enumerate() {
        add_gpu(&mut doc, i, gpu, &facts.nodes);
    }
    match &facts.drive {
        Ok(disk) => add_drive(&mut doc, disk, &facts.model_dir, &facts.nodes),
        Err(why) => doc.set("drives", Origin::Detected(format!("no drive: {why}"))),
    }
    doc.set(
        "io_overlaps_compute",
        Origin::Default("a pipelined engine whose expert reads overlap compute".into()),
    );
    doc.set(
        "felt_fraction",
        Origin::Default(
            "no read time on the critical path; `calibrate --from-log` derives it from an engine log".into(),
        ),
    );
    doc.set(
        "fixed_token_seconds",
        Origin::Default(
            "per-token time outside the stages not modelled; `calibrate --from-log` derives it"
                .into(),
        ),
    );
    doc
}

/// `0-3,8` for comments.
fn cpu_ranges(cpus: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        parts.push(if cpus[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", cpus[i])
        });
        i += 1;
    }
    parts.join(",")
}

fn add_node(doc: &mut ProfileDoc, i: usize, node: &NodeFacts) {
    let ram = round_size(node.ram_bytes, false);
    let reserved = round_size(node.ram_bytes / RAM_RESERVED_SHARE, true);
    let staging = round_size(node.ram_bytes / RAM_STAGING_SHARE, true);
    let cores = node.core_cpus.len() as u32;
    let gemv = round_rate(cores as f64 * CPU_GEMV_PER_CORE_BYTES_PER_S);
    doc.profile.numa.push(NumaNode {
        id: i,
        ram,
        reserved,
        staging,
        cores,
        gemv_bandwidth: gemv,
        stage_overhead: Seconds(0.0),
        host: None,
    });
    let set =
        |doc: &mut ProfileDoc, key: &str, origin: Origin| doc.set(&field("numa", i, key), origin);
    set(
        doc,
        "id",
        Origin::Detected(format!("/sys/devices/system/node/node{}", node.sysfs_id)),
    );
    set(
        doc,
        "ram",
        Origin::Detected(format!("{}, rounded down to 0.01 GiB", node.ram_source)),
    );
    set(
        doc,
        "reserved",
        Origin::Default(format!(
            "1/{RAM_RESERVED_SHARE} of ram for the OS, the engine, KV cache and activations"
        )),
    );
    set(
        doc,
        "staging",
        Origin::Default(format!(
            "1/{RAM_STAGING_SHARE} of ram for transient slots and upload staging"
        )),
    );
    set(
        doc,
        "cores",
        Origin::Detected(format!(
            "{cores} physical cores among CPUs {} this process may use (sysfs topology)",
            cpu_ranges(&node.cpus)
        )),
    );
    set(
        doc,
        "gemv_bandwidth",
        Origin::Default(format!(
            "{cores} cores x {} GB/s per core (Colibri's Zen 2 figure); calibrate measures it",
            CPU_GEMV_PER_CORE_BYTES_PER_S / 1e9
        )),
    );
}

fn add_gpu(doc: &mut ProfileDoc, i: usize, gpu: &GpuFacts, nodes: &[NodeFacts]) {
    let vram = round_size(gpu.vram_bytes, false);
    let used = gpu.used_bytes.unwrap_or(0);
    let reserved = round_size(used + gpu.vram_bytes / VRAM_RESERVED_SHARE, true);
    let bus = gpu.pci.as_ref().map(|p| p.bus_id.as_str());
    let (numa, numa_origin) = node_of(
        nodes,
        gpu.pci.as_ref().and_then(|p| p.numa),
        bus.unwrap_or(&gpu.label),
        &format!("numa_node of /sys/bus/pci/devices/{}", bus.unwrap_or("?")),
    );
    let (gemv, gemv_origin) = match &gpu.peak_memory {
        Some((peak, how)) => (
            peak * GPU_GEMV_EFFICIENCY,
            format!(
                "{GPU_GEMV_EFFICIENCY} x {:.0} GB/s peak ({how}); calibrate measures it",
                peak / 1e9
            ),
        ),
        None => (
            GPU_GEMV_FALLBACK_BYTES_PER_S,
            "the driver gives no memory bus; a mid-range card's figure; calibrate measures it"
                .into(),
        ),
    };
    let link = gpu.pci.as_ref().and_then(|p| p.link.as_ref());
    let (upload, upload_origin) = match link {
        Some(link) => (
            link.bytes_per_s() * UPLOAD_EFFICIENCY,
            format!(
                "{UPLOAD_EFFICIENCY} x {} ({:.1} GB/s; {}); calibrate measures it",
                link.name(),
                link.bytes_per_s() / 1e9,
                link.detail
            ),
        ),
        None => (
            UPLOAD_FALLBACK_BYTES_PER_S,
            "the PCIe link is unknown: 0.8 x PCIe 3.0 x16; calibrate measures it".into(),
        ),
    };
    doc.profile.gpus.push(Gpu {
        id: i,
        name: gpu.name.clone(),
        vram,
        reserved,
        numa,
        gemv_bandwidth: round_rate(gemv),
        upload_bandwidth: round_rate(upload),
        sync_overhead: Seconds(SYNC_OVERHEAD_SECONDS),
        gemv_overhead: Seconds(0.0),
        host: None,
    });
    let mut summary = format!("{} {}", gpu.label, gpu.name);
    if let Some(bus) = bus {
        summary.push_str(&format!(", PCI {bus}"));
    }
    if let Some(link) = link {
        summary.push_str(&format!(", {}", link.name()));
    }
    summary.push_str(&format!(", NUMA node {}", nodes[numa].sysfs_id));
    doc.describe_item(&format!("gpus[{i}]"), vec![summary]);
    let set =
        |doc: &mut ProfileDoc, key: &str, origin: Origin| doc.set(&field("gpus", i, key), origin);
    set(doc, "id", Origin::Detected(gpu.label.clone()));
    set(doc, "name", Origin::Detected("the driver's name".into()));
    set(
        doc,
        "vram",
        Origin::Detected(format!(
            "{} bytes (the driver), rounded down to 0.01 GiB",
            gpu.vram_bytes
        )),
    );
    set(
        doc,
        "reserved",
        Origin::Default(match gpu.used_bytes {
            Some(used) => format!(
                "{} in use when detected (driver, context, other processes) + 1/{VRAM_RESERVED_SHARE} of vram for KV cache, activations, workspace",
                Bytes(used)
            ),
            None => format!("1/{VRAM_RESERVED_SHARE} of vram for the context, KV cache, activations, workspace"),
        }),
    );
    set(doc, "numa", numa_origin);
    set(doc, "gemv_bandwidth", Origin::Default(gemv_origin));
    set(doc, "upload_bandwidth", Origin::Default(upload_origin));
    set(
        doc,
        "sync_overhead",
        Origin::Default(
            "Colibri's per-layer cudaStreamSynchronize (7950X + RTX 4070 Ti SUPER); calibrate measures it".into(),
        ),
    );
}

fn add_drive(doc: &mut ProfileDoc, disk: &BlockFacts, model_dir: &Path, nodes: &[NodeFacts]) {
    let (kind, bandwidth, latency) = if disk.is_nvme() {
        NVME
    } else if disk.rotational == Some(true) {
        ROTATIONAL
    } else {
        SSD
    };
    let (numa, numa_origin) = node_of(
        nodes,
        disk.numa,
        &disk.name,
        &format!("numa_node above /sys/block/{}", disk.name),
    );
    doc.profile.drives.push(Drive {
        id: 0,
        name: disk.name.clone(),
        numa,
        read_bandwidth: round_rate(bandwidth),
        read_latency: Seconds(latency),
        read_concurrency: 1,
    });
    let set =
        |doc: &mut ProfileDoc, key: &str, origin: Origin| doc.set(&field("drives", 0, key), origin);
    set(
        doc,
        "id",
        Origin::Detected(format!(
            "the drive holding {} ({})",
            model_dir.display(),
            disk.via
        )),
    );
    let mut name = format!("/sys/block/{}", disk.name);
    if let Some(model) = &disk.model {
        name.push_str(&format!(", model {model}"));
    }
    if !disk.slaves.is_empty() {
        name.push_str(&format!(", over {}", disk.slaves.join(" ")));
    }
    set(doc, "name", Origin::Detected(name));
    set(doc, "numa", numa_origin);
    let why = match disk.rotational {
        Some(r) => format!("{kind} (sysfs queue/rotational = {})", u8::from(r)),
        None => format!("{kind} assumed (sysfs says no rotational flag)"),
    };
    set(
        doc,
        "read_bandwidth",
        Origin::Default(format!("{why}; calibrate measures it with O_DIRECT")),
    );
    set(
        doc,
        "read_latency",
        Origin::Default(format!(
            "{why}; calibrate measures 4 KiB reads at queue depth 1"
        )),
    );
    set(
        doc,
        "read_concurrency",
        Origin::Default(
            "one read at a time; calibrate issues 8 expert reads together and times their landings"
                .into(),
        ),
    );
}

#[cfg(test)]
mod tests;
