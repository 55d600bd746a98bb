//! Room on the cards for the KV cache of a chosen context (`plan
//! --context-tokens N`, docs/design.md §3.1): users choose a context first
//! and fit the weights around it, so before solving each GPU's capacity for
//! objects gives up the KV cache of `N` tokens of the layers whose attention
//! it will hold. Applied here once, to the instance's `Resources`, so the
//! solver, `explain`, the plan's usage, the exports and the llama.cpp
//! baselines all see the same capacity.

use crate::cost::{Place, Resources};
use crate::model::ModelDescription;
use crate::units::Bytes;
use crate::{PlannerError, Result};
use std::path::Path;

/// VRAM kept off the objects for the KV cache of `tokens` tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextReservation {
    pub tokens: u64,
    /// Bytes kept on each GPU, by GPU id; they add up to at least
    /// `tokens x kv_bytes_per_token`.
    pub gpu_bytes: Vec<u64>,
}

impl Resources {
    /// Takes the KV cache of `tokens` tokens of `model` off the GPUs'
    /// capacities, in place of any context kept before (a re-plan for
    /// another context), and records it in `self.context`; on an error
    /// nothing changes. `model_file` names the description in messages.
    ///
    /// The planner keeps every layer's attention on a card whenever a card
    /// can hold it, and an engine keeps a layer's KV cache beside its
    /// attention; so one card gets all of it. Over several cards the
    /// cache is split in proportion to each card's capacity: llama.cpp's
    /// default layer split (`-ts` not given) gives each card layers, and
    /// hence their KV cache, in proportion to its memory. Where an export
    /// splits the layers otherwise (llama.cpp's `-ts` from the plan's
    /// rules), a card holds its own layers' cache, which this proportion
    /// approximates.
    pub fn reserve_context(
        &mut self,
        tokens: u64,
        model: &ModelDescription,
        model_file: &Path,
    ) -> Result<()> {
        let flag = format!("--context-tokens {tokens}");
        if let Some(context) = model.context_tokens.filter(|&c| tokens > c) {
            return Err(PlannerError::input(
                model_file,
                "context_tokens",
                format!("{flag} is more than the model's context of {context} tokens"),
                format!("give --context-tokens {context} or less"),
            ));
        }
        let Some(token_bytes) = model.kv_bytes_per_token.map(|b| b.0).filter(|&b| b > 0) else {
            return Err(PlannerError::input(
                model_file,
                "kv_bytes_per_token",
                format!("is not given, so the KV cache of {flag} is unknown"),
                "plan from the GGUF file, or add kv_bytes_per_token to the description",
            ));
        };
        let capacities: Vec<u64> = match &self.context {
            Some(before) => (self.gpu_capacity_bytes.iter().zip(&before.gpu_bytes))
                .map(|(c, kept)| c + kept)
                .collect(),
            None => self.gpu_capacity_bytes.clone(),
        };
        let total_capacity: u64 = capacities.iter().sum();
        if total_capacity == 0 {
            return Err(PlannerError::Infeasible(format!(
                "{flag}: the profile has no GPU capacity to keep a KV cache on; leave --context-tokens out"
            )));
        }
        let total = u128::from(total_capacity);
        let cache_bytes = u128::from(tokens) * u128::from(token_bytes);
        // Rounded up per card, so the shares cover the whole cache.
        let gpu_bytes: Vec<u128> = capacities
            .iter()
            .map(|&c| (cache_bytes * u128::from(c)).div_ceil(total))
            .collect();
        if let Some((g, &share)) = gpu_bytes
            .iter()
            .enumerate()
            .find(|&(g, &share)| share > 0 && share >= u128::from(capacities[g]))
        {
            // Card `c`'s share `ceil(M k c / T)` is below `c` exactly when
            // `M k <= T (c - 1) / c`; the most tokens fitting every card.
            let fit_tokens = capacities
                .iter()
                .filter(|&&c| c > 0)
                .map(|&c| {
                    let c = u128::from(c);
                    total * (c - 1) / (c * u128::from(token_bytes))
                })
                .min()
                .map_or(0, |m| {
                    u64::try_from(m).expect("at most the tokens asked for")
                });
            return Err(PlannerError::Infeasible(format!(
                "{flag}: the KV cache of {tokens} tokens takes {share} bytes of {}, all of its capacity of {} ({} bytes); at most {fit_tokens} tokens leave room for weights; give --context-tokens {fit_tokens} or less",
                Place::Gpu(g),
                Bytes(capacities[g]),
                capacities[g]
            )));
        }
        let gpu_bytes: Vec<u64> = gpu_bytes
            .into_iter()
            .map(|b| u64::try_from(b).expect("a share below a u64 capacity"))
            .collect();
        self.gpu_capacity_bytes = capacities
            .iter()
            .zip(&gpu_bytes)
            .map(|(c, kept)| c - kept)
            .collect();
        self.context = Some(ContextReservation { tokens, gpu_bytes });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
