//! Tests of `detect`.

use super::*;
use crate::system::{PciFacts, PcieLink};

fn node(sysfs_id: u32, gib: u64, cpus: std::ops::Range<u32>) -> NodeFacts {
    let cpus: Vec<u32> = cpus.collect();
    NodeFacts {
        sysfs_id,
        ram_bytes: gib << 30,
        ram_source: format!("MemTotal in /sys/devices/system/node/node{sysfs_id}/meminfo"),
        core_cpus: cpus.iter().copied().step_by(2).collect(),
        cpus,
    }
}

/// An H200 node as sysfs and the driver of the project's H200 machine
/// show it (nvidia-smi there: 143771 MiB, PCIe gen 5 x16).
fn h200_facts() -> Facts {
    Facts {
        host: "h200-box".into(),
        nodes: vec![node(0, 1024, 0..112), node(1, 1024, 112..224)],
        gpus: vec![GpuFacts {
            label: "cuda:0".into(),
            name: "NVIDIA H200".into(),
            vram_bytes: 143771 << 20,
            used_bytes: Some(600 << 20),
            peak_memory: Some((
                4.8e12,
                "memory clock 3201 MHz x 6144-bit bus x 2 (double data rate), from the CUDA driver"
                    .into(),
            )),
            pci: Some(PciFacts {
                bus_id: "0000:19:00.0".into(),
                numa: Some(1),
                link: Some(PcieLink {
                    gigatransfers: 32.0,
                    width: 16,
                    detail: "0000:19:00.0: max 32.0 GT/s x16, now 32.0 GT/s x16".into(),
                }),
            }),
        }],
        no_gpu: Vec::new(),
        model_dir: "/data/models".into(),
        drive: Ok(BlockFacts {
            name: "nvme2n1".into(),
            via: "ext4 on /dev/nvme2n1 (259:4)".into(),
            rotational: Some(false),
            model: Some("SAMSUNG MZWLR3T8HBLS".into()),
            numa: None,
            slaves: Vec::new(),
        }),
        notes: Vec::new(),
    }
}

#[test]
fn an_h200_node_names_the_card_its_link_and_its_node() {
    let doc = profile_of(&h200_facts());
    let text = doc.to_yaml_checked(Path::new("box.yaml")).unwrap();
    let g = &doc.profile.gpus[0];
    assert_eq!(g.name, "NVIDIA H200");
    assert_eq!(g.numa, 1);
    // 143771 MiB = 140.40 GiB, rounded down.
    assert_eq!(doc::size_text(g.vram), "140.4 GiB");
    // 0.7 x 4.8 TB/s; 0.8 x 63.0 GB/s (PCIe 5.0 x16).
    assert_eq!(doc::rate_text(g.gemv_bandwidth), "3.36 TB/s");
    assert_eq!(doc::rate_text(g.upload_bandwidth), "50.41 GB/s");
    for needle in [
            "# cuda:0 NVIDIA H200, PCI 0000:19:00.0, PCIe 5.0 x16, NUMA node 1",
            "numa: 1                        # detected: numa_node of /sys/bus/pci/devices/0000:19:00.0 says node 1",
            "upload_bandwidth: 50.41 GB/s   # default: 0.8 x PCIe 5.0 x16 (63.0 GB/s",
            "sync_overhead: 34 us",
            "name: \"nvme2n1\"",
            "# default: sysfs gives no NUMA node for nvme2n1: node 0",
        ] {
            assert!(text.contains(needle), "`{needle}` missing from\n{text}");
        }
    // 1 TiB nodes: 1/8 reserved, 1/32 staging; 56 cores x 1.4 GB/s.
    let n = &doc.profile.numa[1];
    assert_eq!((n.reserved, n.staging), (Bytes(128 << 30), Bytes(32 << 30)));
    assert_eq!(doc::rate_text(n.gemv_bandwidth), "78.4 GB/s");
    every_value_has_an_origin(&doc);
}

#[test]
fn no_gpu_and_no_drive_is_a_valid_cpu_only_profile() {
    let mut facts = h200_facts();
    facts.gpus.clear();
    facts.no_gpu = vec!["CUDA: the driver (libcuda.so) was not found".into()];
    facts.drive = Err("/dev/shm/m is on tmpfs (tmpfs), which no block device backs".into());
    let doc = profile_of(&facts);
    let text = doc.to_yaml_checked(Path::new("box.yaml")).unwrap();
    assert!(text.contains("gpus: []"), "{text}");
    assert!(text.contains("# detected: no GPU: CUDA: the driver (libcuda.so) was not found"));
    assert!(text.contains("drives: []") && text.contains("on tmpfs"));
    every_value_has_an_origin(&doc);
}

/// Every key of every list item, and every top-level value but the
/// name's source, carries a `detected`/`measured`/`default` comment.
fn every_value_has_an_origin(doc: &ProfileDoc) {
    let text = doc.to_yaml();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let key = line.trim_start().trim_start_matches("- ");
        if key.starts_with("source:") || line.ends_with(':') {
            continue;
        }
        assert!(
            ["# detected: ", "# measured: ", "# default: "]
                .iter()
                .any(|o| line.contains(o)),
            "no origin on `{line}`"
        );
    }
}

#[test]
fn this_machine_gives_a_profile_that_validates() {
    let doc = detect(&DetectOptions {
        model_dir: PathBuf::from("."),
    })
    .unwrap();
    let text = doc.to_yaml_checked(Path::new("box.yaml")).unwrap();
    let again = HardwareProfile::from_yaml_str(&text, Path::new("box.yaml")).unwrap();
    assert_eq!(again, doc.profile);
    assert!(!again.numa.is_empty() && again.numa.iter().all(|n| n.cores > 0));
    every_value_has_an_origin(&doc);
}

#[test]
fn a_missing_model_directory_is_one_line() {
    let e = detect(&DetectOptions {
        model_dir: PathBuf::from("/no/such/dir"),
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("/no/such/dir: is not a directory; give --model-dir"),
        "{e}"
    );
}

use crate::doc;
