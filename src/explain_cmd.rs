//! `residency explain` and `residency diff`: plans read back for the
//! inputs given, and what they say about them.

use crate::inputs::{load_plan, LoadedPlan};
use crate::{print, InputArgs};
use anyhow::{bail, Result};
use std::path::Path;
use std::time::Duration;

/// `residency explain`: the plan's marginal values of memory, frontiers
/// and trunk choices, from local re-plans of `time_limit` seconds.
pub fn explain(file: &Path, args: &InputArgs, time_limit: f64) -> Result<()> {
    if !(time_limit.is_finite() && time_limit > 0.0) {
        bail!("--time-limit {time_limit}: give a positive number of seconds");
    }
    let LoadedPlan {
        inst, placement, ..
    } = load_plan(file, &args.paths())?;
    let explanation =
        residency_solver::explain::explain(&inst, &placement, Duration::from_secs_f64(time_limit));
    print::explanation(file, &explanation);
    Ok(())
}

/// `residency diff`: the moves between two plans of the same inputs.
pub fn diff(before_path: &Path, after_path: &Path, args: &InputArgs) -> Result<()> {
    let before = load_plan(before_path, &args.paths())?;
    let after = load_plan(after_path, &args.paths())?;
    // Both placements are priced on the first plan's instance: the second
    // must place the same objects, KV groups included.
    if after.inst.objects.len() != before.inst.objects.len()
        || after.plan.kv_groups() != before.plan.kv_groups()
    {
        return Err(residency_core::PlannerError::input(
            after_path,
            "kv",
            format!(
                "has {} KV groups, {} has {}, not the same",
                after.plan.kv.len(),
                before_path.display(),
                before.plan.kv.len(),
            ),
            "diff plans made with the same KV groups file (plan --kv)",
        )
        .into());
    }
    print::plan_diff(&residency_core::diff::diff(
        &before.inst,
        &before.placement,
        &after.placement,
    ));
    Ok(())
}
