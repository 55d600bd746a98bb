//! `Work::of` and `Work::seconds` on graphs worked by hand.

use super::*;
use residency_core::units::{BytesPerSecond, Seconds};

fn timing() -> LlamaCppTiming {
    LlamaCppTiming {
        source: None,
        cpu_bandwidth: BytesPerSecond(10.0),
        gpu_layer_overhead: Seconds(1.0),
        cpu_layer_overhead: Seconds(2.0),
        crossing_overhead: Seconds(0.5),
        cpu_matrix_overhead: Seconds(0.25),
        token_overhead: Seconds(3.0),
    }
}

fn step(device: Device, bytes: f64, starts_layer: bool) -> Step {
    Step {
        device,
        bytes,
        matrices: 0.0,
        starts_layer,
    }
}

#[test]
fn a_layer_with_cpu_experts_crosses_twice_and_the_logits_once_more() {
    let gpu = Device::Gpu(0);
    // Layer 0: attention on the GPU, experts on the CPU; layer 1 all on
    // the GPU; the head on the GPU.
    // Layer 0's CPU experts multiply 8 matrices (top-8 of one tensor, say).
    let cpu_experts = Step {
        matrices: 8.0,
        ..step(Device::Cpu, 50.0, false)
    };
    let steps = [
        step(gpu, 100.0, true),
        cpu_experts,
        step(gpu, 100.0, true),
        step(gpu, 40.0, false),
        step(gpu, 10.0, false),
    ];
    let work = Work::of(&steps, &[10.0]);
    // By hand: the embeddings' CPU -> GPU, GPU -> CPU and back for layer
    // 0's experts, the logits GPU -> CPU: 4 crossings; 250 GPU bytes at
    // 10 B/s are 25 s.
    assert_eq!(
        work,
        Work {
            gpu_layers: 2.0,
            cpu_layers: 0.0,
            crossings: 4.0,
            cpu_bytes: 50.0,
            cpu_matrices: 8.0,
            fixed_seconds: 25.0,
        }
    );
    // 3 (token) + 2 x 1 (GPU layers) + 4 x 0.5 (crossings) + 50 / 10
    // (CPU bytes) + 8 x 0.25 (CPU matrices) + 25 (GPU bytes) = 39 s.
    assert_eq!(work.seconds(&timing()), 39.0);
}

#[test]
fn a_graph_on_the_cpu_never_crosses() {
    let steps = [
        step(Device::Cpu, 30.0, true),
        step(Device::Cpu, 20.0, false),
    ];
    let work = Work::of(&steps, &[]);
    assert_eq!(work.crossings, 0.0);
    assert_eq!(work.cpu_layers, 1.0);
    // 3 + 2 x 1 (a CPU layer) + 50 / 10 = 10 s.
    assert_eq!(work.seconds(&timing()), 10.0);
}
