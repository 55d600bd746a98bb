//! What a llama.cpp user would type instead of a plan, as placements of the
//! same instance, so that the one cost model prices the plan against them
//! at the same VRAM, and the llama.cpp export never writes a layer choice
//! slower than one of them:
//! - `--n-cpu-moe N`: the routed experts of the first N transformer layers
//!   on the CPU, everything else on the cards; N the fewest that fit;
//! - `-ot exps=CPU`: every routed expert on the CPU, the trunk on the cards;
//! - a `--fit`-like greedy: the trunk on the cards first, then whole layers
//!   of experts in layer order while each fits, the rest on the CPU.
//!
//! The cards hold layers as llama.cpp's default `--tensor-split` does:
//! contiguous runs of transformer layers in proportion to each card's
//! capacity; layerless trunk (the head) goes with the last layer. Experts
//! on the CPU fill the RAM nodes in order, then stream from `disk:0` (a CPU
//! buffer maps the file).

use residency_core::cost::{Instance, Place};
use residency_core::Result;

residency_core::named! {
    /// Which of llama.cpp's ways a strategy is, for callers that pick one
    /// (`residency bench --strategies`).
    pub enum LlamaCppStrategy("llama.cpp strategy") {
        /// `--n-cpu-moe N`.
        NCpuMoe = "n-cpu-moe",
        /// `-ot exps=CPU`.
        ExpsCpu = "exps-cpu",
        /// The `--fit`-like greedy.
        Fit = "fit",
    }
}

/// One strategy: which it is, the flags that give it and its placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Strategy {
    pub kind: LlamaCppStrategy,
    pub flags: String,
    pub placement: Vec<usize>,
}

/// The strategies that fit the instance's cards (none without a card).
pub fn llama_cpp_strategies(inst: &Instance) -> Result<Vec<Strategy>> {
    if inst.resources.gpus() == 0 {
        return Ok(Vec::new());
    }
    let layers = Layers::of(inst)?;
    let mut out = Vec::new();
    // The fewest first layers whose experts must leave the cards.
    let cuts = std::iter::once(0).chain(layers.moe.iter().map(|&l| l + 1));
    if let Some((n, placement)) = cuts
        .filter_map(|n| Some((n, layers.place(inst, |l| l < n)?)))
        .next()
    {
        out.push(Strategy {
            kind: LlamaCppStrategy::NCpuMoe,
            flags: format!("-ngl 999 --n-cpu-moe {n}"),
            placement,
        });
    }
    if let Some(placement) = layers.place(inst, |_| true) {
        out.push(Strategy {
            kind: LlamaCppStrategy::ExpsCpu,
            flags: "-ngl 999 -ot exps=CPU".into(),
            placement,
        });
    }
    if let Some(placement) = layers.fit(inst) {
        out.push(Strategy {
            kind: LlamaCppStrategy::Fit,
            flags: "fit: trunk, then whole layers in order (like --fit)".into(),
            placement,
        });
    }
    Ok(out)
}

/// The transformer layers and the card each runs on.
struct Layers {
    /// Transformer layer of each MoE ordinal.
    moe: Vec<usize>,
    /// Card of each transformer layer.
    card: Vec<usize>,
}

impl Layers {
    fn of(inst: &Instance) -> Result<Layers> {
        let moe = inst.moe_layers()?;
        let count = inst
            .trunk()
            .filter_map(|(_, _, l)| l)
            .chain(moe.iter().copied())
            .max()
            .map_or(0, |l| l + 1);
        let r = &inst.resources;
        let total: u64 = r.gpu_capacity_bytes.iter().sum::<u64>().max(1);
        // Layer l runs on the card whose share of the capacity covers the
        // layer's position in the stack.
        let mut bounds = Vec::new();
        let mut cumulative = 0u64;
        for &c in &r.gpu_capacity_bytes {
            cumulative += c;
            bounds.push(cumulative as f64 / total as f64);
        }
        let card = (0..count)
            .map(|l| {
                let at = (l as f64 + 0.5) / count.max(1) as f64;
                bounds
                    .iter()
                    .position(|&b| at <= b)
                    .unwrap_or(bounds.len() - 1)
            })
            .collect();
        Ok(Layers { moe, card })
    }

    fn card_of(&self, layer: Option<usize>) -> usize {
        match layer {
            Some(l) => self.card[l],
            None => self.card.last().copied().unwrap_or(0),
        }
    }

    /// The trunk on its layers' cards, and each MoE ordinal's experts on
    /// the CPU where `on_cpu(layer)`, else on the layer's card; `None` when
    /// a card or the RAM overflows.
    fn place(&self, inst: &Instance, on_cpu: impl Fn(usize) -> bool) -> Option<Vec<usize>> {
        let mut placement = self.trunk_on_cards(inst);
        let mut cpu = CpuFill::new(inst);
        for (m, ids) in inst.expert_ids.iter().enumerate() {
            let layer = self.moe[m];
            for &o in ids {
                placement[o] = if on_cpu(layer) {
                    cpu.take(inst, o)?
                } else {
                    inst.place_index(Place::Gpu(self.card[layer]))
                };
            }
        }
        inst.check_feasible(&placement).ok().map(|()| placement)
    }

    /// The trunk on the cards, then whole MoE layers in order while their
    /// card has room.
    fn fit(&self, inst: &Instance) -> Option<Vec<usize>> {
        let mut free = inst.resources.gpu_capacity_bytes.clone();
        for (o, _, layer) in inst.trunk() {
            let g = self.card_of(layer);
            free[g] = free[g].checked_sub(inst.objects[o].gpu_bytes)?;
        }
        let on_gpu: Vec<bool> = self
            .moe
            .iter()
            .enumerate()
            .map(|(m, &layer)| {
                let g = self.card[layer];
                let bytes: u64 = inst.expert_ids[m]
                    .iter()
                    .map(|&o| inst.objects[o].gpu_bytes)
                    .sum();
                let fits = bytes <= free[g];
                if fits {
                    free[g] -= bytes;
                }
                fits
            })
            .collect();
        self.place(inst, |layer| {
            let m = self
                .moe
                .iter()
                .position(|&l| l == layer)
                .expect("a MoE layer");
            !on_gpu[m]
        })
    }

    /// A placement with every trunk component on its layer's card and KV
    /// groups recomputed (llama.cpp keeps its own KV cache); experts still
    /// to place (`usize::MAX`).
    fn trunk_on_cards(&self, inst: &Instance) -> Vec<usize> {
        let mut placement = vec![usize::MAX; inst.objects.len()];
        for (o, _, layer) in inst.trunk() {
            placement[o] = inst.place_index(Place::Gpu(self.card_of(layer)));
        }
        for &o in &inst.kv_ids {
            placement[o] = inst.place_index(Place::Recompute);
        }
        placement
    }
}

/// Experts on the CPU: the RAM nodes in order while they have room, then
/// the first drive.
struct CpuFill {
    free: Vec<u64>,
}

impl CpuFill {
    fn new(inst: &Instance) -> CpuFill {
        CpuFill {
            free: inst.resources.ram_capacity_bytes.clone(),
        }
    }

    fn take(&mut self, inst: &Instance, o: usize) -> Option<usize> {
        let bytes = inst.objects[o].ram_bytes;
        if let Some(n) = self.free.iter().position(|&f| f >= bytes) {
            self.free[n] -= bytes;
            return Some(inst.place_index(Place::Ram(n)));
        }
        (inst.resources.drives() > 0).then(|| inst.place_index(Place::Disk(0)))
    }
}
