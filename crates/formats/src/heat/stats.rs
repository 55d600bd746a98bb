//! Concentration statistics of a heat table, per MoE layer, for the
//! `residency heat` command: how much of the routing the hottest experts
//! take, the entropy of the routing distribution, and how many experts
//! cover half and 90 % of the selections.

use super::HeatTable;

/// Concentration of one MoE layer's selections.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerConcentration {
    /// MoE ordinal.
    pub layer: usize,
    pub experts: usize,
    /// Sum of the layer's counts.
    pub selections: f64,
    /// The hottest 10 % of experts, rounded up (`ceil(experts / 10)`).
    pub top10_experts: usize,
    /// Share of the selections those experts take, in 0..=1.
    pub top10_share: f64,
    /// Shannon entropy of `c / sum c` in bits (0 = one expert takes all,
    /// `log2(experts)` = uniform).
    pub entropy_bits: f64,
    /// `log2(experts)`, the entropy of uniform routing, for comparison.
    pub max_entropy_bits: f64,
    /// Fewest experts (hottest first) whose selections reach 50 % / 90 %.
    pub experts_for_50: usize,
    pub experts_for_90: usize,
}

/// Per layer concentration. A layer without selections reports zero
/// selections, shares, entropy and expert counts.
pub fn concentration(table: &HeatTable) -> Vec<LayerConcentration> {
    table
        .counts
        .iter()
        .enumerate()
        .map(|(layer, row)| layer_concentration(layer, row))
        .collect()
}

fn layer_concentration(layer: usize, row: &[f64]) -> LayerConcentration {
    let mut sorted: Vec<f64> = row.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let total: f64 = sorted.iter().sum();
    let experts = row.len();
    let top10_experts = experts.div_ceil(10);
    let empty = total <= 0.0;
    let share = |sum: f64| if empty { 0.0 } else { sum / total };
    let entropy_bits = if empty {
        0.0
    } else {
        -sorted
            .iter()
            .filter(|&&c| c > 0.0)
            .map(|&c| c / total * (c / total).log2())
            .sum::<f64>()
    };
    // Smallest n with the n hottest reaching `fraction` of the total; a
    // relative epsilon keeps float sums of exact halves from missing.
    let cover = |fraction: f64| -> usize {
        if empty {
            return 0;
        }
        let target = fraction * total * (1.0 - 1e-12);
        let mut sum = 0.0;
        for (n, c) in sorted.iter().enumerate() {
            sum += c;
            if sum >= target {
                return n + 1;
            }
        }
        experts
    };
    LayerConcentration {
        layer,
        experts,
        selections: total,
        top10_experts,
        top10_share: share(sorted.iter().take(top10_experts).sum()),
        entropy_bits: entropy_bits.max(0.0),
        max_entropy_bits: if experts > 0 {
            (experts as f64).log2()
        } else {
            0.0
        },
        experts_for_50: cover(0.5),
        experts_for_90: cover(0.9),
    }
}

#[cfg(test)]
mod tests;
