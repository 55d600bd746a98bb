//! CPU GEMV bandwidth per NUMA node: the `gemv` kernel on the node's kept
//! threads (`NodeThreads`, one per physical core, each pinned to its CPU,
//! as `bench` runs a stage), over packed experts each in a slab of its own
//! from a pool bound to the node (as `apply` loads a resident), several
//! times the last-level cache so that they stream from RAM. Then the
//! node's stage overhead: what a stage's GEMV of `top_k` of those experts
//! on the same threads takes beyond its bytes at that rate.

use super::experts::{inputs_for, ExpertSlab};
use super::{Run, MAX_GEMV_BYTES};
use crate::doc::{field, rate_text, round_rate, round_time, time_text, Quantity};
use crate::gemv::{NodeThreads, QuantizedInput};
use crate::system::{self, NodeFacts};
use residency_core::units::Bytes;
use residency_runtime::storage::HostPool;
use std::time::Instant;

impl Run<'_> {
    /// CPU GEMV bandwidth of profile node `i`, on `node`'s cores.
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
                let bytes: u64 = slabs.iter().map(ExpertSlab::bytes).sum();
                let threads = NodeThreads::new(&node.core_cpus).map_err(|e| e.to_string())?;
                let work: Vec<_> = slabs
                    .iter()
                    .flat_map(|e| e.gemvs(packing, &inputs))
                    .collect();
                let mut y = vec![0f32; work.iter().map(|(m, _)| m.rows).sum()];
                let (spread, _) = self.repeat(&step, self.share, |passes| {
                    let started = Instant::now();
                    for _ in 0..passes {
                        threads.gemv(&work, &mut y);
                        std::hint::black_box(&y);
                    }
                    Ok((bytes * passes as u64) as f64 / started.elapsed().as_secs_f64())
                })?;
                drop(work);
                Ok((spread, bytes, slabs, inputs, threads))
            });
        match result {
            Ok((spread, bytes, slabs, inputs, node_threads)) => {
                let rate = round_rate(spread.median);
                self.doc.profile.numa[i].gemv_bandwidth = rate;
                let threads = node_threads.threads();
                let what = format!(
                    "{} {}, {}, each expert in a slab of its own, {threads} kept thread{} pinned to node {}",
                    packing.name(),
                    self.source.label,
                    Bytes(bytes),
                    if threads == 1 { "" } else { "s" },
                    node.sysfs_id
                );
                let shown = rate_text(rate);
                self.record(
                    &field("numa", i, "gemv_bandwidth"),
                    shown,
                    &spread,
                    Quantity::BytesPerSecond,
                    what,
                );
                if let Err(e) = self.cpu_stage_overhead(i, &slabs, &inputs, &node_threads, rate.0) {
                    self.notes
                        .push(format!("numa[{i}]: stage_overhead not measured: {e}"));
                }
            }
            Err(e) => self
                .notes
                .push(format!("numa[{i}]: CPU GEMV not measured: {e}")),
        }
    }
}

impl Run<'_> {
    /// `stage_overhead` of profile node `i`: the mean over a trial's
    /// stages, back to back, of (seconds of one `NodeThreads::gemv` over
    /// `top_k` experts) - their bytes / `bytes_per_s`.
    fn cpu_stage_overhead(
        &mut self,
        i: usize,
        slabs: &[ExpertSlab],
        inputs: &[QuantizedInput],
        threads: &NodeThreads,
        bytes_per_s: f64,
    ) -> Result<(), String> {
        let packing = self.source.cpu;
        // Stage j runs experts j x top_k .. (j + 1) x top_k (fewer where
        // there are fewer): consecutive stages read different bytes, as a
        // decoder's layers do, so none of them is served from the cache.
        // Each projection its own GEMV, as bench runs an expert.
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
        let count = stages.len();
        let bytes = stages[0].iter().map(|(m, _)| m.bytes()).sum::<u64>();
        let mut y = vec![0f32; stages[0].iter().map(|(m, _)| m.rows).sum()];
        let step = format!("numa[{i}]: stage overhead");
        let (spread, trial_stages) = self.repeat(&step, self.share / 4, |n| {
            let started = Instant::now();
            for j in 0..n {
                threads.gemv(&stages[j % count], &mut y);
                std::hint::black_box(&y);
            }
            Ok(started.elapsed().as_secs_f64() / n as f64 - bytes as f64 / bytes_per_s)
        })?;
        let time = round_time(spread.median.max(0.0));
        self.doc.profile.numa[i].stage_overhead = time;
        let what = format!(
            "mean of {trial_stages} stages a trial, back to back, each the GEMVs of {experts} other {} experts' projections ({}) on {} kept threads, less their bytes at gemv_bandwidth",
            packing.name(),
            Bytes(bytes),
            threads.threads()
        );
        self.record(
            &field("numa", i, "stage_overhead"),
            time_text(time),
            &spread,
            Quantity::Seconds,
            what,
        );
        Ok(())
    }
}
