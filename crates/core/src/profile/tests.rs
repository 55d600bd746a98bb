//! Tests of `profile`.

use super::*;

const BOX: &str = r#"
name: box
numa:
  - { id: 0, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 8, gemv_bandwidth: 30 GB/s }
gpus:
  - { id: 0, name: card, vram: 8 GiB, reserved: 1 GiB, numa: 0, gemv_bandwidth: 300 GB/s, upload_bandwidth: 12 GB/s, sync_overhead: 100 us }
drives:
  - { id: 0, name: nvme, numa: 0, read_bandwidth: 3 GB/s, read_latency: 80 us }
"#;

#[test]
fn reads_and_derives_capacities() {
    let p = HardwareProfile::from_yaml_str(BOX, Path::new("p.yaml")).unwrap();
    // 64 GiB - 8 GiB - 2 GiB = 54 GiB; 8 GiB - 1 GiB = 7 GiB.
    assert_eq!(p.ram_capacity(0), 54 << 30);
    assert_eq!(p.gpu_capacity(0), 7 << 30);
    assert_eq!(p.felt_fraction(), 0.0);
    assert!((p.gpus[0].sync_overhead.0 - 1e-4).abs() < 1e-15);
}

#[test]
fn rejects_bad_profiles_with_one_line() {
    let cases = [
        (
            BOX.replace("numa: 0, gemv", "numa: 3, gemv"),
            "gpus[0].numa",
        ),
        (BOX.replace("vram: 8 GiB", "vram: 8 GB/s"), "line"),
        (BOX.replace("vram: 8 GiB", "vram: 0"), "gpus[0].vram"),
        (
            BOX.replace("reserved: 1 GiB", "reserved: 9 GiB"),
            "gpus[0].reserved",
        ),
        (BOX.replace("3 GB/s", "0 GB/s"), "drives[0].read_bandwidth"),
        (
            BOX.replace("{ id: 0, name: nvme", "{ id: 1, name: nvme"),
            "drives[0].id",
        ),
        (
            BOX.replace("cores: 8", "cores: 8, colour: red"),
            "unknown field",
        ),
        (BOX.replace("100 us", "100"), "line"),
        (BOX.replace("staging: 2 GiB", "staging: 60 GiB"), "numa[0]"),
        (
            format!("{BOX}io_overlaps_compute: false\nfelt_fraction: 0.5\n"),
            "felt_fraction",
        ),
        (format!("{BOX}felt_fraction: .nan\n"), "felt_fraction"),
    ];
    for (text, place) in cases {
        let e = HardwareProfile::from_yaml_str(&text, Path::new("p.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.yaml: "), "{e}");
        assert!(e.contains(place), "{place} not in {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
