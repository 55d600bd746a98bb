//! Upload throughput of the GPU tier on the machine it runs on, for object
//! sizes from 4 MiB to 1 GiB:
//!
//! - staged: the `GpuLoader` path the store uses for bytes in ordinary
//!   host memory (host bytes -> pinned staging buffers -> device,
//!   double-buffered), allocation included;
//! - pooled: the same path for bytes in a slab of a host pool that the
//!   device's pinner page-locked (what `apply` reads GPU objects into): one
//!   DMA straight from the slab, allocation included;
//! - pinned: one `cuMemcpyHtoDAsync` of the same bytes from an already
//!   page-locked buffer into already-allocated memory (the DMA ceiling);
//! - read-back: the staged object copied back and compared byte for byte.
//!
//! Each is the median of `--runs` timed runs after one untimed warm-up,
//! with the fastest and slowest. Vulkan devices are measured too (staged
//! and read-back). Prints a table, then the same as JSON; exits 0 with a
//! message where there is no GPU, 1 when a read-back differs or a copy fails.
//!
//! libcuda and libvulkan are loaded at run time, so the binary runs on a
//! machine with the driver and no Rust toolchain:
//!
//! ```text
//! cargo build --release -p residency-runtime --example gpu_upload
//! target/release/examples/gpu_upload [--runs 7] [--max-mib 1024] [--chunk-mib 16]
//!     [--device 0] [--vulkan-cpu] [--json FILE]
//! ```

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};
use residency_policy::ObjectIndex;
use residency_runtime::gpu::{device_label, Backend, Device, GpuLoader, GpuOptions, GpuTier};
use residency_runtime::storage::{AlignedSlab, HostPool};
use residency_runtime::store::{Loader, ObjectBytes};
use serde_json::{json, Value};
use std::ops::Deref;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

const USAGE: &str = "usage: gpu_upload [--runs N] [--max-mib M] [--chunk-mib C] [--device N] [--vulkan-cpu] [--json FILE]";

struct Args {
    runs: usize,
    max_mib: usize,
    chunk_mib: usize,
    device: u32,
    vulkan_cpu: bool,
    json: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        runs: 7,
        max_mib: 1024,
        chunk_mib: GpuOptions::default().staging_chunk_bytes >> 20,
        device: 0,
        vulkan_cpu: false,
        json: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or(format!("{flag} needs a value; {USAGE}"));
        let number = |v: String| {
            v.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or(format!("{flag} {v}: give a positive whole number"))
        };
        match flag.as_str() {
            "--runs" => args.runs = number(value()?)?,
            "--max-mib" => args.max_mib = number(value()?)?.max(4),
            "--chunk-mib" => args.chunk_mib = number(value()?)?,
            "--device" => {
                let v = value()?;
                args.device = v
                    .parse()
                    .map_err(|_| format!("--device {v}: give a device number (0, 1, ...)"))?;
            }
            "--vulkan-cpu" => args.vulkan_cpu = true,
            "--json" => args.json = Some(value()?.into()),
            _ => return Err(format!("unknown argument `{flag}`; {USAGE}")),
        }
    }
    Ok(args)
}

/// Host memory of either kind measured: a plain `Vec` or a pool's slab.
type HostBuffer = Arc<dyn Deref<Target = [u8]> + Send + Sync>;

/// Objects that are prefixes of one host buffer: object `i` is its first
/// `sizes[i]` bytes, handed out without a copy.
struct HostObjects {
    bytes: HostBuffer,
    sizes: Vec<usize>,
}

struct Prefix {
    bytes: HostBuffer,
    len: usize,
}

impl ObjectBytes for Prefix {
    fn len(&self) -> usize {
        self.len
    }

    fn host(&self) -> Option<&[u8]> {
        Some(&self.bytes[..self.len])
    }
}

impl Loader for HostObjects {
    fn size_bytes(&self, o: ObjectIndex) -> u64 {
        self.sizes[o as usize] as u64
    }

    fn load(&self, o: ObjectIndex) -> Result<Box<dyn ObjectBytes>, String> {
        Ok(Box::new(Prefix {
            bytes: Arc::clone(&self.bytes),
            len: self.sizes[o as usize],
        }))
    }
}

/// Copies from page-locked memory into allocated device memory: the most a
/// host-to-device upload can reach.
struct PinnedCopy {
    stream: Arc<CudaStream>,
    pinned: PinnedHostSlice<u8>,
    target: CudaSlice<u8>,
}

impl PinnedCopy {
    fn new(ordinal: u32, host: &[u8]) -> Result<PinnedCopy, DriverError> {
        // The CUDA tier opened this device, so libcuda is there.
        let ctx = CudaContext::new(ordinal as usize)?;
        let stream = ctx.new_stream()?;
        // SAFETY: filled from `host` below, before any copy reads it.
        // Flags 0: plain page-locked memory, not write-combined.
        let mut pinned = unsafe { ctx.alloc_pinned_with_flags::<u8>(host.len(), 0) }?;
        pinned.as_mut_slice()?.copy_from_slice(host);
        // SAFETY: only written, by the copies timed, and never read.
        let target = unsafe { stream.alloc::<u8>(host.len()) }?;
        Ok(PinnedCopy {
            stream,
            pinned,
            target,
        })
    }

    /// Seconds to copy the first `len` bytes.
    fn time(&mut self, len: usize) -> Result<f64, DriverError> {
        let from = &self.pinned.as_slice()?[..len];
        let started = Instant::now();
        self.stream
            .memcpy_htod(from, &mut self.target.slice_mut(..len))?;
        self.stream.synchronize()?;
        Ok(started.elapsed().as_secs_f64())
    }
}

/// Median, fastest and slowest rate of runs of `bytes` that took `seconds`.
fn rates(bytes: usize, seconds: &[f64]) -> Value {
    let mut gbps: Vec<f64> = seconds
        .iter()
        .map(|s| bytes as f64 / s.max(1e-12) / 1e9)
        .collect();
    gbps.sort_by(f64::total_cmp);
    let n = gbps.len();
    let median = if n % 2 == 1 {
        gbps[n / 2]
    } else {
        (gbps[n / 2 - 1] + gbps[n / 2]) / 2.0
    };
    json!({ "median": median, "min": gbps[0], "max": gbps[n - 1] })
}

/// Runs `f` once untimed, then `runs` times timed.
fn timed(runs: usize, mut f: impl FnMut() -> Result<f64, String>) -> Result<Vec<f64>, String> {
    f()?;
    (0..runs).map(|_| f()).collect()
}

/// Seconds of each of `runs` loads of object `o` (after a warm-up), and the
/// last upload, still alive.
fn time_loads(
    loader: &GpuLoader,
    o: ObjectIndex,
    runs: usize,
) -> Result<(Vec<f64>, Box<dyn ObjectBytes>), String> {
    let mut uploaded = None;
    let seconds = timed(runs, || {
        // The previous copy goes back to the pool before the next one.
        uploaded = None;
        let started = Instant::now();
        let object = loader.load(o)?;
        let seconds = started.elapsed().as_secs_f64();
        uploaded = Some(object);
        Ok(seconds)
    })?;
    Ok((seconds, uploaded.ok_or("no upload ran")?))
}

/// Measures one device at every size; a row per size.
fn measure(
    device: &Arc<dyn Device>,
    host: &Arc<Vec<u8>>,
    sizes: &[usize],
    runs: usize,
) -> Result<Vec<Value>, String> {
    let loader_over = |bytes: HostBuffer| {
        let objects = HostObjects {
            bytes,
            sizes: sizes.to_vec(),
        };
        GpuLoader::new(Arc::new(objects), vec![Some(device.clone()); sizes.len()])
    };
    let loader = loader_over(host.clone());
    // The same bytes in a slab of a pool the device page-locks.
    let pooled = device.pinner().map(|pinner| {
        let pool = HostPool::pinned_by(None, 0, Some(pinner));
        let mut slab = AlignedSlab::in_pool(&pool, host.len());
        slab[..host.len()].copy_from_slice(host);
        loader_over(Arc::new(slab))
    });
    let mut pinned = match device.backend() {
        Backend::Cuda => Some(
            PinnedCopy::new(device.ordinal(), host).map_err(|e| format!("pinned buffer: {e}"))?,
        ),
        Backend::Vulkan => None,
    };
    let mut rows = Vec::new();
    for (o, &size) in sizes.iter().enumerate() {
        let o = o as ObjectIndex;
        let (staged, uploaded) = time_loads(&loader, o, runs)?;
        let pooled_rates = match &pooled {
            Some(l) => rates(size, &time_loads(l, o, runs)?.0),
            None => Value::Null,
        };
        let pinned_rates = match &mut pinned {
            Some(p) => rates(
                size,
                &timed(runs, || p.time(size).map_err(|e| e.to_string()))?,
            ),
            None => Value::Null,
        };
        // `uploaded` stays alive until the read-back is done.
        let at = uploaded.device().ok_or("the upload is not on a device")?;
        let read_back = match loader.read_back(o, at) {
            Ok(bytes) => match bytes.iter().zip(&host[..size]).position(|(a, b)| a != b) {
                None if bytes.len() == size => "exact".to_string(),
                None => format!("{} bytes came back, not {size}", bytes.len()),
                Some(i) => format!("differs at byte {i}"),
            },
            Err(e) => format!("failed: {e}"),
        };
        rows.push(json!({
            "size_bytes": size,
            "staged_gbps": rates(size, &staged),
            "pooled_gbps": pooled_rates,
            "pinned_gbps": pinned_rates,
            "read_back": read_back,
        }));
    }
    Ok(rows)
}

fn mib(bytes: u64) -> String {
    match bytes >> 20 {
        m if m >= 1024 => format!("{} GiB", m >> 10),
        m => format!("{m} MiB"),
    }
}

fn print_table(device: &Value) {
    println!(
        "{} {}",
        device["device"].as_str().unwrap_or(""),
        device["name"].as_str().unwrap_or("")
    );
    println!(
        "  {:>8}  {:>26}  {:>26}  {:>26}  {:>7}  {:>7}  read-back",
        "size",
        "staged GB/s med [min..max]",
        "pooled GB/s med [min..max]",
        "pinned GB/s med [min..max]",
        "staged%",
        "pooled%"
    );
    let cell = |r: &Value| match r["median"].as_f64() {
        Some(median) => format!(
            "{median:.2} [{:.2}..{:.2}]",
            r["min"].as_f64().unwrap_or(0.0),
            r["max"].as_f64().unwrap_or(0.0)
        ),
        None => "-".into(),
    };
    for row in device["rows"].as_array().into_iter().flatten() {
        let share = |of: &str| match (
            row[of]["median"].as_f64(),
            row["pinned_gbps"]["median"].as_f64(),
        ) {
            (Some(s), Some(p)) => format!("{:.0}%", 100.0 * s / p),
            _ => "-".into(),
        };
        println!(
            "  {:>8}  {:>26}  {:>26}  {:>26}  {:>7}  {:>7}  {}",
            mib(row["size_bytes"].as_u64().unwrap_or(0)),
            cell(&row["staged_gbps"]),
            cell(&row["pooled_gbps"]),
            cell(&row["pinned_gbps"]),
            share("staged_gbps"),
            share("pooled_gbps"),
            row["read_back"].as_str().unwrap_or("")
        );
    }
}

/// Bytes that differ from place to place (a stuck or shifted copy shows).
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut bytes = vec![0u8; len];
    for word in bytes.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        word.copy_from_slice(&state.to_le_bytes()[..word.len()]);
    }
    bytes
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = GpuOptions {
        staging_chunk_bytes: args.chunk_mib << 20,
        vulkan_cpu: args.vulkan_cpu,
    };
    let sizes: Vec<usize> = (0..)
        .map(|k| 4usize << (20 + k))
        .take_while(|&s| s <= args.max_mib << 20)
        .collect();
    let mut devices = Vec::new();
    let mut not_measured = Vec::new();
    let mut failed = false;
    let mut host = None;
    for tier in [GpuTier::cuda(&options), GpuTier::vulkan(&options)] {
        let Some(device) = tier.device(args.device) else {
            not_measured.extend(tier.reasons().iter().cloned());
            continue;
        };
        let label = device_label(device.backend(), device.ordinal());
        eprintln!("measuring {label} {} ...", device.name());
        let host = host.get_or_insert_with(|| Arc::new(pattern(*sizes.last().unwrap())));
        let rows = measure(device, host, &sizes, args.runs).unwrap_or_else(|e| {
            failed = true;
            not_measured.push(format!("{label}: {e}"));
            Vec::new()
        });
        failed |= rows.iter().any(|r| r["read_back"] != "exact");
        devices.push(json!({ "device": label, "name": device.name(), "rows": rows }));
    }
    let report = json!({
        "runs": args.runs,
        "staging_chunk_bytes": options.staging_chunk_bytes,
        "copy_threads": rayon::current_num_threads(),
        "devices": devices,
        "not_measured": not_measured,
    });
    if devices.is_empty() {
        println!("no GPU to measure here; the CPU tiers serve (nothing failed):");
    } else {
        println!(
            "{} timed runs after a warm-up; staging {} x 2; {} host copy threads",
            args.runs,
            mib(options.staging_chunk_bytes as u64),
            rayon::current_num_threads()
        );
        for device in &devices {
            print_table(device);
        }
    }
    for reason in &not_measured {
        println!("  {reason}");
    }
    let text = serde_json::to_string_pretty(&report).expect("JSON values serialise");
    println!("{text}");
    if let Some(path) = &args.json {
        if let Err(e) = std::fs::write(path, &text) {
            eprintln!("error: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if failed {
        eprintln!("error: an upload failed or a read-back differs (see above)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
