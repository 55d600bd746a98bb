//! The report of a run: measured per token beside the cost model's
//! `evaluate` of the placement, per stage kind and resource.

use super::stage::{kind_index, Tally, KINDS};
use super::{BenchOptions, BenchReport, Measured};
use residency_core::cost::{Evaluation, Instance, Place};

/// Bytes the cost model streams per token, by stage kind, GPU, CPU node
/// and drive.
struct StreamedBytes {
    stage_bytes: [f64; 3],
    gpu_bytes: Vec<f64>,
    cpu_bytes: Vec<f64>,
    drive_bytes: Vec<f64>,
}

/// Use rate x bytes of every object on a GPU, in RAM or on a disk (a
/// disk's read by its drive and its node's CPU).
fn streamed_bytes(inst: &Instance, placement: &[usize]) -> StreamedBytes {
    let r = &inst.resources;
    let mut stage_bytes = [0f64; 3];
    let mut gpu_bytes = vec![0f64; r.gpus()];
    let mut cpu_bytes = vec![0f64; r.numa_nodes()];
    let mut drive_bytes = vec![0f64; r.drives()];
    for (o, object) in inst.objects.iter().enumerate() {
        let kind = kind_index(inst.stages[object.stage].kind);
        match inst.places[placement[o]] {
            Place::Gpu(g) if !object.is_kv() => {
                let b = object.use_rate * object.gpu_bytes as f64;
                stage_bytes[kind] += b;
                gpu_bytes[g] += b;
            }
            Place::Ram(n) if !object.is_kv() => {
                let b = object.use_rate * object.ram_bytes as f64;
                stage_bytes[kind] += b;
                cpu_bytes[n] += b;
            }
            Place::Disk(d) => {
                let b = object.use_rate * object.disk_bytes as f64;
                stage_bytes[kind] += b;
                cpu_bytes[r.drive_numa[d]] += b;
                drive_bytes[d] += b;
            }
            _ => {}
        }
    }
    StreamedBytes {
        stage_bytes,
        gpu_bytes,
        cpu_bytes,
        drive_bytes,
    }
}

/// The report: measured per token beside `evaluate` of the placement.
pub(super) fn report(
    inst: &Instance,
    placement: &[usize],
    options: &BenchOptions,
    (routes, total): (&[Vec<Vec<usize>>], &Tally),
    mut token_seconds: Vec<f64>,
    checksum: f64,
    notes: Vec<String>,
) -> BenchReport {
    let eval = inst.evaluate(placement);
    let served = token_seconds.len();
    let tokens = served.max(1) as f64;
    let per_token = |v: f64| v / tokens;
    let bytes = streamed_bytes(inst, placement);
    let stages = KINDS
        .iter()
        .enumerate()
        .map(|(k, (kind, name))| Measured {
            name: name.to_string(),
            measured_seconds: per_token(total.stage_seconds[k]),
            predicted_seconds: inst
                .stages
                .iter()
                .zip(&eval.stage_seconds)
                .filter(|(s, _)| s.kind == *kind)
                .map(|(_, t)| t)
                .sum(),
            bytes_per_token: per_token(total.stage_bytes[k]),
            predicted_bytes_per_token: bytes.stage_bytes[k],
        })
        .collect();
    let resources = resource_rows(inst, &eval, total, &bytes, tokens);
    let on_routes: f64 = routes[..served]
        .iter()
        .map(|token| inst.routed_token_seconds(placement, token))
        .sum::<f64>()
        / tokens;
    let all: f64 = token_seconds.iter().sum();
    token_seconds.sort_by(f64::total_cmp);
    // Nearest rank.
    let quantile = |q: f64| {
        let rank = ((q * token_seconds.len() as f64).ceil() as usize).max(1);
        token_seconds.get(rank - 1).copied().unwrap_or(0.0)
    };
    BenchReport {
        tokens: served,
        seed: options.seed,
        tok_per_s: if all > 0.0 { tokens / all } else { 0.0 },
        predicted_tok_per_s: 1.0 / eval.token_seconds,
        p50_token_seconds: quantile(0.5),
        p99_token_seconds: quantile(0.99),
        predicted_token_seconds: eval.token_seconds,
        predicted_on_routes_tok_per_s: 1.0 / on_routes,
        bench_overhead_seconds: per_token(total.bench_seconds),
        stages,
        resources,
        checksum,
        notes,
    }
}

/// Each GPU's, CPU node's and drive's row: measured per token over
/// `tokens` beside the cost model's seconds and streamed bytes.
fn resource_rows(
    inst: &Instance,
    eval: &Evaluation,
    total: &Tally,
    bytes: &StreamedBytes,
    tokens: f64,
) -> Vec<Measured> {
    let r = &inst.resources;
    let per_token = |v: f64| v / tokens;
    // A resource's row: its measured and predicted seconds and bytes.
    let resource =
        |name: String, seconds: f64, predicted: f64, bytes: f64, predicted_bytes| Measured {
            name,
            measured_seconds: per_token(seconds),
            predicted_seconds: predicted,
            bytes_per_token: per_token(bytes),
            predicted_bytes_per_token: predicted_bytes,
        };
    let gpus = (0..r.gpus()).map(|g| {
        let predicted = eval.loads.iter().map(|l| l.gpu_seconds(r, g)).sum();
        resource(
            format!("gpu:{g}"),
            total.gpu_seconds[g],
            predicted,
            total.gpu_bytes[g],
            bytes.gpu_bytes[g],
        )
    });
    let cpus = (0..r.numa_nodes()).map(|n| {
        let predicted = eval.loads.iter().map(|l| l.cpu_seconds(r, n)).sum();
        resource(
            format!("cpu:{n}"),
            total.cpu_seconds[n],
            predicted,
            total.cpu_bytes[n],
            bytes.cpu_bytes[n],
        )
    });
    let drives = (0..r.drives()).map(|d| {
        let predicted = eval.loads.iter().map(|l| l.drive[d]).sum();
        resource(
            format!("drive:{d}"),
            total.drive_seconds[d],
            predicted,
            total.drive_bytes[d],
            bytes.drive_bytes[d],
        )
    });
    gpus.chain(cpus).chain(drives).collect()
}
