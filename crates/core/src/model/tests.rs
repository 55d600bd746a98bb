//! Tests of `model`.

use super::*;

fn lite() -> &'static str {
    r#"
name: test
layers: 4
moe_layers: "1..=3"
experts: 8
top_k: 2
hidden: 16
expert_intermediate: 8
formats:
  bf16: 768
  int4: { bits: 4, group: 64 }
tiers: { gpu: int4, ram: bf16, disk: int4 }
trunk:
  - { name: attn, layers: "0..=3", bytes: 1 KiB, stage: dense }
  - { name: lm_head, bytes: 2 KiB, stage: head }
per_layer:
  - { layer: 2, experts: 4, expert_intermediate: 16 }
"#
}

#[test]
fn expands_layers_sizes_and_trunk() {
    let m = Model::from_yaml_str(lite(), Path::new("m.yaml")).unwrap();
    assert_eq!(m.moe_layer_numbers(), vec![1, 2, 3]);
    assert_eq!(m.experts_per_layer(), vec![8, 4, 8]);
    // params = 3*16*8 = 384; int4: 384*4/8 = 192 + ceil(384/64)*2 = 12 -> 204.
    assert_eq!(m.moe[0].gpu_bytes, 204);
    // layer 2 has 768 params: int4 = 384 + 24 = 408; bf16 768 bytes scaled x2.
    assert_eq!(m.moe[1].gpu_bytes, 408);
    assert_eq!(m.moe[1].ram_bytes, 1536);
    assert_eq!(m.trunk.len(), 5);
    assert_eq!(m.trunk[4].layer, None);
}

#[test]
fn rejects_bad_descriptions() {
    let cases = [
        (lite().replace("top_k: 2", "top_k: 0"), "top_k"),
        (lite().replace("\"1..=3\"", "\"1..=9\""), "moe_layers"),
        (lite().replace("gpu: int4", "gpu: fp8"), "tiers.gpu"),
        (
            lite().replace("layer: 2,", "layer: 0,"),
            "per_layer[0].layer",
        ),
        (
            lite().replace("bytes: 2 KiB, stage: head", "bytes: 2 KiB, stage: experts"),
            "trunk[1]",
        ),
        (
            lite().replace("hidden: 16", "hidden: 16\ncolour: red"),
            "line",
        ),
        (lite().replace("bytes: 1 KiB", "bytes: 1 GB/s"), "line"),
    ];
    for (text, place) in cases {
        let e = Model::from_yaml_str(&text, Path::new("m.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("m.yaml: "), "{e}");
        assert!(e.contains(place), "{place} not in {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn rejects_top_k_above_a_layers_experts() {
    let read = |text: String| Model::from_yaml_str(&text, Path::new("m.yaml"));
    let e = read(lite().replace("top_k: 2", "top_k: 9"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "m.yaml: top_k: 9 is larger than experts 8: a token cannot pick more experts \
             than the layer has; lower top_k or raise experts"
    );
    // lite() gives layer 2 four experts: top_k 5 fits the model's 8, not that layer.
    let e = read(lite().replace("top_k: 2", "top_k: 5"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "m.yaml: per_layer[0].experts: 4 is smaller than top_k 5: a token cannot pick \
             more experts than the layer has; raise this layer's experts or lower top_k"
    );
    // Every expert of the smallest layer picked is still a valid routing.
    assert_eq!(
        read(lite().replace("top_k: 2", "top_k: 4"))
            .unwrap()
            .top_k(),
        4
    );
}
