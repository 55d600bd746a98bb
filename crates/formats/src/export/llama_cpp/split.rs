//! The command's `-sm layer -ts ...`: which card llama.cpp makes each
//! layer's default device. A tensor no `-ot` rule names, and the layer's
//! KV cache (`llama-kv-cache.cpp`: `model.dev_layer(il)` with the default
//! `--kv-offload`), go to that device, so `-ts` should put each layer where
//! the plan put its attention.
//!
//! llama.cpp (`llama_model_base::load_tensors`, `src/llama-model.cpp`)
//! has `n_layer + 1` layer slots, the repeating layers then the output
//! layer. With `-ngl 999` every slot is a GPU slot (`i_gpu_start` 0,
//! `act_gpu_layers` `n_layer + 1`), and slot `il` goes to the first card
//! `g` whose normalised running sum of `-ts` exceeds `il / (n_layer + 1)`
//! (`std::upper_bound` over `splits`). Proportions that are slot counts
//! summing to `n_layer + 1` therefore give card 0 the first `ts[0]` slots,
//! card 1 the next `ts[1]`, and so on: one run of consecutive layers per
//! card, in card order. llama.cpp's own `--fit` writes `-ts` as such
//! counts (`common/fit.cpp`, `tensor_split[id] = ngl_per_device[id].n_layer`).

use super::super::join;
use super::{Rules, Tensors};
use crate::export::layer_buffers::Buffer;

/// `-ts` and the default device of each layer slot it gives.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LayerSplit {
    /// Layer slots per card, the `-ts` proportions.
    pub(super) slots_per_card: Vec<usize>,
    /// The default card of each slot, as llama.cpp computes it.
    pub(super) slot_cards: Vec<usize>,
}

impl LayerSplit {
    /// `-ts` with the cards separated by `sep` (llama-server takes `,`,
    /// llama-bench `/`: it reads `,` as separate test configurations).
    pub(super) fn arg(&self, sep: &str) -> String {
        format!(" -sm layer -ts {}", join(&self.slots_per_card, sep))
    }
}

/// The card the plan wants as each slot's default device: the card of
/// the layer's attention, then of the head; `None` where that is the CPU
/// (any card will do: a rule pins the weights, `-ngl 999` keeps the slot
/// on some card).
pub(super) fn wanted_cards(rules: &Rules, layers: usize) -> Vec<Option<usize>> {
    let mut wanted = vec![None; layers + 1];
    for (&(family, buffer), on) in rules {
        let Buffer::Cuda(g) = buffer else { continue };
        match family {
            Tensors::Attention => on.iter().for_each(|&l| wanted[l] = Some(g)),
            Tensors::Output => wanted[layers] = Some(g),
            _ => {}
        }
    }
    wanted
}

/// The split that gives each card the slots the plan wants there, a slot
/// with no wish going with the one before it (the first wish for leading
/// ones); `None` when no slot names a card, where llama.cpp's split by
/// free memory is as good as any.
pub(super) fn layer_split(wanted: &[Option<usize>], gpus: usize) -> Option<LayerSplit> {
    let first = wanted.iter().flatten().next().copied()?;
    let mut slots_per_card = vec![0; gpus];
    let mut card = first;
    for w in wanted {
        card = w.unwrap_or(card);
        slots_per_card[card] += 1;
    }
    let slot_cards = llama_slot_cards(&slots_per_card, wanted.len());
    Some(LayerSplit {
        slots_per_card,
        slot_cards,
    })
}

/// llama.cpp's card for each of `slots` layer slots under `-ngl 999` and
/// `-ts tensor_split`, in its arithmetic: `f32` running sums normalised by
/// their total, and `upper_bound` of `il / slots`.
pub(super) fn llama_slot_cards(tensor_split: &[usize], slots: usize) -> Vec<usize> {
    let mut splits: Vec<f32> = Vec::with_capacity(tensor_split.len());
    let mut sum = 0.0f32;
    for &s in tensor_split {
        sum += s as f32;
        splits.push(sum);
    }
    splits.iter_mut().for_each(|s| *s /= sum);
    (0..slots)
        .map(|il| {
            let at = il as f32 / slots as f32;
            // `std::upper_bound`: the first split point above `at`.
            splits.partition_point(|&s| s <= at)
        })
        .collect()
}

/// What the split cannot give: layers whose attention is on another card
/// than the one llama.cpp makes their default device.
pub(super) fn split_warning(wanted: &[Option<usize>], split: &LayerSplit) -> Option<String> {
    let layers = wanted.len() - 1;
    let off: Vec<String> = wanted[..layers]
        .iter()
        .zip(&split.slot_cards)
        .enumerate()
        .filter_map(|(l, (w, &got))| match w {
            Some(g) if *g != got => Some(format!("{l} (CUDA{g}, default CUDA{got})")),
            _ => None,
        })
        .collect();
    (!off.is_empty()).then(|| {
        format!(
            "llama.cpp's split mode `layer` gives each card one run of consecutive layers, in card order ({}), but the plan's attention is not in such runs: layer(s) {} have their KV cache and any tensor no rule names on their default card; the rules still pin their weights",
            split.arg(",").trim_start(),
            join(&off, ", ")
        )
    })
}
