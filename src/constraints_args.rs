//! `plan`'s constraint flags (`--pin`, `--budget`, `--keep-whole`,
//! `--max-places-per-layer`, `--constraints FILE`): parsed here, compiled
//! and checked by `Instance::constrain` (`residency_core::constraints`).

use residency_core::constraints::{
    parse_budget, parse_keep_whole, parse_max_places, parse_pin, Constraint, ConstraintsFile,
    Sourced,
};
use residency_core::Result;
use std::path::PathBuf;

#[derive(clap::Args, Clone, Default)]
pub struct ConstraintArgs {
    /// Pin routed experts or a trunk component to a place, TARGET=PLACE:
    /// `L3.experts.17=gpu:0` (one expert of transformer layer 3),
    /// `L3.experts=ram:0` (all of them), `L3.attn=gpu:1`, `lm_head=gpu:0`.
    /// Repeatable.
    #[arg(long = "pin", value_name = "TARGET=PLACE", value_parser = parse_pin)]
    pins: Vec<Constraint>,
    /// The most bytes a GPU or RAM place may hold, PLACE=SIZE (`gpu:0=20GiB`);
    /// the lesser of it and the profile's room (after --context-tokens)
    /// counts. Repeatable.
    #[arg(long = "budget", value_name = "PLACE=SIZE", value_parser = parse_budget)]
    budgets: Vec<Constraint>,
    /// Keep all routed experts of a layer on one place (`L3`, or `all`), as
    /// engines that hold a layer's experts in one tensor (llama.cpp) need.
    /// Repeatable, or a comma list.
    #[arg(long, value_name = "LAYER", value_delimiter = ',', value_parser = parse_keep_whole)]
    keep_whole: Vec<Constraint>,
    /// Put the routed experts of each layer on at most this many places.
    #[arg(long, value_name = "K", value_parser = parse_max_places)]
    max_places_per_layer: Option<Constraint>,
    /// Constraints file (YAML: `pins`, `budgets`, `keep_whole`,
    /// `max_places_per_layer`), beside the flags.
    #[arg(long, value_name = "FILE")]
    constraints: Option<PathBuf>,
}

impl ConstraintArgs {
    /// The constraints given, the file's first; `None` when none were (a
    /// re-plan then keeps its plan's).
    pub fn load(&self) -> Result<Option<Vec<Sourced>>> {
        let mut all = match &self.constraints {
            Some(file) => ConstraintsFile::read(file)?,
            None => Vec::new(),
        };
        let flags = [
            ("--pin", &self.pins),
            ("--budget", &self.budgets),
            ("--keep-whole", &self.keep_whole),
        ];
        for (flag, given) in flags {
            all.extend(given.iter().map(|c| Sourced {
                constraint: c.clone(),
                source: flag.to_string(),
            }));
        }
        all.extend(self.max_places_per_layer.iter().map(|c| Sourced {
            constraint: c.clone(),
            source: "--max-places-per-layer".into(),
        }));
        let given = self.constraints.is_some() || !all.is_empty();
        Ok(given.then_some(all))
    }
}
