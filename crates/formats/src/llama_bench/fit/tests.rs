//! The fit recovers a timing that generated its runs, keeps what the runs
//! cannot tell apart at the prior, and refuses negative values.

use super::*;

fn timing(cpu: f64, gpu_layer: f64, cpu_layer: f64, crossing: f64) -> LlamaCppTiming {
    LlamaCppTiming {
        source: None,
        cpu_bandwidth: BytesPerSecond(cpu),
        gpu_layer_overhead: Seconds(gpu_layer),
        cpu_layer_overhead: Seconds(cpu_layer),
        crossing_overhead: Seconds(crossing),
        cpu_matrix_overhead: Seconds(0.0),
        token_overhead: Seconds(0.0),
    }
}

fn work(gpu_layers: f64, cpu_layers: f64, crossings: f64, cpu_bytes: f64) -> Work {
    Work {
        gpu_layers,
        cpu_layers,
        crossings,
        cpu_bytes,
        cpu_matrices: 0.0,
        fixed_seconds: 1e-3,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a / b - 1.0).abs() < 1e-9
}

/// Four placements of a 48-layer model: all on the GPU, experts on the
/// CPU, down projections on the CPU, everything on the CPU.
fn four_placements() -> Vec<Work> {
    vec![
        work(48.0, 0.0, 1.0, 0.0),
        work(48.0, 0.0, 97.0, 1.0e9),
        work(48.0, 0.0, 97.0, 0.34e9),
        work(0.0, 48.0, 0.0, 1.7e9),
    ]
}

#[test]
fn runs_made_by_a_timing_give_it_back() {
    // The runs' seconds come from the formula with known values, so the
    // fit must return exactly them, whatever the prior.
    let truth = timing(50e9, 55e-6, 180e-6, 23e-6);
    let runs: Vec<(Work, f64)> = four_placements()
        .into_iter()
        .map(|w| (w, w.seconds(&truth)))
        .collect();
    let f = fit(&runs, &timing(20e9, 0.0, 0.0, 7e-6));
    // Every run has 48 layers and no CPU matrix: the per-token and
    // per-matrix costs are not told apart.
    assert_eq!(f.fitted, Term::ORDER[..4].to_vec());
    assert_eq!(f.kept, vec![Term::CpuMatrix, Term::Token]);
    assert!(close(f.timing.cpu_bandwidth.0, 50e9));
    assert!(close(f.timing.gpu_layer_overhead.0, 55e-6));
    assert!(close(f.timing.cpu_layer_overhead.0, 180e-6));
    assert!(close(f.timing.crossing_overhead.0, 23e-6));
}

#[test]
fn what_every_run_has_alike_keeps_the_prior() {
    // Whole layers on the CPU with -ngl 99: 48 GPU layers in every run,
    // no CPU layer, crossings 2n + 1 for n CPU layers, CPU bytes n x 21e6.
    // Crossings are then 1/48 of the GPU layers plus CPU bytes / 10.5e6:
    // a combination of the two terms before them, so only those two fit.
    let truth = timing(40e9, 60e-6, 0.0, 7e-6);
    let runs: Vec<(Work, f64)> = [0.0, 12.0, 48.0]
        .into_iter()
        .map(|n| work(48.0, 0.0, 2.0 * n + 1.0, n * 21e6))
        .map(|w| (w, w.seconds(&truth)))
        .collect();
    let prior = timing(20e9, 0.0, 99e-6, 7e-6);
    let f = fit(&runs, &prior);
    assert_eq!(f.fitted, vec![Term::GpuLayer, Term::CpuBandwidth]);
    assert_eq!(
        f.kept,
        vec![Term::Crossing, Term::CpuLayer, Term::CpuMatrix, Term::Token]
    );
    assert!(close(f.timing.gpu_layer_overhead.0, 60e-6));
    assert!(close(f.timing.cpu_bandwidth.0, 40e9));
    assert_eq!(f.timing.cpu_layer_overhead, prior.cpu_layer_overhead);
    assert_eq!(f.timing.crossing_overhead, prior.crossing_overhead);
}

#[test]
fn a_term_fitted_below_zero_keeps_the_prior() {
    // Made with a negative crossing cost: not physical, so crossing keeps
    // the prior and the other terms are fitted without it.
    let made = timing(50e9, 55e-6, 180e-6, -20e-6);
    let runs: Vec<(Work, f64)> = four_placements()
        .into_iter()
        .map(|w| (w, w.seconds(&made)))
        .collect();
    let prior = timing(20e9, 0.0, 0.0, 7e-6);
    let f = fit(&runs, &prior);
    assert!(f.kept.contains(&Term::Crossing));
    assert_eq!(f.timing.crossing_overhead, prior.crossing_overhead);
    assert!(f.timing.gpu_layer_overhead.0 > 0.0 && f.timing.cpu_bandwidth.0 > 0.0);
}
