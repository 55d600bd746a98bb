//! Why a plan is what it is: the marginal value of more memory on each GPU
//! and NUMA node, the frontier between resident and non-resident experts in
//! each layer, and what moving each trunk component would cost. Every number
//! is a change of the cost model's `token_seconds`; every move priced keeps
//! the plan's constraints (pins, budgets, layers kept whole or on at most K
//! places).

use crate::search::SearchState;
use residency_core::cost::{Instance, ObjectKind, Place};
use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone, PartialEq)]
pub struct MarginalCapacity {
    pub place: Place,
    /// Token seconds saved by a local re-plan with one more GiB there (>= 0).
    pub saved_seconds: f64,
}

/// One expert at the resident frontier of its layer.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontierExpert {
    pub expert: usize,
    pub place: Place,
    pub use_rate: f64,
    /// Token seconds it saves (resident) or would save (outside) in the
    /// fastest tier, per GiB it takes there.
    pub seconds_per_gib: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LayerFrontier {
    pub moe: usize,
    pub stage: String,
    pub coldest_resident: Option<FrontierExpert>,
    pub hottest_outside: Option<FrontierExpert>,
}

/// Moving a trunk component to another place: the change of token seconds,
/// and whether that place has room now.
#[derive(Debug, Clone, PartialEq)]
pub struct Alternative {
    pub place: Place,
    pub delta_seconds: f64,
    pub fits: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrunkReason {
    pub name: String,
    pub layer: Option<usize>,
    pub place: Place,
    pub alternatives: Vec<Alternative>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub token_seconds: f64,
    /// Which tier counts as resident: GPUs when the profile has any, else RAM.
    pub resident_tier: &'static str,
    pub marginal_gib: Vec<MarginalCapacity>,
    pub layers: Vec<LayerFrontier>,
    pub trunk: Vec<TrunkReason>,
    /// The user's constraints the plan is held to, each with its source:
    /// no move above breaks one (a pinned component lists no alternative).
    pub constraints: Vec<String>,
}

pub fn explain(inst: &Instance, placement: &[usize], time_limit: Duration) -> Explanation {
    let state = SearchState::new(inst, placement.to_vec());
    let gpu_tier = inst.resources.gpus() > 0;
    let resident = |q: usize| match inst.places[q] {
        Place::Gpu(_) => true,
        Place::Ram(_) => !gpu_tier,
        Place::Disk(_) | Place::Recompute => false,
    };
    let resident_places: Vec<usize> = (0..inst.places.len()).filter(|&q| resident(q)).collect();
    let other_places: Vec<usize> = (0..inst.places.len()).filter(|&q| !resident(q)).collect();
    // Best move of `o` among `targets`: the smallest change of token seconds.
    let best_move = |o: usize, targets: &[usize]| {
        targets
            .iter()
            .filter(|&&q| q != placement[o] && inst.allowed(o, inst.places[q]))
            .map(|&q| state.delta(&[(o, q)]))
            .fold(f64::INFINITY, f64::min)
    };
    let per_gib = |o: usize, seconds: f64| {
        let bytes = resident_places
            .first()
            .map(|&q| inst.objects[o].bytes_at(inst.places[q]))
            .unwrap_or(1)
            .max(1);
        seconds * GIB as f64 / bytes as f64
    };

    let layers = inst
        .expert_ids
        .iter()
        .enumerate()
        .map(|(moe, ids)| {
            let frontier = |o: usize, seconds: f64| FrontierExpert {
                expert: match inst.objects[o].kind {
                    ObjectKind::Expert { expert, .. } => expert,
                    _ => unreachable!("expert ids name experts"),
                },
                place: inst.places[placement[o]],
                use_rate: inst.objects[o].use_rate,
                seconds_per_gib: per_gib(o, seconds),
            };
            let rate = |o: &&usize| inst.objects[**o].use_rate;
            let coldest = ids
                .iter()
                .filter(|&&o| resident(placement[o]))
                .min_by(|a, b| rate(a).total_cmp(&rate(b)));
            let hottest = ids
                .iter()
                .filter(|&&o| !resident(placement[o]))
                .max_by(|a, b| rate(a).total_cmp(&rate(b)));
            LayerFrontier {
                moe,
                stage: inst.stages[inst.objects[ids[0]].stage].name.clone(),
                coldest_resident: coldest.map(|&o| frontier(o, best_move(o, &other_places))),
                hottest_outside: hottest.map(|&o| frontier(o, -best_move(o, &resident_places))),
            }
        })
        .collect();

    let trunk = inst
        .trunk()
        .map(|(o, name, layer)| TrunkReason {
            name: name.to_string(),
            layer,
            place: inst.places[placement[o]],
            alternatives: (0..inst.places.len())
                .filter(|&q| q != placement[o] && inst.allowed(o, inst.places[q]))
                .map(|q| Alternative {
                    place: inst.places[q],
                    delta_seconds: state.delta(&[(o, q)]),
                    fits: state.fits(o, q),
                })
                .collect(),
        })
        .collect();

    let capacitated: Vec<Place> = inst
        .places
        .iter()
        .copied()
        .filter(|&q| inst.resources.capacity_bytes(q).is_some())
        .collect();
    let share = time_limit / capacitated.len().max(1) as u32;
    let marginal_gib = capacitated
        .into_iter()
        .map(|place| {
            let mut bigger = inst.clone();
            match place {
                Place::Gpu(g) => bigger.resources.gpu_capacity_bytes[g] += GIB,
                Place::Ram(n) => bigger.resources.ram_capacity_bytes[n] += GIB,
                Place::Disk(_) | Place::Recompute => unreachable!("unbounded places"),
            }
            let mut search = SearchState::new(&bigger, placement.to_vec());
            search.improve(Instant::now() + share, 0.0);
            MarginalCapacity {
                place,
                saved_seconds: (state.token_seconds() - search.token_seconds()).max(0.0),
            }
        })
        .collect();

    Explanation {
        token_seconds: state.token_seconds(),
        resident_tier: if gpu_tier { "gpu" } else { "ram" },
        marginal_gib,
        layers,
        trunk,
        constraints: (inst.constraints.given.iter())
            .map(|c| c.to_string())
            .collect(),
    }
}
