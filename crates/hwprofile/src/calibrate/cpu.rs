//! CPU GEMV bandwidth per NUMA node: the `gemv` kernel on the node's kept
//! threads (`NodeThreads`, one per physical core, each pinned to its CPU,
//! as `bench` runs a stage), over packed experts each in a slab of its own
//! from a pool bound to the node (as `apply` loads a resident), several
//! times the last-level cache so that they stream from RAM; and in the
//! same trials, the node's stage overhead: what a stage's GEMV of `top_k`
//! of those experts on the same threads takes beyond its bytes at the
//! trial's rate.

use super::experts::{inputs_for, ExpertSlab};
use super::{Run, MAX_GEMV_BYTES};
use crate::doc::{field, rate_text, round_rate, round_time, time_text, Quantity};
use crate::gemv::{NodeThreads, QuantizedInput};
use crate::spread::Spread;
use crate::system::{self, NodeFacts};
use residency_core::units::Bytes;
use residency_runtime::storage::HostPool;
use std::time::Instant;

impl Run<'_> {
    /// CPU GEMV bandwidth and stage overhead of profile node `i`, on
    /// `node`'s cores.
    pub(super) fn cpu_node(&mut self, i: usize, node: &NodeFacts) {
        let step = format!("numa[{i}]: CPU GEMV");
        self.tell(&step);
        let pool = HostPool::new(Some(node.sysfs_id), 0);
        let cache = node
            .core_cpus
            .first()
            .and_then(|&c| system::largest_cache_bytes(c))
            .unwrap_or(32 << 20);
        let target = self
            .span_bytes
            .unwrap_or((4 * cache).clamp(64 << 20, MAX_GEMV_BYTES))
            .min(system::available_bytes().unwrap_or(u64::MAX) / 4);
        let packing = self.source.cpu;
        let top_k = self.source.top_k.max(1);
        let result = self
            .source
            .expert_rows(packing, target, Some(&pool))
            .map_err(|e| e.to_string())
            .and_then(|rows| {
                let inputs = inputs_for(&rows);
                let experts = rows
                    .first()
                    .map_or(0, |m| m.rows / self.source.rows_of_width(m.cols));
                // The stacks only source the bytes: freed before the clock.
                let slabs = self.source.expert_slabs(&rows, 0..experts, &pool);
                drop(rows);
                let threads = NodeThreads::new(&node.core_cpus).map_err(|e| e.to_string())?;
                let timed = self.cpu_trials(&step, &slabs, &inputs, &threads)?;
                let what = (
                    Bytes(slabs.iter().map(ExpertSlab::bytes).sum()),
                    threads.threads(),
                );
                Ok((timed, what))
            });
        match result {
            Ok(((rate, overhead, stage_bytes), (bytes, threads))) => {
                let value = round_rate(rate.median);
                self.doc.profile.numa[i].gemv_bandwidth = value;
                let what = format!(
                    "{} {}, {bytes}, each expert in a slab of its own, {threads} kept thread{} pinned to node {}",
                    packing.name(),
                    self.source.label,
                    if threads == 1 { "" } else { "s" },
                    node.sysfs_id
                );
                self.record(
                    &field("numa", i, "gemv_bandwidth"),
                    rate_text(value),
                    &rate,
                    Quantity::BytesPerSecond,
                    what,
                );
                let time = round_time(overhead.median.max(0.0));
                self.doc.profile.numa[i].stage_overhead = time;
                let what = format!(
                    "each trial's stages, back to back, each the GEMVs of {top_k} other {} experts' projections ({}) on {threads} kept threads, less their bytes at that trial's gemv_bandwidth",
                    packing.name(),
                    Bytes(stage_bytes),
                );
                self.record(
                    &field("numa", i, "stage_overhead"),
                    time_text(time),
                    &overhead,
                    Quantity::Seconds,
                    what,
                );
            }
            Err(e) => self.notes.push(format!(
                "numa[{i}]: gemv_bandwidth and stage_overhead not measured: {e}"
            )),
        }
    }

    /// Trials of the node's GEMV over all `slabs` at once (its rate), each
    /// followed by stages of `top_k` of them (what a stage pays beyond its
    /// bytes at the rate of the same trial): the machine's rate drifts
    /// between seconds (other tenants share its memory), and each overhead
    /// is measured against the rate of its own moment, not one timed
    /// before it. Returns the rates, the overheads and a stage's bytes.
    fn cpu_trials(
        &self,
        step: &str,
        slabs: &[ExpertSlab],
        inputs: &[QuantizedInput],
        threads: &NodeThreads,
    ) -> Result<(Spread, Spread, u64), String> {
        let packing = self.source.cpu;
        let all: Vec<_> = slabs
            .iter()
            .flat_map(|e| e.gemvs(packing, inputs))
            .collect();
        let bytes: u64 = slabs.iter().map(ExpertSlab::bytes).sum();
        // Stage j runs experts j x top_k .. (j + 1) x top_k: consecutive
        // stages read different bytes, as a decoder's layers do, so none
        // of them is served from the cache. Each projection its own GEMV,
        // as bench runs an expert.
        let experts = self.source.top_k.clamp(1, slabs.len().max(1));
        let stages: Vec<Vec<_>> = slabs
            .chunks_exact(experts)
            .map(|stage| {
                stage
                    .iter()
                    .flat_map(|e| e.gemvs(packing, inputs))
                    .collect()
            })
            .collect();
        let stage_bytes = stages[0].iter().map(|(m, _)| m.bytes()).sum::<u64>();
        // Stages of half a pass's bytes after each pass: long enough that
        // their mean is steady, close enough that the rate is their own.
        let stages_a_pass = (bytes / stage_bytes.max(1)).max(1) as usize;
        let mut y = vec![0f32; all.iter().map(|(m, _)| m.rows).sum()];
        let mut overheads = Vec::new();
        let (rates, _) = self.repeat(step, self.share, |passes| {
            let started = Instant::now();
            for _ in 0..passes {
                threads.gemv(&all, &mut y);
                std::hint::black_box(&y);
            }
            let rate = (bytes * passes as u64) as f64 / started.elapsed().as_secs_f64();
            let count = (passes * stages_a_pass / 2).max(1);
            let started = Instant::now();
            for j in 0..count {
                threads.gemv(&stages[j % stages.len()], &mut y);
                std::hint::black_box(&y);
            }
            let stage = started.elapsed().as_secs_f64() / count as f64;
            overheads.push(stage - stage_bytes as f64 / rate);
            Ok(rate)
        })?;
        // The warm-up trial's overhead is not one of the trials'.
        let overheads = Spread::of(&overheads[1..]).expect("at least one trial");
        Ok((rates, overheads, stage_bytes))
    }
}
