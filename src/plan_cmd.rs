//! `residency plan`: the inputs read, a placement solved (or re-planned
//! from a plan in use), the plan written and summed up, and the engines'
//! settings exported.

use crate::inputs::{load_inputs, load_plan, LoadedPlan};
use crate::{plot, print, ReplanArgs};
use anyhow::{bail, Context, Result};
use residency_core::cost::Instance;
use residency_core::model::Model;
use residency_core::plan::{Plan, PlanInputs};
use residency_core::solution::Solution;
use residency_formats::export::{self, Engine};
use residency_formats::gguf;
use residency_formats::inputs::InputPaths;
use residency_solver::incremental::{self, IncrementalOptions, Replanned, Warm};
use residency_solver::{self as solve, SolveOptions};
use std::path::Path;
use std::time::Instant;

/// What a solve gives `plan` to report: the instance, its solution, the
/// placement re-planned from (with `--from`), the model, and what an
/// incremental re-plan reports.
struct Solved {
    inst: Instance,
    solution: Solution,
    current: Option<Vec<usize>>,
    model: Model,
    incremental: Option<(Replanned, IncrementalOptions)>,
}

/// `paths.context_tokens`: with `--from`, `None` keeps the plan's own.
pub fn plan(
    paths: &InputPaths,
    replan: &ReplanArgs,
    out: Option<&Path>,
    options: SolveOptions,
    exports: &[Engine],
    export_dir: Option<&Path>,
    plot_file: Option<&Path>,
) -> Result<()> {
    let started = Instant::now();
    check_flags(replan, options, plot_file)?;
    let time_limit = options.time_limit_seconds;
    let (solved, refs) = match &replan.from {
        None => solve_fresh(paths, options, started)?,
        Some(from) => solve_from(from, paths, replan, options)?,
    };
    let plan = Plan::new(&solved.inst, &solved.solution, refs, time_limit);
    if let Some(out) = out {
        plan.write(out)?;
    }
    report(&plan, &solved, (paths, exports), out, plot_file)?;
    let dir = match (export_dir, out.and_then(Path::parent)) {
        (Some(dir), _) => dir,
        (None, Some(parent)) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    export_all(&plan, &solved, paths, exports, dir)
}

/// The flags clap cannot check: a plot's format, positive seconds, tokens
/// and hysteresis.
fn check_flags(replan: &ReplanArgs, options: SolveOptions, plot_file: Option<&Path>) -> Result<()> {
    if let Some(file) = plot_file {
        plot::PlotFormat::from_path(file)?;
    }
    let time_limit = options.time_limit_seconds;
    if !(time_limit.is_finite() && time_limit > 0.0) {
        bail!("--time-limit {time_limit}: give a positive number of seconds");
    }
    for (flag, value) in [
        ("--horizon-tokens", replan.horizon_tokens),
        ("--hysteresis", replan.hysteresis),
    ] {
        if !(value.is_finite() && value > 0.0) {
            bail!("{flag} {value}: give a positive number");
        }
    }
    Ok(())
}

/// The full plan search on the inputs, within what is left of the time
/// limit after reading them.
fn solve_fresh(
    paths: &InputPaths,
    options: SolveOptions,
    started: Instant,
) -> Result<(Solved, PlanInputs)> {
    let mut inputs = load_inputs(paths)?;
    let inst = inputs.instance()?;
    crate::term::notes(&inputs.notes);
    // The limit counts reading the inputs too.
    let options = SolveOptions {
        time_limit_seconds: (options.time_limit_seconds - started.elapsed().as_secs_f64())
            .max(0.01),
        ..options
    };
    let solution = solve::solve(&inst, options).map_err(|e| e.in_file(&inputs.profile_file))?;
    let solved = Solved {
        inst,
        solution,
        current: None,
        model: inputs.model,
        incremental: None,
    };
    Ok((solved, inputs.refs))
}

/// A re-plan from the plan `from` in use: incremental under
/// `--move-budget`, else the full search with move costs.
fn solve_from(
    from: &Path,
    paths: &InputPaths,
    replan: &ReplanArgs,
    options: SolveOptions,
) -> Result<(Solved, PlanInputs)> {
    let time_limit = options.time_limit_seconds;
    let LoadedPlan {
        inst,
        placement: current,
        refs,
        model,
        ..
    } = load_plan(from, paths)?;
    let mut incremental = None;
    let solution = match replan.move_budget {
        Some(budget_bytes) => {
            let options = IncrementalOptions {
                time_limit_seconds: time_limit,
                gap: options.gap,
                move_budget_bytes: budget_bytes,
                horizon_tokens: replan.horizon_tokens,
                hysteresis: replan.hysteresis,
            };
            let (solution, got) = incremental_replan(&inst, &current, options)?;
            incremental = Some((got, options));
            solution
        }
        None => {
            let options = solve::ReplanOptions {
                time_limit_seconds: time_limit,
                horizon_tokens: replan.horizon_tokens,
                hysteresis: replan.hysteresis,
            };
            solve::replan(&inst, &current, options)?
        }
    };
    let solved = Solved {
        inst,
        solution,
        current: Some(current),
        model,
        incremental,
    };
    Ok((solved, refs))
}

/// The plan's summary, its plot, llama.cpp's baselines (for a llama.cpp
/// export or a GGUF model), the moves from the plan in use and what an
/// incremental re-plan reports.
fn report(
    plan: &Plan,
    solved: &Solved,
    (paths, exports): (&InputPaths, &[Engine]),
    out: Option<&Path>,
    plot_file: Option<&Path>,
) -> Result<()> {
    let inst = &solved.inst;
    print::plan_summary(plan, inst, out);
    if let Some(file) = plot_file {
        let title = format!(
            "Plan: {} on {}",
            plan.inputs.model.name, plan.inputs.profile.name
        );
        plot::plan_plot(file, &title, plan, inst)?;
        println!("wrote {}", file.display());
    }
    let for_llama_cpp =
        exports.contains(&Engine::LlamaCpp) || paths.model.as_deref().is_some_and(gguf::is_gguf);
    if for_llama_cpp {
        let strategies = export::baselines::llama_cpp_strategies(inst)?;
        let exported = export::llama_cpp_as_exported(plan, inst)?;
        print::llama_cpp_baselines(inst, &exported, &strategies);
    }
    if let Some(current) = &solved.current {
        print::plan_diff(&residency_core::diff::diff(
            inst,
            current,
            &solved.solution.placement,
        ));
    }
    if let Some((got, options)) = &solved.incremental {
        print::incremental_replan(got, options);
    }
    Ok(())
}

/// Each engine's settings for the plan, once per engine, into `dir`.
fn export_all(
    plan: &Plan,
    solved: &Solved,
    paths: &InputPaths,
    exports: &[Engine],
    dir: &Path,
) -> Result<()> {
    let mut done = Vec::new();
    for &engine in exports {
        if done.contains(&engine) {
            continue;
        }
        done.push(engine);
        let facts = export::ModelFacts::of(&solved.model.description, paths.model.as_deref());
        let written = export::export(engine, plan, &solved.inst, dir, facts)?;
        for file in &written.files {
            println!("wrote {} ({engine})", file.display());
        }
        crate::term::notes(&written.warnings);
    }
    Ok(())
}

/// `incremental::replan` from `current` with zero prices, as the plan
/// file's solution, beside what the re-plan reports.
fn incremental_replan(
    inst: &Instance,
    current: &[usize],
    options: IncrementalOptions,
) -> Result<(Solution, Replanned)> {
    let warm = Warm {
        placement: current.to_vec(),
        prices_seconds_per_byte: Vec::new(),
    };
    let got = incremental::replan(inst, &warm, options)
        .with_context(|| format!("--move-budget {}", options.move_budget_bytes))?;
    // The plan file's baseline, as `plan` gives it: the greedy placement.
    let greedy_placement = solve::constrained_greedy(inst)?;
    let greedy_token_seconds = inst.evaluate(&greedy_placement).token_seconds;
    let solution = Solution {
        // The plan's bound is on its token seconds, which the bound with
        // move costs is not.
        lower_bound_seconds: got.token_lower_bound_seconds.min(got.token_seconds),
        placement: got.placement.clone(),
        token_seconds: got.token_seconds,
        bound_method: incremental::TOKEN_BOUND_METHOD,
        greedy_placement,
        greedy_token_seconds,
        method: incremental::METHOD.to_string(),
        solve_seconds: got.solve_seconds,
        proven_optimal: false,
    };
    Ok((solution, got))
}
