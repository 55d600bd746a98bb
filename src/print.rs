//! Human-readable summaries of plans and heat for the terminal.

use residency_core::cost::{Instance, Place};
use residency_core::diff::PlanDiff;
use residency_core::plan::Plan;
use residency_core::units::{Bytes, Seconds};
use residency_formats::export::baselines::Strategy;
use residency_formats::heat::{concentration, Heat};
use residency_formats::llama_bench::llama_cpp_seconds;
use residency_solver::explain::{Explanation, FrontierExpert};
use residency_solver::incremental::{IncrementalOptions, Replanned};
use std::path::Path;

/// The plan in a few lines: its inputs, each place's bytes, what is kept
/// for KV, the predicted time beside the greedy baseline and the bound,
/// and where it was written.
pub fn plan_summary(plan: &Plan, inst: &Instance, out: Option<&Path>) {
    println!(
        "plan: {} on {}, heat {} ({})",
        plan.inputs.model.name,
        plan.inputs.profile.name,
        plan.inputs.heat.source,
        match plan.inputs.heat.tokens {
            Some(t) => format!("{t} tokens"),
            None => "tokens unknown".into(),
        }
    );
    usage_table(plan);
    reservations(plan, inst);
    objective(plan, inst);
    match out {
        Some(path) => println!("wrote {}", path.display()),
        None => println!("(no --out: plan not written)"),
    }
}

/// Each place's bytes against its capacity, experts and trunk
/// components; each disk's streamed experts.
fn usage_table(plan: &Plan) {
    println!(
        "  {:<8} {:>24} {:>9} {:>6}",
        "place", "used / capacity", "experts", "trunk"
    );
    for u in &plan.usage {
        println!(
            "  {:<8} {:>24} {:>9} {:>6}",
            u.place,
            format!("{} / {}", Bytes(u.used_bytes), Bytes(u.capacity_bytes)),
            u.experts,
            u.trunk
        );
    }
    for (q, place) in plan
        .places
        .iter()
        .enumerate()
        .filter(|(_, p)| p.starts_with("disk"))
    {
        let streamed = plan.experts.iter().flatten().filter(|&&x| x == q).count();
        println!("  {:<8} {:>24} {:>9} {:>6}", place, "streamed", streamed, 0);
    }
}

/// The KV cache reserved on the cards, and the KV prefix groups kept.
fn reservations(plan: &Plan, inst: &Instance) {
    if let Some(context) = &inst.resources.context {
        // The capacities above are what the cache leaves for objects.
        let cards: Vec<String> = context
            .gpu_bytes
            .iter()
            .enumerate()
            .map(|(g, &b)| format!("{} on {}", Bytes(b), Place::Gpu(g)))
            .collect();
        println!(
            "KV cache of {} tokens reserved: {}",
            context.tokens,
            cards.join(", ")
        );
    }
    if !plan.kv.is_empty() {
        let kept: Vec<_> = plan.kv.iter().filter(|k| k.place.is_some()).collect();
        let kept_bytes: u64 = kept.iter().map(|k| k.bytes.0).sum();
        let total_bytes: u64 = plan.kv.iter().map(|k| k.bytes.0).sum();
        println!(
            "kv: {} of {} prefix groups kept ({} of {}), {} prefill per token left",
            kept.len(),
            plan.kv.len(),
            Bytes(kept_bytes),
            Bytes(total_bytes),
            Seconds(plan.kv.iter().map(|k| k.token_seconds).sum())
        );
    }
}

/// The predicted time beside the greedy baseline, the bound and its gap,
/// and the slowest stage.
fn objective(plan: &Plan, inst: &Instance) {
    let o = &plan.objective;
    let greedy = o.greedy_token_seconds;
    println!(
        "predicted: {:.2} tok/s ({} per token); greedy baseline {:.2} tok/s ({}): {:+.1} %",
        o.tok_per_s,
        Seconds(o.token_seconds),
        1.0 / greedy,
        Seconds(greedy),
        (greedy / o.token_seconds - 1.0) * 100.0
    );
    println!(
        "bound: {} per token ({}), gap {:.3} %; {} in {:.2} s of {} s{}",
        Seconds(o.lower_bound),
        o.bound_method,
        o.gap * 100.0,
        plan.solver.method,
        plan.solver.seconds,
        plan.solver.time_limit_seconds,
        if plan.solver.proven_optimal {
            ", proven optimal"
        } else {
            ""
        }
    );
    let slowest = plan
        .stages
        .iter()
        .max_by(|a, b| a.seconds.total_cmp(&b.seconds));
    if let Some(stage) = slowest {
        println!(
            "slowest stage: {} {} on {} ({} stages, {} objects)",
            stage.stage,
            Seconds(stage.seconds),
            stage.bottleneck,
            plan.stages.len(),
            inst.objects.len()
        );
    }
}

pub fn heat_summary(input: &Path, heat: &Heat) {
    let tokens = heat
        .total
        .tokens
        .as_ref()
        .and_then(|t| t.iter().max().copied());
    println!(
        "{}: {} heat, {} MoE layers, {} categories{}",
        input.display(),
        heat.format,
        heat.total.counts.len(),
        heat.categories.len(),
        tokens.map(|t| format!(", {t} tokens")).unwrap_or_default()
    );
    if !heat.categories.is_empty() {
        let names: Vec<&str> = heat.categories.keys().map(String::as_str).collect();
        println!("categories: {}", names.join(", "));
    }
    println!(
        "  {:>5} {:>7} {:>12} {:>12} {:>13} {:>13}",
        "layer", "experts", "top-10% share", "entropy bits", "experts for 50%", "experts for 90%"
    );
    for c in concentration(&heat.total) {
        println!(
            "  {:>5} {:>7} {:>12.3} {:>7.2}/{:<4.2} {:>13} {:>13}",
            c.layer,
            c.experts,
            c.top10_share,
            c.entropy_bits,
            c.max_entropy_bits,
            c.experts_for_50,
            c.experts_for_90
        );
    }
}

fn ms(seconds: f64) -> String {
    if seconds.is_finite() {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        "n/a".into()
    }
}

pub fn explanation(file: &Path, e: &Explanation) {
    println!(
        "{}: {} per token ({:.2} tok/s)",
        file.display(),
        Seconds(e.token_seconds),
        1.0 / e.token_seconds
    );
    if !e.constraints.is_empty() {
        println!(
            "held to its constraints (no move below breaks one): {}",
            e.constraints.join(", ")
        );
    }
    println!("one more GiB at each place (local re-plan from this plan):");
    for m in &e.marginal_gib {
        println!(
            "  {:<8} saves {} per token",
            m.place.to_string(),
            ms(m.saved_seconds)
        );
    }
    println!(
        "resident frontier per MoE layer (resident = {}); value = token time saved in the {} tier per GiB there:",
        e.resident_tier, e.resident_tier
    );
    println!(
        "  {:<12} {:<40} {:<40}",
        "stage", "coldest resident", "hottest outside"
    );
    let show = |f: &Option<FrontierExpert>| match f {
        Some(f) => format!(
            "e{} p={:.4} on {} {}/GiB",
            f.expert,
            f.use_rate,
            f.place,
            ms(f.seconds_per_gib)
        ),
        None => "-".into(),
    };
    for l in &e.layers {
        println!(
            "  {:<12} {:<40} {:<40}",
            l.stage,
            show(&l.coldest_resident),
            show(&l.hottest_outside)
        );
    }
    println!("trunk components (change of token time if moved):");
    for t in &e.trunk {
        let layer = t.layer.map(|l| format!(" L{l}")).unwrap_or_default();
        let alternatives: Vec<String> = t
            .alternatives
            .iter()
            .map(|a| {
                format!(
                    "{} {:+.3} ms{}",
                    a.place,
                    a.delta_seconds * 1e3,
                    if a.fits { "" } else { " (no room)" }
                )
            })
            .collect();
        println!(
            "  {}{} on {}: {}",
            t.name,
            layer,
            t.place,
            alternatives.join(", ")
        );
    }
}

pub fn plan_diff(d: &PlanDiff) {
    println!(
        "moved: {} experts, {} trunk components, {} KV groups",
        d.moved_experts, d.moved_trunk, d.moved_kv
    );
    for l in &d.links {
        println!(
            "  {} -> {}: {} objects, {} to carry, {:.3} s",
            l.from,
            l.to,
            l.objects,
            Bytes(l.bytes),
            l.seconds
        );
    }
    println!(
        "token time {} -> {} ({:+.2} %); moving takes {:.3} s, paid back after {} tokens",
        Seconds(d.token_seconds_before),
        Seconds(d.token_seconds_after),
        (d.token_seconds_after / d.token_seconds_before - 1.0) * 100.0,
        d.move_seconds,
        match d.token_seconds_before - d.token_seconds_after {
            saved if saved > 0.0 => format!("{:.0}", (d.move_seconds / saved).ceil()),
            _ => "never".into(),
        }
    );
}

/// An incremental re-plan: the bytes carried against the budget, the
/// objective it minimised, its gap and its solve time.
pub fn incremental_replan(got: &Replanned, options: &IncrementalOptions) {
    println!(
        "re-plan: carries {} of a {} move budget; objective {} per token = token {} + {} x move {:.3} s / {} tokens",
        Bytes(got.moved_bytes),
        Bytes(options.move_budget_bytes),
        Seconds(got.objective_seconds),
        Seconds(got.token_seconds),
        options.hysteresis,
        got.move_seconds,
        options.horizon_tokens,
    );
    println!(
        "re-plan bound: {} per token (the objective within the move budget, move costs counted), gap {:.3} %; token seconds of any placement (moves counted at zero, budget relaxed) at least {}; solved in {:.1} ms",
        Seconds(got.lower_bound_seconds),
        got.gap() * 100.0,
        Seconds(got.token_lower_bound_seconds),
        got.solve_seconds * 1e3,
    );
}

/// What the user would type into llama.cpp instead, priced on the same
/// cards beside the plan as llama.cpp runs it (`exported`: one buffer per
/// MoE layer): by the profile's llama.cpp timing where it has one, else by
/// the cost model.
pub fn llama_cpp_baselines(inst: &Instance, exported: &[usize], strategies: &[Strategy]) {
    if strategies.is_empty() {
        return;
    }
    let export_seconds = llama_cpp_seconds(inst, exported);
    let by = match &inst.resources.llama_cpp {
        Some(_) => "the profile's llama.cpp timing (llama_cpp:)",
        None => "the cost model",
    };
    println!("llama.cpp at the same VRAM, by {by}:");
    println!(
        "  {:<52} {:>10.2} tok/s",
        "the plan as exported (one buffer per MoE layer)",
        1.0 / export_seconds
    );
    for s in strategies {
        let seconds = llama_cpp_seconds(inst, &s.placement);
        println!(
            "  {:<52} {:>10.2} tok/s   export {:+.1} %",
            s.flags,
            1.0 / seconds,
            (seconds / export_seconds - 1.0) * 100.0
        );
    }
}
