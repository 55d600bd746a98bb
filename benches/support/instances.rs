//! The planner's benchmark instances, shared by the benches and the
//! solver and re-plan reports in `examples/`: the GLM-5.2 real heat, a Kimi-scale
//! geometry with Zipf heat, the embedded default, a serial-I/O box without
//! GPUs, each on its shipped profile and on seeded mixed fleets where no
//! two cards are alike.

// Each target that includes this file uses a part of it.
#![allow(dead_code)]

use residency_core::cost::Instance;
use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_core::units::{BytesPerSecond, Seconds};
use residency_formats::inputs::{InputPaths, Inputs};
use residency_solver::incremental::Warm;
use residency_solver::{solve_warm, SolveOptions};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A deterministic generator (64-bit LCG), so every run builds the same fleets.
pub struct Lcg(pub u64);

impl Lcg {
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How the cards of a mixed fleet differ from the profile's.
#[derive(Debug, Clone, Copy)]
pub enum Mix {
    /// GEMV and upload bandwidths within +-`spread` of the profile's, and
    /// sync overheads of two values (the profile's and 1.5 times it).
    Bandwidths { spread: f64 },
    /// As `Bandwidths`, and VRAM from 60 % to 100 % of the profile's.
    BandwidthsAndVram { spread: f64 },
}

/// The profile with every GPU changed as `mix` says, seeded.
pub fn mixed_fleet(profile: &HardwareProfile, mix: Mix, seed: u64) -> HardwareProfile {
    let mut rng = Lcg(seed);
    let mut mixed = profile.clone();
    mixed.name = format!("{}-mixed-{seed}", profile.name);
    for gpu in &mut mixed.gpus {
        let spread = match mix {
            Mix::Bandwidths { spread } | Mix::BandwidthsAndVram { spread } => spread,
        };
        let mut vary = |x: f64| x * (1.0 - spread + 2.0 * spread * rng.uniform());
        gpu.gemv_bandwidth = BytesPerSecond(vary(gpu.gemv_bandwidth.0));
        gpu.upload_bandwidth = BytesPerSecond(vary(gpu.upload_bandwidth.0));
        if rng.uniform() < 0.5 {
            gpu.sync_overhead = Seconds(gpu.sync_overhead.0 * 1.5);
        }
        if let Mix::BandwidthsAndVram { .. } = mix {
            let usable = gpu.vram.0 - gpu.reserved.0;
            let scaled = (usable as f64 * (0.6 + 0.4 * rng.uniform())) as u64;
            gpu.vram.0 = gpu.reserved.0 + scaled;
        }
    }
    mixed
}

pub fn profile(name: &str) -> HardwareProfile {
    HardwareProfile::from_yaml_file(Path::new(&format!("{ROOT}/profiles/hardware/{name}.yaml")))
        .unwrap()
}

/// The real GLM-5.2 `.coli_usage` heat, or None without ../shared.
pub fn glm_heat() -> Option<PathBuf> {
    let heat = Path::new(ROOT)
        .join("../shared/data/colibri/glm52_m1ultra_fmt2_2026-08-04/colibri_usage.snapshot");
    if heat.exists() {
        Some(heat)
    } else {
        eprintln!("GLM scale skipped: {} is absent", heat.display());
        None
    }
}

/// GLM-5.2 with its real heat on `profile`.
pub fn glm(profile: &HardwareProfile, heat: &Path) -> Instance {
    let paths = InputPaths {
        model: Some(PathBuf::from(format!(
            "{ROOT}/profiles/models/glm-5.2.yaml"
        ))),
        heat: Some(heat.to_path_buf()),
        ..InputPaths::default()
    };
    let inputs = Inputs::load(&paths).unwrap();
    let rates = inputs
        .heat
        .use_rates(&inputs.model, heat, &mut Vec::new())
        .unwrap();
    Instance::new(profile, &inputs.model, &rates)
}

/// Kimi scale has no published routing: a Zipf law (exponent 1) over each
/// layer's experts in a fixed shuffled order.
pub fn kimi(profile: &HardwareProfile) -> Instance {
    let model = model("kimi-scale");
    Instance::new(profile, &model, &zipf_rates(&model, 7))
}

/// DeepSeek-V3 (`profiles/models/deepseek-v3.yaml`: 61 layers, 58 of them
/// MoE x 256 experts) with Zipf heat of `seed` on `profile`.
pub fn deepseek_v3(profile: &HardwareProfile, seed: u64) -> Instance {
    let model = model("deepseek-v3");
    Instance::new(profile, &model, &zipf_rates(&model, seed))
}

/// Per MoE layer, a Zipf law (exponent 1) over its experts in an order
/// shuffled by `seed`, summing to top_k: a new seed is new heat.
pub fn zipf_rates(model: &Model, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = Lcg(seed);
    model
        .moe
        .iter()
        .map(|m| {
            let mut w: Vec<f64> = (0..m.experts).map(|i| 1.0 / (i + 1) as f64).collect();
            for i in (1..w.len()).rev() {
                rng.uniform();
                w.swap(i, (rng.0 >> 33) as usize % (i + 1));
            }
            let sum: f64 = w.iter().sum();
            w.iter().map(|x| model.top_k() as f64 * x / sum).collect()
        })
        .collect()
}

/// The serving loop's re-plan at DeepSeek-V3 scale (2 GPUs, RAM, a
/// drive) and Kimi scale (8 GPUs, 2 NUMA nodes, 2 drives): each solved
/// cold for Zipf heat (seed 7), then the heat drifts to 90 % of it plus
/// 10 % of another draw (seed 8). The instance carries the new heat; the
/// warm start is the cold plan and its prices.
pub struct ReplanCase {
    /// Criterion's id of the case.
    pub id: &'static str,
    pub name: &'static str,
    pub inst: Instance,
    pub warm: Warm,
    /// The re-plan's time limit: the target wall time at this scale.
    pub limit_seconds: f64,
}

pub fn replan_cases() -> Vec<ReplanCase> {
    let box2 = profile("threadripper-3945wx-rtx3070-quadro4000");
    let h200 = profile("h200-node");
    [
        (
            "deepseek-v3",
            "DeepSeek-V3, 2 GPUs + RAM + drive",
            deepseek_v3(&box2, 7),
            "deepseek-v3",
            0.020,
        ),
        (
            "kimi-scale",
            "Kimi scale, 8 GPUs",
            kimi(&h200),
            "kimi-scale",
            0.200,
        ),
    ]
    .into_iter()
    .map(|(id, name, mut inst, model_name, limit_seconds)| {
        let (_, warm) = solve_warm(&inst, SolveOptions::default()).unwrap();
        let model = model(model_name);
        let (old, new) = (zipf_rates(&model, 7), zipf_rates(&model, 8));
        let drifted: Vec<Vec<f64>> = old
            .iter()
            .zip(&new)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| 0.9 * x + 0.1 * y).collect())
            .collect();
        inst.set_expert_rates(&drifted);
        ReplanCase {
            id,
            name,
            inst,
            warm,
            limit_seconds,
        }
    })
    .collect()
}

pub fn model(name: &str) -> Model {
    Model::from_yaml_file(Path::new(&format!("{ROOT}/profiles/models/{name}.yaml"))).unwrap()
}

/// The embedded default (DeepSeek-V2-Lite, ESFT heat, the two-card box)
/// on `profile`.
pub fn default_model(profile: &HardwareProfile) -> Instance {
    let inputs = Inputs::load(&InputPaths::default()).unwrap();
    let rates = inputs
        .heat
        .use_rates(&inputs.model, Path::new("embedded"), &mut Vec::new())
        .unwrap();
    Instance::new(profile, &inputs.model, &rates)
}

/// A box without GPUs whose reads do not overlap compute: two nodes of 3
/// GiB usable, two drives (the tightest case docs/solver-quality.md found).
pub fn serial_io_box() -> HardwareProfile {
    let text = r#"
name: two-node-no-gpu-serial
numa:
  - { id: 0, ram: 4 GiB, reserved: 1 GiB, cores: 16, gemv_bandwidth: 40 GB/s }
  - { id: 1, ram: 4 GiB, reserved: 1 GiB, cores: 16, gemv_bandwidth: 40 GB/s }
drives:
  - { id: 0, name: nvme0, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us }
  - { id: 1, name: nvme1, numa: 1, read_bandwidth: 6 GB/s, read_latency: 80 us }
io_overlaps_compute: false
"#;
    HardwareProfile::from_yaml_str(text, Path::new("serial-io.yaml")).unwrap()
}

/// The streaming node of the planner issue: eight 141 GB cards with three
/// GEMV speeds and two sync overheads, two NUMA nodes of different GEMV
/// bandwidth with `ram_gib` GiB each, two NVMe drives of 6.5 and 5.5 GB/s,
/// reads overlapping compute with 30 % of them felt. The RAM sets how much
/// of Kimi scale streams from the drives (`kimi_streaming`).
pub fn streaming_node(ram_gib: u64) -> HardwareProfile {
    let gpu = |id: usize, numa: usize, gemv: &str, sync_us: u32| {
        format!(
            "  - {{ id: {id}, name: H200, vram: 141 GB, reserved: 8 GiB, numa: {numa}, \
             gemv_bandwidth: {gemv}, upload_bandwidth: 55 GB/s, sync_overhead: {sync_us} us }}\n"
        )
    };
    let gpus: String = [
        (0, "3.36 TB/s", 34),
        (0, "3.36 TB/s", 34),
        (0, "3.0 TB/s", 34),
        (0, "3.0 TB/s", 51),
        (1, "3.36 TB/s", 51),
        (1, "3.0 TB/s", 34),
        (1, "2.7 TB/s", 51),
        (1, "2.7 TB/s", 51),
    ]
    .iter()
    .enumerate()
    .map(|(id, &(numa, gemv, sync_us))| gpu(id, numa, gemv, sync_us))
    .collect();
    let text = format!(
        r#"
name: streaming-node-{ram_gib}gib
numa:
  - {{ id: 0, ram: {ram_gib} GiB, reserved: 64 GiB, staging: 8 GiB, cores: 56, gemv_bandwidth: 150 GB/s }}
  - {{ id: 1, ram: {ram_gib} GiB, reserved: 64 GiB, staging: 8 GiB, cores: 56, gemv_bandwidth: 120 GB/s }}
gpus:
{gpus}drives:
  - {{ id: 0, name: nvme0, numa: 0, read_bandwidth: 6.5 GB/s, read_latency: 80 us }}
  - {{ id: 1, name: nvme1, numa: 1, read_bandwidth: 5.5 GB/s, read_latency: 80 us }}
io_overlaps_compute: true
felt_fraction: 0.3
"#
    );
    HardwareProfile::from_yaml_str(&text, Path::new("streaming-node.yaml")).unwrap()
}

/// Kimi scale as the planner issue streams it: int4 on the GPUs and the
/// drives, int8 in RAM, Zipf heat (seed 7, a different hot set per layer)
/// on `streaming_node(ram_gib)`. 750 GiB per node streams about 5 % of the
/// experts, 512 GiB about 20 %, 160 GiB about 40 %.
pub fn kimi_streaming(ram_gib: u64) -> Instance {
    let path = format!("{ROOT}/profiles/models/kimi-scale.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let int8_ram = "tiers: { gpu: int4, ram: int8, disk: int4 }";
    let text = text.replace("tiers: { gpu: int4, ram: int4, disk: int4 }", int8_ram);
    assert!(text.contains(int8_ram), "kimi-scale.yaml's tiers changed");
    let model = Model::from_yaml_str(&text, Path::new(&path)).unwrap();
    Instance::new(&streaming_node(ram_gib), &model, &zipf_rates(&model, 7))
}

/// DeepSeek-V3 (Zipf heat, seed 7) on a box of two 48 GB cards of slightly
/// different GEMV speed and sync overhead, two NUMA nodes of 256 GiB and
/// one drive: the experts that miss the cards fit in RAM.
pub fn deepseek_v3_two_card() -> Instance {
    let text = r#"
name: two-48gb-cards-two-nodes
numa:
  - { id: 0, ram: 256 GiB, reserved: 16 GiB, staging: 4 GiB, cores: 32, gemv_bandwidth: 80 GB/s }
  - { id: 1, ram: 256 GiB, reserved: 16 GiB, staging: 4 GiB, cores: 32, gemv_bandwidth: 80 GB/s }
gpus:
  - { id: 0, name: A6000, vram: 48 GB, reserved: 3 GiB, numa: 0, gemv_bandwidth: 672 GB/s, upload_bandwidth: 25 GB/s, sync_overhead: 34 us }
  - { id: 1, name: A6000, vram: 48 GB, reserved: 3 GiB, numa: 1, gemv_bandwidth: 640 GB/s, upload_bandwidth: 25 GB/s, sync_overhead: 40 us }
drives:
  - { id: 0, name: nvme0, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us }
io_overlaps_compute: true
felt_fraction: 0.3
"#;
    let profile = HardwareProfile::from_yaml_str(text, Path::new("two-48gb.yaml")).unwrap();
    let model = model("deepseek-v3");
    Instance::new(&profile, &model, &zipf_rates(&model, 7))
}
