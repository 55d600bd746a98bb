//! The `llama-cpp` export: `--override-tensor` (`-ot <regex>=<buffer>`)
//! rules over GGUF tensor names. All routed experts of a layer are one
//! tensor per projection (`blk.N.ffn_gate_exps.weight`, ...), so each MoE
//! layer goes to the buffer holding the largest share of its use-rate mass;
//! where whole layers overflow a card, its layers with the least planned
//! mass there move to their next buffer with room (else the CPU). The
//! warning on lost per-expert decisions gives the cost model's token time
//! of what llama.cpp will run beside the plan's.

#[cfg(test)]
mod tests;

use super::layer_buffers::{layer_buffers, Buffer};
use super::{create_dir, join, moe_layers, placement, unexpressed_tiers, Export};
use residency_core::cost::Instance;
use residency_core::error::{write_atomic, Result};
use residency_core::plan::Plan;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub const LLAMA_OT_FILE: &str = "llama_cpp_override_tensor.txt";
pub const LLAMA_ARGS_FILE: &str = "llama_cpp_args.txt";

/// A family of GGUF tensors one rule moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Tensors {
    RoutedExperts,
    Attention,
    DenseFfn,
    SharedExperts,
    Output,
}

/// Trunk names of our model descriptions with a GGUF tensor family.
pub const LLAMA_TRUNK_NAMES: [&str; 4] = ["attn", "dense_ffn", "shared_expert", "lm_head"];

impl Tensors {
    fn for_trunk(name: &str) -> Option<Tensors> {
        match name {
            "attn" => Some(Tensors::Attention),
            "dense_ffn" => Some(Tensors::DenseFfn),
            "shared_expert" => Some(Tensors::SharedExperts),
            "lm_head" => Some(Tensors::Output),
            _ => None,
        }
    }

    /// The regex (llama.cpp `std::regex_search`, anchored at the start; no
    /// `,` or `=`, which separate rules and buffers; no shell glob characters).
    fn pattern(self, layers: &BTreeSet<usize>) -> String {
        let alt = join(layers, "|");
        match self {
            Tensors::RoutedExperts => {
                format!(r"^blk\.({alt})\.ffn_(gate|up|down|gate_up)_exps\.")
            }
            Tensors::Attention => format!(r"^blk\.({alt})\.attn_"),
            Tensors::DenseFfn => format!(r"^blk\.({alt})\.ffn_(gate|up|down)\."),
            Tensors::SharedExperts => format!(r"^blk\.({alt})\.ffn_(gate|up|down)_shexp\."),
            Tensors::Output => r"^output\.".into(),
        }
    }
}

/// The rules of a placement, as `(regex, buffer)` in output order.
fn llama_rules(rules: &BTreeMap<(Tensors, Buffer), BTreeSet<usize>>) -> Vec<(String, Buffer)> {
    rules
        .iter()
        .map(|(&(t, b), layers)| (t.pattern(layers), b))
        .collect()
}

/// Writes `llama_cpp_override_tensor.txt` (one `-ot REGEX=BUFFER` line per
/// rule) and `llama_cpp_args.txt` (one command-line fragment).
///
/// Each MoE layer's routed experts go to the buffer with the most of the
/// layer's use-rate mass in the plan (then the most experts, then the lower
/// buffer). Where whole layers then overflow a card's capacity, the layers
/// with the least of the plan's mass on that card go to the CPU until the
/// card fits. Trunk components go where the plan puts them.
pub fn llama_cpp(plan: &Plan, inst: &Instance, dir: &Path) -> Result<Export> {
    let placement = placement(plan, inst)?;
    let place = |o: usize| inst.places[placement[o]];
    let layers_of = moe_layers(inst)?;
    let gpus = inst.resources.gpus();
    let mut warnings = Vec::new();
    let mut rules: BTreeMap<(Tensors, Buffer), BTreeSet<usize>> = BTreeMap::new();

    // Trunk.
    let mut trunk_gpu = vec![0u64; gpus];
    let mut unknown: Vec<String> = Vec::new();
    for (o, name, layer) in inst.trunk() {
        let buffer = Buffer::of(place(o));
        match (Tensors::for_trunk(name), layer) {
            (Some(Tensors::Output), _) => {
                rules.entry((Tensors::Output, buffer)).or_default();
            }
            (Some(t), Some(layer)) => {
                rules.entry((t, buffer)).or_default().insert(layer);
            }
            _ => {
                if !unknown.iter().any(|u| u == name) {
                    unknown.push(name.to_string());
                }
                continue;
            }
        }
        if let Buffer::Cuda(g) = buffer {
            trunk_gpu[g] += inst.objects[o].gpu_bytes;
        }
    }
    if !unknown.is_empty() {
        warnings.push(format!(
            "llama.cpp: no GGUF tensor name is known for trunk component(s) {} (known: {}); no rule is written, so llama.cpp places them by -ngl",
            join(unknown.iter().map(|n| format!("`{n}`")), ", "),
            LLAMA_TRUNK_NAMES.join(", ")
        ));
    }

    let (chosen, buffer_warnings) = layer_buffers(
        plan,
        inst,
        &placement,
        &layers_of,
        &trunk_gpu,
        "llama.cpp holds all routed experts of a layer in one tensor per projection (blk.N.ffn_*_exps)",
    );
    warnings.extend(buffer_warnings);
    for (l, &b) in chosen.iter().enumerate() {
        rules
            .entry((Tensors::RoutedExperts, b))
            .or_default()
            .insert(layers_of[l]);
    }

    warnings.extend(unexpressed_tiers(
        inst,
        &placement,
        |on_disk| format!(
            "llama.cpp has no disk tier: the {on_disk} experts the plan streams from disk go with their layer (CPU unless the layer is on a GPU); a CPU buffer maps the GGUF (mmap), so the OS reads them from the drive on first use and keeps what the page cache holds (--no-mmap would load them into RAM)"
        ),
        |nodes| format!(
            "llama.cpp has one CPU buffer: the plan's choices between {nodes} are not expressed (--numa distribute spreads pages over the nodes instead)"
        ),
    ));

    let rules = llama_rules(&rules);
    let lines: Vec<String> = rules.iter().map(|(r, b)| format!("-ot {r}={b}")).collect();
    let any_gpu = rules.iter().any(|(_, b)| matches!(b, Buffer::Cuda(_)));
    let fragment = format!(
        "-ngl {} -ot '{}'",
        if any_gpu { 999 } else { 0 },
        join(rules.iter().map(|(r, b)| format!("{r}={b}")), ",")
    );
    create_dir(dir)?;
    let ot_path = dir.join(LLAMA_OT_FILE);
    let args_path = dir.join(LLAMA_ARGS_FILE);
    write_atomic(&ot_path, (lines.join("\n") + "\n").as_bytes())?;
    write_atomic(&args_path, (fragment + "\n").as_bytes())?;
    Ok(Export {
        files: vec![ot_path, args_path],
        warnings,
    })
}
