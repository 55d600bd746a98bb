//! Fitting `LlamaCppTiming` to measured runs: least squares on relative
//! error (each run's `(predicted - measured) / measured`), over the terms
//! the runs can tell apart. A term whose amounts are, over these runs, a
//! combination of the terms before it (every run with the same number of
//! GPU layers, say) cannot be fitted: it keeps its prior value and the fit
//! says so. Terms are tried in the order of `Term::ORDER`, the per-layer
//! GPU cost first (the term the cost model lacked: llama.cpp on the H200
//! machine spent about 55 us per layer the cost model did not know). A
//! fitted value below zero is not physical: that term keeps its prior and
//! the rest are fitted again.
//!
//! Runs of one model file cannot tell the last two terms apart: their CPU
//! expert matrices are a fixed number per expert byte (every expert tensor
//! of a file has the same shape), so the matrix count differs from the CPU
//! bytes only by the attention and head bytes of CPU layers, which the
//! per-layer and per-byte terms already take; and their layers always sum
//! to the file's, so a per-token constant is a combination of the
//! per-layer costs. Runs of files of two geometries tell both apart.

use super::graph::Work;
use residency_core::profile::LlamaCppTiming;
use residency_core::units::{BytesPerSecond, Seconds};

/// A term of the timing that runs can determine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    GpuLayer,
    CpuBandwidth,
    Crossing,
    CpuLayer,
    CpuMatrix,
    Token,
}

impl Term {
    pub const ORDER: [Term; 6] = [
        Term::GpuLayer,
        Term::CpuBandwidth,
        Term::Crossing,
        Term::CpuLayer,
        Term::CpuMatrix,
        Term::Token,
    ];

    /// The profile's key for the term.
    pub fn key(self) -> &'static str {
        match self {
            Term::GpuLayer => "gpu_layer_overhead",
            Term::CpuBandwidth => "cpu_bandwidth",
            Term::Crossing => "crossing_overhead",
            Term::CpuLayer => "cpu_layer_overhead",
            Term::CpuMatrix => "cpu_matrix_overhead",
            Term::Token => "token_overhead",
        }
    }

    /// How much of the term `work` incurs.
    fn amount(self, work: &Work) -> f64 {
        match self {
            Term::GpuLayer => work.gpu_layers,
            Term::CpuBandwidth => work.cpu_bytes,
            Term::Crossing => work.crossings,
            Term::CpuLayer => work.cpu_layers,
            Term::CpuMatrix => work.cpu_matrices,
            Term::Token => 1.0,
        }
    }

    /// Seconds per unit of the term.
    fn seconds_per_unit(self, t: &LlamaCppTiming) -> f64 {
        match self {
            Term::GpuLayer => t.gpu_layer_overhead.0,
            Term::CpuBandwidth => 1.0 / t.cpu_bandwidth.0,
            Term::Crossing => t.crossing_overhead.0,
            Term::CpuLayer => t.cpu_layer_overhead.0,
            Term::CpuMatrix => t.cpu_matrix_overhead.0,
            Term::Token => t.token_overhead.0,
        }
    }

    fn set(self, t: &mut LlamaCppTiming, seconds_per_unit: f64) {
        match self {
            Term::GpuLayer => t.gpu_layer_overhead = Seconds(seconds_per_unit),
            Term::CpuBandwidth => t.cpu_bandwidth = BytesPerSecond(1.0 / seconds_per_unit),
            Term::Crossing => t.crossing_overhead = Seconds(seconds_per_unit),
            Term::CpuLayer => t.cpu_layer_overhead = Seconds(seconds_per_unit),
            Term::CpuMatrix => t.cpu_matrix_overhead = Seconds(seconds_per_unit),
            Term::Token => t.token_overhead = Seconds(seconds_per_unit),
        }
    }
}

/// A fitted timing and which terms the runs determined.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub timing: LlamaCppTiming,
    pub fitted: Vec<Term>,
    /// Terms kept at the prior: not told apart by the runs, or fitted below
    /// zero.
    pub kept: Vec<Term>,
}

/// A column that is this small a part of itself after removing the
/// columns before it is a combination of them (rounding leaves about 1e-16).
const INDEPENDENT: f64 = 1e-6;

/// Fits `prior`'s terms to `(work, measured seconds per token)` runs.
pub fn fit(runs: &[(Work, f64)], prior: &LlamaCppTiming) -> Fit {
    let mut refused: Vec<Term> = Vec::new();
    loop {
        let terms = independent_terms(runs, &refused);
        let values = solve(runs, prior, &terms);
        match terms.iter().zip(&values).find(|(_, &v)| v <= 0.0) {
            Some((&term, _)) => refused.push(term),
            None => {
                let mut timing = prior.clone();
                for (&term, &v) in terms.iter().zip(&values) {
                    term.set(&mut timing, v);
                }
                let kept = Term::ORDER
                    .into_iter()
                    .filter(|t| !terms.contains(t))
                    .collect();
                return Fit {
                    timing,
                    fitted: terms,
                    kept,
                };
            }
        }
    }
}

/// Each run's amount of `term`, over the run's measured seconds (the
/// weights of relative error).
fn weighted_column(runs: &[(Work, f64)], term: Term) -> Vec<f64> {
    runs.iter().map(|(w, t)| term.amount(w) / t).collect()
}

/// The terms, in `Term::ORDER` and not `refused`, whose weighted columns
/// are independent of those before them (Gram-Schmidt), at most one per run.
fn independent_terms(runs: &[(Work, f64)], refused: &[Term]) -> Vec<Term> {
    let mut basis: Vec<Vec<f64>> = Vec::new();
    let mut terms = Vec::new();
    for term in Term::ORDER {
        if refused.contains(&term) || terms.len() == runs.len() {
            continue;
        }
        let column = weighted_column(runs, term);
        let norm = dot(&column, &column).sqrt();
        let mut rest = column;
        for b in &basis {
            let d = dot(&rest, b);
            rest.iter_mut().zip(b).for_each(|(r, x)| *r -= d * x);
        }
        let rest_norm = dot(&rest, &rest).sqrt();
        if norm > 0.0 && rest_norm > INDEPENDENT * norm {
            basis.push(rest.iter().map(|r| r / rest_norm).collect());
            terms.push(term);
        }
    }
    terms
}

/// Least squares on relative error for `terms`' seconds per unit, the
/// other terms at the prior; by the normal equations on columns scaled to
/// unit norm (bytes and counts differ by nine orders of magnitude).
fn solve(runs: &[(Work, f64)], prior: &LlamaCppTiming, terms: &[Term]) -> Vec<f64> {
    let columns: Vec<Vec<f64>> = terms.iter().map(|&t| weighted_column(runs, t)).collect();
    let scales: Vec<f64> = columns.iter().map(|c| dot(c, c).sqrt()).collect();
    let columns: Vec<Vec<f64>> = columns
        .iter()
        .zip(&scales)
        .map(|(c, s)| c.iter().map(|x| x / s).collect())
        .collect();
    // What is left of each run's (weighted) time for the fitted terms.
    let target: Vec<f64> = runs
        .iter()
        .map(|(w, t)| {
            let known: f64 = Term::ORDER
                .into_iter()
                .filter(|term| !terms.contains(term))
                .map(|term| term.amount(w) * term.seconds_per_unit(prior))
                .sum();
            (t - known - w.fixed_seconds) / t
        })
        .collect();
    let n = terms.len();
    let mut a: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| dot(&columns[i], &columns[j])).collect())
        .collect();
    let mut b: Vec<f64> = (0..n).map(|i| dot(&columns[i], &target)).collect();
    // Gaussian elimination with partial pivoting; the columns are
    // independent, so the system is regular.
    for p in 0..n {
        let pivot = (p..n)
            .max_by(|&i, &j| a[i][p].abs().total_cmp(&a[j][p].abs()))
            .expect("a row");
        a.swap(p, pivot);
        b.swap(p, pivot);
        let (upper, lower) = a.split_at_mut(p + 1);
        let row = &upper[p];
        for (i, other) in lower.iter_mut().enumerate() {
            let f = other[p] / row[p];
            other
                .iter_mut()
                .zip(row)
                .skip(p)
                .for_each(|(x, r)| *x -= f * r);
            b[p + 1 + i] -= f * b[p];
        }
    }
    let mut x = vec![0.0; n];
    for p in (0..n).rev() {
        let rest: f64 = (p + 1..n).map(|j| a[p][j] * x[j]).sum();
        x[p] = (b[p] - rest) / a[p][p];
    }
    x.iter().zip(&scales).map(|(x, s)| x / s).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests;
