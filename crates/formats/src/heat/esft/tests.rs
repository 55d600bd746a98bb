//! Tests of `esft`.

use super::*;
use crate::heat::common::test_util::{model_m, one_line, shared_data};

/// Writes a task folder with `layers` files, each `lines`.
fn task(root: &Path, name: &str, files: &[(u64, &str)]) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for (layer, text) in files {
        std::fs::write(dir.join(format!("expert_weights_{layer}.txt")), text).unwrap();
    }
    dir
}

const TOKEN2: &str =
    "0\t1\t2\t3\t4\t5\t5\t6\t7\t8\t9\t10\t\t.1\t.1\t.1\t.1\t.1\t.1\t.1\t.1\t.1\t.1\t.1\t.1\n";
const TOKEN1: &str = "1\t2\t3\t4\t5\t6\t\t.1\t.1\t.1\t.1\t.1\t.1\n";

#[test]
fn small_data_set() {
    let root = tempfile::tempdir().unwrap();
    task(root.path(), "law", &[(1, TOKEN2), (2, TOKEN2)]);
    task(root.path(), "intent", &[(1, TOKEN1), (2, TOKEN1)]);
    std::fs::write(root.path().join("law/summary.json"), "{}").unwrap();
    let trace = read_trace(root.path(), &HeatContext::default(), &mut vec![]).unwrap();
    // law: 1 line of 2 tokens; intent: 1 line of 1 token -> 3 tokens.
    assert_eq!(trace.tokens.len(), 3);
    assert_eq!(trace.tokens[0].seq, "intent/0");
    assert_eq!(trace.tokens[2].routes[1], vec![5, 6, 7, 8, 9, 10]);
    assert_eq!(trace.experts, vec![64, 64]);
    let h = trace.heat();
    // Expert 5 is chosen by both law tokens and the intent token in each layer: 3.
    assert_eq!(h.total.counts[0][5], 3.0);
    assert_eq!(h.categories["law"].tokens, Some(vec![2, 2]));
    // One task folder alone: category = folder name.
    let t = read_trace(
        &root.path().join("law"),
        &HeatContext::default(),
        &mut vec![],
    )
    .unwrap();
    assert_eq!(t.categories(), ["law"]);
}

#[test]
fn bad_inputs_name_the_place() {
    let root = tempfile::tempdir().unwrap();
    let ctx = model_m(&[1, 2], &[8, 8]);
    let none = HeatContext::default();
    // (task folder, layer files, file named by the error, place, model)
    type Case<'a> = (
        &'a str,
        Vec<(u64, &'a str)>,
        &'a str,
        &'a str,
        &'a HeatContext,
    );
    let cases: Vec<Case> = vec![
        (
            "a",
            vec![(1, TOKEN1), (2, "1\t2\n")],
            "expert_weights_2.txt",
            "line 1: no TAB TAB",
            &none,
        ),
        (
            "b",
            vec![(1, TOKEN1), (2, "1\tx\t\t.1\t.1\n")],
            "expert_weights_2.txt",
            "line 1, field 2 (expert id)",
            &none,
        ),
        (
            "c",
            vec![(1, TOKEN1), (2, "1\t2\t\t.1\t.1\n")],
            "expert_weights_2.txt",
            "not a multiple of 6",
            &none,
        ),
        (
            "d",
            vec![(1, TOKEN1), (2, "1\t2\t3\t4\t5\t6\t\t.1\n")],
            "expert_weights_2.txt",
            "1 gate scores",
            &none,
        ),
        (
            "e",
            vec![(1, TOKEN1), (2, TOKEN2)],
            "expert_weights_2.txt",
            "line 1: has 2 tokens",
            &none,
        ),
        (
            "f",
            vec![(1, TOKEN1), (2, "")],
            "expert_weights_2.txt",
            "line 1: has 0 lines",
            &none,
        ),
        (
            "g",
            vec![(1, TOKEN1), (3, TOKEN1)],
            "g",
            "expert_weights_2.txt is missing",
            &none,
        ),
        (
            "h",
            vec![(1, TOKEN1), (2, TOKEN1), (3, TOKEN1)],
            "expert_weights_3.txt",
            "file name: layer 3 is not an MoE layer",
            &ctx,
        ),
        (
            "i",
            vec![(1, TOKEN1), (2, TOKEN2)],
            "expert_weights_2.txt",
            "line 1, field 10 (expert id): expert 8 does not exist",
            &ctx,
        ),
        (
            "j",
            vec![(0, TOKEN1), (1, TOKEN1)],
            "expert_weights_0.txt",
            "file name",
            &none,
        ),
    ];
    for (name, files, file, place, ctx) in cases {
        let dir = task(root.path(), name, &files);
        one_line(read_trace(&dir, ctx, &mut vec![]).unwrap_err(), file, place);
    }
    let dir = root.path().join("a");
    one_line(
        read_trace(&dir.join("expert_weights_1.txt"), &none, &mut vec![]).unwrap_err(),
        "expert_weights_1.txt",
        "path",
    );
}

#[test]
fn real_data() {
    let Some(dir) = shared_data("traces/esft_deepseek_v2_lite") else {
        return;
    };
    let trace = read_trace(&dir, &HeatContext::default(), &mut vec![]).unwrap();
    assert_eq!(trace.experts, vec![64; 26]);
    let h = trace.heat();
    // Tokens kept per task (SOURCES.md 1 cut table); every token is in all 26 layers.
    for (task, tokens) in [
        ("intent", 2068),
        ("law", 2184),
        ("summary", 2255),
        ("translation", 2258),
    ] {
        let t = &h.categories[task];
        assert_eq!(t.tokens, Some(vec![tokens; 26]), "{task}");
        for row in &t.counts {
            assert_eq!(
                row.iter().sum::<f64>(),
                (TOP_K as u64 * tokens) as f64,
                "{task}: 6 selections per token"
            );
        }
    }
    assert_eq!(h.total.tokens, Some(vec![2068 + 2184 + 2255 + 2258; 26]));
    // With the model: model layers 1..=26 are the MoE layers, same result.
    let ctx = HeatContext {
        moe_layers: Some((1..=26).collect()),
        experts: Some(vec![64; 26]),
        ..Default::default()
    };
    assert_eq!(
        read_trace(&dir.join("law"), &ctx, &mut vec![])
            .unwrap()
            .heat()
            .total,
        h.categories["law"]
    );
}
