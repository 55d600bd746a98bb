//! The heat table: how often each routed expert was used, per MoE layer,
//! and its conversion to use rates (design §3.3). Reading and writing heat
//! in the engines' formats is `residency-formats`.

use crate::error::{PlannerError, Result};
use crate::limits;
use crate::model::Model;
use std::path::Path;

/// Counts per MoE ordinal and expert, with the tokens observed per layer
/// when known. Counts are f64 because aggregated sources (Qwen3 CSV) publish
/// fractions, and decayed counters are fractional too.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeatTable {
    pub counts: Vec<Vec<f64>>,
    pub tokens: Option<Vec<u64>>,
}

impl HeatTable {
    /// Use rates `p[l][e]` (design §3.3): `c / N[l]` when N is known, else
    /// `top_k * c / sum_e c`; a layer summing to zero gets `top_k / experts`
    /// (reported through `warnings`). Fails when the shape is not the model's.
    pub fn use_rates(
        &self,
        model: &Model,
        file: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Vec<f64>>> {
        let want = model.experts_per_layer();
        let got: Vec<usize> = self.counts.iter().map(Vec::len).collect();
        if want != got {
            return Err(PlannerError::input(
                file,
                "shape",
                format!(
                    "heat has {} MoE layers of {} experts, model `{}` has {} of {}",
                    got.len(),
                    describe_widths(&got),
                    model.name(),
                    want.len(),
                    describe_widths(&want)
                ),
                "use heat recorded on this model, or the model it was recorded on",
            ));
        }
        for (l, row) in self.counts.iter().enumerate() {
            if let Some(e) = row
                .iter()
                .position(|c| !(0.0..=limits::MAX_HEAT_COUNT).contains(c))
            {
                return Err(PlannerError::input(
                    file,
                    format!("MoE layer {l} expert {e}"),
                    format!("count {} is not from 0 to 1e15", row[e]),
                    "give each expert's selections, a count of zero or more",
                ));
            }
        }
        let top_k = model.top_k() as f64;
        let mut zero_layers = Vec::new();
        let rates = self
            .counts
            .iter()
            .enumerate()
            .map(|(l, row)| {
                let sum: f64 = row.iter().sum();
                let n = self.tokens.as_ref().map(|t| t[l]).filter(|&n| n > 0);
                match n {
                    _ if sum <= 0.0 => {
                        zero_layers.push(l);
                        vec![top_k / row.len() as f64; row.len()]
                    }
                    Some(n) => row.iter().map(|c| c / n as f64).collect(),
                    None => row.iter().map(|c| top_k * c / sum).collect(),
                }
            })
            .collect();
        if !zero_layers.is_empty() {
            warnings.push(format!(
                "{}: MoE layers {:?} have no routed selections; they get uniform heat (top_k / experts)",
                file.display(),
                zero_layers
            ));
        }
        Ok(rates)
    }

    /// Uniform heat for a model: every expert used `top_k / experts` times a token.
    pub fn uniform(model: &Model) -> HeatTable {
        HeatTable {
            counts: model
                .experts_per_layer()
                .into_iter()
                .map(|e| vec![1.0; e])
                .collect(),
            tokens: None,
        }
    }

    /// Appends zero-count layers up to `widths.len()` (experts per MoE
    /// layer), observed by no token where tokens are known.
    pub fn pad_layers(&mut self, widths: &[usize]) {
        let given = self.counts.len().min(widths.len());
        self.counts
            .extend(widths[given..].iter().map(|&w| vec![0.0; w]));
        if let Some(tokens) = &mut self.tokens {
            tokens.resize(widths.len(), 0);
        }
    }

    /// Adds another table of the same shape (used to sum categories).
    pub fn add(&mut self, other: &HeatTable) {
        if self.counts.is_empty() {
            *self = other.clone();
            return;
        }
        for (row, other_row) in self.counts.iter_mut().zip(&other.counts) {
            for (c, o) in row.iter_mut().zip(other_row) {
                *c += o;
            }
        }
        self.tokens = match (&self.tokens, &other.tokens) {
            (Some(a), Some(b)) => Some(a.iter().zip(b).map(|(x, y)| x + y).collect()),
            _ => None,
        };
    }
}

fn describe_widths(widths: &[usize]) -> String {
    match widths.first() {
        Some(&w) if widths.iter().all(|&x| x == w) => w.to_string(),
        Some(_) => "varying numbers of".to_string(),
        None => "0".to_string(),
    }
}
