//! Tests of `doc`.

use super::*;

#[test]
fn unit_text_reads_back_exactly() {
    for bytes in [
        0,
        1,
        4096,
        8 << 30,
        141_000_000_000,
        2_590_000_000,
        16_815_525_887,
    ] {
        let text = size_text(Bytes(bytes));
        assert_eq!(parse_size(&text), Ok(Bytes(bytes)), "{text}");
    }
    assert_eq!(size_text(Bytes(8 << 30)), "8 GiB");
    assert_eq!(size_text(Bytes(141_000_000_000)), "141 GB");
    assert_eq!(size_text(Bytes(512 << 20)), "512 MiB");
    for rate in [25e9, 3.36e12, 12.5e9, 1.0e9 / 3.0, 150e6] {
        let text = rate_text(BytesPerSecond(rate));
        assert_eq!(parse_rate(&text), Ok(BytesPerSecond(rate)), "{text}");
    }
    assert_eq!(rate_text(BytesPerSecond(3.36e12)), "3.36 TB/s");
    assert_eq!(rate_text(BytesPerSecond(150e6)), "150 MB/s");
    for time in [0.0, 34e-6, 1.0 / 3.0, 8e-3] {
        let text = time_text(Seconds(time));
        assert_eq!(parse_time(&text), Ok(Seconds(time)), "{text}");
    }
    assert_eq!(time_text(Seconds(34e-6)), "34 us");
    assert_eq!(time_text(Seconds(0.0)), "0 s");
    assert_eq!(size_text(Bytes(0)), "0");
}

#[test]
fn rounding_keeps_four_digits_and_the_direction() {
    assert_eq!(rate_text(round_rate(31_234_567_890.0)), "31.23 GB/s");
    assert_eq!(time_text(round_time(0.000_034_256_7)), "34.26 us");
    // 24683652 kB = 23.5401 GiB: down to 23.54 GiB, up to 23.55 GiB.
    let bytes = 24_683_652 * 1024;
    assert_eq!(size_text(round_size(bytes, false)), "23.54 GiB");
    assert_eq!(size_text(round_size(bytes, true)), "23.55 GiB");
    assert_eq!(size_text(round_size(700 << 20, true)), "700 MiB");
}

#[test]
fn comments_survive_a_rewrite_and_new_origins_replace_them() {
    let text = "\
# A box.
name: box
numa:
  # the only node
  - id: 0                # detected: node0
    ram: 64 GiB          # detected: meminfo
    reserved: 8 GiB
    staging: 2 GiB
    cores: 8
    # Colibri: 39 GB/s on this CPU
    gemv_bandwidth: 39 GB/s
gpus:
  # RTX 5090: 32 GB
  - { id: 0, name: \"RTX 5090\", vram: 32 GiB, reserved: 3.3 GB, numa: 0, gemv_bandwidth: 1254 GB/s, upload_bandwidth: 56 GB/s, sync_overhead: 34 us }
drives: []
io_overlaps_compute: true  # assumed
";
    let mut doc = ProfileDoc::parse(text, Path::new("box.yaml")).unwrap();
    assert_eq!(doc.header, ["A box."]);
    assert_eq!(doc.origin("numa[0].ram"), Some("detected: meminfo"));
    assert_eq!(doc.notes["numa[0]"].above, ["the only node"]);
    assert_eq!(
        doc.notes["numa[0].gemv_bandwidth"].above,
        ["Colibri: 39 GB/s on this CPU"]
    );
    assert_eq!(doc.notes["gpus[0]"].above, ["RTX 5090: 32 GB"]);
    assert_eq!(doc.origin("io_overlaps_compute"), Some("assumed"));
    // Rewritten, it reads back the same, comments included.
    let again = ProfileDoc::parse(&doc.to_yaml(), Path::new("box.yaml")).unwrap();
    assert_eq!(again, doc);
    assert!(doc.to_yaml().contains("reserved: 3.3 GB"));
    // A measured value takes its new origin, and loses the old comment.
    doc.profile.numa[0].gemv_bandwidth = round_rate(41.27e9);
    doc.set(
        "numa[0].gemv_bandwidth",
        Origin::Measured("median 41.3 GB/s over 5 trials [40.1..42.0]".into()),
    );
    let text = doc.to_yaml_checked(Path::new("box.yaml")).unwrap();
    assert!(text.contains(
            "    gemv_bandwidth: 41.27 GB/s     # measured: median 41.3 GB/s over 5 trials [40.1..42.0]\n"
        ), "{text}");
    assert!(!text.contains("Colibri: 39"));
}

#[test]
fn every_shipped_profile_rewrites_to_itself() {
    let dir = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../profiles/hardware"
    ));
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let doc = ProfileDoc::read(&path).unwrap();
        let text = doc.to_yaml_checked(&path).unwrap();
        assert_eq!(
            ProfileDoc::parse(&text, &path).unwrap(),
            doc,
            "{}",
            path.display()
        );
        count += 1;
    }
    assert!(count >= 4);
    // Hosts and their references too.
    let hosts = "name: two\nnuma:\n  - { id: 0, ram: 8 GiB, cores: 4, gemv_bandwidth: 9 GB/s, host: a }\n\
                     hosts:\n  - { name: a, network_bandwidth: 12.5 GB/s, network_latency: 5 us }\n";
    let doc = ProfileDoc::parse(hosts, Path::new("two.yaml")).unwrap();
    let text = doc.to_yaml_checked(Path::new("two.yaml")).unwrap();
    assert!(
        text.contains("    host: \"a\"") && text.contains("network_latency: 5 us"),
        "{text}"
    );
}

#[test]
fn comments_inside_quotes_stay_values() {
    assert_eq!(
        split_comment("name: \"a # b\"  # c"),
        ("name: \"a # b\"", Some("c".into()))
    );
    assert_eq!(split_comment("name: a#b"), ("name: a#b", None));
}
