//! The `llama-cpp` export: `--override-tensor` (`-ot <regex>=<buffer>`)
//! rules over GGUF tensor names, and the command lines that use them. All
//! routed experts of a layer are one tensor per projection
//! (`blk.N.ffn_gate_exps.weight`, ...), so each MoE layer goes to the buffer
//! holding the largest share of its use-rate mass; where whole layers
//! overflow a card, its layers with the least planned mass there move to
//! their next buffer with room (else the CPU). The warning on lost
//! per-expert decisions gives the cost model's token time of what llama.cpp
//! will run beside the plan's.
//!
//! With several GPUs, `-sm layer -ts` gives each card the layers whose
//! attention the plan put there (`split`), so that their KV cache follows;
//! `-c` is the context the plan reserved (`plan --context-tokens`), else the
//! most tokens of KV cache the plan leaves room for (`context`).
//! With one GPU the rules name only what leaves it: `-ngl 999` already puts
//! every other tensor on `CUDA0`, and rules that pin tensors there
//! explicitly made llama.cpp 5-10 % slower on the H200 machine than the same
//! layer choice written as CPU rules alone
//! (`../shared/data/llamacpp-h200-qwen3-30b/second-run/`).

mod context;
mod split;
#[cfg(test)]
mod tests;

use super::baselines::llama_cpp_strategies;
use super::layer_buffers::{layer_buffers, llama_placement, Buffer};
use super::{create_dir, join, placement, shell_quote, unexpressed_tiers, Export, ModelFacts};
use crate::gguf::tensors::WITH_ATTENTION;
use crate::llama_bench::llama_cpp_seconds;
use residency_core::cost::Instance;
use residency_core::error::{write_atomic, Result};
use residency_core::plan::Plan;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How much faster a baseline must be than the plan's projection for the
/// export to write it instead.
const SWITCH_MARGIN: f64 = 1e-3;

/// Why the engine cannot hold per-expert decisions.
const LAYOUT: &str =
    "llama.cpp holds all routed experts of a layer in one tensor per projection (blk.N.ffn_*_exps)";
pub const LLAMA_OT_FILE: &str = "llama_cpp_override_tensor.txt";
pub const LLAMA_ARGS_FILE: &str = "llama_cpp_args.txt";
pub const LLAMA_COMMAND_FILE: &str = "llama_cpp_command.txt";
pub const LLAMA_MEMORY_FILE: &str = "llama_cpp_memory_plan.json";

/// A family of GGUF tensors one rule moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
enum Tensors {
    RoutedExperts,
    Attention,
    DenseFfn,
    SharedExperts,
    ChunkExperts,
    Output,
}

/// Trunk names of our model descriptions with a GGUF tensor family.
pub const LLAMA_TRUNK_NAMES: [&str; 5] = [
    "attn",
    "dense_ffn",
    "shared_expert",
    "chunk_experts",
    "lm_head",
];

impl Tensors {
    fn for_trunk(name: &str) -> Option<Tensors> {
        match name {
            "attn" => Some(Tensors::Attention),
            "dense_ffn" => Some(Tensors::DenseFfn),
            "shared_expert" => Some(Tensors::SharedExperts),
            "chunk_experts" => Some(Tensors::ChunkExperts),
            "lm_head" => Some(Tensors::Output),
            _ => None,
        }
    }

    /// The regex (llama.cpp `std::regex_search`, anchored at the start; no
    /// `,`, `;` or `=`, which separate rules and buffers; no shell quote).
    /// Attention takes the layer's norms and router with it, as the model
    /// description counts them (`gguf::tensors`).
    fn pattern(self, layers: &BTreeSet<usize>) -> String {
        let alt = join(layers, "|");
        match self {
            Tensors::RoutedExperts => {
                format!(r"^blk\.({alt})\.ffn_(gate|up|down|gate_up)_exps\.")
            }
            Tensors::Attention => {
                let with = join(WITH_ATTENTION.iter().map(|b| format!(r"{b}\.")), "|");
                format!(r"^blk\.({alt})\.(attn_|{with})")
            }
            Tensors::DenseFfn => format!(r"^blk\.({alt})\.ffn_(gate|up|down|gate_up)\."),
            Tensors::SharedExperts => {
                format!(r"^blk\.({alt})\.ffn_(gate|up|down|gate_inp)_shexp\.")
            }
            Tensors::ChunkExperts => format!(r"^blk\.({alt})\.ffn_(gate|up|down)_chexps\."),
            Tensors::Output => r"^(output|output_norm|rope_freqs)\.".into(),
        }
    }
}

/// The layers each family of tensors goes to each buffer for.
type Rules = BTreeMap<(Tensors, Buffer), BTreeSet<usize>>;

/// The rules of a placement, as `(regex, buffer)` in output order, leaving
/// out those for `default` (where `-ngl` puts an unmatched tensor anyway).
fn llama_rules(rules: &Rules, default: Option<Buffer>) -> Vec<(String, Buffer)> {
    rules
        .iter()
        .filter(|((_, b), _)| Some(*b) != default)
        .map(|(&(t, b), layers)| (t.pattern(layers), b))
        .collect()
}

/// Per llama.cpp buffer, the bytes the rules put there, by tensor family.
#[derive(Debug, Serialize)]
struct MemoryPlan {
    buffers: BTreeMap<String, BufferBytes>,
}

#[derive(Debug, Default, Serialize)]
struct BufferBytes {
    bytes: u64,
    by_family: BTreeMap<Tensors, u64>,
}

impl MemoryPlan {
    fn add(&mut self, buffer: Buffer, family: Tensors, bytes: u64) {
        let b = self.buffers.entry(buffer.to_string()).or_default();
        b.bytes += bytes;
        *b.by_family.entry(family).or_default() += bytes;
    }
}

/// Writes `llama_cpp_override_tensor.txt` (one `-ot 'REGEX=BUFFER'` line
/// per rule), `llama_cpp_args.txt` (one command-line fragment),
/// `llama_cpp_command.txt` (a `llama-server` and a `llama-bench` line of
/// the same placement; `-m` is the model's file when it is a GGUF, `-c`
/// the context the plan reserved or leaves room for, `context`) and
/// `llama_cpp_memory_plan.json`.
///
/// Each MoE layer's routed experts go to the buffer with the most of the
/// layer's use-rate mass in the plan (then the most experts, then the lower
/// buffer). Where whole layers then overflow a card's capacity, the layers
/// with the least of the plan's mass on that card go to the CPU until the
/// card fits. Trunk components go where the plan puts them.
pub fn llama_cpp(plan: &Plan, inst: &Instance, dir: &Path, model: ModelFacts) -> Result<Export> {
    let (placement, switched) = rules_source(plan, inst)?;
    let layers_of = inst.moe_layers()?;
    let mut warnings: Vec<String> = switched.into_iter().collect();
    let mut memory = MemoryPlan {
        buffers: BTreeMap::new(),
    };
    let (mut rules, trunk_gpu) = trunk_rules(inst, &placement, &mut memory, &mut warnings);
    let chosen = layer_buffers(plan, inst, &placement, &trunk_gpu, LAYOUT, &mut warnings)?;
    for (l, &b) in chosen.iter().enumerate() {
        rules
            .entry((Tensors::RoutedExperts, b))
            .or_default()
            .insert(layers_of[l]);
        let bytes = inst.expert_ids[l]
            .iter()
            .map(|&o| on_buffer_bytes(inst, o, b))
            .sum();
        memory.add(b, Tensors::RoutedExperts, bytes);
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

    let any_gpu = rules.keys().any(|(_, b)| matches!(b, Buffer::Cuda(_)));
    let gpus = inst.resources.gpus();
    // Where `-ngl` alone puts an unmatched tensor: the one card, or the
    // CPU without GPU layers; with several cards the layer's card by
    // `-ts` (`split`), which need not be the plan's, so every rule is kept.
    let default = match (any_gpu, gpus) {
        (false, _) => Some(Buffer::Cpu),
        (true, 1) => Some(Buffer::Cuda(0)),
        (true, _) => None,
    };
    let ngl = if any_gpu { 999 } else { 0 };
    let (split, layer_buffers) = layer_devices(inst, &rules, ngl, &mut warnings);
    let ts = |sep: &str| split.as_ref().map_or(String::new(), |s| s.arg(sep));
    let (context, note) = context::context_tokens(inst, layer_buffers.as_deref(), &memory, &model);
    warnings.extend(note);
    // llama-bench has no `-c`: it sizes the context from `-p` and `-n`.
    let c = context.map_or(String::new(), |tokens| format!(" -c {tokens}"));
    let rules = llama_rules(&rules, default);
    let joined = |sep: &str| join(rules.iter().map(|(r, b)| format!("{r}={b}")), sep);
    let ot = |sep: &str| {
        if rules.is_empty() {
            String::new()
        } else {
            format!(" -ot '{}'", joined(sep))
        }
    };
    let model_path = match model.file.filter(|p| crate::gguf::is_gguf(p)) {
        Some(p) => shell_quote(&p.display().to_string()),
        None => {
            warnings.push(format!(
                "{LLAMA_COMMAND_FILE}: the plan's model is not a GGUF file, so `-m MODEL.gguf` stands for it; plan with --model FILE.gguf to get its path and sizes"
            ));
            "MODEL.gguf".to_string()
        }
    };
    let lines: Vec<String> = rules
        .iter()
        .map(|(r, b)| format!("-ot '{r}={b}'"))
        .collect();
    let server = format!("-ngl {ngl}{}{c}{}", ts(","), ot(","));
    let commands = format!(
        "# llama-server (and llama-cli) take the rules joined with `,`:\n\
         llama-server -m {model_path} {server}\n\
         # llama-bench reads `,` as separate test configurations: it takes `;`.\n\
         llama-bench -m {model_path} -ngl {ngl}{}{} -p 0 -n 128\n",
        ts("/"),
        ot(";"),
    );
    create_dir(dir)?;
    let ot_path = dir.join(LLAMA_OT_FILE);
    let args_path = dir.join(LLAMA_ARGS_FILE);
    let command_path = dir.join(LLAMA_COMMAND_FILE);
    let memory_path = dir.join(LLAMA_MEMORY_FILE);
    let text = |lines: &[String]| lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    write_atomic(&ot_path, text(&lines).as_bytes())?;
    write_atomic(&args_path, format!("{server}\n").as_bytes())?;
    write_atomic(&command_path, commands.as_bytes())?;
    let json = serde_json::to_string_pretty(&memory).expect("the memory plan serialises");
    write_atomic(&memory_path, (json + "\n").as_bytes())?;
    Ok(Export {
        files: vec![ot_path, args_path, command_path, memory_path],
        warnings,
    })
}

/// With several cards, the `-ts` split that puts each layer's default
/// device where the rules put its attention (with a note where it cannot);
/// and each layer's default device, where llama.cpp puts its KV cache
/// (`None` where no split says).
fn layer_devices(
    inst: &Instance,
    rules: &Rules,
    ngl: u32,
    warnings: &mut Vec<String>,
) -> (Option<split::LayerSplit>, Option<Vec<Buffer>>) {
    let gpus = inst.resources.gpus();
    let split = if ngl > 0 && gpus > 1 {
        let wanted = split::wanted_cards(rules, inst.layers());
        let split = split::layer_split(&wanted, gpus);
        if let Some(split) = &split {
            warnings.extend(split::split_warning(&wanted, split));
        }
        split
    } else {
        None
    };
    // Each layer's default device, where its KV cache goes.
    let layers = inst.layers();
    let layer_buffers: Option<Vec<Buffer>> = match (&split, ngl, gpus) {
        (_, 0, _) => Some(vec![Buffer::Cpu; layers]),
        (_, _, 1) => Some(vec![Buffer::Cuda(0); layers]),
        (Some(split), ..) => Some(
            split.slot_cards[..layers]
                .iter()
                .map(|&g| Buffer::Cuda(g))
                .collect(),
        ),
        (None, ..) => None,
    };
    (split, layer_buffers)
}

/// The placement llama.cpp runs with the export's rules (one buffer per
/// MoE layer), for pricing it beside the plan and the baselines.
pub fn as_exported(plan: &Plan, inst: &Instance) -> Result<Vec<usize>> {
    let (source, _) = rules_source(plan, inst)?;
    projection(plan, inst, &source)
}

/// What the rules are written from: the plan, unless a baseline's whole
/// layers run faster in llama.cpp than the plan's projection onto whole
/// layers (by the profile's llama.cpp timing, else the cost model; by more
/// than `SWITCH_MARGIN`: equal layers tie to rounding); then that baseline, with the note saying so. The plan
/// file keeps the per-expert plan either way.
fn rules_source(plan: &Plan, inst: &Instance) -> Result<(Vec<usize>, Option<String>)> {
    let planned = placement(plan, inst)?;
    let projected = llama_cpp_seconds(inst, &projection(plan, inst, &planned)?);
    let fastest = llama_cpp_strategies(inst)?
        .into_iter()
        .map(|s| (llama_cpp_seconds(inst, &s.placement), s))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    Ok(match fastest {
        Some((seconds, s)) if seconds < projected * (1.0 - SWITCH_MARGIN) => {
            let note = format!(
                "llama.cpp runs a layer's experts from one buffer: the plan projected onto whole layers gives {} ms per token, `{}` {} ms ({}), so the rules write the faster, `{}`'s placement (the plan file keeps the per-expert plan)",
                ms(projected),
                s.flags,
                ms(seconds),
                if inst.resources.llama_cpp.is_some() {
                    "by the profile's llama.cpp timing"
                } else {
                    "by the cost model"
                },
                s.flags
            );
            (s.placement, Some(note))
        }
        _ => (planned, None),
    })
}

/// `placement` as llama.cpp runs it: each MoE layer's experts on the layer
/// buffers' choice, the trunk as placed.
fn projection(plan: &Plan, inst: &Instance, placement: &[usize]) -> Result<Vec<usize>> {
    let mut memory = MemoryPlan {
        buffers: BTreeMap::new(),
    };
    let mut warnings = Vec::new();
    let (_, trunk_gpu) = trunk_rules(inst, placement, &mut memory, &mut warnings);
    let chosen = layer_buffers(plan, inst, placement, &trunk_gpu, LAYOUT, &mut warnings)?;
    Ok(llama_placement(inst, placement, &chosen))
}

fn ms(seconds: f64) -> String {
    format!("{:.3}", seconds * 1e3)
}

/// The trunk's rules, and each card's trunk bytes (for the layer buffers).
fn trunk_rules(
    inst: &Instance,
    placement: &[usize],
    memory: &mut MemoryPlan,
    warnings: &mut Vec<String>,
) -> (Rules, Vec<u64>) {
    let mut rules = Rules::new();
    let mut trunk_gpu = vec![0u64; inst.resources.gpus()];
    let mut unknown: Vec<String> = Vec::new();
    for (o, name, layer) in inst.trunk() {
        let buffer = Buffer::of(inst.places[placement[o]]);
        let family = match (Tensors::for_trunk(name), layer) {
            (Some(Tensors::Output), _) => {
                rules.entry((Tensors::Output, buffer)).or_default();
                Tensors::Output
            }
            (Some(t), Some(layer)) => {
                rules.entry((t, buffer)).or_default().insert(layer);
                t
            }
            _ => {
                if !unknown.iter().any(|u| u == name) {
                    unknown.push(name.to_string());
                }
                continue;
            }
        };
        memory.add(buffer, family, on_buffer_bytes(inst, o, buffer));
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
    (rules, trunk_gpu)
}

/// An object's bytes in the format of the buffer's tier.
fn on_buffer_bytes(inst: &Instance, o: usize, buffer: Buffer) -> u64 {
    match buffer {
        Buffer::Cuda(_) => inst.objects[o].gpu_bytes,
        Buffer::Cpu => inst.objects[o].ram_bytes,
    }
}
