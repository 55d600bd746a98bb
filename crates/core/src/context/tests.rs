//! Hand-computed reservations: each expected number is worked out in the
//! comment above it.

use super::*;
use crate::profile::HardwareProfile;

/// A card of `vram_gb[g]` GB (10^9 bytes) and no `reserved` per GPU.
fn resources(vram_gb: &[u64]) -> Resources {
    let cards: String = vram_gb
        .iter()
        .enumerate()
        .map(|(g, v)| format!("  - {{ id: {g}, name: g{g}, vram: {v} GB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }}\n"))
        .collect();
    let gpus = if cards.is_empty() {
        String::new()
    } else {
        format!("gpus:\n{cards}")
    };
    let yaml = format!(
        "name: t\nnuma:\n  - {{ id: 0, ram: 64 GB, cores: 4, gemv_bandwidth: 10 GB/s }}\n{gpus}"
    );
    Resources::from_profile(&HardwareProfile::from_yaml_str(&yaml, Path::new("p")).unwrap())
}

fn model(kv_bytes_per_token: Option<u64>, context_tokens: Option<u64>) -> ModelDescription {
    let yaml = "name: m\nlayers: 2\nmoe_layers: [1]\nexperts: 4\ntop_k: 2\nhidden: 8\nexpert_intermediate: 8\nformats: { q: 1 MB }\ntiers: { gpu: q, ram: q, disk: q }\n";
    let mut d: ModelDescription = serde_norway::from_str(yaml).unwrap();
    d.kv_bytes_per_token = kv_bytes_per_token.map(Bytes);
    d.context_tokens = context_tokens;
    d
}

#[test]
fn one_card_gives_up_the_whole_cache() {
    let mut r = resources(&[8]);
    // 4096 tokens x 98_304 bytes = 402_653_184 bytes; 8e9 - that = 7_597_346_816.
    r.reserve_context(4096, &model(Some(98_304), Some(32_768)), Path::new("m"))
        .unwrap();
    assert_eq!(r.gpu_capacity_bytes, vec![7_597_346_816]);
    let kept = r.context.unwrap();
    assert_eq!((kept.tokens, kept.gpu_bytes), (4096, vec![402_653_184]));
}

#[test]
fn another_context_replaces_the_one_kept() {
    let mut r = resources(&[8]);
    let m = model(Some(1000), None);
    r.reserve_context(4096, &m, Path::new("m")).unwrap();
    // 1024 x 1000 bytes in place of 4096 x 1000: 8e9 - 1_024_000.
    r.reserve_context(1024, &m, Path::new("m")).unwrap();
    assert_eq!(r.gpu_capacity_bytes, vec![7_998_976_000]);
    assert_eq!(r.context.as_ref().unwrap().gpu_bytes, vec![1_024_000]);
    // A refused one leaves it as it was.
    assert!(r.reserve_context(8_000_000, &m, Path::new("m")).is_err());
    assert_eq!(r.gpu_capacity_bytes, vec![7_998_976_000]);
}

#[test]
fn cards_share_the_cache_by_capacity() {
    let mut r = resources(&[6, 2]);
    // 1000 tokens x 1000 bytes = 1e6 bytes over 8e9: gpu:0 6/8 = 750_000,
    // gpu:1 2/8 = 250_000 (both exact, no rounding).
    r.reserve_context(1000, &model(Some(1000), None), Path::new("m"))
        .unwrap();
    assert_eq!(r.context.unwrap().gpu_bytes, vec![750_000, 250_000]);
    assert_eq!(r.gpu_capacity_bytes, vec![5_999_250_000, 1_999_750_000]);
}

#[test]
fn shares_round_up_to_cover_the_cache() {
    let mut r = resources(&[1, 1, 1]);
    // 1 token x 10 bytes over three equal cards: 10/3 = 3.33 -> 4 each.
    r.reserve_context(1, &model(Some(10), None), Path::new("m"))
        .unwrap();
    assert_eq!(r.context.unwrap().gpu_bytes, vec![4, 4, 4]);
}

#[test]
fn more_than_the_models_context_is_refused() {
    let mut r = resources(&[8]);
    let e = r
        .reserve_context(
            65_536,
            &model(Some(1000), Some(32_768)),
            Path::new("m.gguf"),
        )
        .unwrap_err()
        .to_string();
    assert_eq!(e, "m.gguf: context_tokens: --context-tokens 65536 is more than the model's context of 32768 tokens; give --context-tokens 32768 or less");
    assert_eq!(r.gpu_capacity_bytes, vec![8_000_000_000]);
}

#[test]
fn an_unknown_token_size_is_refused() {
    let e = resources(&[8])
        .reserve_context(1024, &model(None, None), Path::new("m.yaml"))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "m.yaml: kv_bytes_per_token: is not given, so the KV cache of --context-tokens 1024 is unknown; plan from the GGUF file, or add kv_bytes_per_token to the description");
}

#[test]
fn a_cache_that_fills_a_card_says_what_fits() {
    let mut r = resources(&[1, 3]);
    // 4e9 bytes of cards; 4_000_000 tokens x 1000 bytes = 4e9 fills both
    // (gpu:0's share 1e9 = its capacity). The most that fits: card c keeps
    // ceil(M 1000 c / 4e9) < c, so M <= 4e9 (c - 1) / (1000 c): for c = 1e9,
    // 3_999_999.996 -> 3_999_999; for c = 3e9, 3_999_999.998 -> 3_999_999.
    let e = r
        .reserve_context(4_000_000, &model(Some(1000), None), Path::new("m"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("takes 1000000000 bytes of gpu:0") && e.ends_with("at most 3999999 tokens leave room for weights; give --context-tokens 3999999 or less"),
        "{e}"
    );
    assert!(r.context.is_none());
    // And that many do fit.
    r.reserve_context(3_999_999, &model(Some(1000), None), Path::new("m"))
        .unwrap();
}

#[test]
fn no_card_is_refused() {
    let mut r = resources(&[]);
    let e = r
        .reserve_context(1, &model(Some(1), None), Path::new("m"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no GPU capacity"), "{e}");
}
