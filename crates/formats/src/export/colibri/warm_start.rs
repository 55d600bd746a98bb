//! CUDA_EXPERT_GB, the HEAT_FILE and Colibri's warm start: the one
//! allowance for every card, heat values that rank the plan's GPU experts
//! first, and a model of the fill (`qt_plan_fill`) that says what Colibri
//! will load otherwise than the plan.

use super::super::join;
use super::place::{coli_expert_cards, ColiList, ColiTarget, COLI_ROLE_SPLIT};
use super::Placed;
use residency_core::cost::{Instance, Place};
use residency_core::error::{PlannerError, Result};

/// HEAT_FILE values are multiples of this: their order survives `>> 4`
/// (Colibri ages loaded heat by `>> 1`, or a decay or shift of a few bits).
pub const HEAT_STEP: u32 = 16;
/// Bytes added to the largest card's need before rounding CUDA_EXPERT_GB up,
/// so that the engine's `atof(x) * 2^30` truncation never lands one byte short.
pub(super) const ALLOWANCE_SLACK: u64 = 1024;
const GIB: u128 = 1 << 30;

/// `bytes` as CUDA_EXPERT_GB text: GiB with six decimals, rounded up.
pub(super) fn gib_text(bytes: u64) -> String {
    let micro = (bytes as u128 * 1_000_000).div_ceil(GIB);
    format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000)
}

/// The bytes Colibri makes of a CUDA_EXPERT_GB text: `atof(x) * 2^30`, truncated.
pub fn coli_allowance_bytes(text: &str) -> u64 {
    (text.parse::<f64>().unwrap_or(0.0) * 1_073_741_824.0) as u64
}

/// HEAT_FILE values: every expert the plan puts on a GPU above every other,
/// each class in the order of its use rates (ties: the lower expert slot
/// first), as multiples of [`HEAT_STEP`] so the order survives aging.
/// `resident[o]` says whether object `o` is on a GPU.
pub(super) fn coli_heat_values(inst: &Instance, resident: &[bool]) -> Result<Vec<Vec<u32>>> {
    let mut slots: Vec<(bool, f64, usize, usize, usize)> = Vec::new();
    for (l, ids) in inst.expert_ids.iter().enumerate() {
        for (e, &o) in ids.iter().enumerate() {
            slots.push((resident[o], inst.objects[o].use_rate, slots.len(), l, e));
        }
    }
    // Ascending: coldest first; among equal rates the higher slot is colder.
    slots.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(b.2.cmp(&a.2)));
    let mut values: Vec<Vec<u32>> = inst
        .expert_ids
        .iter()
        .map(|ids| vec![0; ids.len()])
        .collect();
    for (rank, &(_, _, _, l, e)) in slots.iter().enumerate() {
        values[l][e] = u32::try_from(rank + 1)
            .ok()
            .and_then(|r| r.checked_mul(HEAT_STEP))
            .ok_or_else(|| {
                PlannerError::Infeasible(format!(
                    "{} experts are too many for HEAT_FILE's u32 counters at a step of {HEAT_STEP}",
                    slots.len()
                ))
            })?;
    }
    Ok(values)
}

/// Colibri's warm start (`qt_plan_fill`): slots in descending heat; each
/// goes to its home card `cards[e % n]` while that card's budget holds it;
/// stops when every card is full. Returns the card of each slot, by
/// `(l, e)`.
pub(super) fn coli_fill(
    inst: &Instance,
    heat: &[Vec<u32>],
    cards: &[usize],
    budget: &[u64],
) -> Vec<Vec<Option<usize>>> {
    let mut loaded: Vec<Vec<Option<usize>>> =
        heat.iter().map(|row| vec![None; row.len()]).collect();
    if cards.is_empty() {
        return loaded;
    }
    let mut order: Vec<(u32, usize, usize, usize)> = Vec::new();
    for (l, row) in heat.iter().enumerate() {
        for (e, &h) in row.iter().enumerate() {
            order.push((h, order.len(), l, e));
        }
    }
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut used = vec![0u64; cards.len()];
    let smallest = inst
        .expert_ids
        .iter()
        .flatten()
        .map(|&o| inst.objects[o].gpu_bytes)
        .min()
        .unwrap_or(0);
    for (_, _, l, e) in order {
        if (0..cards.len()).all(|i| used[i] + smallest > budget[i]) {
            break;
        }
        let home = e % cards.len();
        let bytes = inst.objects[inst.expert_ids[l][e]].gpu_bytes;
        if used[home] + bytes <= budget[home] {
            used[home] += bytes;
            loaded[l][e] = Some(cards[home]);
        }
    }
    loaded
}

/// CUDA_EXPERT_GB: one allowance for every card, experts plus charged trunk.
pub(super) struct Allowance {
    /// Bytes of each card: its planned experts and its charged trunk.
    pub(super) need: Vec<u64>,
    /// The plan's experts on each card.
    pub(super) planned: Vec<usize>,
    /// COLI_CUDA: whether the tier is on.
    pub(super) tier_on: bool,
    /// The COLI_GPUS card with the largest need (the lower on ties).
    pub(super) heaviest: Option<usize>,
    /// CUDA_EXPERT_GB's value: the heaviest card's need, rounded up.
    pub(super) text: Option<String>,
    /// The bytes Colibri reads `text` as; 0 without one.
    pub(super) bytes: u64,
}

impl Allowance {
    /// The allowance that holds the heaviest card's planned experts.
    pub(super) fn new(at: &Placed, list: &ColiList) -> Allowance {
        let gpus = at.inst.resources.gpus();
        let mut need = list.charged.clone();
        let mut planned = vec![0usize; gpus];
        for &o in at.inst.expert_ids.iter().flatten() {
            if let Place::Gpu(g) = at.place(o) {
                need[g] += at.inst.objects[o].gpu_bytes;
                planned[g] += 1;
            }
        }
        let tier_on = list.experts_item != Some(ColiTarget::Cpu) && !list.coli_gpus.is_empty();
        let heaviest = list
            .coli_gpus
            .iter()
            .copied()
            .max_by_key(|&g| (need[g], usize::MAX - g));
        let text = match heaviest {
            Some(g) if tier_on => Some(gib_text(need[g] + ALLOWANCE_SLACK)),
            _ => None,
        };
        let bytes = text.as_deref().map_or(0, coli_allowance_bytes);
        Allowance {
            need,
            planned,
            tier_on,
            heaviest,
            text,
            bytes,
        }
    }
}

/// HEAT_FILE and what Colibri's warm start will load with it.
pub(super) struct WarmStart {
    pub(super) heat: Vec<Vec<u32>>,
    /// Colibri's expert cards, in home order; none when the tier is off.
    pub(super) cards: Vec<usize>,
    /// The allowance of each of `cards` after its charged trunk.
    pub(super) budget: Vec<u64>,
    /// The card each expert slot is loaded on, by `(l, e)`.
    pub(super) loaded: Vec<Vec<Option<usize>>>,
}

/// The plan's GPU experts beside what the warm start loads.
#[derive(Default)]
struct Tally {
    /// The plan's GPU experts.
    planned: usize,
    /// GPU experts planned on another card than their home.
    off_home: usize,
    /// GPU experts loaded on the planned card, on another, not at all.
    same: usize,
    moved: usize,
    in_ram: usize,
    /// Experts the plan keeps off the GPUs that are loaded anyway.
    extra: usize,
}

impl WarmStart {
    /// The heat values and Colibri's fill of the cards with them.
    pub(super) fn new(at: &Placed, list: &ColiList, allowance: &Allowance) -> Result<WarmStart> {
        let inst = at.inst;
        let resident: Vec<bool> = (0..inst.objects.len())
            .map(|o| matches!(at.place(o), Place::Gpu(_)))
            .collect();
        let heat = coli_heat_values(inst, &resident)?;
        let dense_layers = inst.layers();
        let cards = if allowance.tier_on {
            coli_expert_cards(&list.coli_gpus, &list.items, dense_layers).unwrap_or_default()
        } else {
            Vec::new()
        };
        let budget: Vec<u64> = cards
            .iter()
            .map(|&d| allowance.bytes.saturating_sub(list.charged[d]))
            .collect();
        let loaded = coli_fill(inst, &heat, &cards, &budget);
        Ok(WarmStart {
            heat,
            cards,
            budget,
            loaded,
        })
    }

    /// Counts the fill against the plan, expert by expert.
    fn tally(&self, at: &Placed) -> Tally {
        let cards = &self.cards;
        let mut t = Tally::default();
        for (l, ids) in at.inst.expert_ids.iter().enumerate() {
            for (e, &o) in ids.iter().enumerate() {
                let got = self.loaded[l][e];
                match at.place(o) {
                    Place::Gpu(g) => {
                        t.planned += 1;
                        if cards.is_empty() || cards[e % cards.len()] != g {
                            t.off_home += 1;
                        }
                        match got {
                            Some(c) if c == g => t.same += 1,
                            Some(_) => t.moved += 1,
                            None => t.in_ram += 1,
                        }
                    }
                    _ => t.extra += usize::from(got.is_some()),
                }
            }
        }
        t
    }

    /// What Colibri's homes (`e % n`) and its warm start do otherwise than
    /// the plan.
    pub(super) fn warnings(
        &self,
        at: &Placed,
        list: &ColiList,
        allowance: &Allowance,
        warnings: &mut Vec<String>,
    ) {
        let Tally {
            planned,
            off_home,
            same,
            moved,
            in_ram,
            extra,
        } = self.tally(at);
        if off_home > 0 {
            warnings.push(self.home_warning(list, off_home, planned));
        }
        if allowance.tier_on && (same < planned || extra > 0) {
            let why = if extra > 0 {
                " where a card's allowance has room left (CUDA_EXPERT_GB is one value for every card)"
            } else {
                ""
            };
            warnings.push(format!(
                "warm start: Colibri will load {same} of the plan's {planned} GPU experts on the planned card, {moved} on another card, leave {in_ram} in RAM, and add {extra} experts the plan keeps off the GPU{why}"
            ));
        }
    }

    /// Colibri homes expert `e` on card `e % n`: the plan's GPU experts
    /// elsewhere, and the cards the role split takes out.
    fn home_warning(&self, list: &ColiList, off_home: usize, planned: usize) -> String {
        let cards = &self.cards;
        let dropped: Vec<usize> = list
            .expert_cards
            .iter()
            .copied()
            .filter(|g| !cards.contains(g))
            .collect();
        let why = if dropped.is_empty() {
            String::new()
        } else {
            format!(
                "; Colibri takes card(s) {} out of expert placement because COLI_PLACE gives them {} and another card is left",
                join(&dropped, ", "),
                COLI_ROLE_SPLIT.join("/")
            )
        };
        let homes = match cards.as_slice() {
            [card] => format!("puts every expert on card {card}"),
            _ => format!(
                "gives expert e the home card [{}][e % {}]",
                join(cards, ", "),
                cards.len()
            ),
        };
        format!(
            "COLI_GPUS: Colibri {homes} and cannot choose a card per expert: {off_home} of the plan's {planned} GPU experts are planned on another card than their home{why}"
        )
    }
}
