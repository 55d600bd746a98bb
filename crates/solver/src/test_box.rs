//! The hardware of the solver's unit tests: one NUMA node, one card and
//! one drive, with the memory sizes each test needs.

use residency_core::profile::HardwareProfile;
use std::path::Path;

/// One NUMA node of 40 GB/s, one card of 300 GB/s (uploads at 20 GB/s,
/// 30 us a sync) and one 6 GB/s drive, reads overlapping compute; RAM and
/// VRAM and their reserves as given (`"4 GiB"`), and `felt_fraction`
/// where given.
pub(crate) fn one_card_box(
    (ram, ram_reserved): (&str, &str),
    (vram, vram_reserved): (&str, &str),
    felt_fraction: Option<f64>,
) -> HardwareProfile {
    let felt = felt_fraction.map_or(String::new(), |f| format!("felt_fraction: {f}\n"));
    HardwareProfile::from_yaml_str(
        &format!(
            "name: box\n\
             numa:\n  - {{ id: 0, ram: {ram}, reserved: {ram_reserved}, cores: 16, gemv_bandwidth: 40 GB/s }}\n\
             gpus:\n  - {{ id: 0, name: card, vram: {vram}, reserved: {vram_reserved}, numa: 0, \
             gemv_bandwidth: 300 GB/s, upload_bandwidth: 20 GB/s, sync_overhead: 30 us }}\n\
             drives:\n  - {{ id: 0, name: nvme, numa: 0, read_bandwidth: 6 GB/s, read_latency: 80 us }}\n\
             io_overlaps_compute: true\n{felt}"
        ),
        Path::new("box.yaml"),
    )
    .unwrap()
}
