//! Calibration on this machine, of generated experts and of a checkpoint's,
//! and the one-line refusals of bad budgets and directories.

use super::experts::{read_extent, ExpertSource};
use super::*;
use crate::detect::{detect, DetectOptions};
use residency_runtime::checkpoint::{generate, GenDtype, GenOptions};

fn options(dir: &Path, seconds: f64) -> CalibrateOptions {
    CalibrateOptions {
        seconds,
        checkpoint: None,
        model: None,
        model_dir: Some(dir.to_path_buf()),
        span_bytes: None,
    }
}

#[test]
fn this_machine_calibrates_in_the_time_given() {
    let dir = tempfile::tempdir().unwrap();
    let doc = detect(&DetectOptions {
        model_dir: dir.path().to_path_buf(),
    })
    .unwrap();
    let started = Instant::now();
    let c = calibrate(doc, &options(dir.path(), 1.5), &|_, _| {}).unwrap();
    // Setup (1 GiB at most of generated experts, the temporary file)
    // comes on top of the budget.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let p = &c.doc.profile;
    assert!(p.numa.iter().all(|n| n.gemv_bandwidth.0 > 0.0));
    let gemv = c.doc.origin("numa[0].gemv_bandwidth").unwrap();
    assert!(
        gemv.starts_with("measured: median") && gemv.contains("trials ["),
        "{gemv}"
    );
    if p.drives.is_empty() {
        // Each node's GEMV rate and stage overhead.
        assert!(c.measured.len() == 2 * p.numa.len(), "{:?}", c.measured);
    } else {
        // Measured, or a note says why not (a file system without O_DIRECT).
        let timed = c.doc.origin("drives[0].read_latency").unwrap_or("");
        assert!(
            timed.starts_with("measured:") || !c.notes.is_empty(),
            "{:?}",
            c.notes
        );
    }
    for m in &c.measured {
        let s = m.spread.unwrap();
        // An overhead is a difference of two timings: a trial can fall
        // below zero in noise (the value written is clamped at zero).
        let overhead = m.path.ends_with("_overhead");
        assert!(
            (s.min > 0.0 || overhead)
                && s.min <= s.median
                && s.median <= s.max
                && s.count >= MIN_TRIALS,
            "{m}"
        );
    }
    assert!(p.numa.iter().all(|n| n.stage_overhead.0 >= 0.0));
    // Reads served at once: 8 x the first landing / the last of 8 reads,
    // so at most 8 (the first lands no later than the last), and what is
    // written is a whole number of reads within 1..=8.
    if let Some(m) = c
        .measured
        .iter()
        .find(|m| m.path.ends_with("read_concurrency"))
    {
        let s = m.spread.unwrap();
        assert!(s.max <= super::drive::READS_AT_ONCE as f64, "{m}");
        assert!((1..=8).contains(&p.drives[0].read_concurrency), "{m}");
    }
    // The temporary file is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // It reads back.
    ProfileDoc::parse(&c.doc.to_yaml(), Path::new("box.yaml")).unwrap();
}

/// An int4 checkpoint of the model `description` generated in `dir`, its
/// detected profile, and calibration's options on it.
fn int4_checkpoint(dir: &Path, description: &str) -> (PathBuf, ProfileDoc, CalibrateOptions) {
    let yaml = dir.join("model.yaml");
    std::fs::write(&yaml, description).unwrap();
    let model = Model::from_yaml_file(&yaml).unwrap();
    let ckpt = dir.join("ckpt");
    let gen = GenOptions {
        dtype: GenDtype::Int4,
        ..GenOptions::default()
    };
    generate(&model, &yaml, &ckpt, &gen).unwrap();
    let doc = detect(&DetectOptions {
        model_dir: ckpt.clone(),
    })
    .unwrap();
    let mut opts = options(&ckpt, 1.0);
    opts.checkpoint = Some(ckpt.clone());
    opts.model_dir = None;
    (ckpt, doc, opts)
}

#[test]
fn a_checkpoint_s_experts_and_shards_are_what_is_timed() {
    let dir = tempfile::tempdir().unwrap();
    // Groups of 64 int4 values: 32 bytes, the AVX2 kernel's vector.
    let (ckpt, doc, opts) = int4_checkpoint(
        dir.path(),
        "name: Mixtral-tiny\nlayers: 2\nmoe_layers: \"0..=1\"\nexperts: 4\ntop_k: 2\nhidden: 128\n\
             expert_intermediate: 64\nformats:\n  int4: { bits: 4, group: 64 }\n\
             tiers: { gpu: int4, ram: int4, disk: int4 }\n\
             trunk:\n  - { name: attn, layers: \"0..=1\", bytes: 163840, stage: dense }\n",
    );
    let c = calibrate(doc, &opts, &|_, _| {}).unwrap();
    let gemv = c.doc.origin("numa[0].gemv_bandwidth").unwrap();
    assert!(
        gemv.contains(&format!("int4 experts of {}", ckpt.display())),
        "{gemv}"
    );
    if let Some(read) = c
        .doc
        .origin("drives[0].read_bandwidth")
        .filter(|o| o.starts_with("measured"))
    {
        // Timed as the store's loader reads a streamed expert, on the
        // checkpoint's one shard.
        assert!(read.contains("the checkpoint's experts"), "{read}");
        let latency = c.doc.origin("drives[0].read_latency").unwrap();
        assert!(
            latency.contains("1 shard(s) of the checkpoint"),
            "{latency}"
        );
    }
    // The checkpoint's experts, repeated: 4 x 2 experts of 3 projections.
    let source = ExpertSource::new(&opts).unwrap();
    let rows = source.expert_rows(source.cpu, 1 << 20, None).unwrap();
    assert_eq!(rows.iter().map(|m| m.cols).collect::<Vec<_>>(), [64, 128]);
    let first = &source.stored.as_ref().unwrap()[0];
    let weights = read_extent(&first[0].weights).unwrap();
    let matrix = rows.iter().find(|m| m.cols == first[0].cols).unwrap();
    assert_eq!(&matrix.weights()[..weights.len()], &weights[..]);
}

/// Llama-4's experts are slices of fused tensors, which the kernels do
/// not stack: its geometry's experts are generated for them, while the
/// drive reads the checkpoint's own experts as the store's loader does.
/// One expert by hand: gate and up 64 x 128 and down 128 x 64 int4 in
/// groups of 64, 24,576 values: 12,288 bytes and 384 F16 scales (768
/// bytes), 13,056 bytes (12.75 KiB).
#[test]
fn a_llama4_checkpoint_s_drive_is_read_and_its_geometry_computed() {
    let dir = tempfile::tempdir().unwrap();
    let (ckpt, doc, opts) = int4_checkpoint(
        dir.path(),
        "name: Llama-4-tiny\nlayers: 2\nmoe_layers: [1]\nexperts: 4\ntop_k: 1\nhidden: 128\n\
             expert_intermediate: 64\nformats:\n  int4: { bits: 4, group: 64 }\n\
             tiers: { gpu: int4, ram: int4, disk: int4 }\n\
             trunk:\n  - { name: attn, layers: [0, 1], bytes: 163840, stage: dense }\n\
             \x20 - { name: dense_ffn, layers: [0], bytes: 98304, stage: dense }\n",
    );
    let c = calibrate(doc, &opts, &|_, _| {}).unwrap();
    let gemv = c.doc.origin("numa[0].gemv_bandwidth").unwrap();
    assert!(
        gemv.contains(&format!(
            "generated experts of {}'s geometry",
            ckpt.display()
        )),
        "{gemv}"
    );
    if let Some(read) = c
        .doc
        .origin("drives[0].read_bandwidth")
        .filter(|o| o.starts_with("measured"))
    {
        assert!(
            read.contains("the checkpoint's experts (12.75 KiB)"),
            "{read}"
        );
    }
    let source = ExpertSource::new(&opts).unwrap();
    assert!(source.stored.is_none());
    assert_eq!(source.expert_bytes(source.cpu), 13_056);
}

#[test]
fn bad_budgets_and_directories_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let doc = detect(&DetectOptions {
        model_dir: dir.path().to_path_buf(),
    })
    .unwrap();
    let e = calibrate(doc.clone(), &options(dir.path(), 0.0), &|_, _| {})
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "--seconds: is 0; give a positive number of seconds, e.g. --seconds 20"
    );
    let absent = dir.path().join("absent");
    let e = calibrate(doc, &options(&absent, 1.0), &|_, _| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: is not a directory", absent.display())),
        "{e}"
    );
}

/// Generated int4 experts (group 64, top 2) of projections `shapes`.
fn generated(shapes: Vec<(usize, usize)>) -> ExpertSource {
    let packing = crate::gemv::Packing { bits: 4, group: 64 };
    ExpertSource {
        label: String::new(),
        shapes,
        top_k: 2,
        cpu: packing,
        gpu: packing,
        stored: None,
        checkpoint: None,
    }
}

#[test]
fn a_stage_s_gemvs_are_its_experts_projections_in_the_stacks() {
    // Gate and up: 3 rows of 8 features; down: 8 rows of 3. `expert_rows`
    // stacks an expert's rows of a width together: 6 rows of width 8 (gate
    // then up) and 8 of width 3 an expert. So expert 1's gate is rows 6..9
    // of the width-8 stack, its up 9..12, its down rows 8..16 of the
    // width-3 stack; expert 2's start at 12 and 16.
    let source = generated(vec![(3, 8), (3, 8), (8, 3)]);
    assert_eq!(
        source.stage_parts(&[8, 3], 1..3),
        [
            (0, 6..9),
            (0, 9..12),
            (1, 8..16),
            (0, 12..15),
            (0, 15..18),
            (1, 16..24)
        ]
    );
}

#[test]
fn each_expert_s_slab_holds_its_projections_as_the_stacks_do() {
    // Gate and up: 64 rows of 128 int4 features (64 bytes a row, two F16
    // scales); down: 128 rows of 64 (32 bytes, one scale). Hand-counted:
    // 64 x (64 + 4) x 2 + 128 x (32 + 2) = 8704 + 4352 = 13056 bytes.
    let source = generated(vec![(64, 128), (64, 128), (128, 64)]);
    let packing = source.cpu;
    let rows = source.expert_rows(packing, 3 * 13056, None).unwrap();
    let inputs = super::experts::inputs_for(&rows);
    let pool = residency_runtime::storage::HostPool::new(None, 0);
    let slabs = source.expert_slabs(&rows, 1..3, &pool);
    assert_eq!(slabs.len(), 2);
    assert_eq!(slabs[0].bytes(), 13056);
    // Expert 2's projections, taken from the stacks by `stage_parts`
    // (checked by hand above): the same bytes and the same outputs.
    let widths: Vec<usize> = rows.iter().map(|m| m.cols).collect();
    let parts = source.stage_parts(&widths, 2..3);
    let mine: Vec<_> = slabs[1].gemvs(packing, &inputs).collect();
    assert_eq!(mine.len(), parts.len());
    for ((view, x), (m, range)) in mine.iter().zip(parts) {
        let stacked = rows[m].view().rows_range(range);
        assert_eq!(
            (view.weights, view.scales),
            (stacked.weights, stacked.scales)
        );
        assert!(std::ptr::eq(*x, &inputs[m]));
        let (mut a, mut b) = (vec![0f32; view.rows], vec![0f32; view.rows]);
        view.rows_into(x, 0, &mut a);
        stacked.rows_into(&inputs[m], 0, &mut b);
        assert_eq!(a, b);
    }
}
