//! Tests of `trace`.

use super::*;

fn token(seq: &str, category: Option<&str>, routes: Vec<Vec<u32>>) -> TokenRoutes {
    TokenRoutes {
        seq: seq.into(),
        pos: 0,
        category: category.map(Into::into),
        routes,
    }
}

#[test]
fn heat_counts_selections_and_observed_tokens() {
    // Two layers of 3 experts, top-2. Token a (law): L0 {0,1}, L1 {1,2};
    // token b (code): L0 {0,2}, L1 not observed; token c (none): L0 {0,1}.
    // Total L0: e0 = 3 (a,b,c), e1 = 2 (a,c), e2 = 1 (b); N0 = 3.
    // Total L1: e1 = 1, e2 = 1; N1 = 1 (only a observed there).
    let tokens = vec![
        token("s", Some("law"), vec![vec![0, 1], vec![1, 2]]),
        token("s", Some("code"), vec![vec![0, 2]]),
        token("t", None, vec![vec![0, 1], vec![]]),
    ];
    let trace = Trace::build(HeatFormat::Jsonl, &HeatContext::default(), 2, 3, tokens);
    assert_eq!(trace.tokens[1].routes, vec![vec![0, 2], vec![]]);
    let heat = trace.heat();
    assert_eq!(
        heat.total.counts,
        vec![vec![3.0, 2.0, 1.0], vec![0.0, 1.0, 1.0]]
    );
    assert_eq!(heat.total.tokens, Some(vec![3, 1]));
    assert_eq!(
        heat.categories["law"].counts,
        vec![vec![1.0, 1.0, 0.0], vec![0.0, 1.0, 1.0]]
    );
    assert_eq!(heat.categories["code"].tokens, Some(vec![1, 0]));
    assert_eq!(trace.categories(), vec!["code", "law"]);
}

#[test]
fn width_comes_from_model_then_declared_then_ids() {
    let tokens = vec![token("s", None, vec![vec![5]])];
    let t = Trace::build(
        HeatFormat::Jsonl,
        &HeatContext::default(),
        1,
        0,
        tokens.clone(),
    );
    assert_eq!(t.experts, vec![6]);
    let t = Trace::build(
        HeatFormat::Jsonl,
        &HeatContext::default(),
        1,
        8,
        tokens.clone(),
    );
    assert_eq!(t.experts, vec![8]);
    let ctx = HeatContext {
        experts: Some(vec![16]),
        ..Default::default()
    };
    assert_eq!(
        Trace::build(HeatFormat::Jsonl, &ctx, 1, 8, tokens).experts,
        vec![16]
    );
}
