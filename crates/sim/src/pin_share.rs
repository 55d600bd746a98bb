//! Pins only where they pay: the share of a budget that
//! `pinned-lru` should pin, decided on held-out replays. Each category in
//! turn is replayed with pins learned on the others (the hottest by their
//! counts, as the gate trains), at every share of `PIN_SHARES`, where 0 is
//! plain LRU. The recommended share has the least held-out felt wait
//! summed over the categories, the smaller share on a tie: zero when
//! recency wins, as on the traces `docs/serving.md` measured.

use super::allocation::Allocation;
use super::arms::{Arm, SimOptions, Simulator};
use super::gate::{held_out_splits, Split};
use super::SimError;
use residency_formats::heat::Trace;
use residency_policy::PolicyKind;

/// The shares of a budget tried: none, then up to three quarters (the LRU
/// part keeps at least a quarter for what the training did not see).
pub const PIN_SHARES: [f64; 5] = [0.0, 0.1, 0.25, 0.5, 0.75];

/// One allocation and budget: the held-out felt wait at each share, and
/// the share recommended.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct PinShareRecommendation {
    pub allocation: String,
    /// Bytes of the cache budget.
    pub budget: u64,
    pub shares: Vec<ShareFelt>,
    pub recommended_share: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct ShareFelt {
    pub share: f64,
    /// Held-out felt wait, summed over the categories.
    pub felt_wait_seconds: f64,
}

/// The recommendation at every budget of `budgets_bytes`, for each of
/// `allocations`, over `splits` (the gate's, one per held-out category).
pub fn recommend_pin_shares(
    splits: &[Split],
    miss_seconds: &[f64],
    budgets_bytes: &[u64],
    allocations: &[Allocation],
    options: &SimOptions,
) -> Result<Vec<PinShareRecommendation>, SimError> {
    // A simulator per share and category: its memo holds one share's
    // replays.
    let mut sims: Vec<Vec<Simulator>> = PIN_SHARES
        .iter()
        .map(|&share| {
            splits
                .iter()
                .map(|s| {
                    Simulator::new(
                        s.eval.clone(),
                        s.train_counts.clone(),
                        miss_seconds.to_vec(),
                        SimOptions {
                            pin_fraction: share,
                            ..options.clone()
                        },
                    )
                })
                .collect()
        })
        .collect();
    let layers = splits.first().map_or(0, |s| s.eval.layers());
    let ones = vec![1.0; layers];
    let mut out = Vec::new();
    for &allocation in allocations {
        for &budget_bytes in budgets_bytes {
            let arm = Arm {
                policy: PolicyKind::PinnedLru,
                allocation,
                budget_bytes,
            };
            let mut shares = Vec::with_capacity(PIN_SHARES.len());
            for (&share, sims) in PIN_SHARES.iter().zip(&mut sims) {
                let mut felt = 0.0;
                for sim in sims.iter_mut() {
                    felt += sim.run(arm, &ones)?.felt_wait_seconds;
                }
                shares.push(ShareFelt {
                    share,
                    felt_wait_seconds: felt,
                });
            }
            // The first of the least: shares ascend, so ties go to the
            // smaller.
            let best = shares
                .iter()
                .fold(&shares[0], |b, s| {
                    if s.felt_wait_seconds < b.felt_wait_seconds {
                        s
                    } else {
                        b
                    }
                })
                .share;
            out.push(PinShareRecommendation {
                allocation: allocation.name().into(),
                budget: budget_bytes,
                shares,
                recommended_share: best,
            });
        }
    }
    Ok(out)
}

/// The recommendation for one cache of `budget_bytes` under `allocation`,
/// each category of `trace` held out in turn with pins learned on the
/// others (`replay --pin-share auto` asks it of the training categories
/// alone, so the category it replays stays unseen). `expert_bytes[l]`: size
/// of an expert of MoE ordinal `l`; `miss_seconds[o]`: felt seconds of a
/// miss of object `o`.
pub fn recommend_held_out_pin_share(
    trace: &Trace,
    expert_bytes: &[u64],
    miss_seconds: &[f64],
    budget_bytes: u64,
    allocation: Allocation,
    options: &SimOptions,
) -> Result<PinShareRecommendation, SimError> {
    let categories = trace.categories().len();
    if categories < 2 {
        // With one category there is nothing to learn pins on while it is
        // held out: every share would pin nothing and tie at zero.
        return Err(SimError::Invalid(format!(
            "a pin share is recommended from each category held out in turn, which needs two categories or more; the trace has {categories}"
        )));
    }
    let splits = held_out_splits(trace, expert_bytes);
    let mut recommendations = recommend_pin_shares(
        &splits,
        miss_seconds,
        &[budget_bytes],
        &[allocation],
        options,
    )?;
    Ok(recommendations.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use residency_formats::heat::{HeatFormat, TokenRoutes};

    const SIZE: u64 = 1000;

    /// One MoE layer of 16 experts, two categories of 20 tokens. Category
    /// `a` routes its hot expert `hot_a` and cold ones cycling through 1..=7,
    /// `b` its `hot_b` and 9..=15; `cold` cold experts a token.
    fn trace(hot_a: u32, hot_b: u32, cold: usize) -> Trace {
        let mut tokens = Vec::new();
        for (category, hot, first) in [("a", hot_a, 1u32), ("b", hot_b, 9)] {
            let mut next = 0u32;
            for pos in 0..20 {
                let mut route = vec![hot];
                for _ in 0..cold {
                    route.push(first + next % 7);
                    next += 1;
                }
                tokens.push(TokenRoutes {
                    seq: category.into(),
                    pos,
                    category: Some(category.into()),
                    routes: vec![route],
                });
            }
        }
        Trace {
            model: None,
            format: HeatFormat::Jsonl,
            experts: vec![16],
            tokens,
        }
    }

    fn recommend(trace: &Trace) -> Result<PinShareRecommendation, SimError> {
        recommend_held_out_pin_share(
            trace,
            &[SIZE],
            &[1.0; 16],
            2 * SIZE,
            Allocation::Global,
            &SimOptions::default(),
        )
    }

    fn felt(r: &PinShareRecommendation) -> Vec<f64> {
        r.shares.iter().map(|s| s.felt_wait_seconds).collect()
    }

    #[test]
    fn pins_pay_when_the_hot_expert_is_shared_and_scans_evict_it() {
        // Both categories route expert 0 and two new cold experts a token,
        // into 2 slots. LRU: the two cold ones evict 0 each token, 3 misses
        // a token (60 a category). One pinned slot (shares 0.5 and 0.75;
        // 0.1 and 0.25 of 2 slots pin nothing) holds 0, learned on the
        // other category, from the start: 2 misses a token (40).
        let r = recommend(&trace(0, 0, 2)).unwrap();
        assert_eq!(felt(&r), [120.0, 120.0, 120.0, 80.0, 80.0]);
        assert_eq!(r.recommended_share, 0.5);
    }

    #[test]
    fn no_pins_when_recency_wins() {
        // Category a routes 0 and one cold expert a token, b routes 8 and
        // one. LRU keeps its own hot expert: 1 miss a token and the first
        // hot one, 21 a category. Pins learned on the other category hold
        // its hot expert, which this one never routes: 1 LRU slot, 2
        // misses a token (40).
        let r = recommend(&trace(0, 8, 1)).unwrap();
        assert_eq!(felt(&r), [42.0, 42.0, 42.0, 80.0, 80.0]);
        assert_eq!(r.recommended_share, 0.0);
    }

    #[test]
    fn one_category_has_nothing_to_hold_out() {
        let mut one = trace(0, 0, 2);
        one.tokens.retain(|t| t.category.as_deref() == Some("a"));
        let e = recommend(&one).unwrap_err().to_string();
        assert!(
            e.contains("needs two categories or more; the trace has 1"),
            "{e}"
        );
    }
}
