//! Checkpoints end to end: small descriptions of every architecture written
//! as several shards, read back, and checked against sizes computed by hand;
//! corrupted shards; the adapters' fit on the real descriptions.

use super::config::{Attention, Mla};
use super::family::{Arch, ExpertLayout};
use super::gen::{arch_config, GenDtype, GenOptions};
use super::read::INDEX_FILE;
use super::{generate, Checkpoint, ExpertFormat};
use crate::identity::{Family, ObjectKey};
use residency_core::model::{FormatSize, Model, StageKind};
use residency_core::units::Bytes;
use std::path::{Path, PathBuf};

const HIDDEN: u64 = 64;
const INTERMEDIATE: u64 = 32;
const EXPERTS: u32 = 4;
const VOCAB: u64 = 100;
/// BF16 bytes of one expert: 3 * 64 * 32 parameters.
const EXPERT_BF16_BYTES: u64 = 3 * HIDDEN * INTERMEDIATE * 2;
/// Mixtral attention at 4 heads of 16, 2 key/value heads: q, o 64x64, k, v
/// 32x64, two norms of 64, router 4x64 = 12,672 parameters.
const MIXTRAL_ATTN_BYTES: u64 = (2 * 64 * 64 + 2 * 32 * 64 + 2 * 64 + 4 * 64) * 2;
/// Qwen2-MoE attention at 4 heads of 16, 4 key/value heads: q, k, v, o 64x64,
/// q/k/v biases of 64, two norms, router = 16,960 parameters.
const QWEN2_ATTN_BYTES: u64 = (4 * 64 * 64 + 3 * 64 + 2 * 64 + 4 * 64) * 2;

/// A small description of `arch`: (name, yaml, MoE layers it lists).
fn small_yaml(arch: Arch) -> (&'static str, String) {
    let lm_head = VOCAB * HIDDEN * 2;
    let (name, layers, moe, extra) = match arch {
        Arch::Mixtral => (
            "mixtral-small",
            3,
            "0..=2",
            format!("  - {{ name: attn, layers: \"0..=2\", bytes: {MIXTRAL_ATTN_BYTES}, stage: dense }}"),
        ),
        Arch::DeepseekV2 => (
            "DeepSeek-V2-small",
            4,
            "1..=3",
            // dense MLP 96 wide; two shared experts of 32.
            format!(
                "  - {{ name: attn, layers: \"0..=3\", bytes: 40000, stage: dense }}\n\
                 \x20 - {{ name: dense_ffn, layers: [0], bytes: {}, stage: dense }}\n\
                 \x20 - {{ name: shared_expert, layers: \"1..=3\", bytes: {}, stage: experts }}",
                3 * HIDDEN * 96 * 2,
                2 * EXPERT_BF16_BYTES
            ),
        ),
        Arch::DeepseekV3 => (
            "deepseek_v3_small",
            5,
            "2..=4",
            format!(
                "  - {{ name: attn, layers: \"0..=4\", bytes: 60000, stage: dense }}\n\
                 \x20 - {{ name: dense_ffn, layers: \"0..=1\", bytes: {}, stage: dense }}\n\
                 \x20 - {{ name: shared_expert, layers: \"2..=4\", bytes: {EXPERT_BF16_BYTES}, stage: experts }}",
                3 * HIDDEN * 96 * 2
            ),
        ),
        Arch::Qwen2Moe => (
            "Qwen2-MoE-small",
            3,
            "0..=2",
            format!(
                "  - {{ name: attn, layers: \"0..=2\", bytes: {QWEN2_ATTN_BYTES}, stage: dense }}\n\
                 \x20 - {{ name: shared_expert, layers: \"0..=2\", bytes: {}, stage: experts }}",
                3 * HIDDEN * 48 * 2
            ),
        ),
        Arch::Qwen3Moe => (
            "qwen3-small",
            3,
            "0..=2",
            "  - { name: attn, layers: \"0..=2\", bytes: 30000, stage: dense }".to_string(),
        ),
        Arch::Olmoe => (
            "OLMoE-small",
            3,
            "0..=2",
            "  - { name: attn, layers: \"0..=2\", bytes: 30000, stage: dense }".to_string(),
        ),
        Arch::Llama4 | Arch::Llama4Text => unreachable!("fused experts: see llama4_tests"),
    };
    let yaml = format!(
        "name: {name}\nlayers: {layers}\nmoe_layers: \"{moe}\"\nexperts: {EXPERTS}\ntop_k: 2\n\
         hidden: {HIDDEN}\nexpert_intermediate: {INTERMEDIATE}\n\
         formats:\n  bf16: {EXPERT_BF16_BYTES}\n  int8: {{ bits: 8, group: 32 }}\n  int4: {{ bits: 4, group: 16 }}\n\
         tiers: {{ gpu: int4, ram: int8, disk: bf16 }}\ntrunk:\n{extra}\n\
         \x20 - {{ name: lm_head, bytes: {lm_head}, stage: head }}\n"
    );
    (name, yaml)
}

fn small_model(arch: Arch) -> (PathBuf, Model) {
    let (name, yaml) = small_yaml(arch);
    let path = PathBuf::from(format!("{name}.yaml"));
    let model = Model::from_yaml_str(&yaml, &path).unwrap();
    (path, model)
}

const ARCHS: [Arch; 6] = [
    Arch::Mixtral,
    Arch::DeepseekV2,
    Arch::DeepseekV3,
    Arch::Qwen2Moe,
    Arch::Qwen3Moe,
    Arch::Olmoe,
];

/// Generates two MoE layers of `arch` in shards of at most 32 KiB.
fn generate_small(arch: Arch, dtype: GenDtype, dir: &Path) -> Checkpoint {
    let (path, model) = small_model(arch);
    let out = dir.join(format!("{arch:?}-{}", dtype.name()));
    let opts = GenOptions {
        dtype,
        moe_layers: Some(2),
        shard_bytes: 32 << 10,
        seed: 7,
        ..GenOptions::default()
    };
    let report = generate(&model, &path, &out, &opts).unwrap();
    assert!(report.shards > 1, "{arch:?}: {} shard", report.shards);
    assert!(out.join(INDEX_FILE).is_file());
    Checkpoint::open(&out).unwrap()
}

#[test]
fn checkpoint_of_every_family_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ARCHS {
        let (_, model) = small_model(arch);
        let ckpt = generate_small(arch, GenDtype::Bf16, dir.path());
        assert_eq!(ckpt.config.arch, arch);
        assert_eq!(ckpt.identity.family, arch.spec().family);
        assert_eq!(ckpt.identity.format, "bf16");
        assert_eq!(ckpt.identity.content_id.len(), 64);
        // The first two MoE layers and the dense layers before them.
        let moe = &model.moe_layer_numbers()[..2];
        assert_eq!(ckpt.config.moe_layers(), moe, "{arch:?}");
        assert_eq!(ckpt.config.layers, moe[1] + 1);
        let ExpertLayout::PerExpert(projections) = arch.spec().experts else {
            unreachable!("these families have one module per expert")
        };
        for &layer in moe {
            for expert in 0..EXPERTS {
                let key = ObjectKey::Expert {
                    layer: layer as u32,
                    expert,
                };
                let extents = ckpt.extents(&key);
                assert_eq!(extents.len(), 3, "{arch:?} {key}");
                for p in projections {
                    let name = format!(".experts.{expert}.{p}.weight");
                    let e = extents.iter().find(|e| e.tensor.ends_with(&name)).unwrap();
                    assert!(e.tensor.starts_with(&format!("model.layers.{layer}.")));
                    // [32, 64] or [64, 32] BF16.
                    assert_eq!(e.len, INTERMEDIATE * HIDDEN * 2);
                    let shard_bytes = std::fs::metadata(&e.shard).unwrap().len();
                    assert!(e.offset + e.len <= shard_bytes);
                }
            }
        }
        assert!(ckpt
            .extents(&ObjectKey::Expert {
                layer: 99,
                expert: 0
            })
            .is_empty());

        let d = ckpt.description();
        let derived = Model::validate(d.clone(), &ckpt.dir).unwrap();
        let source = &model.description;
        assert_eq!(derived.moe_layer_numbers(), moe);
        assert_eq!(
            (d.experts, d.top_k, d.hidden, d.expert_intermediate),
            (
                source.experts,
                source.top_k,
                source.hidden,
                source.expert_intermediate
            )
        );
        assert_eq!(
            d.formats["bf16"],
            FormatSize::Bytes(Bytes(EXPERT_BF16_BYTES))
        );
        assert_eq!(derived.moe[0].gpu_bytes, EXPERT_BF16_BYTES);
        let component = |name: &str| {
            derived
                .trunk
                .iter()
                .filter(|c| c.name == name)
                .collect::<Vec<_>>()
        };
        // lm_head: the YAML's 100 x 64 plus the final norm of 64.
        let head = component("lm_head");
        assert_eq!(head.len(), 1);
        assert_eq!(
            (head[0].bytes, head[0].stage),
            ((VOCAB + 1) * HIDDEN * 2, StageKind::Head)
        );
        assert_eq!(component("attn").len(), ckpt.config.layers);
        assert!(component("embed").is_empty());
        let expected_attn = match arch {
            Arch::Mixtral => Some(MIXTRAL_ATTN_BYTES),
            Arch::Qwen2Moe => Some(QWEN2_ATTN_BYTES),
            _ => None,
        };
        if let Some(bytes) = expected_attn {
            assert!(
                component("attn").iter().all(|c| c.bytes == bytes),
                "{arch:?}"
            );
        }
        let source_trunk = |name: &str| source.trunk.iter().find(|t| t.name == name);
        if let Some(t) = source_trunk("shared_expert") {
            let shared = component("shared_expert");
            assert_eq!(shared.len(), 2, "{arch:?}");
            // Qwen2-MoE's shared expert also has its [1, 64] sigmoid gate.
            let gate = if arch == Arch::Qwen2Moe {
                HIDDEN * 2
            } else {
                0
            };
            assert!(shared
                .iter()
                .all(|c| c.bytes == t.bytes.0 + gate && c.stage == StageKind::Experts));
        }
        if let Some(t) = source_trunk("dense_ffn") {
            let dense = component("dense_ffn");
            assert_eq!(dense.len(), ckpt.config.dense_layers.len());
            assert!(dense.iter().all(|c| c.bytes == t.bytes.0));
        }
    }
}

#[test]
fn checkpoint_int4_and_int8_containers_hold_packed_experts_and_scales() {
    let dir = tempfile::tempdir().unwrap();
    let params = 3 * HIDDEN * INTERMEDIATE;
    // int4 group 16 (from the YAML): two values per byte, an F16 scale per 16.
    // int8 group 32: one value per byte, an F16 scale per 32.
    for (dtype, bits, group) in [(GenDtype::Int4, 4, 16), (GenDtype::Int8, 8, 32)] {
        let ckpt = generate_small(Arch::Qwen3Moe, dtype, dir.path());
        assert_eq!(ckpt.config.format, ExpertFormat::Packed { bits, group });
        assert_eq!(ckpt.identity.group_size, group as u32);
        let key = ObjectKey::Expert {
            layer: 1,
            expert: 2,
        };
        let extents = ckpt.extents(&key);
        assert_eq!(extents.len(), 6);
        let scales: u64 = extents
            .iter()
            .filter(|e| e.tensor.ends_with(".scales"))
            .map(|e| e.len)
            .sum();
        assert_eq!(scales, params / group * 2);
        let expected = params * bits as u64 / 8 + params / group * 2;
        assert_eq!(ckpt.object_bytes(&key), expected);
        let d = ckpt.description();
        assert_eq!(d.formats[dtype.name()], FormatSize::Bytes(Bytes(expected)));
        assert_eq!(d.tiers.gpu, dtype.name());
        // The YAML's {bits, group} size is the same number.
        let (_, model) = small_model(Arch::Qwen3Moe);
        let yaml = model.description.formats[dtype.name()];
        assert_eq!(yaml.expert_bytes(params, params), expected);
    }
}

#[test]
fn checkpoint_values_are_seeded_per_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_model(Arch::Olmoe);
    let read = |seed: u64, layers: usize, name: &str| {
        let out = dir.path().join(name);
        let opts = GenOptions {
            seed,
            moe_layers: Some(layers),
            ..GenOptions::default()
        };
        generate(&model, &path, &out, &opts).unwrap();
        let ckpt = Checkpoint::open(&out).unwrap();
        let e = &ckpt.extents(&ObjectKey::Expert {
            layer: 0,
            expert: 1,
        })[0];
        let bytes = std::fs::read(&e.shard).unwrap();
        (
            ckpt.identity.content_id.clone(),
            bytes[e.offset as usize..(e.offset + e.len) as usize].to_vec(),
        )
    };
    let (id_a, a) = read(1, 1, "a");
    let (_, b) = read(1, 3, "b");
    let (id_c, c) = read(2, 1, "c");
    assert_eq!(a, b, "a tensor's values do not depend on the layers kept");
    assert_ne!(a, c, "another seed gives other values");
    assert_eq!(id_a, id_c, "the content id covers headers, not values");
}

fn shard_of(dir: &Path, tensor: &str) -> PathBuf {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(INDEX_FILE)).unwrap()).unwrap();
    dir.join(index["weight_map"][tensor].as_str().unwrap())
}

/// Replaces `from` by `to` (same length) in the header of the shard holding `tensor`.
fn edit_header(dir: &Path, tensor: &str, from: &str, to: &str) -> PathBuf {
    assert_eq!(from.len(), to.len());
    let shard = shard_of(dir, tensor);
    let mut bytes = std::fs::read(&shard).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + header_len].to_vec()).unwrap();
    let entry = format!("\"{tensor}\":{{\"dtype\":");
    let at = header.find(&entry).unwrap() + entry.len();
    let rest = &header[at..];
    let pos = at + rest.find(from).unwrap();
    bytes[8 + pos..8 + pos + from.len()].copy_from_slice(to.as_bytes());
    std::fs::write(&shard, bytes).unwrap();
    shard
}

#[test]
fn checkpoint_corruption_is_an_error_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = |name: &str| {
        let parent = dir.path().join(name);
        std::fs::create_dir(&parent).unwrap();
        let ckpt = generate_small(Arch::Mixtral, GenDtype::Bf16, &parent);
        ckpt.dir
    };
    let expect = |ckpt: &Path, file: &Path, needles: &[&str]| {
        let e = Checkpoint::open(ckpt).unwrap_err().to_string();
        assert!(e.starts_with(&file.display().to_string()), "{e}");
        for needle in needles {
            assert!(e.contains(needle), "`{needle}` not in {e}");
        }
        assert!(!e.contains('\n'), "{e}");
    };

    // A truncated shard names the first tensor past the end.
    let ckpt = fresh("truncated");
    let w2 = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
    let shard = shard_of(&ckpt, w2);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - 1).unwrap();
    expect(&ckpt, &shard, &["tensor `model.", "truncated"]);

    // A dtype of the same width the adapter does not expect.
    let ckpt = fresh("dtype");
    let gate = "model.layers.0.block_sparse_moe.gate.weight";
    let shard = edit_header(&ckpt, gate, "\"BF16\"", "\"F16\" ");
    expect(&ckpt, &shard, &[gate, "has dtype F16, expected BF16"]);

    // A transposed shape: same bytes, wrong geometry.
    let ckpt = fresh("shape");
    let w1 = "model.layers.0.block_sparse_moe.experts.0.w1.weight";
    let shard = edit_header(&ckpt, w1, "[32,64]", "[64,32]");
    expect(
        &ckpt,
        &shard,
        &[w1, "has shape [64, 32], expected [32, 64]"],
    );

    // A dtype whose width disagrees with the data offsets.
    let ckpt = fresh("width");
    let shard = edit_header(&ckpt, w1, "\"BF16\"", "\"F32\" ");
    expect(&ckpt, &shard, &[w1, "data_offsets"]);

    // A shard the index names is gone.
    let ckpt = fresh("missing");
    let shard = shard_of(&ckpt, w1);
    std::fs::remove_file(&shard).unwrap();
    let e = Checkpoint::open(&ckpt).unwrap_err().to_string();
    assert!(e.contains(&shard.display().to_string()), "{e}");
}

#[test]
fn checkpoint_generation_refuses_bad_requests_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_model(Arch::Mixtral);
    let out = dir.path().join("out");
    let fails = |model: &Model, opts: GenOptions, place: &str| {
        let e = generate(model, &path, &out, &opts).unwrap_err().to_string();
        assert!(e.contains(place), "`{place}` not in {e}");
        assert!(!e.contains('\n'), "{e}");
    };
    fails(
        &model,
        GenOptions {
            moe_layers: Some(0),
            ..GenOptions::default()
        },
        "--layers",
    );
    fails(
        &model,
        GenOptions {
            moe_layers: Some(4),
            ..GenOptions::default()
        },
        "--layers",
    );
    fails(
        &model,
        GenOptions {
            shard_bytes: 0,
            ..GenOptions::default()
        },
        "--shard-bytes",
    );
    // Mixtral has no dense layers; a description with one is not a Mixtral.
    let (_, dsv2) = small_model(Arch::DeepseekV2);
    let as_mixtral = GenOptions {
        family: Some(Family::Mixtral),
        ..GenOptions::default()
    };
    fails(&dsv2, as_mixtral, "moe_layers");
    // A name no family is recognised in.
    let mut unnamed = model.clone();
    unnamed.description.name = "some-model".into();
    let e = generate(&unnamed, Path::new("m.yaml"), &out, &GenOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("m.yaml: name: ") && e.contains("--family"),
        "{e}"
    );
    // A group that does not divide the expert width.
    let odd = small_yaml(Arch::Mixtral)
        .1
        .replace("group: 16", "group: 24");
    let odd = Model::from_yaml_str(&odd, &path).unwrap();
    fails(
        &odd,
        GenOptions {
            dtype: GenDtype::Int4,
            ..GenOptions::default()
        },
        "formats.int4",
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // An existing non-empty output is never overwritten.
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep"), "x").unwrap();
    fails(&model, GenOptions::default(), "already exists");
    assert!(out.join("keep").exists());
    // An empty one is replaced.
    std::fs::remove_file(out.join("keep")).unwrap();
    generate(&model, &path, &out, &GenOptions::default()).unwrap();
    assert!(
        out.join("model.safetensors").is_file(),
        "one shard, no index"
    );
    assert!(Checkpoint::open(&out).is_ok());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// The real descriptions: the attention fitted to their sizes is the
/// geometry their config.json has (cited in each file).
#[test]
fn checkpoint_adapters_fit_the_real_descriptions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles/models");
    let gqa = |heads, kv_heads, head_dim| Attention::Gqa {
        heads,
        kv_heads,
        head_dim,
    };
    let mla = |heads, q_lora_rank| {
        Attention::Mla(Mla {
            heads,
            q_lora_rank,
            kv_lora_rank: 512,
            qk_nope_head_dim: 128,
            qk_rope_head_dim: 64,
            v_head_dim: 128,
        })
    };
    let cases = [
        ("mixtral-8x7b", Arch::Mixtral, gqa(32, 8, 128), 32000, 0, 0),
        (
            "qwen3-30b-a3b",
            Arch::Qwen3Moe,
            gqa(32, 4, 128),
            151936,
            0,
            0,
        ),
        (
            "deepseek-v2-lite",
            Arch::DeepseekV2,
            mla(16, None),
            102400,
            10944,
            2 * 1408,
        ),
        (
            "deepseek-v3",
            Arch::DeepseekV3,
            mla(128, Some(1536)),
            129280,
            18432,
            2048,
        ),
        // 40 heads: the query width is hidden, 5120.
        (
            "llama4-maverick",
            Arch::Llama4,
            gqa(40, 8, 128),
            202048,
            16384,
            8192,
        ),
    ];
    for (name, arch, attention, vocab, dense, shared) in cases {
        let path = root.join(format!("{name}.yaml"));
        let model = Model::from_yaml_file(&path).unwrap();
        let (cfg, notes) = arch_config(&model, &path, &GenOptions::default()).unwrap();
        assert_eq!(cfg.arch, arch, "{name}");
        assert_eq!(cfg.attention, attention, "{name}: {notes:?}");
        assert_eq!(
            (cfg.vocab, cfg.dense_intermediate, cfg.shared_intermediate),
            (vocab, dense, shared),
            "{name}"
        );
        assert_eq!(cfg.layers, model.description.layers);
        // The only note says how the attention was fitted.
        assert_eq!(notes.len(), 1, "{name}: {notes:?}");
        // Its KV cache is what the description computed.
        assert_eq!(
            Some(Bytes(cfg.kv_bytes_per_token())),
            model.description.kv_bytes_per_token,
            "{name}"
        );
    }
}
