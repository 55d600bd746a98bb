//! CPU GEMV bandwidth per NUMA node: the `gemv` kernel on one thread per
//! physical core of the node, each pinned to its CPU, over packed experts
//! in memory bound to the node, several times the last-level cache so that
//! they stream from RAM. Then the node's stage overhead: what a stage's
//! GEMV of `top_k` experts on the node's kept threads (`NodeThreads`, as
//! `bench` runs a stage) takes beyond its bytes at that rate, after the
//! threads have idled as they do while GPUs run the stages between.

use super::experts::inputs_for;
use super::{Run, MAX_GEMV_BYTES};
use crate::doc::{field, rate_text, round_rate, round_time, time_text};
use crate::gemv::{NodeThreads, PackedRows, QuantizedInput};
use crate::system::{self, NodeFacts};
use residency_core::units::Bytes;
use residency_runtime::storage::HostPool;
use std::time::{Duration, Instant};

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
        let target = (4 * cache)
            .clamp(64 << 20, MAX_GEMV_BYTES)
            .min(system::available_bytes().unwrap_or(u64::MAX) / 4);
        let packing = self.source.cpu;
        let result = self
            .source
            .expert_rows(packing, target, Some(&pool))
            .map_err(|e| e.to_string())
            .and_then(|rows| {
                let inputs = inputs_for(&rows);
                let bytes: u64 = rows.iter().map(PackedRows::bytes).sum();
                let cpus = &node.core_cpus;
                let (spread, _) = self.repeat(&step, self.share, |passes| {
                    let started = Instant::now();
                    for _ in 0..passes {
                        std::hint::black_box(parallel_gemv(&rows, &inputs, cpus));
                    }
                    Ok((bytes * passes as u64) as f64 / started.elapsed().as_secs_f64())
                })?;
                Ok((spread, bytes))
            });
        match result {
            Ok((spread, bytes)) => {
                let rate = round_rate(spread.median);
                self.doc.profile.numa[i].gemv_bandwidth = rate;
                let threads = node.core_cpus.len();
                let what = format!(
                    "{} {}, {}, {threads} thread{} pinned to node {}",
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
                    true,
                    what,
                );
                if let Err(e) = self.cpu_stage_overhead(i, node, &pool, rate.0) {
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
    /// stages of (seconds of one `NodeThreads::gemv` over `top_k` experts,
    /// started after `IDLE` without work) - their bytes / `bytes_per_s`.
    fn cpu_stage_overhead(
        &mut self,
        i: usize,
        node: &NodeFacts,
        pool: &std::sync::Arc<HostPool>,
        bytes_per_s: f64,
    ) -> Result<(), String> {
        const IDLE: Duration = Duration::from_millis(1);
        let packing = self.source.cpu;
        let experts = self.source.top_k.max(1) as u64;
        let rows = self
            .source
            .expert_rows(
                packing,
                experts * self.source.expert_bytes(packing),
                Some(pool),
            )
            .map_err(|e| e.to_string())?;
        let inputs = inputs_for(&rows);
        let bytes: u64 = rows.iter().map(PackedRows::bytes).sum();
        let threads = NodeThreads::new(&node.core_cpus).map_err(|e| e.to_string())?;
        let work: Vec<_> = rows.iter().map(|m| m.view()).zip(&inputs).collect();
        let mut y = vec![0f32; rows.iter().map(|m| m.rows).sum()];
        let step = format!("numa[{i}]: stage overhead");
        let (spread, stages) = self.repeat(&step, self.share / 4, |stages| {
            let mut seconds = 0.0;
            for _ in 0..stages {
                std::thread::sleep(IDLE);
                let started = Instant::now();
                threads.gemv(&work, &mut y);
                seconds += started.elapsed().as_secs_f64();
            }
            Ok(seconds / stages as f64 - bytes as f64 / bytes_per_s)
        })?;
        let time = round_time(spread.median.max(0.0));
        self.doc.profile.numa[i].stage_overhead = time;
        let what = format!(
            "mean of {stages} stages a trial, each a GEMV of {experts} {} experts ({}) on {} kept threads after {} us idle, less their bytes at gemv_bandwidth",
            packing.name(),
            Bytes(bytes),
            threads.threads(),
            IDLE.as_micros()
        );
        self.record(
            &field("numa", i, "stage_overhead"),
            time_text(time),
            &spread,
            false,
            what,
        );
        Ok(())
    }
}

/// `y = W x` for every matrix, the rows of each split evenly over one
/// thread per CPU of `cpus`, each pinned to its CPU; the sum of `y`.
fn parallel_gemv(rows: &[PackedRows], inputs: &[QuantizedInput], cpus: &[u32]) -> f64 {
    let threads = cpus.len().max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let cpu = cpus.get(t).copied();
                scope.spawn(move || {
                    if let Some(cpu) = cpu {
                        // Unpinned where refused: still a thread of the run.
                        system::pin_to_cpu(cpu);
                    }
                    rows.iter()
                        .zip(inputs)
                        .map(|(m, x)| {
                            let share = m.rows * t / threads..m.rows * (t + 1) / threads;
                            m.sum_rows(x, share)
                        })
                        .sum::<f64>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a GEMV thread"))
            .sum()
    })
}
