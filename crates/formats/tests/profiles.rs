//! The shipped `profiles/`: every hardware profile and model description
//! loads through the strict readers, a few sizes match arithmetic done by
//! hand (in the comments), and the real heat data sets load against the
//! model description they were recorded on.

use residency_core::model::Model;
use residency_core::profile::HardwareProfile;
use residency_formats::heat::{read_heat, HeatContext, HeatFormat};
use std::path::{Path, PathBuf};

fn profiles_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles")
}

/// The `*.yaml` files of `profiles/<sub>`, sorted.
fn yaml_files(sub: &str) -> Vec<PathBuf> {
    let dir = profiles_dir().join(sub);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn hardware(name: &str) -> HardwareProfile {
    let path = profiles_dir().join("hardware").join(name);
    HardwareProfile::from_yaml_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn model(name: &str) -> Model {
    let path = profiles_dir().join("models").join(name);
    Model::from_yaml_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Sum of all trunk component bytes (one per layer of each entry).
fn trunk_bytes(m: &Model) -> u64 {
    m.trunk.iter().map(|t| t.bytes).sum()
}

/// Checks that every `*.yaml` file of `profiles/<sub>` loads with `load`,
/// and that the files `shipped` are among them.
fn every_file_loads<T, E: std::fmt::Display>(
    sub: &str,
    load: impl Fn(&Path) -> Result<T, E>,
    shipped: &[&str],
) {
    let files = yaml_files(sub);
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| load(path).err().map(|e| e.to_string()))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for name in shipped {
        assert!(
            files.iter().any(|p| p.file_name().unwrap() == *name),
            "profiles/{sub}/{name} is missing"
        );
    }
}

#[test]
fn every_hardware_profile_loads() {
    every_file_loads(
        "hardware",
        HardwareProfile::from_yaml_file,
        &[
            "threadripper-3945wx-rtx3070-quadro4000.yaml",
            "desktop-1gpu-8gb.yaml",
            "dual-socket-6gpu.yaml",
            "h200-node.yaml",
        ],
    );
}

#[test]
fn every_model_description_loads() {
    every_file_loads(
        "models",
        Model::from_yaml_file,
        &[
            "deepseek-v2-lite.yaml",
            "qwen3-30b-a3b.yaml",
            "mixtral-8x7b.yaml",
            "deepseek-v3.yaml",
            "glm-5.2.yaml",
            "kimi-scale.yaml",
            "llama4-maverick.yaml",
        ],
    );
}

#[test]
fn hardware_profiles_have_the_cited_shape() {
    // Desktop: one node, one 8 GiB card; usable VRAM 8 GiB - 2.59 GB
    // = 8,589,934,592 - 2,590,000,000 = 5,999,934,592 (Colibri's "allowance 6.0 GB").
    let d = hardware("desktop-1gpu-8gb.yaml");
    assert_eq!((d.numa.len(), d.gpus.len(), d.drives.len()), (1, 1, 1));
    assert_eq!(d.gpu_capacity(0), 5_999_934_592);
    // 64 GiB - 8 GiB - 2 GiB = 54 GiB.
    assert_eq!(d.ram_capacity(0), 54 << 30);

    // Dual socket: 2 nodes, 6 cards, 3 per node, one drive per node.
    let s = hardware("dual-socket-6gpu.yaml");
    assert_eq!((s.numa.len(), s.gpus.len(), s.drives.len()), (2, 6, 2));
    for node in 0..2 {
        assert_eq!(s.gpus.iter().filter(|g| g.numa == node).count(), 3);
        assert_eq!(s.drives.iter().filter(|d| d.numa == node).count(), 1);
        // 125.5 GiB - 16 GiB - 4 GiB = 105.5 GiB = 113,279,762,432 bytes.
        assert_eq!(s.ram_capacity(node), 113_279_762_432);
        // Colibri: 64.7 GB/s over both nodes, half each.
        assert!((s.numa[node].gemv_bandwidth.0 * 2.0 - 64.7e9).abs() < 1e6);
    }
    // 32 GiB - 3.3 GB = 34,359,738,368 - 3,300,000,000 = 31,059,738,368 per card.
    assert_eq!(s.gpu_capacity(0), 31_059_738_368);

    // H200 node: 8 cards, 4 per node; 141 GB - 8 GiB = 141e9 - 8,589,934,592.
    let h = hardware("h200-node.yaml");
    assert_eq!((h.numa.len(), h.gpus.len(), h.drives.len()), (2, 8, 2));
    for node in 0..2 {
        assert_eq!(h.gpus.iter().filter(|g| g.numa == node).count(), 4);
    }
    assert_eq!(h.gpu_capacity(7), 132_410_065_408);
    // 4.8 TB/s x 0.7.
    assert!((h.gpus[0].gemv_bandwidth.0 - 3.36e12).abs() < 1e6);
}

#[test]
fn deepseek_v2_lite_sizes() {
    let m = model("deepseek-v2-lite.yaml");
    // 26 MoE layers (1..=26) x 64 experts = 1,664.
    assert_eq!(m.expert_count(), 1_664);
    // int4: 3*2048*1408 = 8,650,752 params; /2 = 4,325,376
    // + ceil(8,650,752/64) = 135,168 scales * 2 = 270,336 -> 4,595,712.
    assert!(m.moe.iter().all(|l| l.gpu_bytes == 4_595_712
        && l.ram_bytes == 4_595_712
        && l.disk_bytes == 4_595_712));
}

#[test]
fn qwen3_30b_a3b_sizes() {
    let m = model("qwen3-30b-a3b.yaml");
    // 48 layers, all MoE, x 128 = 6,144 experts.
    assert_eq!(m.expert_count(), 6_144);
    assert_eq!(m.moe_layer_numbers(), (0..48).collect::<Vec<_>>());
    // int4: 3*2048*768 = 4,718,592 params; /2 = 2,359,296 + 73,728 * 2 = 147,456 -> 2,506,752.
    assert_eq!(m.moe[0].gpu_bytes, 2_506_752);
    // Parameters: trunk bf16 bytes / 2 + experts + embedding 151936*2048 = 311,164,928
    // should give the published 30.5B: 48*19,140,864 + 311,164,928 + 6,144*4,718,592
    // + 311,164,928 = 30,532,120,576.
    let params = trunk_bytes(&m) / 2 + 6_144 * 4_718_592 + 311_164_928;
    assert_eq!(params, 30_532_120_576);
}

#[test]
fn mixtral_8x7b_sizes() {
    let m = model("mixtral-8x7b.yaml");
    // 32 layers x 8 = 256 experts.
    assert_eq!(m.expert_count(), 256);
    // int4: 3*4096*14336 = 176,160,768 params; /2 = 88,080,384
    // + ceil(176,160,768/64) = 2,752,512 scales * 2 = 5,505,024 -> 93,585,408.
    assert_eq!(m.moe[0].gpu_bytes, 93_585_408);
    // 46.7B published: 32*41,984,000 + 131,072,000 (lm_head) + 256*176,160,768
    // + 131,072,000 (embedding) = 46,702,788,608.
    let params = trunk_bytes(&m) / 2 + 256 * 176_160_768 + 131_072_000;
    assert_eq!(params, 46_702_788_608);
}

#[test]
fn deepseek_v3_sizes() {
    let m = model("deepseek-v3.yaml");
    // MoE layers 3..=60: 58 x 256 = 14,848 experts.
    assert_eq!(m.expert_count(), 14_848);
    assert_eq!(m.moe_layer_numbers().first(), Some(&3));
    // int4: 3*7168*2048 = 44,040,192; /2 = 22,020,096 + 688,128 * 2 = 1,376,256 -> 23,396,352.
    assert_eq!(m.moe[0].gpu_bytes, 23_396_352);
    // 671B published (without MTP): 61*187,121,664 + 3*396,361,728 + 58*45,875,456
    // + 926,679,040 (lm_head) + 14,848*44,040,192 + 926,679,040 (embedding) = 671,026,412,032.
    let params = trunk_bytes(&m) / 2 + 14_848 * 44_040_192 + 926_679_040;
    assert_eq!(params, 671_026_412_032);
}

#[test]
fn llama4_maverick_sizes() {
    let m = model("llama4-maverick.yaml");
    // MoE on odd layers 1..=47: 24 layers x 128 = 3,072 experts.
    let odd: Vec<usize> = (1..48).step_by(2).collect();
    assert_eq!(m.moe_layer_numbers(), odd);
    assert_eq!(m.expert_count(), 3_072);
    // int4: 3*5120*8192 = 125,829,120; /2 = 62,914,560 + 1,966,080 * 2 = 3,932,160 -> 66,846,720.
    assert_eq!(m.moe[0].gpu_bytes, 66_846_720);
    // 400B published: 48*62,924,800 + 24*251,658,240 + 24*126,484,480 + 1,034,485,760
    // + 3,072*125,829,120 + 1,034,485,760 (embedding) = 400,711,843,840.
    let params = trunk_bytes(&m) / 2 + 3_072 * 125_829_120 + 1_034_485_760;
    assert_eq!(params, 400_711_843_840);
}

#[test]
fn glm_5_2_sizes() {
    let m = model("glm-5.2.yaml");
    // MoE layers 3..=77 (the .coli_usage rows): 75 x 256 = 19,200 experts.
    let layers = m.moe_layer_numbers();
    assert_eq!(
        (layers.first(), layers.last(), layers.len()),
        (Some(&3), Some(&77), 75)
    );
    assert_eq!(m.expert_count(), 19_200);
    // int4 per-row: 3*6144*2048/2 = 18,874,368 + 10,240 rows * 4 = 40,960 -> 18,915,328;
    // Colibri's log: 46.9 GB / 2478 experts = 18.93 MB.
    assert_eq!(m.moe[0].gpu_bytes, 18_915_328);
    assert!((46.9e9_f64 / 2478.0 - 18_915_328.0).abs() < 0.05e9 / 2478.0);
    // Trunk: 78*87,488,384 + 3*113,369,088 + 75*25,207,808 + 476,410,880
    // = 6,824,093,952 + 340,107,264 + 1,890,585,600 + 476,410,880 = 9,531,197,696;
    // Colibri's "resident dense: 9647.10 MB" is 1.2% more.
    assert_eq!(trunk_bytes(&m), 9_531_197_696);
    assert!((trunk_bytes(&m) as f64 / 9_647.10e6 - 1.0).abs() < 0.02);
}

#[test]
fn kimi_scale_sizes() {
    let m = model("kimi-scale.yaml");
    // The scale target: 64 MoE layers x 1280 experts = 81,920.
    assert_eq!(m.expert_count(), 81_920);
    assert_eq!(m.moe_layer_numbers(), (1..=64).collect::<Vec<_>>());
    // Same expert shape as DeepSeek-V3: int4 23,396,352; 81,920 of them = 1,916,629,155,840 bytes.
    let total: u64 = m.moe.iter().map(|l| l.experts as u64 * l.disk_bytes).sum();
    assert_eq!(total, 1_916_629_155_840);
}

/// Real heat sets load against the description of the model they were
/// recorded on, and give use rates of the model's shape.
#[test]
fn real_heat_loads_against_matching_models() {
    let data = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data"));
    if !data.exists() {
        eprintln!(
            "skipped: {} is absent (the shared data sets live beside the repository)",
            data.display()
        );
        return;
    }
    let cases: [(&str, &str, Option<HeatFormat>); 5] = [
        (
            "traces/esft_deepseek_v2_lite",
            "deepseek-v2-lite.yaml",
            None,
        ),
        (
            "traces/qwen3_30b_a3b_cross_lang",
            "qwen3-30b-a3b.yaml",
            None,
        ),
        (
            "traces/mixtral_8x7b_speculative_moe",
            "mixtral-8x7b.yaml",
            None,
        ),
        ("traces/llama4_maverick_mmlu", "llama4-maverick.yaml", None),
        (
            "colibri/glm52_m1ultra_fmt2_2026-08-04/colibri_usage.snapshot",
            "glm-5.2.yaml",
            Some(HeatFormat::ColiUsage),
        ),
    ];
    for (sub, model_file, format) in cases {
        let path = data.join(sub);
        if !path.exists() {
            eprintln!("skipped: {} is absent", path.display());
            continue;
        }
        let m = model(model_file);
        let mut warnings = Vec::new();
        let heat = read_heat(&path, format, &HeatContext::for_model(&m), &mut warnings)
            .unwrap_or_else(|e| panic!("{model_file}: {e}"));
        let rates = heat
            .total
            .use_rates(&m, &path, &mut warnings)
            .unwrap_or_else(|e| panic!("{model_file}: {e}"));
        assert_eq!(rates.len(), m.moe.len(), "{sub}");
        // Every MoE layer routes about top_k experts per token.
        let k = m.top_k() as f64;
        for (l, row) in rates.iter().enumerate() {
            let sum: f64 = row.iter().sum();
            assert!(
                (sum - k).abs() <= 0.05 * k,
                "{sub}: MoE layer {l} uses {sum} experts per token, top_k is {k}"
            );
        }
        for w in &warnings {
            eprintln!("{sub}: {w}");
        }
    }
}
