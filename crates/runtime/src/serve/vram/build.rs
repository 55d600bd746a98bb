//! How a VRAM tier is built for each policy: one cache knowing the
//! experts (or the future, for `belady`), one a MoE layer for `dynamic`,
//! or the card's knapsack for `plan` and `replan`.

use super::{Cache, CardKnowledge, CopyState, Decider, VramPolicy, VramResidency};
use crate::serve::heat::LiveHeat;
use crate::serve::replan::{ReplanParams, Replanner};
use residency_policy::online::{LayerShape, OnlineAllocator, OnlineParams};
use residency_policy::{
    build, Knowledge, ObjectIndex, PolicyError, PolicyKind, PolicyParams, PolicySetup, NEVER,
};
use std::collections::VecDeque;

impl VramResidency {
    /// A tier of `capacity_bytes` over experts of `sizes_bytes`, resident by
    /// `policy`, which knows nothing of the experts (`lfru`, `lru`, ...).
    pub fn new(
        policy: PolicyKind,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        params: PolicyParams,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, PolicyError> {
        let knowledge = (Knowledge::default(), Vec::new());
        VramResidency::knowing(
            policy,
            capacity_bytes,
            sizes_bytes,
            knowledge,
            params,
            allowance_bytes_per_token,
        )
    }

    /// A tier of one cache under `policy`, with `knowledge` of the experts
    /// and `next_access` of every tick (`belady`'s; empty for the others).
    /// Whatever the policy holds from the start (`plan`'s knapsack) is
    /// queued for [`VramResidency::startup`].
    fn knowing(
        policy: PolicyKind,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        (knowledge, next_access): (Knowledge, Vec<u64>),
        params: PolicyParams,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, PolicyError> {
        let n = sizes_bytes.len();
        let setup = PolicySetup {
            capacity_bytes,
            objects: n,
            knowledge,
            params,
        };
        let cache = Cache {
            policy: build(policy, &setup)?,
            first: 0,
        };
        let held: Vec<ObjectIndex> = (0..n as ObjectIndex)
            .filter(|&o| cache.policy.contains(o))
            .collect();
        let decider = Decider::Caches {
            caches: vec![cache],
            cache_objects: n.max(1),
            allocator: None,
            next_access,
        };
        let mut tier = VramResidency::of(
            decider,
            capacity_bytes,
            sizes_bytes,
            allowance_bytes_per_token,
        );
        tier.queue_all(&held);
        Ok(tier)
    }

    /// `policy`'s tier of `capacity_bytes` over experts of `sizes_bytes`
    /// in MoE layers `layers`, knowing `knowledge`; `dynamic`: one cache a
    /// layer (each resident by a policy that resizes), from the uniform
    /// split of `capacity_bytes` that `online` then moves between layers
    /// as their curves ask, as the RAM tier's `dynamic` does.
    pub fn of_policy(
        policy: VramPolicy,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        layers: Vec<LayerShape>,
        (params, dynamic): (PolicyParams, Option<OnlineParams>),
        knowledge: &CardKnowledge,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, String> {
        let failed = |e: PolicyError| format!("--vram-policy {policy}: {e}");
        if let Some(online) = dynamic {
            let Some(kind) = policy.cache_policy().filter(|k| k.resizes()) else {
                return Err(format!(
                    "--vram-policy {policy}: per-layer budgets that move need {} inside each layer",
                    PolicyKind::resizing_names()
                ));
            };
            return VramResidency::per_layer(
                kind,
                capacity_bytes,
                sizes_bytes,
                layers,
                params,
                online,
                allowance_bytes_per_token,
            );
        }
        let Some(kind) = policy.cache_policy() else {
            return Ok(VramResidency::planned(
                capacity_bytes,
                sizes_bytes,
                &layers,
                knowledge,
                allowance_bytes_per_token,
            ));
        };
        let n = sizes_bytes.len();
        let mut known = Knowledge::default();
        let mut params = params;
        if matches!(kind, PolicyKind::Frequency | PolicyKind::Cost) {
            known.prior_rate = knowledge.prior_rate();
        }
        if kind == PolicyKind::Cost {
            known.miss_seconds = knowledge.cpu_seconds.clone();
            // The card computes beside the CPU: a hit costs the token nothing.
            known.hit_seconds = vec![0.0; n];
            params.move_seconds_per_byte = knowledge.upload_seconds_per_byte();
        }
        if kind == PolicyKind::Plan {
            known.pinned = knowledge.knapsack(&sizes_bytes, capacity_bytes);
            known.sizes_bytes = sizes_bytes.clone();
        }
        let next_access = if kind == PolicyKind::Belady {
            next_accesses(&knowledge.future)
        } else {
            Vec::new()
        };
        VramResidency::knowing(
            kind,
            capacity_bytes,
            sizes_bytes,
            (known, next_access),
            params,
            allowance_bytes_per_token,
        )
        .map_err(failed)
    }

    /// `replan` on the card: the training knapsack queued for
    /// [`VramResidency::startup`], then re-planned from live heat.
    fn planned(
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        layers: &[LayerShape],
        knowledge: &CardKnowledge,
        allowance_bytes_per_token: u64,
    ) -> VramResidency {
        let pins = knowledge.knapsack(&sizes_bytes, capacity_bytes);
        let params = ReplanParams {
            bytes_per_token: allowance_bytes_per_token,
            ..knowledge.replan.clone()
        };
        let replanner = Replanner::new(
            params,
            capacity_bytes,
            sizes_bytes.clone(),
            knowledge.cpu_seconds.clone(),
            knowledge.link.clone(),
            &pins,
        );
        // Without layers (a tier over plain objects), one layer of all.
        let per_layer: Vec<usize> = match layers {
            [] => vec![sizes_bytes.len()],
            _ => layers.iter().map(|l| l.experts).collect(),
        };
        let experts = per_layer[0].max(1);
        let decider = Decider::Planner {
            replanner: Box::new(replanner),
            heat: LiveHeat::new(&per_layer, knowledge.heat_halve_every_tokens),
            experts,
        };
        let mut tier = VramResidency::of(
            decider,
            capacity_bytes,
            sizes_bytes,
            allowance_bytes_per_token,
        );
        tier.queue_all(&pins);
        tier
    }

    /// `dynamic` on the card: one cache a layer (`layers[l]`, its experts
    /// `l * experts..`), each resident by `policy` (one that resizes), from
    /// the uniform split of `capacity_bytes` that `online` then moves
    /// between layers as their curves ask, as the RAM tier's `dynamic`
    /// does.
    pub fn per_layer(
        policy: PolicyKind,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        layers: Vec<LayerShape>,
        params: PolicyParams,
        online: OnlineParams,
        allowance_bytes_per_token: u64,
    ) -> Result<VramResidency, String> {
        if !policy.resizes() {
            return Err(format!(
                "--vram-policy {}: per-layer budgets that move need {} inside each layer",
                policy.name(),
                PolicyKind::resizing_names()
            ));
        }
        let experts = layers.first().map_or(0, |l| l.experts);
        let allocator =
            OnlineAllocator::new(online, layers, capacity_bytes).map_err(|e| e.to_string())?;
        let caches = allocator
            .capacities_bytes()
            .iter()
            .enumerate()
            .map(|(l, &bytes)| cache(policy, bytes, l * experts, experts, &params))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let decider = Decider::Caches {
            caches,
            cache_objects: experts.max(1),
            allocator: Some(allocator),
            next_access: Vec::new(),
        };
        Ok(VramResidency::of(
            decider,
            capacity_bytes,
            sizes_bytes,
            allowance_bytes_per_token,
        ))
    }

    fn of(
        decider: Decider,
        capacity_bytes: u64,
        sizes_bytes: Vec<u64>,
        allowance_bytes_per_token: u64,
    ) -> VramResidency {
        VramResidency {
            decider,
            tokens: 0,
            copies: vec![CopyState::None; sizes_bytes.len()],
            largest_bytes: sizes_bytes.iter().copied().max().unwrap_or(0),
            sizes_bytes,
            queue: VecDeque::new(),
            capacity_bytes,
            device_bytes: 0,
            allowance_bytes_per_token,
            credit_bytes: 0,
            ticks: 0,
            evicted: Vec::new(),
        }
    }
}

/// For each position of `sequence`, the position of the next request for
/// the same object, or [`NEVER`].
fn next_accesses(sequence: &[ObjectIndex]) -> Vec<u64> {
    let mut next = vec![NEVER; sequence.len()];
    let mut seen: std::collections::HashMap<ObjectIndex, u64> = Default::default();
    for (i, &o) in sequence.iter().enumerate().rev() {
        if let Some(&j) = seen.get(&o) {
            next[i] = j;
        }
        seen.insert(o, i as u64);
    }
    next
}

/// A cache of `policy` over `objects` experts from `first` on.
fn cache(
    policy: PolicyKind,
    capacity_bytes: u64,
    first: usize,
    objects: usize,
    params: &PolicyParams,
) -> Result<Cache, PolicyError> {
    let setup = PolicySetup {
        capacity_bytes,
        objects,
        knowledge: Knowledge::default(),
        params: params.clone(),
    };
    Ok(Cache {
        policy: build(policy, &setup)?,
        first: first as ObjectIndex,
    })
}
