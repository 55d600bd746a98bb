//! What each GGUF tensor is to the planner, from llama.cpp's tensor names
//! (`blk.N.ffn_gate_exps.weight`, `output.weight`, ...). Routed experts are
//! the `ffn_{gate,up,down,gate_up}_exps` tensors (weights, biases and
//! scales); shared experts `ffn_*_shexp` (their gate `ffn_gate_inp_shexp`
//! too); GroveMoE's chunk experts `ffn_*_chexps`; a dense layer's MLP
//! `ffn_{gate,up,down}`; attention is every `attn_*` tensor with the
//! layer's norms and router (`ffn_norm`, `ffn_gate_inp`, `exp_probs_b`),
//! which run beside it. A name outside these families is refused by name:
//! it would otherwise be priced as nothing.

/// The part of the model a tensor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Routed experts of layer `N`; all experts of a layer share the tensor.
    RoutedExperts,
    SharedExperts,
    ChunkExperts,
    DenseFfn,
    Attention,
    /// `token_embd`: llama.cpp keeps the embeddings in host memory.
    Embeddings,
    /// `output`, `output_norm`: the head.
    Head,
}

impl Family {
    /// The trunk component name of the model description (the names the
    /// exports know), for the families that are trunk.
    pub fn trunk_name(self) -> Option<&'static str> {
        match self {
            Family::SharedExperts => Some("shared_expert"),
            Family::ChunkExperts => Some("chunk_experts"),
            Family::DenseFfn => Some("dense_ffn"),
            Family::Attention => Some("attn"),
            Family::Head => Some("lm_head"),
            Family::RoutedExperts | Family::Embeddings => None,
        }
    }
}

/// Bases (the name without `blk.N.` and the `.weight`/`.bias`/`.scale`
/// suffix) that run with attention.
pub const WITH_ATTENTION: [&str; 6] = [
    "ffn_norm",
    "ffn_gate_inp",
    "exp_probs_b",
    "post_attention_norm",
    "post_ffw_norm",
    "layer_output_norm",
];

/// The layer of a `blk.N.*` tensor, whatever its family.
pub fn block_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// `(layer, family)` of a tensor name, `None` for a name outside the known
/// families. Global tensors have no layer.
pub fn classify(name: &str) -> Option<(Option<usize>, Family)> {
    if let Some(rest) = name.strip_prefix("blk.") {
        let (layer, rest) = rest.split_once('.')?;
        let layer: usize = layer.parse().ok()?;
        let base = rest
            .strip_suffix(".weight")
            .or_else(|| rest.strip_suffix(".bias"))
            .or_else(|| rest.strip_suffix(".scale"))
            .unwrap_or(rest);
        let family = match base {
            "ffn_gate_exps" | "ffn_up_exps" | "ffn_down_exps" | "ffn_gate_up_exps" => {
                Family::RoutedExperts
            }
            b if b.ends_with("_shexp") => Family::SharedExperts,
            b if b.ends_with("_chexps") => Family::ChunkExperts,
            "ffn_gate" | "ffn_up" | "ffn_down" | "ffn_gate_up" => Family::DenseFfn,
            b if b.starts_with("attn_") || WITH_ATTENTION.contains(&b) => Family::Attention,
            _ => return None,
        };
        return Some((Some(layer), family));
    }
    let family = match name {
        "token_embd.weight" | "token_embd_norm.weight" | "token_embd_norm.bias" => {
            Family::Embeddings
        }
        "output.weight" | "output.bias" | "output_norm.weight" | "output_norm.bias"
        | "rope_freqs.weight" => Family::Head,
        _ => return None,
    };
    Some((None, family))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::arch_tensors::arch_tensors;

    #[test]
    fn every_tensor_of_the_planned_architectures_has_a_family() {
        for (arch, names) in arch_tensors() {
            for name in names.iter() {
                assert!(classify(name).is_some(), "{arch}: {name}");
            }
        }
        // The planned architectures are the table's.
        let archs: Vec<&str> = arch_tensors().iter().map(|(a, _)| *a).collect();
        assert_eq!(archs, crate::gguf::ARCHITECTURES);
    }

    #[test]
    fn llama_cpp_names_fall_in_their_families() {
        // Names as llama.cpp's converter writes them (gguf-py's tensor map).
        let cases = [
            ("blk.3.ffn_gate_exps.weight", Some(3), Family::RoutedExperts),
            (
                "blk.3.ffn_gate_up_exps.weight",
                Some(3),
                Family::RoutedExperts,
            ),
            ("blk.0.ffn_down_exps.bias", Some(0), Family::RoutedExperts),
            (
                "blk.12.ffn_up_shexp.weight",
                Some(12),
                Family::SharedExperts,
            ),
            (
                "blk.12.ffn_gate_inp_shexp.weight",
                Some(12),
                Family::SharedExperts,
            ),
            (
                "blk.1.ffn_gate_chexps.weight",
                Some(1),
                Family::ChunkExperts,
            ),
            ("blk.0.ffn_up.weight", Some(0), Family::DenseFfn),
            ("blk.5.attn_kv_a_mqa.weight", Some(5), Family::Attention),
            ("blk.5.attn_q_norm.weight", Some(5), Family::Attention),
            ("blk.5.ffn_norm.weight", Some(5), Family::Attention),
            ("blk.5.ffn_gate_inp.weight", Some(5), Family::Attention),
            ("blk.5.exp_probs_b.bias", Some(5), Family::Attention),
            ("token_embd.weight", None, Family::Embeddings),
            ("output.weight", None, Family::Head),
            ("output_norm.weight", None, Family::Head),
        ];
        for (name, layer, family) in cases {
            assert_eq!(classify(name), Some((layer, family)), "{name}");
        }
        for unknown in [
            "blk.3.ssm_conv1d.weight",
            "blk.x.attn_q.weight",
            "vision.weight",
        ] {
            assert_eq!(classify(unknown), None, "{unknown}");
        }
    }
}
