//! The adapter table and the tensors it gives, per family: names, shapes,
//! dtypes and objects, fused Llama-4 experts split per expert.

use super::tensors::trunk;
use super::*;
use crate::checkpoint::config::tests::small;
use crate::checkpoint::config::ArchConfig;
use crate::identity::ObjectKey;
use safetensors::Dtype;

#[test]
fn every_table_row_is_reachable_and_distinct() {
    for (i, spec) in ARCHS.iter().enumerate() {
        assert_eq!(spec.arch.spec().model_type, spec.model_type);
        assert!(ARCHS[..i].iter().all(|o| o.model_type != spec.model_type));
    }
    for family in Family::ALL {
        assert!(ARCHS.iter().any(|s| s.family == family), "{family}");
    }
}

#[test]
fn mixtral_names_and_objects() {
    let cfg = small(Arch::Mixtral);
    let t = tensors(&cfg);
    let find = |name: &str| t.iter().find(|s| s.name == name).unwrap();
    // int4, group 16: two values per byte, one scale per 16 inputs.
    let w2 = find("model.layers.1.block_sparse_moe.experts.3.w2.weight");
    assert_eq!((w2.dtype, w2.shape.clone()), (Dtype::U8, vec![64, 16]));
    let scales = find("model.layers.1.block_sparse_moe.experts.3.w2.scales");
    assert_eq!(
        (scales.dtype, scales.shape.clone()),
        (Dtype::F16, vec![64, 2])
    );
    assert_eq!(scales.owner, w2.owner);
    assert_eq!(
        w2.owner,
        Owner::Object(ObjectKey::Expert {
            layer: 1,
            expert: 3
        })
    );
    let gate = find("model.layers.0.block_sparse_moe.gate.weight");
    assert_eq!(gate.owner, Owner::Object(trunk(ATTN, Some(0))));
    let owner = |name: &str| find(name).owner.clone();
    assert_eq!(
        owner("model.norm.weight"),
        Owner::Object(trunk(LM_HEAD, None))
    );
    assert_eq!(
        owner("model.embed_tokens.weight"),
        Owner::Object(trunk(EMBED, None))
    );
    assert!(t.iter().all(|s| !s.name.contains("shared")));
}

#[test]
fn llama4_fused_experts_split_per_expert() {
    // Layer 0 dense, 1 and 2 MoE; 4 experts of 32, hidden 64, int4 group 16.
    let cfg = small(Arch::Llama4);
    let t = tensors(&cfg);
    let find = |name: &str| {
        t.iter()
            .find(|s| s.name == format!("language_model.model.layers.{name}"))
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let gate_up = find("1.feed_forward.experts.gate_up_proj");
    assert_eq!(
        (gate_up.dtype, gate_up.shape.clone()),
        (Dtype::U8, vec![4, 32, 64])
    );
    assert_eq!(gate_up.owner, Owner::ExpertSlices { layer: 1 });
    let scales = find("1.feed_forward.experts.gate_up_proj_scales");
    assert_eq!(
        (scales.dtype, scales.shape.clone()),
        (Dtype::F16, vec![4, 4, 64])
    );
    let down = find("2.feed_forward.experts.down_proj");
    assert_eq!(down.shape, vec![4, 16, 64]);
    assert_eq!(
        find("2.feed_forward.experts.down_proj_scales").shape,
        vec![4, 2, 64]
    );
    // Expert e's slice: 32 * 64 bytes at e times that.
    let parts = gate_up.parts();
    assert_eq!(parts.len(), 4);
    for (e, (key, range)) in parts.into_iter().enumerate() {
        let expert = ObjectKey::Expert {
            layer: 1,
            expert: e as u32,
        };
        assert_eq!(
            (key, range),
            (expert, e as u64 * 2048..(e as u64 + 1) * 2048)
        );
    }
    let router = find("1.feed_forward.router.weight");
    assert_eq!(router.shape, vec![4, 64]);
    assert_eq!(router.owner, Owner::Object(trunk(ATTN, Some(1))));
    let dense = find("0.feed_forward.gate_proj.weight");
    assert_eq!(dense.shape, vec![96, 64]);
    assert_eq!(dense.owner, Owner::Object(trunk(DENSE_FFN, Some(0))));
    let shared = find("2.feed_forward.shared_expert.down_proj.weight");
    assert_eq!(shared.shape, vec![64, 32]);
    assert_eq!(shared.owner, Owner::Object(trunk(SHARED_EXPERT, Some(2))));
    assert!(t.iter().all(|s| s.name.starts_with("language_model.")));
    assert!(t.iter().any(|s| s.name == "language_model.lm_head.weight"));
    assert!(!t
        .iter()
        .any(|s| s.name.contains("router") && s.name.contains(".0.")));

    // The text-only checkpoint: the same tensors without the prefix.
    let text = tensors(&ArchConfig {
        arch: Arch::Llama4Text,
        ..cfg
    });
    assert_eq!(text.len(), t.len());
    for (a, b) in t.iter().zip(&text) {
        assert_eq!(a.name, format!("language_model.{}", b.name));
        assert_eq!((&a.shape, &a.owner), (&b.shape, &b.owner));
    }
}

#[test]
fn deepseek_dense_layers_shared_experts_and_mla() {
    let cfg = small(Arch::DeepseekV3);
    let t = tensors(&cfg);
    let names: Vec<&str> = t.iter().map(|s| s.name.as_str()).collect();
    for name in [
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.1.mlp.experts.0.down_proj.weight",
        "model.layers.1.mlp.shared_experts.up_proj.weight",
        "model.layers.1.mlp.gate.e_score_correction_bias",
        "model.layers.0.self_attn.q_a_proj.weight",
        "model.layers.0.self_attn.q_b_proj.weight",
        "model.layers.0.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.0.self_attn.kv_b_proj.weight",
        "model.layers.0.self_attn.kv_a_layernorm.weight",
    ] {
        assert!(names.contains(&name), "{name} missing");
    }
    assert!(!names.contains(&"model.layers.0.mlp.gate.weight"));
    let bias = t
        .iter()
        .find(|s| s.name.ends_with("correction_bias"))
        .unwrap();
    assert_eq!(bias.dtype, Dtype::F32);
}
