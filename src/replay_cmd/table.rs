//! `replay`'s tables: the runs, the simulator beside them, the
//! predictions of `--predict-only`, and why the pin share and the card's
//! window are what they are.

use super::setup::by_category;
use anyhow::Result;
use residency_core::units::{Bytes, BytesPerSecond};
use residency_formats::heat::TokenRoutes;
use residency_hwprofile::Spread;
use residency_lab::replay::card_choice::CardChoice;
use residency_lab::replay::{
    predict, replay_bound, MissBound, PinShareChoice, PinShareSource, ReplayConfig, ReplayRun,
};
use residency_runtime::checkpoint::Checkpoint;

/// The card's rule and window `auto` chose, and what each candidate's
/// tokens took.
pub(super) fn print_card_choice(choice: &CardChoice) {
    let judged_on = if choice.held_out.is_empty() {
        "on the training tokens, in-sample (name two or more --train-categories to hold each out)"
            .to_string()
    } else {
        format!("on {} held out in turn", choice.held_out.join(", "))
    };
    println!(
        "card: {} with its heat halved every {} requests (auto: the least simulated time {judged_on}; per rule and window in requests: seconds, experts on the card: {})",
        choice.policy,
        choice.halve_every_ticks,
        choice
            .judged
            .iter()
            .map(|t| format!(
                "{} {}: {:.6} s, {}",
                t.policy, t.halve_every_ticks, t.token_seconds, t.experts_on_card
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Which share `replan` pins, and why.
pub(super) fn print_pin_share(choice: &PinShareChoice) {
    let Some(r) = &choice.recommendation else {
        let why = match choice.chosen_by {
            PinShareSource::Flag => format!("--pin-share {}", choice.share),
            PinShareSource::Auto => format!(
                "--pin-share auto: pins are judged on a training category held out from the others, and the training tokens have {} ({}); name two or more with --train-categories, or give a share, e.g. --pin-share 0.5",
                choice.held_out_categories.len(),
                if choice.held_out_categories.is_empty() {
                    "none".into()
                } else {
                    choice.held_out_categories.join(", ")
                }
            ),
        };
        println!(
            "replan pins {:.0}% of the budget ({why})",
            100.0 * choice.share
        );
        return;
    };
    let felt: Vec<String> = r
        .shares
        .iter()
        .map(|s| format!("{:.0}%: {:.3}", 100.0 * s.share, s.felt_wait_seconds))
        .collect();
    let why = if choice.share == 0.0 {
        "no pinned share waits less than LRU alone (recency wins)"
    } else {
        "the least held-out felt wait"
    };
    println!(
        "replan pins {:.0}% of the budget (--pin-share auto: {why}; pinned-lru simulated {} on {}, each held out in turn, felt wait s {})",
        100.0 * choice.share,
        if choice.seeded { "seeded" } else { "cold" },
        choice.held_out_categories.join(", "),
        felt.join("  ")
    );
}

/// `--predict-only`: the simulator's misses, felt wait and experts on
/// the card for every arm it has, all tokens at once or per category.
pub(super) fn print_predictions(
    checkpoint: &Checkpoint,
    eval: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
    per_category: bool,
) -> Result<()> {
    let parts = if per_category {
        by_category(eval)
    } else {
        vec![(None, eval.to_vec())]
    };
    println!(
        "predicted, serving nothing: {} tokens, {} of RAM for experts (a miss reads for {:.3} ms, hits computed at {})",
        eval.len(),
        Bytes(config.ram_budget_bytes),
        config.miss_seconds * 1e3,
        BytesPerSecond(config.hit_compute_bytes_per_s)
    );
    println!(
        "  {:<16} {:>12} {:>10} {:>10} {:>8}",
        "policy", "category", "misses", "felt s", "on card"
    );
    for (category, tokens) in parts {
        let category = category.as_deref().unwrap_or("all");
        for (policy, p) in predict(checkpoint, &tokens, train_counts, config)? {
            println!(
                "  {:<16} {:>12} {:>10} {:>10.3} {:>8}",
                policy.name(),
                category,
                p.misses,
                p.felt_wait_seconds,
                p.gpu_experts
            );
        }
        let bound = replay_bound(checkpoint, &tokens, config);
        for (name, misses) in [
            ("bound (offline)", bound.misses),
            ("min after seed", bound.misses_after_seed),
        ] {
            println!(
                "  {:<16} {:>12} {:>10} {:>10} {:>8}",
                name, category, misses, "-", "-"
            );
        }
    }
    println!("{}", bound_legend(config));
    Ok(())
}

/// What the `bound (offline)` rows are.
fn bound_legend(config: &ReplayConfig) -> String {
    let tiers = if config.vram.is_some() {
        "the card and RAM as one memory"
    } else {
        "RAM"
    };
    format!(
        "  (bound (offline): the reads no arm goes under on these tokens: {tiers}, Belady's MIN from the best start; min after seed: MIN from the arms' start, a reference that an arm with pins may beat)"
    )
}

/// Per category, the reads no arm goes under, beside the fewest any arm
/// read (the median of its rounds).
pub(super) fn print_bound(runs: &[ReplayRun], config: &ReplayConfig) {
    let mut categories: Vec<(Option<&str>, MissBound)> = Vec::new();
    for r in runs {
        if let Some(bound) = r.miss_bound {
            if !categories.iter().any(|(c, _)| *c == r.category.as_deref()) {
                categories.push((r.category.as_deref(), bound));
            }
        }
    }
    for (category, bound) in categories {
        let mut arms: Vec<&str> = runs
            .iter()
            .filter(|r| r.category.as_deref() == category)
            .map(|r| r.policy.as_str())
            .collect();
        arms.sort_unstable();
        arms.dedup();
        let fewest = arms
            .iter()
            .map(|&arm| {
                let misses: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.policy == arm && r.category.as_deref() == category)
                    .map(|r| r.misses as f64)
                    .collect();
                (Spread::of(&misses).map_or(0.0, |s| s.median), arm)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((misses, arm)) = fewest {
            println!(
                "offline bound, {}: {} reads from any start, {} by MIN after the seed, with room for {} experts; the fewest, {arm}: {misses}",
                category.unwrap_or("all"),
                bound.misses,
                bound.misses_after_seed,
                bound.capacity_experts
            );
        }
    }
    if runs.iter().any(|r| r.miss_bound.is_some()) {
        println!("{}", bound_legend(config));
    }
}

/// Per arm (and category), the simulator's prediction beside the median
/// of the measured rounds, and their ratios.
pub(super) fn print_simulated(runs: &[ReplayRun], config: &ReplayConfig) {
    let mut arms: Vec<(&str, Option<&str>)> = Vec::new();
    for r in runs.iter().filter(|r| r.simulated.is_some()) {
        let arm = (r.policy.as_str(), r.category.as_deref());
        if !arms.contains(&arm) {
            arms.push(arm);
        }
    }
    if arms.is_empty() {
        return;
    }
    // The card's columns only where the simulator had a VRAM tier.
    let on_card = runs
        .iter()
        .filter_map(|r| r.simulated.as_ref())
        .any(|s| s.gpu_experts > 0);
    let card = |text: String| if on_card { text } else { String::new() };
    println!(
        "the simulator on the same tokens and budget (a miss reads for {:.3} ms, {} at once, less in each layer of a token what the compute before it hides, at {}), against the median of the rounds:",
        config.miss_seconds * 1e3,
        config.reads_at_once,
        BytesPerSecond(config.hit_compute_bytes_per_s)
    );
    println!(
        "  (at the run's reads: each miss read in the time the run's reads took one; and its rates: the hits computed at the run's own rate too)"
    );
    if on_card {
        println!(
            "  (with the VRAM tier: on what reaches the RAM tier, the card deciding as the run's does, each copy landing while the next token is served)"
        );
    }
    println!(
        "  {:<16} {:>12} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>12} {:>12}{}",
        "policy",
        "category",
        "sim misses",
        "misses",
        "ratio",
        "sim felt s",
        "felt s",
        "ratio",
        "run reads",
        "run rates",
        card(format!(" {:>11} {:>8}", "sim on card", "on card"))
    );
    for (policy, category) in arms {
        let of_arm: Vec<&ReplayRun> = runs
            .iter()
            .filter(|r| r.policy == policy && r.category.as_deref() == category)
            .collect();
        let simulated = of_arm[0].simulated.as_ref().expect("filtered above");
        let median = |values: Vec<f64>| Spread::of(&values).map_or(0.0, |s| s.median);
        let misses = median(of_arm.iter().map(|r| r.misses as f64).collect());
        let felt = median(of_arm.iter().map(|r| r.felt_wait_seconds).collect());
        let gpu_experts = median(of_arm.iter().map(|r| r.gpu_experts as f64).collect());
        let ratio = |simulated: f64| simulated / felt.max(1e-9);
        println!(
            "  {:<16} {:>12} {:>10} {:>10} {:>7.3} {:>10.3} {:>10.3} {:>7.3} {:>12.3} {:>12.3}{}",
            policy,
            category.unwrap_or("all"),
            simulated.misses,
            misses,
            simulated.misses as f64 / misses.max(1.0),
            simulated.felt_wait_seconds,
            felt,
            ratio(simulated.felt_wait_seconds),
            ratio(simulated.felt_wait_seconds_at_run_reads),
            ratio(simulated.felt_wait_seconds_at_run_rates),
            card(format!(" {:>11} {:>8}", simulated.gpu_experts, gpu_experts))
        );
    }
}

/// Every run's row: rates, latency, felt wait, bytes and counters.
pub(super) fn print_runs(runs: &[ReplayRun]) {
    // The card's column only where a VRAM tier computed something.
    let on_card = runs.iter().any(|r| r.gpu_experts > 0);
    let card = |text: String| if on_card { text } else { String::new() };
    println!(
        "  {:<10} {:>12} {:>5} {:>8} {:>8} {:>8} {:>10} {:>11} {:>8} {:>8} {:>8} {:>10}{}",
        "policy",
        "category",
        "round",
        "tok/s",
        "p50 ms",
        "p99 ms",
        "felt s",
        "read",
        "misses",
        "bypassed",
        "evicted",
        "moved",
        card(format!(" {:>8}", "on card"))
    );
    for r in runs {
        println!(
            "  {:<10} {:>12} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>10.3} {:>11} {:>8} {:>8} {:>8} {:>10}{}",
            r.policy,
            r.category.as_deref().unwrap_or("all"),
            r.round,
            r.tok_per_s,
            r.p50_ms,
            r.p99_ms,
            r.felt_wait_seconds,
            Bytes(r.bytes_read).to_string(),
            r.misses,
            r.rejections + r.bypasses,
            r.evictions,
            Bytes(r.migration_bytes).to_string(),
            card(format!(" {:>8}", r.gpu_experts))
        );
    }
}
