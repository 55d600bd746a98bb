//! One token served: layer by layer, the misses loading while the experts
//! already there are computed, the waits counted, the outputs combined.

use super::card::object_of;
use super::report::{ReadBurst, ReplayError, ReplayRun, ServePolicy};
use residency_formats::heat::TokenRoutes;
use residency_policy::ObjectIndex;
use residency_runtime::serve::compute::{start_activation, ExpertKernel, LayerInput};
use residency_runtime::store::{Lease, Store, StoreError};
use sha2::Digest;
use sha2::Sha256;
use std::time::{Duration, Instant};

/// What serving the tokens measured: time, per-token latencies, the
/// compute thread's waits and the outputs' checksum.
pub(super) struct Served {
    pub(super) tokens: u64,
    pub(super) seconds: f64,
    pub(super) latencies_seconds: Vec<f64>,
    pub(super) waits: LayerWaits,
    pub(super) checksum: String,
    pub(super) output_sum: f64,
    pub(super) gpu_experts: u64,
}

/// What serving layers waited: the compute thread for misses (`felt`),
/// and the misses' reads, from starting a layer's loads to the last
/// landing (`reads`), also by the layer's number of misses (`bursts`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LayerWaits {
    felt: Duration,
    reads: Duration,
    /// The compute thread's products, and their bytes.
    compute: Duration,
    computed_bytes: u64,
    /// Index `k - 1`: layers that read `k` misses together (the last,
    /// `BURSTS` or more), and their reads' time.
    bursts: [(u64, Duration); BURSTS],
}

/// Burst sizes counted apart; larger ones share the last count.
const BURSTS: usize = 16;

impl std::ops::AddAssign for LayerWaits {
    fn add_assign(&mut self, other: LayerWaits) {
        self.felt += other.felt;
        self.reads += other.reads;
        self.compute += other.compute;
        self.computed_bytes += other.computed_bytes;
        for (mine, theirs) in self.bursts.iter_mut().zip(other.bursts) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
    }
}

impl Served {
    /// The run, with the store's counters left at zero.
    pub(super) fn run(self, policy: ServePolicy, round: usize) -> ReplayRun {
        let mut latencies = self.latencies_seconds;
        latencies.sort_by(f64::total_cmp);
        let percentile = |q: f64| {
            latencies
                .get(((latencies.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
                * 1e3
        };
        ReplayRun {
            policy: policy.name().into(),
            category: None,
            round,
            tokens: self.tokens,
            seconds: self.seconds,
            tok_per_s: self.tokens as f64 / self.seconds.max(1e-9),
            p50_ms: percentile(0.5),
            p99_ms: percentile(0.99),
            felt_wait_seconds: self.waits.felt.as_secs_f64(),
            miss_reads_seconds: self.waits.reads.as_secs_f64(),
            compute_bytes_per_s: self.waits.computed_bytes as f64
                / self.waits.compute.as_secs_f64().max(1e-9),
            read_bursts: (1..)
                .zip(self.waits.bursts)
                .filter(|(_, (layers, _))| *layers > 0)
                .map(|(misses, (layers, reads))| ReadBurst {
                    misses,
                    layers,
                    seconds: reads.as_secs_f64(),
                })
                .collect(),
            read_service_seconds: 0.0,
            bytes_read: 0,
            startup_bytes: 0,
            startup_seconds: 0.0,
            hits: 0,
            misses: 0,
            rejections: 0,
            bypasses: 0,
            evictions: 0,
            migration_bytes: 0,
            gpu_experts: self.gpu_experts,
            output_sum: self.output_sum,
            output_checksum: self.checksum,
            simulated: None,
            miss_bound: None,
        }
    }
}

/// Serves every token, layer by layer, through `serve_layer` (outputs in
/// route order and what it waited); `after_token(tokens served, token)`
/// runs between tokens (heat, re-planning).
pub(super) fn serve(
    tokens: &[TokenRoutes],
    experts: usize,
    hidden: usize,
    mut serve_layer: impl FnMut(
        &[ObjectIndex],
        &[f32],
    ) -> Result<(Vec<Vec<f32>>, LayerWaits), ReplayError>,
    mut after_token: impl FnMut(u64, &TokenRoutes) -> Result<(), ReplayError>,
) -> Result<Served, ReplayError> {
    let mut x = start_activation(hidden);
    let mut checksum = Sha256::new();
    let mut output_sum = 0f64;
    let mut latencies_seconds = Vec::with_capacity(tokens.len());
    let mut waits = LayerWaits::default();
    let serving = Instant::now();
    for (t, token) in tokens.iter().enumerate() {
        let token_started = Instant::now();
        for (l, route) in token.routes.iter().enumerate() {
            let objects: Vec<ObjectIndex> =
                route.iter().map(|&e| object_of(l, e, experts)).collect();
            let (outputs, waited) = serve_layer(&objects, &x)?;
            waits += waited;
            x = combine(&x, &outputs);
            for v in &x {
                checksum.update(v.to_le_bytes());
                output_sum += f64::from(v.abs());
            }
        }
        latencies_seconds.push(token_started.elapsed().as_secs_f64());
        after_token(t as u64 + 1, token)?;
    }
    Ok(Served {
        tokens: tokens.len() as u64,
        seconds: serving.elapsed().as_secs_f64(),
        latencies_seconds,
        waits,
        checksum: format!("{:x}", checksum.finalize()),
        output_sum,
        gpu_experts: 0,
    })
}

/// Serves one layer of one token. The experts resident now are leased
/// without waiting (`try_acquire`); every other one is acquired on a
/// thread of its own, so misses load in parallel while the computing thread
/// multiplies the hits, then each miss as it arrives. The computing thread
/// never waits while it holds a lease and never acquires what may need a
/// load: if it did, it could wait for bytes that a finished load's lease
/// holds while that load waits in the queue for it, and both would wait for
/// the budget timeout. Outputs come back in route order, so the result is
/// the same whatever the timing. Returns them, the time the computing
/// thread waited, and the time from starting the loads to the last landing.
pub(super) fn layer(
    store: &Store,
    kernel: &ExpertKernel,
    objects: &[ObjectIndex],
    input: &LayerInput,
) -> Result<(Vec<Vec<f32>>, LayerWaits), StoreError> {
    let mut outputs: Vec<Vec<f32>> = vec![Vec::new(); objects.len()];
    let mut waits = LayerWaits::default();
    let hits: Vec<Option<Lease>> = objects
        .iter()
        .map(|&o| store.try_acquire(o))
        .collect::<Result<_, _>>()?;
    let misses = hits.iter().filter(|h| h.is_none()).count();
    std::thread::scope(|scope| {
        let (sender, arrivals) = std::sync::mpsc::channel();
        let loads_started = Instant::now();
        for (i, &o) in objects.iter().enumerate() {
            if hits[i].is_none() {
                let sender = sender.clone();
                scope.spawn(move || {
                    let lease = store.acquire(o);
                    sender.send((i, lease, loads_started.elapsed()))
                });
            }
        }
        drop(sender);
        let compute = |i: usize, lease: &Lease, waits: &mut LayerWaits| {
            let bytes = lease.host().expect("replay keeps experts in host memory");
            let started = Instant::now();
            let y = kernel.compute(objects[i] as usize, bytes, input);
            waits.compute += started.elapsed();
            waits.computed_bytes += bytes.len() as u64;
            y
        };
        for (i, lease) in hits.into_iter().enumerate() {
            if let Some(lease) = lease {
                outputs[i] = compute(i, &lease, &mut waits);
            }
        }
        loop {
            let started = Instant::now();
            let Ok((i, lease, landed)) = arrivals.recv() else {
                break;
            };
            waits.felt += started.elapsed();
            waits.reads = waits.reads.max(landed);
            outputs[i] = compute(i, &lease?, &mut waits);
        }
        Ok::<_, StoreError>(())
    })?;
    if misses > 0 {
        let burst = &mut waits.bursts[misses.min(BURSTS) - 1];
        burst.0 += 1;
        burst.1 += waits.reads;
    }
    Ok((outputs, waits))
}

/// The next activation: `x` plus the experts' outputs folded onto its
/// width, scaled back to at most 1 in magnitude (keeps values finite).
pub(super) fn combine(x: &[f32], outputs: &[Vec<f32>]) -> Vec<f32> {
    let mut next = x.to_vec();
    for y in outputs {
        for (i, v) in y.iter().enumerate() {
            next[i % x.len()] += v * 1e-3;
        }
    }
    let peak = next.iter().fold(0f32, |m, v| m.max(v.abs())).max(1.0);
    next.iter_mut().for_each(|v| *v /= peak);
    next
}
