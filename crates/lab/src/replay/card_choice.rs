//! The card's rule and `lfru`'s heat window chosen by the simulator: which
//! rule wins on the card depends on the trace (on ESFT Colibri's `lfru`,
//! on Llama-4 recency), and `lfru`'s one free parameter (how often its
//! heat is halved) decides much of its lead. This module replays the
//! training tokens through the card's simulated tier under each
//! candidate, every training category held out in turn after a seed of
//! the others, and picks the candidate whose tokens take the least time:
//! what the card leaves to the CPU, computed at the replay's rate, plus
//! the RAM tier's felt wait on it. Experts on the card alone is the wrong
//! score where the drive binds: a card that computes more can leave the
//! RAM tier missing more. The served categories are never simulated, so
//! the choice is as held out as the run.

use super::twin::{simulated_allocation, RunSimulator};
use super::{card_knowledge, count_routes, expert_sizes, layer_shapes, simulated_card};
use super::{ReplayConfig, ReplayError, ServePolicy};
use residency_formats::heat::TokenRoutes;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::gpu_tier::VramConfig;
use residency_runtime::serve::vram::VramPolicy;
use residency_sim::allocation::Allocation;

/// Windows tried, in tokens of the training data; each becomes requests
/// at the training tokens' mean routes a token. From a window shorter
/// than a pass of `replan` on the card (4 tokens) to the RAM tier's
/// (1,024), doubling, so the best is within a factor of two of any.
const WINDOWS_TOKENS: [u64; 9] = [4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// The rule and window chosen, and what each candidate's tokens took.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct CardChoice {
    /// The card's rule (`--vram-policy`).
    pub policy: String,
    /// Its heat halved every this many requests.
    pub halve_every_ticks: u64,
    /// Each candidate tried, in the order tried.
    pub judged: Vec<CardTrial>,
    /// The training categories held out in turn; empty when the training
    /// tokens have fewer than two and the candidates were judged in-sample.
    pub held_out: Vec<String>,
}

/// One candidate tried, and what its held-out tokens took, simulated.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct CardTrial {
    pub policy: String,
    pub halve_every_ticks: u64,
    /// Experts of the held-out tokens computed on the card, summed over
    /// the categories.
    pub experts_on_card: u64,
    /// Seconds of the held-out tokens, summed over the categories: the
    /// experts left to the CPU at the replay's compute rate, plus the RAM
    /// tier's felt wait on them.
    pub token_seconds: f64,
}

/// The card `vram` under the candidate of `rules` (each at `vram`'s
/// window; `lfru` at each of the windows too when `tune_window`) whose
/// tokens take the least simulated time over `train`, beside `config`'s
/// RAM tier, each training category held out after the last
/// `seed_tokens` tokens of the others (cold when 0), and the choice. The
/// RAM tier is the first of the replay's arms the simulator has (else
/// `lru`). A tie goes to the later candidate: `lfru` comes last, its
/// longer windows after its shorter ones (the rule's own side). With
/// fewer than two training categories every candidate is judged on all
/// the training tokens, cold. The learning rules (`plan`, `cost`,
/// `frequency`, `replan`) learn from `heat_counts` where given (the
/// replay's `--heat`), else from the other categories' tokens only: a
/// rule judged on a category it learned from would win in-sample.
pub fn choose_card(
    checkpoint: &Checkpoint,
    train: &[TokenRoutes],
    heat_counts: Option<&[u64]>,
    config: &ReplayConfig,
    (vram, rules, tune_window): (&VramConfig, &[VramPolicy], bool),
    seed_tokens: usize,
) -> Result<(VramConfig, CardChoice), ReplayError> {
    let sizes = expert_sizes(checkpoint);
    let experts = checkpoint.config.experts;
    let cases = held_out_cases(train, seed_tokens);
    // `lfru` last, so that a tie goes to it.
    let mut candidates: Vec<(VramPolicy, u64)> = rules
        .iter()
        .filter(|&&r| r != VramPolicy::Lfru)
        .map(|&r| (r, vram.halve_every_ticks))
        .collect();
    if rules.contains(&VramPolicy::Lfru) {
        match tune_window {
            true => candidates
                .extend(lfru_windows(train, vram.halve_every_ticks).map(|w| (VramPolicy::Lfru, w))),
            false => candidates.push((VramPolicy::Lfru, vram.halve_every_ticks)),
        }
    }
    let (ram_policy, allocation) = config
        .policies
        .iter()
        .find_map(|&p| simulated_allocation(config, p).map(|a| (p, a)))
        .unwrap_or((ServePolicy::Lru, Allocation::Global));
    let counts: Vec<Vec<u64>> = cases
        .iter()
        .map(|(held, _, _)| match (heat_counts, held) {
            (Some(heat), _) => heat.to_vec(),
            (None, Some(held)) => count_routes(
                train
                    .iter()
                    .filter(|t| t.category.as_deref() != Some(held.as_str())),
                checkpoint,
            ),
            (None, None) => count_routes(train, checkpoint),
        })
        .collect();
    let mut judged = Vec::with_capacity(candidates.len());
    for &(policy, window) in &candidates {
        let trial = VramConfig {
            policy,
            halve_every_ticks: window,
            ..vram.clone()
        };
        let (mut experts_on_card, mut token_seconds) = (0, 0.0);
        for ((_, seed, tokens), train_counts) in cases.iter().zip(&counts) {
            let served = (&seed[..], &tokens[..]);
            let layers = layer_shapes(config, &sizes, experts, tokens);
            let knowledge = card_knowledge(config, &trial, &sizes, train_counts, served, experts);
            let card = simulated_card(&trial, &sizes, layers, &knowledge, served, experts)?;
            experts_on_card += card.on_card;
            let cpu_bytes: u64 = card
                .tokens
                .iter()
                .flat_map(|t| super::card::routed_objects(t, experts))
                .map(|o| sizes[o as usize])
                .sum();
            let ram_share = (&card.seed[..], &card.tokens[..]);
            let mut ram = RunSimulator::new(
                config,
                config.rates(),
                &sizes,
                ram_share,
                train_counts,
                experts,
            );
            let (_, felt_seconds) = ram.arm(config, ram_policy, allocation)?;
            token_seconds += cpu_bytes as f64 / config.hit_compute_bytes_per_s + felt_seconds;
        }
        judged.push(CardTrial {
            policy: policy.name().to_string(),
            halve_every_ticks: window,
            experts_on_card,
            token_seconds,
        });
    }
    // A tie goes to the later candidate.
    let best = (0..judged.len())
        .reduce(
            |best, i| match judged[i].token_seconds <= judged[best].token_seconds {
                true => i,
                false => best,
            },
        )
        .expect("at least one rule is tried");
    let (policy, halve_every_ticks) = candidates[best];
    let chosen = VramConfig {
        policy,
        halve_every_ticks,
        ..vram.clone()
    };
    let choice = CardChoice {
        policy: policy.name().to_string(),
        halve_every_ticks,
        judged,
        held_out: cases.into_iter().filter_map(|(c, _, _)| c).collect(),
    };
    Ok((chosen, choice))
}

/// `lfru`'s windows tried, shortest first: [`WINDOWS_TOKENS`] in requests
/// at `train`'s mean routes a token, and the rule's `default`.
fn lfru_windows(train: &[TokenRoutes], default: u64) -> impl Iterator<Item = u64> {
    let routes: usize = train
        .iter()
        .map(|t| t.routes.iter().map(Vec::len).sum::<usize>())
        .sum();
    let routes_per_token = routes as f64 / train.len().max(1) as f64;
    let mut windows: Vec<u64> = WINDOWS_TOKENS
        .iter()
        .map(|&w| ((w as f64 * routes_per_token).round() as u64).max(1))
        .chain([default])
        .collect();
    windows.sort_unstable();
    windows.dedup();
    windows.into_iter()
}

/// `(held-out category, seed, tokens)` for each training category in
/// trace order: the seed is the last `seed_tokens` of every other
/// category. One in-sample case, cold, when there are fewer than two.
fn held_out_cases(
    train: &[TokenRoutes],
    seed_tokens: usize,
) -> Vec<(Option<String>, Vec<TokenRoutes>, Vec<TokenRoutes>)> {
    let mut categories: Vec<&str> = Vec::new();
    for t in train {
        if let Some(c) = t.category.as_deref() {
            if !categories.contains(&c) {
                categories.push(c);
            }
        }
    }
    if categories.len() < 2 {
        return vec![(None, Vec::new(), train.to_vec())];
    }
    let of = |c: &str| -> Vec<TokenRoutes> {
        train
            .iter()
            .filter(|t| t.category.as_deref() == Some(c))
            .cloned()
            .collect()
    };
    categories
        .iter()
        .map(|&held| {
            let seed = categories
                .iter()
                .filter(|&&c| c != held)
                .flat_map(|&c| {
                    let tokens = of(c);
                    let from = tokens.len().saturating_sub(seed_tokens);
                    tokens[from..].to_vec()
                })
                .collect();
            (Some(held.to_string()), seed, of(held))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(category: &str, pos: u64) -> TokenRoutes {
        TokenRoutes {
            seq: category.into(),
            pos,
            category: Some(category.into()),
            routes: vec![vec![pos as u32]],
        }
    }

    #[test]
    fn each_category_is_held_out_after_the_others_last_tokens() {
        // a: positions 0, 1, 2; b: 0, 1. With one seed token, by hand:
        // a is served after b's last (pos 1), b after a's last (pos 2).
        let train = [
            token("a", 0),
            token("a", 1),
            token("a", 2),
            token("b", 0),
            token("b", 1),
        ];
        let cases = held_out_cases(&train, 1);
        let shape: Vec<(Option<String>, Vec<u64>, Vec<u64>)> = cases
            .iter()
            .map(|(c, seed, tokens)| {
                let pos = |t: &[TokenRoutes]| t.iter().map(|t| t.pos).collect();
                (c.clone(), pos(seed), pos(tokens))
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (Some("a".into()), vec![1], vec![0, 1, 2]),
                (Some("b".into()), vec![2], vec![0, 1]),
            ]
        );
        // One category: judged in-sample, cold.
        let one = held_out_cases(&train[..3], 1);
        assert_eq!(one.len(), 1);
        assert!(one[0].0.is_none() && one[0].1.is_empty() && one[0].2.len() == 3);
    }
}
