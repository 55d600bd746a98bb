//! Llama-4 checkpoints end to end: interleaved dense and MoE layers, fused
//! expert tensors split into one object per expert, the multimodal
//! config.json and its vision tower, and the apply loader reading an
//! expert's slices; every size computed by hand.

use super::config::{ArchConfig, Attention};
use super::family::{self, Arch, Owner};
use super::gen::{GenDtype, GenOptions};
use super::read::INDEX_FILE;
use super::{generate, Checkpoint, ExpertFormat};
use crate::apply::loader::CheckpointLoader;
use crate::identity::{Family, ObjectKey};
use crate::storage::{open_backend, BackendKind};
use crate::store::Loader;
use residency_core::model::{FormatSize, Model, StageKind};
use residency_core::units::Bytes;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const HIDDEN: u64 = 64;
const INTER: u64 = 32;
const EXPERTS: u64 = 4;
/// One expert: gate_up `[64, 64]` (hidden x 2 * inter) and down `[32, 64]`
/// (inter x hidden) = 6,144 parameters.
const EXPERT_PARAMS: u64 = HIDDEN * 2 * INTER + INTER * HIDDEN;
const EXPERT_BF16: u64 = EXPERT_PARAMS * 2;
/// int4 group 16: 6,144 / 2 bytes of values and 6,144 / 16 F16 scales.
const EXPERT_INT4: u64 = EXPERT_PARAMS / 2 + EXPERT_PARAMS / 16 * 2;
/// Attention at 4 heads of 16 (or any geometry of the same size), 2
/// key/value heads: q, o 64x64, k, v 32x64, two norms of 64 = 12,416
/// parameters; a MoE layer adds its router, 4x64.
const ATTN_DENSE: u64 = (2 * 64 * 64 + 2 * 32 * 64 + 2 * 64) * 2;
const ATTN_MOE: u64 = ATTN_DENSE + EXPERTS * HIDDEN * 2;
/// Dense MLP 96 wide, on the even layers.
const DENSE_FFN: u64 = 3 * HIDDEN * 96 * 2;
/// The shared expert is as wide as a routed one.
const SHARED: u64 = 3 * HIDDEN * INTER * 2;
/// lm_head 100 x 64 and the final norm.
const LM_HEAD: u64 = (100 * HIDDEN + HIDDEN) * 2;

/// Six layers, MoE on 1, 3, 5 (`interleave_moe_layer_step` 2, as Maverick).
fn tiny_yaml() -> String {
    tiny_yaml_with("int4: { bits: 4, group: 16 }")
}

/// `tiny_yaml` with `packed` the packed formats' lines.
fn tiny_yaml_with(packed: &str) -> String {
    format!(
        "name: Llama-4-tiny\nlayers: 6\nmoe_layers: [1, 3, 5]\nexperts: {EXPERTS}\ntop_k: 1\n\
         hidden: {HIDDEN}\nexpert_intermediate: {INTER}\n\
         formats:\n  bf16: {EXPERT_BF16}\n  {packed}\n\
         tiers: {{ gpu: int4, ram: int4, disk: bf16 }}\ntrunk:\n\
         \x20 - {{ name: attn, layers: [1, 3, 5], bytes: {ATTN_MOE}, stage: dense }}\n\
         \x20 - {{ name: attn, layers: [0, 2, 4], bytes: {ATTN_DENSE}, stage: dense }}\n\
         \x20 - {{ name: dense_ffn, layers: [0, 2, 4], bytes: {DENSE_FFN}, stage: dense }}\n\
         \x20 - {{ name: shared_expert, layers: [1, 3, 5], bytes: {SHARED}, stage: experts }}\n\
         \x20 - {{ name: lm_head, bytes: {}, stage: head }}\n",
        100 * HIDDEN * 2
    )
}

/// The first two MoE layers (layers 0..=3) in shards of at most 16 KiB.
fn generate_tiny(dir: &Path, dtype: GenDtype) -> Checkpoint {
    generate_from(dir, dtype, &tiny_yaml())
}

/// `generate_tiny` of the model `yaml`.
fn generate_from(dir: &Path, dtype: GenDtype, yaml: &str) -> Checkpoint {
    let path = PathBuf::from("llama4-tiny.yaml");
    let model = Model::from_yaml_str(yaml, &path).unwrap();
    let out = dir.join(dtype.name());
    let opts = GenOptions {
        dtype,
        moe_layers: Some(2),
        shard_bytes: 16 << 10,
        seed: 3,
        ..GenOptions::default()
    };
    let report = generate(&model, &path, &out, &opts).unwrap();
    assert_eq!(report.config.arch, Arch::Llama4, "inferred from the name");
    assert!(report.shards > 1);
    Checkpoint::open(&out).unwrap()
}

fn fused_name(layer: u32, param: &str) -> String {
    format!("language_model.model.layers.{layer}.feed_forward.experts.{param}")
}

/// `(shard, first data byte, end)` of `tensor`, read from the index and the
/// shard's header here, apart from the reader.
fn tensor_span(dir: &Path, tensor: &str) -> (PathBuf, u64, u64) {
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir.join(INDEX_FILE)).unwrap()).unwrap();
    let shard = dir.join(index["weight_map"][tensor].as_str().unwrap());
    let bytes = std::fs::read(&shard).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let header: Value = serde_json::from_slice(&bytes[8..8 + n as usize]).unwrap();
    let offsets = &header[tensor]["data_offsets"];
    let (start, end) = (offsets[0].as_u64().unwrap(), offsets[1].as_u64().unwrap());
    (shard, 8 + n + start, 8 + n + end)
}

#[test]
fn llama4_checkpoint_round_trips_with_fused_experts() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = generate_tiny(dir.path(), GenDtype::Bf16);
    assert_eq!(ckpt.config.arch, Arch::Llama4);
    assert_eq!(ckpt.identity.family, Family::Llama4);
    assert_eq!(ckpt.config.layers, 4);
    assert_eq!(ckpt.config.dense_layers, [0, 2]);

    // config.json as transformers writes a multimodal Llama-4 one.
    let config: Value =
        serde_json::from_slice(&std::fs::read(ckpt.dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        config["architectures"],
        json!(["Llama4ForConditionalGeneration"])
    );
    assert_eq!(config["model_type"], "llama4");
    let text = &config["text_config"];
    assert_eq!(text["model_type"], "llama4_text");
    assert_eq!(text["interleave_moe_layer_step"], 2);
    assert_eq!(text["moe_layers"], json!([1, 3]));
    assert_eq!(text["num_local_experts"], EXPERTS);
    assert_eq!(text["intermediate_size"], INTER);
    assert_eq!(text["intermediate_size_mlp"], 96);
    assert!(config.get("vision_config").is_none());

    // MoE at the interleaved positions.
    let d = ckpt.description();
    let derived = Model::validate(d.clone(), &ckpt.dir).unwrap();
    assert_eq!(derived.moe_layer_numbers(), [1, 3]);
    assert_eq!(d.layers, 4);
    assert_eq!(d.formats["bf16"], FormatSize::Bytes(Bytes(EXPERT_BF16)));

    // Each expert: its slice of gate_up_proj (64 x 64 BF16 = 8,192 bytes)
    // and of down_proj (32 x 64 = 4,096 bytes) = 12,288 bytes.
    assert_eq!(EXPERT_BF16, 12_288);
    for layer in [1u32, 3] {
        for expert in 0..EXPERTS as u32 {
            let key = ObjectKey::Expert { layer, expert };
            assert_eq!(ckpt.object_bytes(&key), EXPERT_BF16, "{key}");
            let extents = ckpt.extents(&key);
            let lens: Vec<(String, u64)> =
                extents.iter().map(|e| (e.tensor.clone(), e.len)).collect();
            assert_eq!(
                lens,
                [
                    (fused_name(layer, "gate_up_proj"), 8192),
                    (fused_name(layer, "down_proj"), 4096)
                ],
                "{key}"
            );
        }
        // The experts' ranges are disjoint and cover each fused tensor.
        for param in ["gate_up_proj", "down_proj"] {
            let name = fused_name(layer, param);
            let (shard, start, end) = tensor_span(&ckpt.dir, &name);
            let mut ranges: Vec<(u64, u64)> = ckpt
                .objects
                .values()
                .flatten()
                .filter(|e| e.tensor == name)
                .inspect(|e| assert_eq!(e.shard, shard))
                .map(|e| (e.offset, e.offset + e.len))
                .collect();
            ranges.sort_unstable();
            assert_eq!(ranges.len(), EXPERTS as usize);
            let slice = (end - start) / EXPERTS;
            for (e, &(a, b)) in ranges.iter().enumerate() {
                assert_eq!(
                    (a, b),
                    (start + e as u64 * slice, start + (e as u64 + 1) * slice)
                );
            }
            assert_eq!((ranges[0].0, ranges[3].1), (start, end));
        }
    }
    assert!(ckpt
        .extents(&ObjectKey::Expert {
            layer: 0,
            expert: 0
        })
        .is_empty());

    // Trunk components with their hand-computed sizes.
    let component = |name: &str| -> Vec<(Vec<usize>, u64, StageKind)> {
        d.trunk
            .iter()
            .filter(|t| t.name == name)
            .map(|t| {
                let layers = t.layers.as_ref().map(|s| s.expand().unwrap());
                (layers.unwrap_or_default(), t.bytes.0, t.stage)
            })
            .collect()
    };
    assert_eq!(
        component("attn"),
        [
            (vec![0, 2], ATTN_DENSE, StageKind::Dense),
            (vec![1, 3], ATTN_MOE, StageKind::Dense)
        ]
    );
    assert_eq!(
        component("dense_ffn"),
        [(vec![0, 2], DENSE_FFN, StageKind::Dense)]
    );
    assert_eq!(
        component("shared_expert"),
        [(vec![1, 3], SHARED, StageKind::Experts)]
    );
    assert_eq!(component("lm_head"), [(vec![], LM_HEAD, StageKind::Head)]);
    assert!(component("embed").is_empty());
    // The embedding is an object, left out of the description.
    let embed = ObjectKey::Trunk {
        name: family::EMBED.into(),
        layer: None,
    };
    assert_eq!(ckpt.object_bytes(&embed), 100 * HIDDEN * 2);
}

#[test]
fn llama4_int4_experts_are_slices_of_packed_fused_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = generate_tiny(dir.path(), GenDtype::Int4);
    assert_eq!(
        ckpt.config.format,
        ExpertFormat::Packed { bits: 4, group: 16 }
    );
    // gate_up: U8 [4, 32, 64] and F16 scales [4, 4, 64]; down: U8 [4, 16, 64]
    // and F16 scales [4, 2, 64]: per expert 2,048 + 512 + 1,024 + 256.
    assert_eq!(EXPERT_INT4, 2048 + 512 + 1024 + 256);
    for layer in [1u32, 3] {
        for expert in 0..EXPERTS as u32 {
            let key = ObjectKey::Expert { layer, expert };
            let mut lens: Vec<(String, u64)> = ckpt
                .extents(&key)
                .iter()
                .map(|e| (e.tensor.clone(), e.len))
                .collect();
            lens.sort();
            let name = |p| fused_name(layer, p);
            assert_eq!(
                lens,
                [
                    (name("down_proj"), 1024),
                    (name("down_proj_scales"), 256),
                    (name("gate_up_proj"), 2048),
                    (name("gate_up_proj_scales"), 512),
                ]
            );
            assert_eq!(ckpt.object_bytes(&key), EXPERT_INT4);
        }
    }
    let d = ckpt.description();
    assert_eq!(d.formats["int4"], FormatSize::Bytes(Bytes(EXPERT_INT4)));
    // The YAML's {bits, group} size is the same number.
    let yaml = Model::from_yaml_str(&tiny_yaml(), Path::new("m.yaml")).unwrap();
    let size = yaml.description.formats["int4"];
    assert_eq!(size.expert_bytes(EXPERT_PARAMS, EXPERT_PARAMS), EXPERT_INT4);
}

/// The packed formats of the kernels' test: groups of 32 fit every width
/// (64 and 32 inputs) and are whole chunks of the GPU kernels.
const KERNEL_FORMATS: &str = "int4: { bits: 4, group: 32 }\n  int8: { bits: 8, group: 32 }";

/// A Llama-4 expert is slices of fused `x @ W` tensors (input-major); the
/// packed kernel computes it, with the outputs of a naive f32 reference:
/// the slices read from the shards here and dequantised weight by weight,
/// multiplied with the activation quantised to int8 a group as the kernel
/// does, each output summed in f64. Within 1e-5 of the sum of the terms'
/// magnitudes: the kernel sums in f32 a group at a time.
#[test]
fn llama4_packed_experts_are_computed_by_the_input_major_kernel() {
    use crate::gemv::{f16_to_f32, NodeThreads};
    use crate::serve::compute::ExpertKernel;
    let dir = tempfile::tempdir().unwrap();
    for (dtype, bits) in [(GenDtype::Int4, 4usize), (GenDtype::Int8, 8)] {
        let ckpt = generate_from(dir.path(), dtype, &tiny_yaml_with(KERNEL_FORMATS));
        let group = 32;
        let keys: Vec<ObjectKey> = [1u32, 3]
            .into_iter()
            .flat_map(|layer| {
                (0..EXPERTS as u32).map(move |expert| ObjectKey::Expert { layer, expert })
            })
            .collect();
        let kernel = ExpertKernel::of(&ckpt, &keys, None);
        let note = kernel.describe();
        assert!(
            note.contains(&format!("the int{bits} GEMV kernel")),
            "{note}"
        );
        if let Err(card) = crate::serve::gpu_tier::available(&kernel) {
            assert!(!card.contains("fused"), "{card}");
        }
        let threaded = ExpertKernel::of(&ckpt, &keys, Some(NodeThreads::new(&[0, 1]).unwrap()));
        let loader =
            CheckpointLoader::new(&ckpt, keys.clone(), open_backend(BackendKind::Pread), &[])
                .unwrap();
        let x: Vec<f32> = (0..HIDDEN as usize)
            .map(|j| ((j * 37) % 19) as f32 / 9.0 - 1.0)
            .collect();
        let input = kernel.input(&x);
        for (o, key) in keys.iter().enumerate() {
            let ObjectKey::Expert { layer, expert } = *key else {
                unreachable!()
            };
            let bytes = loader.load(o as u32).unwrap();
            let y = kernel.compute(o, bytes.host().unwrap(), &input);
            // Cut over two threads: the same floats.
            assert_eq!(threaded.compute(o, bytes.host().unwrap(), &input), y);
            // The projections' outputs one after another, in file order.
            let mut params: Vec<_> = [
                ("gate_up_proj", HIDDEN, 2 * INTER),
                ("down_proj", INTER, HIDDEN),
            ]
            .into_iter()
            .map(|(p, inputs, outputs)| {
                let span = tensor_span(&ckpt.dir, &fused_name(layer, p));
                (span, p, inputs as usize, outputs as usize)
            })
            .collect();
            params.sort();
            let mut at = 0;
            for ((shard, start, end), param, inputs, outputs) in params {
                let file = std::fs::read(&shard).unwrap();
                let slice = |(start, end): (u64, u64)| {
                    let len = ((end - start) / EXPERTS) as usize;
                    file[start as usize + expert as usize * len..][..len].to_vec()
                };
                let weights = slice((start, end));
                let (scale_shard, s0, s1) =
                    tensor_span(&ckpt.dir, &fused_name(layer, &format!("{param}_scales")));
                let scales = std::fs::read(scale_shard).unwrap()[s0 as usize..s1 as usize].to_vec();
                let slice_len = scales.len() / EXPERTS as usize;
                let scales = &scales[expert as usize * slice_len..][..slice_len];
                // The weight of input `k`, output `n`: int4 byte [k / 2][n],
                // `k` even in the low nibble, each `q + 8`; int8 [k][n].
                let weight = |k: usize, n: usize| -> f32 {
                    let q = if bits == 8 {
                        weights[k * outputs + n] as i8 as f32
                    } else {
                        let b = weights[k / 2 * outputs + n];
                        (if k.is_multiple_of(2) { b & 15 } else { b >> 4 }) as f32 - 8.0
                    };
                    let s = (k / group * outputs + n) * 2;
                    q * f16_to_f32(u16::from_le_bytes([scales[s], scales[s + 1]]))
                };
                // The activation tiled to the width, an int8 value and a
                // scale a group.
                let tiled: Vec<f32> = (0..inputs).map(|j| x[j % x.len()]).collect();
                let quantised: Vec<f32> = tiled
                    .chunks(group)
                    .flat_map(|g| {
                        let max = g.iter().fold(0f32, |m, v| m.max(v.abs()));
                        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
                        g.iter().map(move |v| (v / scale).round() * scale)
                    })
                    .collect();
                for n in 0..outputs {
                    let terms = (0..inputs).map(|k| weight(k, n) as f64 * quantised[k] as f64);
                    let (want, size) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                    let got = y[at + n] as f64;
                    assert!(
                        (got - want).abs() <= 1e-5 * size + 1e-6,
                        "{key} {param} output {n}: {got} against {want}"
                    );
                }
                at += outputs;
            }
            assert_eq!(at, y.len());
        }
    }
    // BF16 experts are still refused, with their own reason.
    let ckpt = generate_tiny(dir.path(), GenDtype::Bf16);
    let keys = [ObjectKey::Expert {
        layer: 1,
        expert: 0,
    }];
    let note = ExpertKernel::of(&ckpt, &keys, None).describe();
    assert!(note.contains("BF16") && !note.contains("fused"), "{note}");
}

#[test]
fn llama4_loader_reads_each_experts_slices() {
    let dir = tempfile::tempdir().unwrap();
    for dtype in [GenDtype::Bf16, GenDtype::Int4] {
        let ckpt = generate_tiny(dir.path(), dtype);
        let keys: Vec<ObjectKey> = ckpt
            .objects
            .keys()
            .filter(|k| matches!(k, ObjectKey::Expert { .. }))
            .cloned()
            .collect();
        assert_eq!(keys.len(), 2 * EXPERTS as usize);
        let loader =
            CheckpointLoader::new(&ckpt, keys.clone(), open_backend(BackendKind::Pread), &[])
                .unwrap();
        let params: &[&str] = match dtype {
            GenDtype::Bf16 => &["gate_up_proj", "down_proj"],
            _ => &[
                "gate_up_proj",
                "gate_up_proj_scales",
                "down_proj",
                "down_proj_scales",
            ],
        };
        for (o, key) in keys.iter().enumerate() {
            let ObjectKey::Expert { layer, expert } = *key else {
                unreachable!()
            };
            // Slice `expert` of each fused tensor, in file order, read here.
            let mut spans: Vec<_> = params
                .iter()
                .map(|p| tensor_span(&ckpt.dir, &fused_name(layer, p)))
                .collect();
            spans.sort();
            let mut expected = Vec::new();
            for (shard, start, end) in spans {
                let slice = ((end - start) / EXPERTS) as usize;
                let bytes = std::fs::read(shard).unwrap();
                let at = start as usize + expert as usize * slice;
                expected.extend_from_slice(&bytes[at..at + slice]);
            }
            let got = loader.load(o as u32).unwrap();
            assert_eq!(loader.size_bytes(o as u32), expected.len() as u64);
            assert!(got.host().unwrap() == expected.as_slice(), "{key}");
        }
    }
}

#[test]
fn llama4_vision_tower_is_left_alone_other_strangers_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = generate_tiny(dir.path(), GenDtype::Bf16);
    let objects = ckpt.objects.len();
    // Add a shard of vision tensors, as the released checkpoints have.
    let add = |file: &str, name: &str| {
        let data = vec![0u8; 32];
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![4, 4], &data)
                .unwrap();
        safetensors::serialize_to_file([(name, view)], None, &ckpt.dir.join(file)).unwrap();
        let index_path = ckpt.dir.join(INDEX_FILE);
        let mut index: Value =
            serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
        index["weight_map"][name] = json!(file);
        std::fs::write(&index_path, index.to_string()).unwrap();
    };
    add(
        "vision-1.safetensors",
        "vision_model.patch_embedding.linear.weight",
    );
    add(
        "vision-2.safetensors",
        "multi_modal_projector.linear_1.weight",
    );
    let opened = Checkpoint::open(&ckpt.dir).unwrap();
    assert_eq!(opened.objects.len(), objects);
    assert_ne!(opened.identity.content_id, ckpt.identity.content_id);

    add(
        "stray.safetensors",
        "language_model.model.layers.0.extra.weight",
    );
    let e = Checkpoint::open(&ckpt.dir).unwrap_err().to_string();
    assert!(
        e.contains("language_model.model.layers.0.extra.weight"),
        "{e}"
    );
}

/// config.json of Llama-4-Maverick (`text_config` from
/// meta-llama/Llama-4-Maverick-17B-128E-Instruct, the keys this reader uses).
fn maverick_config() -> Value {
    json!({
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": false,
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "num_hidden_layers": 48,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "interleave_moe_layer_step": 2,
            "num_local_experts": 128,
            "num_experts_per_tok": 1,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 202048,
            "use_qk_norm": false,
            "torch_dtype": "bfloat16"
        },
        "vision_config": { "model_type": "llama4_vision_model", "hidden_size": 1408 }
    })
}

fn parse(v: &Value) -> Result<ArchConfig, String> {
    ArchConfig::from_json(&v.to_string(), Path::new("c/config.json")).map_err(|e| e.to_string())
}

#[test]
fn llama4_configs_of_maverick_scout_and_the_text_model() {
    let maverick = parse(&maverick_config()).unwrap();
    assert_eq!(maverick.arch, Arch::Llama4);
    let odd: Vec<usize> = (1..48).step_by(2).collect();
    assert_eq!(maverick.moe_layers(), odd);
    assert_eq!(maverick.dense_layers.len(), 24);
    assert_eq!(
        (maverick.dense_intermediate, maverick.shared_intermediate),
        (16384, 8192)
    );
    assert_eq!(
        maverick.attention,
        Attention::Gqa {
            heads: 40,
            kv_heads: 8,
            head_dim: 128
        }
    );
    // The description's KV cache: 48 layers x (k + v) x 8 x 128 x 2 bytes.
    assert_eq!(maverick.kv_bytes_per_token(), 196_608);
    // Parameters (bf16 bytes / 2), as profiles/models/llama4-maverick.yaml
    // counts them: 3,072 experts x 125,829,120; attention 48 x 62,924,800;
    // routers 24 x 655,360; dense MLPs 24 x 251,658,240; shared experts
    // 24 x 125,829,120; lm_head and embedding 2 x 1,034,485,760; final norm
    // 5,120 = 400,711,848,960.
    let tensors = family::tensors(&maverick);
    let bytes: u64 = tensors.iter().map(|t| t.bytes()).sum();
    assert_eq!(bytes / 2, 400_711_848_960);
    let expert = ObjectKey::Expert {
        layer: 47,
        expert: 127,
    };
    let expert_bytes: u64 = tensors
        .iter()
        .flat_map(|t| t.parts())
        .filter(|(k, _)| *k == expert)
        .map(|(_, r)| r.end - r.start)
        .sum();
    assert_eq!(expert_bytes, 251_658_240, "the description's bf16 size");
    assert!(tensors
        .iter()
        .filter(|t| t.owner == Owner::ExpertSlices { layer: 47 })
        .all(|t| t.shape[0] == 128));

    // Scout: a MoE layer every layer, 16 experts; its dense width unused.
    let mut scout = maverick_config();
    scout["text_config"]["interleave_moe_layer_step"] = json!(1);
    scout["text_config"]["num_local_experts"] = json!(16);
    let scout = parse(&scout).unwrap();
    assert_eq!(scout.moe_layers().len(), 48);
    assert!(scout.dense_layers.is_empty());
    assert_eq!(scout.dense_intermediate, 0);

    // An explicit `moe_layers` wins over the step.
    let mut listed = maverick_config();
    listed["text_config"]["moe_layers"] = json!([0, 5, 47]);
    assert_eq!(parse(&listed).unwrap().moe_layers(), [0, 5, 47]);

    // The text model alone: its keys at the top level.
    let mut text = maverick_config()["text_config"].clone();
    text["architectures"] = json!(["Llama4ForCausalLM"]);
    let text = parse(&text).unwrap();
    assert_eq!(text.arch, Arch::Llama4Text);
    assert_eq!(
        ArchConfig {
            arch: Arch::Llama4,
            ..text
        },
        maverick
    );
}

#[test]
fn llama4_bad_configs_name_the_key() {
    let cases: [(&str, Value, &str); 4] = [
        ("text_config", Value::Null, "`text_config`"),
        ("moe_layers", json!([1, 48]), "`text_config.moe_layers`"),
        (
            "num_local_experts",
            json!(0),
            "`text_config.num_local_experts`",
        ),
        ("torch_dtype", json!("float16"), "`text_config.torch_dtype`"),
    ];
    for (key, value, place) in cases {
        let mut v = maverick_config();
        if key == "text_config" {
            v[key] = value;
        } else {
            v["text_config"][key] = value;
        }
        let e = parse(&v).unwrap_err();
        assert!(e.starts_with("c/config.json: "), "{e}");
        assert!(e.contains(place), "{place} not in {e}");
    }
}
