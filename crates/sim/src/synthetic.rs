//! Synthetic MoE routing traces for benchmarks and tests of the simulator at
//! sizes no real trace here has (design §6: a 1,000,000-event trace of 60
//! layers x 256 experts, top-8). Each category has its own Zipf-ranked
//! experts per layer (a seeded permutation), so categories overlap only
//! partly, as real tasks do; generation is deterministic in the seed.

use residency_core::rng::Rng;
use residency_formats::heat::{HeatFormat, TokenRoutes, Trace};

/// Shape of a synthetic trace.
#[derive(Debug, Clone, Copy)]
pub struct SyntheticShape {
    pub layers: usize,
    pub experts: usize,
    pub top_k: usize,
    pub tokens_per_category: usize,
    pub categories: usize,
    /// Zipf exponent of expert popularity within a category and layer.
    pub zipf_s: f64,
    pub seed: u64,
}

impl SyntheticShape {
    /// Expert requests (events) of the trace.
    pub fn events(&self) -> usize {
        self.layers * self.top_k * self.tokens_per_category * self.categories
    }
}

pub fn zipf_trace(shape: &SyntheticShape) -> Trace {
    let mut rng = Rng(shape.seed.max(1));
    // Cumulative Zipf weights over ranks.
    let mut cdf: Vec<f64> = (1..=shape.experts)
        .map(|r| (r as f64).powf(-shape.zipf_s))
        .scan(0.0, |acc, w| {
            *acc += w;
            Some(*acc)
        })
        .collect();
    let total = *cdf.last().unwrap_or(&1.0);
    cdf.iter_mut().for_each(|c| *c /= total);
    // rank -> expert, per category and layer.
    let permutations: Vec<Vec<Vec<u32>>> = (0..shape.categories)
        .map(|_| {
            (0..shape.layers)
                .map(|_| {
                    let mut p: Vec<u32> = (0..shape.experts as u32).collect();
                    for i in (1..p.len()).rev() {
                        p.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
                    }
                    p
                })
                .collect()
        })
        .collect();
    let mut tokens = Vec::with_capacity(shape.tokens_per_category * shape.categories);
    let mut chosen = vec![false; shape.experts];
    for (c, perm) in permutations.iter().enumerate() {
        for t in 0..shape.tokens_per_category {
            let routes = perm
                .iter()
                .map(|ranked| {
                    let mut ids = Vec::with_capacity(shape.top_k);
                    while ids.len() < shape.top_k.min(shape.experts) {
                        let rank = cdf
                            .partition_point(|&x| x < rng.unit())
                            .min(shape.experts - 1);
                        let e = ranked[rank];
                        if !chosen[e as usize] {
                            chosen[e as usize] = true;
                            ids.push(e);
                        }
                    }
                    for &e in &ids {
                        chosen[e as usize] = false;
                    }
                    ids
                })
                .collect();
            tokens.push(TokenRoutes {
                seq: format!("c{c}-{}", t / 256),
                pos: (t % 256) as u64,
                category: Some(format!("c{c}")),
                routes,
            });
        }
    }
    Trace {
        model: None,
        format: HeatFormat::Jsonl,
        experts: vec![shape.experts; shape.layers],
        tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_distinct_top_k() {
        let shape = SyntheticShape {
            layers: 3,
            experts: 16,
            top_k: 4,
            tokens_per_category: 50,
            categories: 2,
            zipf_s: 1.0,
            seed: 7,
        };
        let trace = zipf_trace(&shape);
        assert_eq!(trace.tokens.len(), 100);
        let events: usize = trace
            .tokens
            .iter()
            .flat_map(|t| &t.routes)
            .map(Vec::len)
            .sum();
        assert_eq!(events, shape.events());
        for t in &trace.tokens {
            for ids in &t.routes {
                let mut d = ids.clone();
                d.sort_unstable();
                d.dedup();
                assert_eq!(d.len(), 4);
                assert!(d.iter().all(|&e| e < 16));
            }
        }
        assert_eq!(trace.categories(), vec!["c0", "c1"]);
        // Deterministic in the seed.
        assert_eq!(zipf_trace(&shape), trace);
    }
}
