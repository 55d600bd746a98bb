//! The command's `-c`: the context the plan reserved (`plan
//! --context-tokens N`: `-c N`, its KV cache already kept off the cards'
//! capacities), else the most tokens whose KV cache fits where the plan
//! leaves room for it.
//!
//! llama.cpp allocates, for `-c N`, each layer's K and V cache of `N`
//! tokens on the layer's default device (`llama-kv-cache.cpp`: a tensor
//! of `n_embd_k_gqa x kv_size` on `model.dev_layer(il)`; f16 by default;
//! MLA keeps only the latent and rope key), which the model description
//! counts as `kv_bytes_per_token` over all layers. So with `L` layers,
//! `k = ceil(kv_bytes_per_token / L)` bytes per token and layer, and on
//! each buffer `b` holding the cache of `L_b` layers:
//!
//! ```text
//! free_b = capacity_b - bytes the rules put on b   (the memory plan)
//! N      = min over b of floor(free_b / (L_b * k)), rounded down to 256
//! -c     = min(N, context_tokens)
//! ```
//!
//! `capacity_b` is the card's `vram - reserved` (all RAM nodes' for the
//! CPU buffer): the profile's `reserved` is left to what llama.cpp also
//! allocates there and no plan sizes (the CUDA context, compute buffers,
//! other processes). llama.cpp pads `-c` up to a multiple of 256
//! (`llama-context.cpp`: `GGML_PAD(cparams.n_ctx, 256)`), so a budget that
//! is not one would be exceeded.

use super::MemoryPlan;
use crate::export::layer_buffers::Buffer;
use crate::export::ModelFacts;
use residency_core::cost::Instance;
use residency_core::units::Bytes;
use std::collections::BTreeMap;

/// llama.cpp's context is a multiple of this many tokens.
const CONTEXT_STEP_TOKENS: u64 = 256;

/// `-c`, or why it is left out, and a note where it is less than the
/// model's context or llama.cpp pads it. `layer_buffers` is each layer's
/// default device, `None` where llama.cpp chooses it by free memory.
pub(super) fn context_tokens(
    inst: &Instance,
    layer_buffers: Option<&[Buffer]>,
    memory: &MemoryPlan,
    model: &ModelFacts,
) -> (Option<u64>, Option<String>) {
    if let Some(reserved) = &inst.resources.context {
        let tokens = reserved.tokens;
        let padded_tokens = tokens.next_multiple_of(CONTEXT_STEP_TOKENS);
        let note = (padded_tokens != tokens).then(|| {
            format!("-c {tokens}: llama.cpp pads the context to {padded_tokens} tokens, whose KV cache the plan did not reserve; plan with --context-tokens {padded_tokens}, or a multiple of {CONTEXT_STEP_TOKENS}")
        });
        return (Some(tokens), note);
    }
    let left_out = |why: String| {
        (None, Some(format!("-c is left out: {why}; llama.cpp sizes its KV cache itself (--fit, on by default, shrinks the model's context to the free memory)")))
    };
    let Some(kv_bytes_per_token) = model.kv_bytes_per_token.filter(|&b| b > 0) else {
        return left_out(
            "the model description has no kv_bytes_per_token (plan from the GGUF file, or add it to the description), so a token's KV cache is unknown".into(),
        );
    };
    let Some(layer_buffers) = layer_buffers.filter(|l| !l.is_empty()) else {
        return left_out(
            "no layer's attention is on a card, so llama.cpp splits the layers and their KV cache over the cards by free memory".into(),
        );
    };
    let layer_token_bytes = kv_bytes_per_token.div_ceil(layer_buffers.len() as u64);
    let mut layers_on: BTreeMap<Buffer, u64> = BTreeMap::new();
    for &b in layer_buffers {
        *layers_on.entry(b).or_default() += 1;
    }
    let (buffer, free_bytes, token_bytes, tokens) = layers_on
        .iter()
        .map(|(&b, &layers)| {
            let capacity_bytes = match b {
                Buffer::Cuda(g) => inst.resources.gpu_capacity_bytes[g],
                Buffer::Cpu => inst.resources.ram_capacity_bytes.iter().sum(),
            };
            let weights_bytes = memory.buffers.get(&b.to_string()).map_or(0, |w| w.bytes);
            let free_bytes = capacity_bytes.saturating_sub(weights_bytes);
            let token_bytes = layers * layer_token_bytes;
            (b, free_bytes, token_bytes, free_bytes / token_bytes)
        })
        .min_by_key(|&(b, .., tokens)| (tokens, b))
        .expect("some layer has a buffer");
    let budget_tokens = tokens / CONTEXT_STEP_TOKENS * CONTEXT_STEP_TOKENS;
    let room = format!(
        "{buffer} keeps {} ({free_bytes} bytes) beside the rules' weights, and a token's KV cache of its {} layer(s) is {token_bytes} bytes",
        Bytes(free_bytes),
        layers_on[&buffer]
    );
    if budget_tokens == 0 {
        return left_out(format!("{room}: less than {CONTEXT_STEP_TOKENS} tokens"));
    }
    match model.context_tokens {
        Some(context) if context <= budget_tokens => (Some(context), None),
        context => (
            Some(budget_tokens),
            context.map(|context| {
                format!(
                    "-c {budget_tokens}, less than the model's context of {context} tokens: {room}"
                )
            }),
        ),
    }
}
