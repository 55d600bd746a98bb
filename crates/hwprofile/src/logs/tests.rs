//! Tests of `logs`.

use super::*;
use crate::doc::{rate_text, time_text};
use std::path::PathBuf;

const BOX: &str = "
name: box
numa:
  - { id: 0, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 16, gemv_bandwidth: 30 GB/s }
  - { id: 1, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 16, gemv_bandwidth: 30 GB/s }
gpus:
  - { id: 0, name: card, vram: 16 GiB, reserved: 2 GiB, numa: 0, gemv_bandwidth: 500 GB/s, upload_bandwidth: 25 GB/s, sync_overhead: 34 us }
drives:
  - { id: 0, name: nvme0n1, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us }
";

/// Four MoE layers of 8 experts, top-2, 1 MiB experts in RAM.
const MODEL: &str = "
name: four-layers
layers: 4
moe_layers: \"0..=3\"
experts: 8
top_k: 2
hidden: 1024
expert_intermediate: 512
formats:
  int4: 1 MiB
tiers: { gpu: int4, ram: int4, disk: int4 }
";

fn doc() -> ProfileDoc {
    ProfileDoc::parse(BOX, Path::new("box.yaml")).unwrap()
}

fn log(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("run.log");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn prof_lines_give_the_felt_fraction_and_the_drive_rate() {
    let dir = tempfile::tempdir().unwrap();
    let line = |gb: f64, misses: u32, felt: f64| {
        format!("[PROF] expert I/O: {gb:.3} GB fetched (12.0 MB/token, 1.10 GB/s over the run) | hit 81.2% (900 pin + 400 lru / {misses} load) | 525.0 loads/token | 3.1s read service / {felt:.1}s felt wait\n")
    };
    let path = log(
        dir.path(),
        &format!("decode\n{}{}", line(4.2, 300, 1.4), line(1.0, 100, 0.6)),
    );
    let c = calibrate_from_log(doc(), &path, None).unwrap();
    // Felt 1.4 + 0.6 = 2.0 s of 3.1 + 3.1 = 6.2 s read service: 0.3226.
    assert_eq!(c.doc.profile.felt_fraction, Some(0.3226));
    // 5.2 GB over (6.2 s - 400 misses x 80 us = 6.168 s) = 843.06 MB/s.
    assert_eq!(
        rate_text(c.doc.profile.drives[0].read_bandwidth),
        "843.1 MB/s"
    );
    let comment = c.doc.origin("felt_fraction").unwrap();
    assert!(
        comment.starts_with("measured: felt wait 2.0 s / read service 6.2 s"),
        "{comment}"
    );
    assert!(
        comment.contains("lines 2 and 3 of") && comment.contains("5.000 ms felt per physical miss"),
        "{comment}"
    );
    // The rest is untouched.
    assert_eq!(rate_text(c.doc.profile.gpus[0].gemv_bandwidth), "500 GB/s");
}

#[test]
fn profile_lines_skip_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let path = log(
        dir.path(),
        "PROFILO PREFILL (11.61s):\n\
             PROFILE: expert-disk 295.811s service / 9.057s wait | expert-matmul 1.336s\n\
             prefill 13 tokens in 11.61s | decode 1024 tokens in 781.17s (1.31 tok/s)\n\
             PROFILE: expert-disk 1340.818s service / 431.739s wait | expert-matmul 188.270s\n",
    );
    let c = calibrate_from_log(doc(), &path, None).unwrap();
    // 431.739 / 1340.818 = 0.32200; the prefill line (0.0306) is left out.
    assert_eq!(c.doc.profile.felt_fraction, Some(0.322));
    assert!(c.doc.origin("felt_fraction").unwrap().contains("line 4 of"));
    assert_eq!(c.measured.len(), 1);
}

#[test]
fn timers_blocks_give_sync_cpu_bandwidth_and_fixed_time() {
    let dir = tempfile::tempdir().unwrap();
    let block = |take: f64, compute: f64, outside: f64| {
        format!(
            "   [timers] decode: 63 tokens  (shared/router are subsets of moe_total)\n\
                 [timers]   step() total: 32.1 ms/token (outside the phases: {outside})\n\
                 [timers]   expert kernel: fetch 9.03 | compute {compute} ms/token\n\
                 [timers]   qtier: issue 1.95 | cpu-miss 3.69 | take {take} ms/token\n\
                 [timers] prefill: 56 tokens  dn=413 attn=74 moe=437(sh=62 rt=5) head=2 ms\n"
        )
    };
    let path = log(dir.path(), &(block(0.4, 2.0, 1.5) + &block(0.6, 4.0, 1.3)));
    let model = Model::from_yaml_str(MODEL, Path::new("m.yaml")).unwrap();
    let c = calibrate_from_log(doc(), &path, Some(&model)).unwrap();
    let p = &c.doc.profile;
    // take 0.4 and 0.6 ms/token over 4 layers: 100 and 150 us, median 125 us.
    assert_eq!(time_text(p.gpus[0].sync_overhead), "125 us");
    // 2 x 4 x 1 MiB = 8388608 B a token over 2 and 4 ms: 4.194 and 2.097
    // GB/s, median 3.146 GB/s, shared by two nodes: 1.573 GB/s each.
    assert_eq!(rate_text(p.numa[0].gemv_bandwidth), "1.573 GB/s");
    assert_eq!(p.numa[1].gemv_bandwidth, p.numa[0].gemv_bandwidth);
    // Outside the phases: 1.5 and 1.3 ms, median 1.4 ms.
    assert_eq!(time_text(p.fixed_token_seconds), "1.4 ms");
    let sync = c.doc.origin("gpus[0].sync_overhead").unwrap();
    assert!(
        sync.contains("over 2 runs") && sync.contains("lines 4 and 9 of"),
        "{sync}"
    );
    // Without the model only the time outside the phases follows.
    let c = calibrate_from_log(doc(), &path, None).unwrap();
    assert_eq!(c.measured.len(), 1);
    assert!(c.notes[0].contains("pass --model"), "{:?}", c.notes);
}

#[test]
fn a_log_without_lines_or_values_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = log(dir.path(), "nothing to see\n");
    let e = calibrate_from_log(doc(), &path, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: has no `[PROF] expert I/O:`", path.display())),
        "{e}"
    );
    assert!(e.contains("COLI_TIMERS=1") && !e.contains('\n'), "{e}");
    // Lines that give nothing this profile takes (a sync, but no GPU;
    // a felt share, but no overlap) are an error too, saying why.
    let path = log(
        dir.path(),
        "PROFILE: expert-disk 10.0s service / 5.0s wait | expert-matmul 1.0s\n",
    );
    let serial = format!("{BOX}io_overlaps_compute: false\n");
    let serial = ProfileDoc::parse(&serial, Path::new("box.yaml")).unwrap();
    let e = calibrate_from_log(serial, &path, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("io_overlaps_compute: false") && !e.contains('\n'),
        "{e}"
    );
    let missing = dir.path().join("absent.log");
    let e = calibrate_from_log(doc(), &missing, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: cannot read it", missing.display())),
        "{e}"
    );
}
