//! Live heat: per MoE layer, a decayed count per expert,
//! fed by `report_route(layer, experts)` from the engine's router and halved
//! every N tokens of that layer, as Colibri's tier halves its heat. Each
//! layer's clock is the tokens reported for it, so a caller never has to
//! say where a token ends. The counts are the policies' own decayed
//! counters (`policy::counts`), and they read out as a planner heat table.

use residency_core::heat::HeatTable;
use residency_policy::counts::DecayedCounts;
use residency_policy::{Knowledge, PolicyParams, PolicySetup};

/// Colibri's tier halves its heat every 1024 tokens.
pub const DEFAULT_HALVE_EVERY_TOKENS: u64 = 1024;

pub struct LiveHeat {
    layers: Vec<LayerHeat>,
    halve_every_tokens: u64,
}

struct LayerHeat {
    counts: DecayedCounts,
    experts: usize,
    tokens: u64,
}

/// A route that names a layer or an expert the model does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("moe_layer {layer}: the model has {layers} MoE layers (ordinals from 0, not transformer layers)")]
    Layer { layer: usize, layers: usize },
    #[error("expert {expert} in a route of moe_layer {layer}: that layer has {experts} experts")]
    Expert {
        layer: usize,
        expert: u32,
        experts: usize,
    },
}

impl LiveHeat {
    /// `experts[l]`: experts of MoE ordinal `l`.
    pub fn new(experts: &[usize], halve_every_tokens: u64) -> LiveHeat {
        let layer = |&n: &usize| {
            let setup = PolicySetup {
                capacity_bytes: 0,
                objects: n,
                knowledge: Knowledge::default(),
                params: PolicyParams {
                    halve_every_ticks: halve_every_tokens.max(1),
                    ..PolicyParams::default()
                },
            };
            LayerHeat {
                counts: DecayedCounts::new(&setup, false),
                experts: n,
                tokens: 0,
            }
        };
        LiveHeat {
            layers: experts.iter().map(layer).collect(),
            halve_every_tokens: halve_every_tokens.max(1),
        }
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Counts one token of MoE ordinal `layer` routed to `experts`; counts
    /// nothing when any argument is outside the model.
    pub fn report_route(&mut self, layer: usize, experts: &[u32]) -> Result<(), RouteError> {
        let layers = self.layers.len();
        let heat = self
            .layers
            .get_mut(layer)
            .ok_or(RouteError::Layer { layer, layers })?;
        if let Some(&expert) = experts.iter().find(|&&e| e as usize >= heat.experts) {
            return Err(RouteError::Expert {
                layer,
                expert,
                experts: heat.experts,
            });
        }
        for &e in experts {
            heat.counts.record(e, heat.tokens);
        }
        heat.tokens += 1;
        Ok(())
    }

    /// The decayed count of one expert.
    pub fn count(&self, layer: usize, expert: u32) -> u32 {
        self.layers[layer].counts.count(expert)
    }

    /// Expected requests per token of every expert, layer by layer: a
    /// decayed count holds between one and two windows of requests, so it
    /// is taken as 1.5 windows.
    pub fn rates(&self) -> Vec<f64> {
        let window = self.halve_every_tokens as f64 * 1.5;
        self.layers
            .iter()
            .flat_map(|l| (0..l.experts as u32).map(move |e| l.counts.count(e) as f64 / window))
            .collect()
    }

    /// Decayed counts as a heat table without token counts: decayed counts
    /// are not counts over a number of tokens, so use rates come out as
    /// `top_k * c / sum c` (design §3.3).
    pub fn table(&self) -> HeatTable {
        HeatTable {
            counts: self
                .layers
                .iter()
                .map(|l| {
                    (0..l.experts as u32)
                        .map(|e| l.counts.count(e) as f64)
                        .collect()
                })
                .collect(),
            tokens: None,
        }
    }

    /// Our `json` heat format (design §3.3), readable by `residency plan --heat`.
    pub fn to_json(&self, model: &str) -> String {
        let layers: Vec<Vec<u32>> = self
            .layers
            .iter()
            .map(|l| (0..l.experts as u32).map(|e| l.counts.count(e)).collect())
            .collect();
        serde_json::json!({ "model": model, "layers": layers }).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_decay_per_layer_clock_and_bad_routes_count_nothing() {
        // Two layers of 4 experts, halved every 2 tokens of a layer.
        let mut heat = LiveHeat::new(&[4, 4], 2);
        // Layer 0, tokens 0 and 1: {0,1}, {0}: e0 = 2, e1 = 1.
        heat.report_route(0, &[0, 1]).unwrap();
        heat.report_route(0, &[0]).unwrap();
        assert_eq!((heat.count(0, 0), heat.count(0, 1)), (2, 1));
        // Token 2 halves first (2 -> 1, 1 -> 0), then counts e0: 2.
        heat.report_route(0, &[0]).unwrap();
        assert_eq!((heat.count(0, 0), heat.count(0, 1)), (2, 0));
        // Layer 1 has its own clock: untouched so far.
        assert_eq!(heat.count(1, 0), 0);
        assert_eq!(
            heat.report_route(1, &[1, 4]),
            Err(RouteError::Expert {
                layer: 1,
                expert: 4,
                experts: 4
            })
        );
        assert_eq!(heat.count(1, 1), 0);
        assert!(matches!(
            heat.report_route(2, &[0]),
            Err(RouteError::Layer {
                layer: 2,
                layers: 2
            })
        ));
        assert_eq!(heat.table().counts[0], vec![2.0, 0.0, 0.0, 0.0]);
        let doc: serde_json::Value = serde_json::from_str(&heat.to_json("m")).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"model": "m", "layers": [[2, 0, 0, 0], [0, 0, 0, 0]]})
        );
    }
}
