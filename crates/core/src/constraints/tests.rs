use super::*;
use crate::model::Model;
use crate::profile::HardwareProfile;
use residency_testkit::{file_in, OneFormatModel};

/// Two MoE layers (1 and 2) of 4 experts of 100 MB, attention on every
/// layer (10 MB), a head of 50 MB; one card of 250 MB, RAM of 1 GB, a drive.
fn instance(drive: bool) -> Instance {
    let model = OneFormatModel::new("two-layers", 3, "[1, 2]")
        .width(64)
        .expert_size("100 MB")
        .yaml(
            r#"  - { name: attn, layers: "0..=2", bytes: 10 MB, stage: dense }
  - { name: lm_head, bytes: 50 MB, stage: head }
"#,
        );
    let model = Model::from_yaml_str(&model, Path::new("m.yaml")).unwrap();
    let drives = if drive {
        "drives:\n  - { id: 0, name: d, numa: 0, read_bandwidth: 3 GB/s, read_latency: 100 us }\n"
    } else {
        ""
    };
    let profile = HardwareProfile::from_yaml_str(
        &format!(
            r#"
name: box
numa:
  - {{ id: 0, ram: 1 GB, reserved: 0, cores: 4, gemv_bandwidth: 20 GB/s }}
gpus:
  - {{ id: 0, name: a, vram: 250 MB, numa: 0, gemv_bandwidth: 300 GB/s, upload_bandwidth: 20 GB/s, sync_overhead: 10 us }}
{drives}"#
        ),
        Path::new("p.yaml"),
    )
    .unwrap();
    Instance::new(&profile, &model, &[vec![0.5; 4], vec![0.5; 4]])
}

/// One of the parsers of a constraint's text.
type Parse = fn(&str) -> std::result::Result<Constraint, String>;

fn given(source: &str, texts: &[(&str, Parse)]) -> Vec<Sourced> {
    texts
        .iter()
        .map(|(text, parse)| Sourced {
            constraint: parse(text).unwrap(),
            source: source.into(),
        })
        .collect()
}

#[test]
fn targets_and_constraints_print_as_they_parse() {
    for text in ["L3.experts.17", "L3.experts", "L3.attn", "lm_head"] {
        assert_eq!(text.parse::<Target>().unwrap().to_string(), text);
    }
    assert_eq!(
        parse_pin("L3.experts.17=gpu:0").unwrap(),
        Constraint::Pin {
            target: Target::Expert {
                layer: 3,
                expert: 17
            },
            place: Place::Gpu(0)
        }
    );
    // 20 GiB = 20 * 2^30 bytes.
    assert_eq!(
        parse_budget("gpu:0=20GiB").unwrap(),
        Constraint::Budget {
            place: Place::Gpu(0),
            bytes: Bytes(20 << 30)
        }
    );
    assert_eq!(
        parse_keep_whole("all").unwrap().to_string(),
        "keep-whole all"
    );
    assert_eq!(parse_keep_whole("L4").unwrap().to_string(), "keep-whole L4");
    assert!(parse_pin("L3.experts.x=gpu:0").is_err());
    assert!(parse_pin("L3.experts").is_err());
    assert!(parse_budget("gpu0=1GiB").is_err());
    assert!(parse_max_places("0").is_err());
    assert!(parse_keep_whole("3").is_err());
}

#[test]
fn a_file_round_trips_and_refuses_unknown_keys_with_the_nearest() {
    let dir = tempfile::tempdir().unwrap();
    let path = file_in(
        dir.path(),
        "c.yaml",
        "pins:\n  L1.experts.2: gpu:0\n  lm_head: ram:0\nbudgets:\n  gpu:0: 200 MB\nkeep_whole: [L2]\nmax_places_per_layer: 2\n",
    );
    let read = ConstraintsFile::read(&path).unwrap();
    assert_eq!(read.len(), 5);
    assert!(read.iter().all(|c| c.source == path.display().to_string()));
    let file = ConstraintsFile::of(&read);
    assert_eq!(file.parse(&path).unwrap(), read);

    std::fs::write(&path, "pin:\n  lm_head: ram:0\n").unwrap();
    let e = ConstraintsFile::read(&path).unwrap_err().to_string();
    assert!(e.contains("did you mean `pins`?"), "{e}");
    assert!(e.starts_with(&path.display().to_string()), "{e}");
    std::fs::write(&path, "pins:\n  L1.experts: gpu0\n").unwrap();
    let e = ConstraintsFile::read(&path).unwrap_err().to_string();
    assert!(e.contains("pins.L1.experts") && e.contains("gpu:0"), "{e}");
}

#[test]
fn pins_budgets_and_groups_compile_onto_the_instance() {
    let mut inst = instance(true);
    let set = given(
        "c.yaml",
        &[
            ("L1.experts.2=gpu:0", parse_pin),
            ("L2.attn=ram:0", parse_pin),
            ("gpu:0=200MB", parse_budget),
            ("L2", parse_keep_whole),
            ("3", parse_max_places),
        ],
    );
    inst.constrain(&set).unwrap();
    let expert = inst.expert_ids[0][2];
    assert!(inst.allowed(expert, Place::Gpu(0)));
    assert!(!inst.allowed(expert, Place::Ram(0)));
    // 200 MB budget under the card's 250 MB.
    assert_eq!(inst.resources.gpu_capacity_bytes[0], 200_000_000);
    // Layer 2 kept whole (1 place); layer 1 at most 3 places (of 4 experts).
    let limits: Vec<usize> = inst
        .constraints
        .groups
        .iter()
        .map(|g| g.max_places)
        .collect();
    assert_eq!(limits, vec![3, 1]);
    assert!(inst.constraints.beyond_relaxation(&inst));
}

#[test]
fn an_infeasible_set_is_one_line_naming_the_constraint_and_its_source() {
    let refused = |drive: bool, set: Vec<Sourced>| {
        let e = instance(drive).constrain(&set).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        e
    };
    // Four experts of 100 MB pinned to a 250 MB card.
    let e = refused(true, given("--pin", &[("L1.experts=gpu:0", parse_pin)]));
    assert!(e.contains("`pin L1.experts=gpu:0` (from --pin)"), "{e}");
    // A layer of 400 MB kept whole with no drive: RAM (1 GB) holds it, so
    // a 300 MB RAM budget leaves no place.
    let e = refused(
        false,
        given(
            "c.yaml",
            &[("all", parse_keep_whole), ("ram:0=300MB", parse_budget)],
        ),
    );
    assert!(e.contains("keep-whole all") && e.contains("c.yaml"), "{e}");
    // Two experts of layer 1 pinned to two places, the layer kept whole.
    let e = refused(
        true,
        given(
            "c.yaml",
            &[
                ("L1.experts.0=gpu:0", parse_pin),
                ("L1.experts.1=ram:0", parse_pin),
                ("L1", parse_keep_whole),
            ],
        ),
    );
    assert!(e.contains("keep-whole L1"), "{e}");
    // Unknown layer, expert, trunk name, place.
    for (text, parse) in [
        ("L0.experts=gpu:0", parse_pin as Parse),
        ("L1.experts.9=gpu:0", parse_pin),
        ("L1.mlp=gpu:0", parse_pin),
        ("lm_head=gpu:3", parse_pin),
        ("lm_head=disk:0", parse_pin),
        ("disk:0=1GB", parse_budget),
    ] {
        let e = refused(true, given("--pin", &[(text, parse)]));
        assert!(e.starts_with("--pin: "), "{e}");
    }
}
