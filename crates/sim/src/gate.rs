//! The held-out gate (design §6). A trace's categories take turns as the
//! evaluation set; the policies that learn are trained on the other
//! categories. Gain per category `= 1 - felt(candidate) / felt(uniform
//! LRU)` at the same budget, categories weighing equally. A candidate
//! passes at a budget when the mean gain is at least 10 % and no category
//! is more than 3 % worse, and still passes with each layer's miss cost
//! scaled by 0.5 and by 1.5, one layer at a time (2 x layers reruns).

use super::allocation::Allocation;
use super::arms::{Arm, Run, SimOptions, Simulator};
use super::stream::Stream;
use super::SimError;
use residency_formats::heat::Trace;
use residency_policy::PolicyKind;

pub const MIN_MEAN_GAIN: f64 = 0.10;
pub const MAX_CATEGORY_LOSS: f64 = 0.03;
const SENSITIVITY_SCALES: [f64; 2] = [0.5, 1.5];

/// The arm every candidate is measured against.
pub const BASELINE: (PolicyKind, Allocation) = (PolicyKind::Lru, Allocation::Uniform);

/// One held-out category: its tokens as a stream, and the request counts of
/// all other categories (what the learning policies train on).
pub struct Split {
    pub category: String,
    pub eval: Stream,
    pub train_counts: Vec<u64>,
}

/// One split per category of the trace (tokens without a category are
/// neither evaluated nor trained on). `expert_bytes[l]`: size of an expert
/// of MoE ordinal `l`.
pub fn held_out_splits(trace: &Trace, expert_bytes: &[u64]) -> Vec<Split> {
    let streams: Vec<(String, Stream)> = trace
        .categories()
        .into_iter()
        .map(|c| {
            let tokens = trace
                .tokens
                .iter()
                .filter(|t| t.category.as_deref() == Some(c));
            (
                c.to_string(),
                Stream::from_tokens(tokens, &trace.experts, expert_bytes),
            )
        })
        .collect();
    let counts: Vec<Vec<u64>> = streams.iter().map(|(_, s)| s.counts()).collect();
    streams
        .into_iter()
        .enumerate()
        .map(|(i, (category, eval))| {
            let mut train_counts = vec![0u64; eval.objects()];
            for (j, c) in counts.iter().enumerate().filter(|&(j, _)| j != i) {
                debug_assert_ne!(j, i);
                for (t, &n) in train_counts.iter_mut().zip(c) {
                    *t += n;
                }
            }
            Split {
                category,
                eval,
                train_counts,
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct GateConfig {
    pub budgets_bytes: Vec<u64>,
    pub candidates: Vec<(PolicyKind, Allocation)>,
    pub sensitivity: bool,
    pub options: SimOptions,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct CategoryGain {
    pub category: String,
    pub baseline_felt_seconds: f64,
    pub candidate_felt_seconds: f64,
    pub gain: f64,
}

/// Mean and worst gain over categories, and whether they pass.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Verdict {
    pub mean_gain: f64,
    pub worst_gain: f64,
    pub passed: bool,
}

impl Verdict {
    fn of(gains: impl IntoIterator<Item = f64>) -> Verdict {
        let gains: Vec<f64> = gains.into_iter().collect();
        let mean_gain = gains.iter().sum::<f64>() / gains.len().max(1) as f64;
        let worst_gain = gains.iter().copied().fold(f64::INFINITY, f64::min);
        Verdict {
            mean_gain,
            worst_gain,
            passed: !gains.is_empty()
                && mean_gain >= MIN_MEAN_GAIN
                && worst_gain >= -MAX_CATEGORY_LOSS,
        }
    }
}

/// The sensitivity reruns of one candidate at one budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Sensitivity {
    pub reruns: usize,
    pub failed: usize,
    /// The rerun with the lowest mean gain: (layer, scale, verdict).
    pub worst: Option<(usize, f64, Verdict)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateResult {
    pub policy: PolicyKind,
    pub allocation: Allocation,
    pub budget_bytes: u64,
    pub categories: Vec<CategoryGain>,
    pub verdict: Verdict,
    pub sensitivity: Option<Sensitivity>,
}

impl GateResult {
    /// Passed at the base miss costs and in every sensitivity rerun.
    pub fn passed(&self) -> bool {
        self.verdict.passed && self.sensitivity.as_ref().is_none_or(|s| s.failed == 0)
    }
}

pub struct GateReport {
    pub results: Vec<GateResult>,
    /// Every arm at the base miss costs, with its category (paired-arm
    /// details: seeded and admitted hits, churn).
    pub runs: Vec<(String, Run)>,
}

/// Runs the gate. `miss_seconds[o]`: felt seconds of a miss of object `o`
/// (the same numbering in every split).
pub fn gate(
    splits: Vec<Split>,
    miss_seconds: &[f64],
    config: &GateConfig,
) -> Result<GateReport, SimError> {
    if splits.len() < 2 {
        return Err(SimError::Invalid(format!(
            "the held-out gate needs at least 2 categories, the trace has {}; use a trace whose tokens carry categories",
            splits.len()
        )));
    }
    let names: Vec<String> = splits.iter().map(|s| s.category.clone()).collect();
    let mut sims: Vec<Simulator> = splits
        .into_iter()
        .map(|s| {
            Simulator::new(
                s.eval,
                s.train_counts,
                miss_seconds.to_vec(),
                config.options.clone(),
            )
        })
        .collect();
    let layers = sims[0].stream().layers();
    let ones = vec![1.0; layers];
    let mut runs = Vec::new();
    let mut results = Vec::new();
    for &budget_bytes in &config.budgets_bytes {
        let arm = |(policy, allocation): (PolicyKind, Allocation)| Arm {
            policy,
            allocation,
            budget_bytes,
        };
        let felt = |sims: &mut [Simulator],
                    a: Arm,
                    scale: &[f64],
                    runs: Option<&mut Vec<(String, Run)>>| {
            let mut out = Vec::with_capacity(sims.len());
            let mut keep = Vec::new();
            for (sim, name) in sims.iter_mut().zip(&names) {
                let run = sim.run(a, scale)?;
                out.push(run.felt_wait_seconds);
                keep.push((name.clone(), run));
            }
            if let Some(r) = runs {
                r.extend(keep);
            }
            Ok::<_, SimError>(out)
        };
        let baseline = felt(&mut sims, arm(BASELINE), &ones, Some(&mut runs))?;
        for &candidate in &config.candidates {
            let felt_c = felt(&mut sims, arm(candidate), &ones, Some(&mut runs))?;
            let categories: Vec<CategoryGain> = names
                .iter()
                .zip(baseline.iter().zip(&felt_c))
                .map(|(c, (&b, &f))| CategoryGain {
                    category: c.clone(),
                    baseline_felt_seconds: b,
                    candidate_felt_seconds: f,
                    gain: gain(b, f),
                })
                .collect();
            let verdict = Verdict::of(categories.iter().map(|c| c.gain));
            let sensitivity = if config.sensitivity {
                let mut s = Sensitivity {
                    reruns: 0,
                    failed: 0,
                    worst: None,
                };
                for l in 0..layers {
                    for factor in SENSITIVITY_SCALES {
                        let mut scale = ones.clone();
                        scale[l] = factor;
                        let b = felt(&mut sims, arm(BASELINE), &scale, None)?;
                        let f = felt(&mut sims, arm(candidate), &scale, None)?;
                        let v = Verdict::of(b.iter().zip(&f).map(|(&b, &f)| gain(b, f)));
                        s.reruns += 1;
                        s.failed += usize::from(!v.passed);
                        if s.worst.is_none_or(|(_, _, w)| v.mean_gain < w.mean_gain) {
                            s.worst = Some((l, factor, v));
                        }
                    }
                }
                Some(s)
            } else {
                None
            };
            results.push(GateResult {
                policy: candidate.0,
                allocation: candidate.1,
                budget_bytes,
                categories,
                verdict,
                sensitivity,
            });
        }
    }
    Ok(GateReport { results, runs })
}

/// `1 - candidate / baseline`; no felt wait at all on both sides is no gain.
fn gain(baseline: f64, candidate: f64) -> f64 {
    if baseline > 0.0 {
        1.0 - candidate / baseline
    } else if candidate > 0.0 {
        f64::NEG_INFINITY
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
