//! Tests of the `kt-kernel` export: its GPU expert file read back, the
//! budget flag SGLang turns back into the plan's count, and the warnings.
//! Expected values are worked out by hand in the comments.

use super::*;
use crate::export::tests::{
    assert_mentions, instance, instance_on, placement, plan_of, scenario_a, DISK, G0, G1, PROFILE,
    RAM,
};

fn read_back(dir: &Path) -> (KtKernelGpuExperts, String) {
    let json = std::fs::read_to_string(dir.join(KT_KERNEL_FILE)).unwrap();
    let command = std::fs::read_to_string(dir.join(KT_KERNEL_COMMAND_FILE)).unwrap();
    (serde_json::from_str(&json).unwrap(), command)
}

fn layer(layer: usize, gpu_experts: &[usize], by_card: [&[usize]; 2]) -> KtKernelLayer {
    KtKernelLayer {
        layer,
        gpu_experts: gpu_experts.to_vec(),
        count: gpu_experts.len(),
        by_card: by_card.iter().map(|c| c.to_vec()).collect(),
    }
}

/// The cost model's ms per token of a placement, as the warnings print it.
fn ms(inst: &Instance, placement: &[usize]) -> String {
    format!("{:.3} ms", inst.evaluate(placement).token_seconds * 1e3)
}

#[test]
fn export_kt_kernel_writes_the_plans_gpu_experts_per_layer() {
    let inst = instance();
    // Scenario A: L1 = [G0, G0, RAM, RAM], L2 = [G0, RAM, RAM, RAM],
    // L3 = [G0, DISK, G0, RAM], all GPU experts on gpu:0. Masks: L1 {0, 1},
    // L2 {0}, L3 {0, 2}: 5 GPU experts in 3 layers, which does not divide,
    // so the budget is the ratio (5 + 0.5) / (3 * 4) = 0.458333...
    let plan = plan_of(&inst, scenario_a());
    let dir = tempfile::tempdir().unwrap();
    let out = kt_kernel(&plan, &inst, dir.path(), None).unwrap();
    let d = dir.path();
    assert_eq!(
        out.files,
        vec![
            d.join(KT_KERNEL_FILE),
            d.join(KT_KERNEL_COUNTS_FILE),
            d.join(KT_KERNEL_COMMAND_FILE)
        ]
    );
    let (file, command) = read_back(d);
    assert_eq!(
        file,
        KtKernelGpuExperts {
            num_hidden_layers: 4,
            num_experts: 4,
            total_gpu_experts: 5,
            layers: vec![
                layer(1, &[0, 1], [&[0, 1], &[]]),
                layer(2, &[0], [&[0], &[]]),
                layer(3, &[0, 2], [&[0, 2], &[]]),
            ],
        }
    );
    assert_mentions(&command, "--kt-gpu-experts-ratio 0.4583333333333333 ");
    // The counts the server reads: [1, 4 layers, 4 experts], layer 0
    // dense (zeros), 2 on the masks above and 1 elsewhere in MoE layers.
    let pt = d.join(KT_KERNEL_COUNTS_FILE);
    let counts = crate::torch::read(&std::fs::read(&pt).unwrap()).unwrap();
    let want = Tensor {
        dtype: DType::Float32,
        shape: vec![1, 4, 4],
        #[rustfmt::skip]
        values: vec![
            0., 0., 0., 0.,
            2., 2., 1., 1.,
            2., 1., 1., 1.,
            2., 1., 2., 1.,
        ],
    };
    assert_eq!(
        counts,
        crate::torch::Value::Dict(vec![(
            crate::torch::Value::Str("logical_count".into()),
            crate::torch::Value::Tensor(want)
        )])
    );
    assert!(!command.contains("python -\n"), "no snippet: {command}");
    let pt = pt.display().to_string();
    assert_mentions(&command, &format!("--init-expert-location '{pt}'\n"));
    assert_mentions(&command, "--model-path MODEL_DIR --trust-remote-code --kt-weight-path KT_WEIGHTS_DIR --kt-method AMXINT4 --kt-cpuinfer CPU_THREADS --kt-threadpool-count 1 --tensor-parallel-size 2 --kt-gpu-experts-ratio");
    assert_mentions(&command, "--kt-expert-placement-strategy frequency");

    let all = out.warnings.join("\n");
    // Two cards: each holds half of the 5 x 1 MB of GPU experts, 2.38 MiB,
    // where the plan puts all 5 MB (4.77 MiB) on gpu:0.
    assert_mentions(&all, "each card holds 1/2 of the 5 GPU experts (2.38 MiB of expert weights) instead of the plan's cards per expert (gpu:0 4.77 MiB, gpu:1 0 B)");
    // Upstream's prefix: K = 5 / 3 = 1, expert 0 of every layer: L1 e1 and
    // L3 e2 leave gpu:0 for RAM.
    let prefix = placement(
        [
            [G0, RAM, RAM, RAM],
            [G0, RAM, RAM, RAM],
            [G0, DISK, RAM, RAM],
        ],
        [G0, G0, RAM, RAM],
        G1,
    );
    assert!(
        all.contains(&format!(
            "The closest, K = 1 (3 of the plan's 5 GPU experts), gives {} per token by the cost model, the plan {:.3} ms",
            ms(&inst, &prefix),
            plan.objective.token_seconds * 1e3
        )),
        "{all}"
    );
    assert_mentions(&all, "no disk tier: the 1 experts");
    assert_mentions(&all, "SGLang runs the trunk");
    assert_mentions(&all, "`--model-path MODEL_DIR` stands for it");
    // SGLang keeps the whole trunk on the cards: 4 x 2 MB attention, 3 MB
    // dense FFN, 3 x 1 MB shared experts, 4 MB lm_head and 1 MB router bias,
    // 19 MB; with the 5 MB of experts, 12 MB a card, past both cards' 10 MB.
    for g in 0..2 {
        assert_mentions(&all, &format!("gpu:{g} gets 11.44 MiB (12000000 bytes): 1/2 of the GPU experts and of the whole trunk"));
    }
    assert_eq!(out.warnings.len(), 7, "{all}");
}

#[test]
fn export_kt_kernel_merges_cards_into_one_mask_and_counts_per_layer() {
    let inst = instance();
    // Two GPU experts per layer over both cards: L1 {0: gpu:0, 1: gpu:1},
    // L2 {1: gpu:0, 2: gpu:1}, L3 {0: gpu:1, 3: gpu:0}. 6 in 3 layers
    // divides: --kt-num-gpu-experts 2.
    let plan = plan_of(
        &inst,
        placement(
            [[G0, G1, RAM, RAM], [RAM, G0, G1, RAM], [G1, RAM, RAM, G0]],
            [RAM; 4],
            G1,
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("ckpt");
    std::fs::create_dir(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    let out = kt_kernel(&plan, &inst, &dir.path().join("kt"), Some(&model)).unwrap();
    let (file, command) = read_back(&dir.path().join("kt"));
    assert_eq!(file.total_gpu_experts, 6);
    assert_eq!(
        file.layers,
        vec![
            layer(1, &[0, 1], [&[0], &[1]]),
            layer(2, &[1, 2], [&[1], &[2]]),
            layer(3, &[0, 3], [&[3], &[0]]),
        ]
    );
    assert!(
        command.contains(&format!(
            "--model-path '{}' --trust-remote-code",
            model.display()
        )),
        "{command}"
    );
    assert_mentions(
        &command,
        "--tensor-parallel-size 2 --kt-num-gpu-experts 2 --kt-expert-placement-strategy frequency",
    );
    let all = out.warnings.join("\n");
    assert_mentions(&all, "(gpu:0 2.86 MiB, gpu:1 2.86 MiB)");
    // Upstream's K = 2 keeps experts 0 and 1: L2 e0 and L3 e1 come to the
    // card with most of their layer's GPU experts (a tie: gpu:0), L2 e2 and
    // L3 e3 go to RAM.
    let prefix = placement(
        [[G0, G1, RAM, RAM], [G0, G0, RAM, RAM], [G1, G0, RAM, RAM]],
        [RAM; 4],
        G1,
    );
    assert!(
        all.contains(&format!(
            "K = 2 (6 of the plan's 6 GPU experts), gives {}",
            ms(&inst, &prefix)
        )),
        "{all}"
    );
    assert!(!all.contains("MODEL_DIR"), "{all}");
    // (6 MB of experts + 19 MB of trunk) / 2 = 12.5 MB on each 10 MB card.
    assert_mentions(&all, "gpu:1 gets 11.92 MiB (12500000 bytes)");
    assert_eq!(out.warnings.len(), 5, "{all}");
}

#[test]
fn export_kt_kernel_says_nothing_of_upstream_or_cards_for_a_prefix_plan_on_one_card() {
    // One card, experts 0 and 1 of every layer on it: upstream's prefix is
    // the plan and there is one card, so what is left to say is the trunk,
    // the model placeholder, and the card that must hold 6 MB of experts
    // and the whole 19 MB trunk.
    let one_card = PROFILE.replace(
        "  - { id: 1, name: b, vram: 10 MB, numa: 0, gemv_bandwidth: 100 GB/s, upload_bandwidth: 10 GB/s, sync_overhead: 100 us }\n",
        "",
    );
    let inst = instance_on(&one_card);
    assert_eq!(inst.resources.gpus(), 1);
    // Places: 0 = gpu:0, 1 = ram:0, 2 = disk:0.
    let (g, ram) = (0, 1);
    let mut p = vec![ram; inst.objects.len()];
    for l in 0..3 {
        p[4 * l] = g;
        p[4 * l + 1] = g;
    }
    let plan = plan_of(&inst, p);
    let dir = tempfile::tempdir().unwrap();
    let out = kt_kernel(&plan, &inst, dir.path(), None).unwrap();
    let (file, command) = read_back(dir.path());
    assert!(file.layers.iter().all(|l| l.gpu_experts == [0, 1]));
    assert!(command.contains("--tensor-parallel-size 1 --kt-num-gpu-experts 2 "));
    let all = out.warnings.join("\n");
    assert_mentions(&all, "gpu:0 gets 23.84 MiB (25000000 bytes)");
    assert_eq!(out.warnings.len(), 3, "{all}");
}

#[test]
fn export_kt_kernel_refuses_a_profile_without_gpus() {
    let no_gpus = PROFILE
        .lines()
        .filter(|l| !l.contains("vram:"))
        .map(|l| if l == "gpus:" { "gpus: []" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let inst = instance_on(&no_gpus);
    assert_eq!(inst.resources.gpus(), 0);
    let plan = plan_of(&inst, vec![0; inst.objects.len()]);
    let dir = tempfile::tempdir().unwrap();
    let err = kt_kernel(&plan, &inst, dir.path(), None).unwrap_err();
    assert!(
        err.to_string()
            .contains("the kt-kernel export needs at least one GPU"),
        "{err}"
    );
    assert!(!dir.path().join(KT_KERNEL_FILE).exists());
}

#[test]
fn budget_ratio_truncates_back_to_the_plans_count() {
    // SGLang computes int(ratio * layers * experts): for every total of a
    // DeepSeek-V3-sized model (58 MoE layers of 256 experts) and a small
    // one, the printed ratio parsed back gives the total again.
    for (layers, experts) in [(58usize, 256usize), (3, 4), (47, 128)] {
        let slots = layers * experts;
        for total in 0..=slots {
            let flag = budget_flag(total, layers, experts);
            let back = match flag.split_once(' ') {
                Some(("--kt-num-gpu-experts", k)) => k.parse::<usize>().unwrap() * layers,
                Some(("--kt-gpu-experts-ratio", r)) => {
                    (r.parse::<f64>().unwrap() * slots as f64) as usize
                }
                _ => panic!("{flag}"),
            };
            assert_eq!(back, total, "{flag}");
        }
    }
}
