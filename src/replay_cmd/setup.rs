//! What `replay` serves and prices beyond its flags: the served and
//! training tokens, their counts and categories, `replan`'s pin share, and
//! the links a move into RAM and a copy onto the card are priced on.

use super::{PinShareArg, ReplayArgs};
use anyhow::{bail, Result};
use residency_core::cost::{Place, Resources};
use residency_core::profile::HardwareProfile;
use residency_formats::heat::{HeatFormat, TokenRoutes, Trace};
use residency_lab::replay::{replay, PinShareChoice, PinShareSource, ReplayConfig, ReplayRun};
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::serve::replan::MoveLink;
use residency_sim::allocation::Allocation;
use residency_sim::arms::{SimOptions, Start};
use residency_sim::pin_share::recommend_held_out_pin_share;

/// The tokens to replay (those outside --train-categories, else all) and
/// those learned on (those of --train-categories, else all).
pub(super) fn split_held_out(
    tokens: &[TokenRoutes],
    args: &ReplayArgs,
    notes: &mut Vec<String>,
) -> Result<(Vec<TokenRoutes>, Vec<TokenRoutes>)> {
    let in_training = |c: &Option<String>| match &args.train_categories {
        Some(train) => c.as_ref().is_some_and(|c| train.contains(c)),
        None => true,
    };
    let eval: Vec<_> = match &args.train_categories {
        Some(_) => tokens
            .iter()
            .filter(|t| !in_training(&t.category))
            .cloned()
            .collect(),
        None => {
            notes.push("learning policies learned on the replayed tokens (in-sample); --train-categories holds some out".into());
            tokens.to_vec()
        }
    };
    if eval.is_empty() {
        bail!(
            "{}: no token left to replay (check --categories and --train-categories against the trace's categories)",
            args.trace.display()
        );
    }
    let train = tokens
        .iter()
        .filter(|t| in_training(&t.category))
        .cloned()
        .collect();
    Ok((eval, train))
}

/// `replan`'s share of the budget: the one given, or with `auto` the one
/// `simulate --gate` recommends (`sim::pin_share`, the same code) for the
/// training tokens alone, each of their categories held out in turn, at
/// the replay's budget in one global cache, as `replan` has. The replayed
/// categories are never simulated: the choice must be as held out as the
/// pins. Seeded replays are simulated seeded (`simulate --seeded`): cold,
/// pins are a free warm start that LRU lacks, which short runs reward
/// whether or not the pins are worth their bytes.
pub(super) fn choose_pin_share(
    args: &ReplayArgs,
    train: &[TokenRoutes],
    checkpoint: &Checkpoint,
    expert_bytes: &[u64],
    budget_bytes: u64,
    miss_seconds: f64,
) -> Result<PinShareChoice> {
    let seeded = args.seed_tokens > 0;
    if let PinShareArg::Share(share) = args.pin_share {
        return Ok(PinShareChoice {
            share,
            chosen_by: PinShareSource::Flag,
            held_out_categories: Vec::new(),
            seeded,
            recommendation: None,
        });
    }
    let layers = expert_bytes.len();
    let trace = Trace {
        model: None,
        format: HeatFormat::Jsonl,
        experts: vec![checkpoint.config.experts; layers],
        tokens: train.to_vec(),
    };
    let categories: Vec<String> = trace.categories().into_iter().map(String::from).collect();
    if categories.len() < 2 {
        // Nothing to hold out, so no share can be shown to pay: the rule's
        // tie (every share unjudged) goes to the smallest, no pins, and the
        // run goes on as LRU would rather than stopping a default.
        return Ok(PinShareChoice {
            share: 0.0,
            chosen_by: PinShareSource::Auto,
            held_out_categories: categories,
            seeded,
            recommendation: None,
        });
    }
    let objects = checkpoint.config.experts * layers;
    let options = SimOptions {
        start: if seeded { Start::Seeded } else { Start::Cold },
        ..SimOptions::default()
    };
    let recommendation = recommend_held_out_pin_share(
        &trace,
        expert_bytes,
        &vec![miss_seconds; objects],
        budget_bytes,
        Allocation::Global,
        &options,
    )?;
    Ok(PinShareChoice {
        share: recommendation.recommended_share,
        chosen_by: PinShareSource::Auto,
        held_out_categories: categories,
        seeded,
        recommendation: Some(recommendation),
    })
}

/// How the re-planner prices a move: from the profile's fastest drive into
/// RAM node 0.
pub(super) fn drive_to_ram(profile: &HardwareProfile) -> MoveLink {
    let mut resources = Resources::from_profile(profile);
    if resources.drive_read_bytes_per_s.iter().all(|&r| r <= 0.0) {
        // The profile describes no drive the checkpoint is read from: moves
        // are priced at 1 GB/s (as a miss falls back to 1 ms).
        resources.drive_numa = vec![0];
        resources.drive_read_bytes_per_s = vec![1e9];
        resources.drive_latency_seconds = vec![0.0];
    }
    let fastest = (0..resources.drives())
        .max_by(|&a, &b| {
            let rate = &resources.drive_read_bytes_per_s;
            rate[a].total_cmp(&rate[b])
        })
        .expect("one drive at least");
    MoveLink {
        resources,
        from: Place::Disk(fastest),
        to: Place::Ram(0),
    }
}

/// The link the card's copies take: RAM to the profile's first GPU, at
/// its upload rate; free where the profile has no GPU (RAM to RAM).
pub(super) fn ram_to_card(profile: &HardwareProfile) -> MoveLink {
    MoveLink {
        resources: Resources::from_profile(profile),
        from: Place::Ram(0),
        to: if profile.gpus.is_empty() {
            Place::Ram(0)
        } else {
            Place::Gpu(0)
        },
    }
}

/// `eval` split by category, in name order.
pub(super) fn by_category(eval: &[TokenRoutes]) -> Vec<(Option<String>, Vec<TokenRoutes>)> {
    let mut categories: Vec<Option<String>> = eval.iter().map(|t| t.category.clone()).collect();
    categories.sort();
    categories.dedup();
    categories
        .into_iter()
        .map(|category| {
            let tokens = eval
                .iter()
                .filter(|t| t.category == category)
                .cloned()
                .collect();
            (category, tokens)
        })
        .collect()
}

/// One replay of each category's tokens, its runs labelled with it.
pub(super) fn replay_per_category(
    checkpoint: &Checkpoint,
    eval: &[TokenRoutes],
    train_counts: &[u64],
    config: &ReplayConfig,
) -> Result<Vec<ReplayRun>> {
    let mut runs = Vec::new();
    for (category, tokens) in by_category(eval) {
        for mut run in replay(checkpoint, &tokens, train_counts, config)? {
            run.category = category.clone();
            runs.push(run);
        }
    }
    Ok(runs)
}
