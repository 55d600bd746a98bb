//! Per CUDA GPU: resident GEMV bandwidth (the PTX kernel over packed
//! experts in device memory, checked against the CPU kernel first), pinned
//! upload bandwidth, and what a stage pays beyond its bytes, timed as
//! `bench` runs a stage: the sync overhead (a stage of one one-row GEMV)
//! and the overhead of each GEMV in a stage of `top_k` experts.

use super::experts::inputs_for;
use super::{Run, GPU_STAGE_SPAN_BYTES, MAX_GEMV_BYTES, UPLOAD_BYTES};
use crate::cuda_bench::{resident_gemv, stage_gemvs, upload};
use crate::doc::{field, rate_text, round_rate, round_time, time_text, Quantity};
use crate::gemv::PackedRows;
use residency_core::units::Bytes;
use residency_runtime::gpu::gemv::CudaGemv;
use std::time::Duration;

impl Run<'_> {
    /// GEMV, upload and sync of profile GPU `g`, on CUDA device `g`.
    pub(super) fn gpu(&mut self, g: usize) {
        let profile_name = self.doc.profile.gpus[g].name.clone();
        let bench = CudaGemv::open(g).and_then(|b| {
            let name = b.name()?;
            let (a, b_) = (name.to_lowercase(), profile_name.to_lowercase());
            if a.contains(&b_) || b_.contains(&a) {
                Ok(b)
            } else {
                Err(format!("CUDA device {g} is `{name}`, not `{profile_name}`"))
            }
        });
        let bench = match bench {
            Ok(b) => b,
            Err(e) => {
                self.notes
                    .push(format!("gpus[{g}] ({profile_name}): not measured: {e}"));
                return;
            }
        };
        let quarter = self.share / 4;
        if let Err(e) = self.gpu_gemv(g, &bench, self.share / 2) {
            self.notes
                .push(format!("gpus[{g}]: gemv_bandwidth not measured: {e}"));
        }
        let upload = upload(&bench, UPLOAD_BYTES).and_then(|mut u| {
            let bytes = u.bytes() as f64;
            let step = format!("gpus[{g}]: upload");
            self.repeat(&step, quarter, |copies| {
                let seconds: f64 = (0..copies)
                    .map(|_| u.trial())
                    .sum::<Result<f64, String>>()?;
                Ok(bytes * copies as f64 / seconds)
            })
        });
        match upload {
            Ok((spread, _)) => {
                let rate = round_rate(spread.median);
                self.doc.profile.gpus[g].upload_bandwidth = rate;
                let what = format!(
                    "cuMemcpyHtoD of {} from page-locked memory",
                    Bytes(UPLOAD_BYTES as u64)
                );
                self.record(
                    &field("gpus", g, "upload_bandwidth"),
                    rate_text(rate),
                    &spread,
                    Quantity::BytesPerSecond,
                    what,
                );
            }
            Err(e) => self
                .notes
                .push(format!("gpus[{g}]: upload_bandwidth not measured: {e}")),
        }
        if let Err(e) = self.gpu_stage(g, &bench, quarter) {
            self.notes.push(format!(
                "gpus[{g}]: sync_overhead and gemv_overhead not measured: {e}"
            ));
        }
    }

    /// What a stage costs on GPU `g` beyond its bytes, timed as `bench`
    /// runs a stage (an event, one batched launch, an event, a wait):
    /// `sync_overhead` is a stage of one one-row GEMV; `gemv_overhead` is,
    /// per GEMV, what a stage of `top_k` experts' projections (each its own
    /// GEMV) takes beyond that and its bytes at `gemv_bandwidth`.
    fn gpu_stage(&mut self, g: usize, bench: &CudaGemv, budget: Duration) -> Result<(), String> {
        let packing = self.source.gpu;
        let cols = packing.group.max(packing.chunk_features());
        let mut tiny = PackedRows::zeroed(packing, cols, 1, None);
        tiny.fill_generated(3);
        let one = stage_gemvs(
            bench,
            std::slice::from_ref(&tiny),
            &inputs_for(std::slice::from_ref(&tiny)),
            &[vec![(0, 0..1)]],
        )?;
        let step = format!("gpus[{g}]: sync overhead");
        let (spread, stages) = self.repeat(&step, budget / 2, |stages| one.trial(stages))?;
        let sync = round_time(spread.median);
        self.doc.profile.gpus[g].sync_overhead = sync;
        let what = format!(
            "mean of {stages} stages a trial, each an event, a batched launch of one one-row {} GEMV, an event and a wait for it",
            packing.name()
        );
        self.record(
            &field("gpus", g, "sync_overhead"),
            time_text(sync),
            &spread,
            Quantity::Seconds,
            what,
        );
        let experts = self.source.top_k.max(1);
        // Consecutive stages read different experts, as a decoder's layers
        // do: a stage's few MB repeated would be served from the card's L2
        // (50 MB on an H100 or H200), faster than `gemv_bandwidth` says.
        let stage_bytes = experts as u64 * self.source.expert_bytes(packing);
        let span = self.span_bytes.unwrap_or(GPU_STAGE_SPAN_BYTES);
        let sets = (span / stage_bytes).max(1) as usize;
        let rows = self
            .source
            .expert_rows(packing, sets as u64 * stage_bytes, None)
            .map_err(|e| e.to_string())?;
        let widths: Vec<usize> = rows.iter().map(|m| m.cols).collect();
        let parts: Vec<_> = (0..sets)
            .map(|j| {
                self.source
                    .stage_parts(&widths, j * experts..(j + 1) * experts)
            })
            .collect();
        let stage = stage_gemvs(bench, &rows, &inputs_for(&rows), &parts)?;
        let bytes_per_s = self.doc.profile.gpus[g].gemv_bandwidth.0;
        let (bytes, gemvs) = (stage.bytes() as f64, stage.gemvs() as f64);
        let step = format!("gpus[{g}]: GEMV overhead");
        let (spread, stages) = self.repeat(&step, budget / 2, |stages| {
            Ok((stage.trial(stages)? - sync.0 - bytes / bytes_per_s) / gemvs)
        })?;
        let time = round_time(spread.median.max(0.0));
        self.doc.profile.gpus[g].gemv_overhead = time;
        let what = format!(
            "mean of {stages} stages a trial, each {experts} other experts' {gemvs} GEMVs ({}) in one launch, {sets} sets in turn, less sync_overhead and their bytes at gemv_bandwidth, per GEMV",
            Bytes(stage.bytes())
        );
        self.record(
            &field("gpus", g, "gemv_overhead"),
            time_text(time),
            &spread,
            Quantity::Seconds,
            what,
        );
        Ok(())
    }

    /// Resident GEMV bandwidth of GPU `g`, after checking the kernel's
    /// result against the CPU's on the same bytes.
    fn gpu_gemv(&mut self, g: usize, bench: &CudaGemv, budget: Duration) -> Result<(), String> {
        let packing = self.source.gpu;
        if self.gpu_experts.is_none() {
            let target = self
                .span_bytes
                .unwrap_or(MAX_GEMV_BYTES)
                .min(bench.free_bytes()? / 4);
            let rows = self
                .source
                .expert_rows(packing, target, None)
                .map_err(|e| e.to_string())?;
            if let Some(why) = rows.iter().find_map(|m| packing.unfit_for(m.cols)) {
                return Err(format!(
                    "the GPU kernel cannot run {}: {why}",
                    packing.name()
                ));
            }
            let inputs = inputs_for(&rows);
            self.gpu_experts = Some((rows, inputs));
        }
        let (rows, inputs) = self.gpu_experts.as_ref().expect("made above");
        let resident = resident_gemv(bench, rows, inputs)?;
        resident.trial(1)?;
        for (m, (matrix, x)) in rows.iter().zip(inputs).enumerate() {
            let sample = matrix.rows.min(256);
            let gpu = resident.y(m, sample)?;
            let cpu: Vec<f32> = (0..sample).map(|r| matrix.row_dot(x, r)).collect();
            let scale = cpu
                .iter()
                .fold(0f32, |a, v| a.max(v.abs()))
                .max(f32::MIN_POSITIVE);
            if let Some(r) = (0..sample).find(|&r| (gpu[r] - cpu[r]).abs() > 1e-3 * scale) {
                return Err(format!(
                    "the PTX kernel's row {r} is {} where the CPU kernel's is {}; a kernel bug, please report it",
                    gpu[r], cpu[r]
                ));
            }
        }
        let bytes = resident.bytes() as f64;
        let step = format!("gpus[{g}]: resident GEMV");
        let (spread, passes) = self.repeat(&step, budget, |passes| {
            Ok(bytes * passes as f64 / resident.trial(passes)?)
        })?;
        let rate = round_rate(spread.median);
        self.doc.profile.gpus[g].gemv_bandwidth = rate;
        let what = format!(
            "PTX {} GEMV over {} of {} in device memory, {passes} passes a trial, timed with events",
            packing.name(),
            Bytes(resident.bytes()),
            self.source.label
        );
        self.record(
            &field("gpus", g, "gemv_bandwidth"),
            rate_text(rate),
            &spread,
            Quantity::BytesPerSecond,
            what,
        );
        Ok(())
    }
}
