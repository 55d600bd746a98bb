//! The C ABI end to end (design §7): the committed `include/residency.h` is
//! exactly what cbindgen makes of `src/ffi/` (the drift test), and a C
//! program built against it and the static library opens a plan made for a
//! generated checkpoint, acquires experts (one the plan keeps in RAM, one it
//! leaves on the disk) and a trunk component whose bytes equal plain reads
//! of their tensors, reports a route, reads heat and telemetry, gets
//! one-line errors, closes. A second C program uses the KV prefix cache:
//! keys, lookup, insert, release. A third abuses every entry point from
//! 16 threads at once: NULL handles and arguments, missing files, sizes
//! that do not fit, handles closed or released already, of another kind or
//! made up.

use residency_testkit as common;

use residency::{RESIDENCY_ERR_ARGUMENT, RESIDENCY_ERR_NOT_FOUND};
use residency_core::model::Model;
use residency_core::plan::Plan;
use residency_formats::heat::{read_json_str, HeatContext};
use residency_formats::inputs::{InputPaths, Inputs, LoadedModel};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::identity::ObjectKey;
use residency_solver::{self as solve, SolveOptions};
use std::ffi::OsString;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const HEADER: &str = "include/residency.h";

/// What the static library needs linked after it, as rustc's `--print
/// native-static-libs` lists it: dl for CUDA and Vulkan loaded at run time,
/// the rest for Rust's std. Nothing in the library is C++.
const LINK_FLAGS: &[&str] = &[
    "-ldl",
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-lc",
];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The header cbindgen makes of the crate: `lib.rs`, then its modules in
/// the order it declares them.
fn generated_header() -> String {
    let config = cbindgen::Config {
        language: cbindgen::Language::C,
        header: Some(
            "/* residency: the C ABI of the object store and the KV prefix cache; link libresidency.a. */".into(),
        ),
        autogen_warning: Some(
            "/* Generated from crates/capi/src/ by cbindgen; do not edit. Regenerate with\n   RESIDENCY_WRITE_HEADER=1 cargo test --release -p residency-capi --test c_abi */".into(),
        ),
        include_guard: Some("RESIDENCY_H".into()),
        cpp_compat: true,
        usize_is_size_t: true,
        // Declaration order: the life of a handle, top to bottom.
        sort_by: cbindgen::SortKey::None,
        ..cbindgen::Config::default()
    };
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir().join("src/lib.rs"))
        .generate()
        .expect("cbindgen reads src/");
    let mut text = Vec::new();
    bindings.write(&mut text);
    String::from_utf8(text).expect("cbindgen writes UTF-8")
}

#[test]
fn committed_header_matches_the_rust_code() {
    let path = crate_dir().join(HEADER);
    let generated = generated_header();
    if std::env::var_os("RESIDENCY_WRITE_HEADER").is_some() {
        std::fs::write(&path, &generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "crates/capi/{HEADER} differs from what cbindgen makes of src/: regenerate it with \
         `RESIDENCY_WRITE_HEADER=1 cargo test --release -p residency-capi --test c_abi` and commit it"
    );
}

/// `libresidency.a` of this build: beside the test executable's
/// `deps/` folder, or the newest one inside it.
fn static_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let uplifted = deps.parent().unwrap().join("libresidency.a");
    let in_deps = std::fs::read_dir(deps)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("libresidency") && name.ends_with(".a")
        });
    let modified = |p: &PathBuf| p.metadata().and_then(|m| m.modified()).ok();
    std::iter::once(uplifted)
        .filter(|p| p.exists())
        .chain(in_deps)
        .max_by_key(modified)
        .unwrap_or_else(|| panic!("no libresidency.a near {}", exe.display()))
}

/// `common::tiny_checkpoint` (two MoE layers of 4 experts) and a plan for
/// it on a CPU-only box whose RAM holds the trunk and three experts: the
/// rest stay on the disk.
fn checkpoint_and_plan(dir: &Path) -> (Checkpoint, PathBuf) {
    let checkpoint = common::tiny_checkpoint(dir);
    let bytes = |key: &ObjectKey| checkpoint.object_bytes(key);
    let trunk_bytes: u64 = checkpoint
        .objects
        .keys()
        .filter(|k| matches!(k, ObjectKey::Trunk { .. }))
        .map(bytes)
        .sum();
    let expert_bytes = bytes(&ObjectKey::Expert {
        layer: 0,
        expert: 0,
    });
    let profile = dir.join("cpu-only.yaml");
    std::fs::write(
        &profile,
        format!(
            "name: cpu-only\n\
             numa:\n  - {{ id: 0, ram: {}, cores: 4, gemv_bandwidth: 20 GB/s }}\n\
             drives:\n  - {{ id: 0, name: nvme, numa: 0, read_bandwidth: 3 GB/s, read_latency: 80 us }}\n",
            trunk_bytes + 3 * expert_bytes
        ),
    )
    .unwrap();
    let described = Model::validate(checkpoint.description(), &checkpoint.dir).unwrap();
    let loaded = LoadedModel {
        model: described,
        sha256: checkpoint.identity.content_id.clone(),
    };
    let paths = InputPaths {
        profile: Some(profile),
        ..InputPaths::default()
    };
    let mut inputs = Inputs::load_with_model(&paths, Some(loaded)).unwrap();
    let inst = inputs.instance().unwrap();
    let solution = solve::solve(
        &inst,
        SolveOptions {
            time_limit_seconds: 1.0,
            ..SolveOptions::default()
        },
    )
    .unwrap();
    let plan = Plan::new(&inst, &solution, inputs.refs.clone(), 1.0);
    let plan_path = dir.join("plan.json");
    plan.write(&plan_path).unwrap();
    (checkpoint, plan_path)
}

/// FNV-1a, 64 bits, as the C program computes it.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An object's bytes, read from its shards with plain file reads.
fn plain_bytes(checkpoint: &Checkpoint, key: &ObjectKey) -> Vec<u8> {
    let mut bytes = Vec::new();
    for e in checkpoint.extents(key) {
        let mut tensor = vec![0u8; e.len as usize];
        std::fs::File::open(&e.shard)
            .unwrap()
            .read_exact_at(&mut tensor, e.offset)
            .unwrap();
        bytes.extend(tensor);
    }
    bytes
}

/// The rest of the line of `output` that starts with `tag `, the `n`th such.
fn line<'a>(output: &'a str, tag: &str, n: usize) -> &'a str {
    output
        .lines()
        .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
        .nth(n)
        .unwrap_or_else(|| panic!("no line {n} tagged `{tag}` in:\n{output}"))
}

#[test]
fn a_c_program_acquires_experts_through_the_header() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (checkpoint, plan_path) = checkpoint_and_plan(dir.path());
    let plan = Plan::read(&plan_path).unwrap();
    // One expert the plan keeps in RAM, one it leaves on the disk (loaded on
    // demand); transformer layers, as the checkpoint numbers them.
    let moe_layers = checkpoint.config.moe_layers();
    let place_of = |layer: usize, expert: usize| &plan.places[plan.experts[layer][expert]];
    let find = |on_disk: bool| {
        (0..plan.experts.len())
            .flat_map(|l| (0..plan.experts[l].len()).map(move |e| (l, e)))
            .find(|&(l, e)| place_of(l, e).starts_with("disk") == on_disk)
            .map(|(l, e)| (moe_layers[l] as u32, e as u32))
            .unwrap_or_else(|| panic!("the plan has no expert with on_disk = {on_disk}"))
    };
    let chosen = [find(false), find(true)];

    let program = dir.path().join("use_residency");
    compile_c("use_residency.c", &program);
    let mut args = vec![
        plan_path.clone().into_os_string(),
        checkpoint.dir.clone().into(),
    ];
    for (layer, expert) in chosen {
        args.extend([layer.to_string().into(), expert.to_string().into()]);
    }
    let stdout = run_c(&program, &args);

    // Each object the program acquired (the experts, then `lm_head`), what
    // it printed for it, and whether the plan leaves it on the disk.
    let mut acquired: Vec<(String, ObjectKey, bool)> = chosen
        .iter()
        .zip([false, true])
        .map(|(&(layer, expert), on_disk)| {
            let key = ObjectKey::Expert { layer, expert };
            (format!("expert {layer} {expert}"), key, on_disk)
        })
        .collect();
    let lm_head = plan.trunk.iter().find(|t| t.name == "lm_head").unwrap();
    acquired.push((
        "trunk lm_head".into(),
        ObjectKey::Trunk {
            name: "lm_head".into(),
            layer: None,
        },
        lm_head.place.starts_with("disk"),
    ));
    for (what, key, _) in &acquired {
        let plain = plain_bytes(&checkpoint, key);
        let expected = format!(
            "{what} bytes {} fnv1a64 {:016x}",
            plain.len(),
            fnv1a64(&plain)
        );
        assert!(
            stdout.lines().any(|l| l == expected),
            "`{expected}` missing from:\n{stdout}"
        );
    }
    // The route (experts 0 and 1 of MoE ordinal 0) is the whole live heat,
    // in a table the planner reads.
    let heat = line(&stdout, "heat", 0);
    let model = Model::validate(checkpoint.description(), &checkpoint.dir).unwrap();
    let table = read_json_str(heat, Path::new("live"), &HeatContext::for_model(&model))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(table.total.counts, [vec![1.0, 1.0, 0.0, 0.0], vec![0.0; 4]]);
    // Telemetry: the loads read the plan's residents and, on demand, what
    // it leaves on the disk; the leases handed out every acquired byte.
    let telemetry: serde_json::Value = serde_json::from_str(line(&stdout, "telemetry", 0)).unwrap();
    let resident_bytes: u64 = plan.usage.iter().map(|u| u.used_bytes).sum();
    let bytes = |(_, key, _): &(String, ObjectKey, bool)| checkpoint.object_bytes(key);
    let read_on_demand: u64 = acquired.iter().filter(|a| a.2).map(bytes).sum();
    let handed_out: u64 = acquired.iter().map(bytes).sum();
    assert_eq!(
        telemetry["physical_bytes"].as_u64(),
        Some(resident_bytes + read_on_demand)
    );
    assert!(telemetry["logical_bytes"].as_u64().unwrap() >= handed_out);
    assert!(stdout.contains("\nresidency_logical_bytes "), "{stdout}");
    // Errors: a status and one line naming what was wrong.
    let not_found = line(&stdout, "error", 0);
    assert!(
        not_found.starts_with(&format!(
            "{RESIDENCY_ERR_NOT_FOUND} the plan has no expert 0 of layer 9999"
        )),
        "{not_found}"
    );
    let null = line(&stdout, "error", 1);
    assert_eq!(
        null,
        format!("{RESIDENCY_ERR_ARGUMENT} `out_lease` is NULL; pass a valid pointer")
    );
    assert!(stdout.ends_with("closed\n"), "{stdout}");
}

/// Whether there is a C compiler (`cc`) to build the test programs with;
/// where there is none, says the test is skipped.
fn have_cc() -> bool {
    let found = Command::new("cc").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: no C compiler (`cc`) on this machine");
    }
    found
}

/// Runs a compiled test program with `args`: its standard output, once it
/// has exited successfully.
fn run_c(program: &Path, args: &[OsString]) -> String {
    let ran = Command::new(program).args(args).output().unwrap();
    let stdout = String::from_utf8(ran.stdout).unwrap();
    assert!(
        ran.status.success(),
        "the C program failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    stdout
}

/// Compiles `tests/c/<source>` against the header and the static library.
fn compile_c(source: &str, program: &Path) {
    let compiled = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(program)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(crate_dir().join("tests/c").join(source))
        .arg(static_library())
        .args(LINK_FLAGS)
        .output()
        .unwrap();
    assert!(
        compiled.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&compiled.stderr)
    );
}

#[test]
fn a_c_program_uses_the_kv_prefix_cache() {
    use residency::RESIDENCY_ERR_ARGUMENT;
    use residency_kv::{block_keys, KvIdentity};
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("use_kv");
    compile_c("use_kv.c", &program);
    let stdout = run_c(&program, &[]);
    // The keys the Rust API makes of the same identity and tokens.
    let identity = KvIdentity {
        model: "sha256:model".into(),
        chat_template: "chatml".into(),
        ..KvIdentity::default()
    };
    let tokens: Vec<u32> = (100..110).collect();
    let keys = block_keys(&identity.digest(), b"tenant-a", &tokens, 4);
    let hex: Vec<String> = keys.iter().map(|k| k.to_hex()).collect();
    assert_eq!(line(&stdout, "keys", 0), format!("2 {}", hex.join(" ")));
    assert_eq!(line(&stdout, "cold", 0), "0");
    // Block k holds bytes k * 16 + b, b < 12, as the program wrote them.
    let served: Vec<String> = (0..2u8)
        .map(|k| {
            let bytes: Vec<u8> = (0..12).map(|b| k * 16 + b).collect();
            format!("12:{:016x}", fnv1a64(&bytes))
        })
        .collect();
    assert_eq!(line(&stdout, "warm", 0), format!("2 {}", served.join(" ")));
    assert!(
        line(&stdout, "error", 0).starts_with(&format!(
            "{RESIDENCY_ERR_ARGUMENT} KV insert of block {}: 5 bytes for 4 tokens",
            hex[0]
        )),
        "{stdout}"
    );
    assert_eq!(line(&stdout, "counters", 0), "lookups 2 hits 2 inserted 2");
    assert!(stdout.ends_with("closed\n"), "{stdout}");
}

#[test]
fn every_entry_point_refuses_abuse_from_many_threads() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("abuse");
    compile_c("abuse.c", &program);
    let stdout = run_c(&program, &[]);
    // 16 threads x 50 rounds x the `CHECK`ed calls of a round.
    let source = std::fs::read_to_string(crate_dir().join("tests/c/abuse.c")).unwrap();
    let checks = source.matches("CHECK(residency_").count();
    assert_eq!(checks, 44);
    assert_eq!(stdout, format!("ok {}\n", 16 * 50 * checks));
}
