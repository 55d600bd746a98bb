//! Miss costs (DESIGN 6 "felt wait"): the seconds one physical miss of a
//! layer's expert adds to the critical path. Calibrated from engine logs as
//! felt-wait seconds divided by physical misses (never by loads per token,
//! the mistake of Colibri #924); without calibration every read is taken as
//! felt: latency + bytes / bandwidth of the profile's fastest drive.

use residency_planner::profile::HardwareProfile;

/// Seconds per physical miss from a log's totals.
pub fn miss_seconds_from_log(felt_wait_seconds: f64, physical_misses: u64) -> f64 {
    felt_wait_seconds / physical_misses as f64
}

/// Seconds to read `bytes` from the profile's fastest drive (highest read
/// bandwidth; ties: lowest latency). `None` for a profile without drives.
pub fn read_seconds(profile: &HardwareProfile, bytes: u64) -> Option<f64> {
    let drive = profile.drives.iter().max_by(|a, b| {
        a.read_bandwidth
            .0
            .total_cmp(&b.read_bandwidth.0)
            .then(b.read_latency.0.total_cmp(&a.read_latency.0))
    })?;
    Some(drive.read_latency.0 + bytes as f64 / drive.read_bandwidth.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn colibri_924_divides_by_physical_misses() {
        // 1.4 s felt over 300 physical misses = 4.6667 ms per miss; dividing
        // by the 525 loads per token instead would give 2.667 ms.
        let m = miss_seconds_from_log(1.4, 300);
        assert!((m - 0.004_666_7).abs() < 1e-7, "{m}");
    }

    #[test]
    fn uncalibrated_misses_read_from_the_fastest_drive() {
        let yaml = "
name: box
numa:
  - { id: 0, ram: 64 GiB, reserved: 8 GiB, staging: 2 GiB, cores: 8, gemv_bandwidth: 30 GB/s }
drives:
  - { id: 0, name: sata, numa: 0, read_bandwidth: 500 MB/s, read_latency: 100 us }
  - { id: 1, name: nvme, numa: 0, read_bandwidth: 4 GB/s, read_latency: 80 us }
";
        let profile = HardwareProfile::from_yaml_str(yaml, Path::new("box.yaml")).unwrap();
        // nvme: 80 us + 8 MB / 4 GB/s = 80 us + 2 ms.
        let s = read_seconds(&profile, 8_000_000).unwrap();
        assert!((s - 0.002_08).abs() < 1e-12, "{s}");
    }
}
