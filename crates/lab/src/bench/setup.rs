//! What a bench run holds before its clock starts: the nodes' GEMV
//! threads, the seeded inputs, each object's work (its bytes, read or
//! generated), the cards it needs and the residents' leases.

use super::gpu::Card;
use super::stage::Work;
use super::{input, BenchError};
use residency_core::cost::{Instance, ObjectKind, Place};
use residency_hwprofile::system;
use residency_policy::ObjectIndex;
use residency_runtime::apply::Applied;
use residency_runtime::checkpoint::Checkpoint;
use residency_runtime::gemv::{
    projections_at, tensor_specs, NodeThreads, PackedRows, Packing, ProjectionAt, QuantizedInput,
};
use residency_runtime::identity::ObjectKey;
use residency_runtime::storage::HostPool;
use residency_runtime::store::Lease;
use std::collections::BTreeMap;
use std::path::Path;

/// The GEMV threads of each NUMA node the profile has, pinned to its
/// cores, with its sysfs id; refused where this machine has fewer nodes.
pub(super) fn node_threads(
    inst: &Instance,
    plan_path: &Path,
    notes: &mut Vec<String>,
) -> Result<Vec<(NodeThreads, u32)>, BenchError> {
    let machine = system::numa_nodes(notes);
    let mut threads = Vec::new();
    for n in 0..inst.resources.numa_nodes() {
        let Some(node) = machine.get(n) else {
            return Err(input(
                plan_path,
                &format!("ram:{n}"),
                format!("this machine has {} NUMA node(s)", machine.len()),
                "bench on the machine the profile describes",
            ));
        };
        threads.push((NodeThreads::new(&node.core_cpus)?, node.sysfs_id));
    }
    Ok(threads)
}

/// One seeded quantised input for every width a GEMV reads: each expert
/// projection's columns and the hidden size.
pub(super) fn seeded_inputs(
    work: &[Work],
    hidden: usize,
    packing: Packing,
    seed: u64,
) -> BTreeMap<usize, QuantizedInput> {
    let mut inputs: BTreeMap<usize, QuantizedInput> = BTreeMap::new();
    for w in work {
        let cols: Vec<usize> = match w {
            Work::Expert { at, .. } => at.iter().map(|p| p.cols).collect(),
            _ => vec![],
        };
        for c in cols.into_iter().chain([hidden]) {
            inputs
                .entry(c)
                .or_insert_with(|| QuantizedInput::seeded(c, packing, seed ^ c as u64));
        }
    }
    inputs
}

/// The leases held for the run: the plan pins residents, and an engine
/// maps its weights once at load. The GPU's experts are checked on their
/// card, and its generated trunk rows put there.
pub(super) fn hold_residents(
    inst: &Instance,
    placement: &[usize],
    applied: &Applied,
    work: &mut [Work],
    cards: &mut [Option<Card>],
) -> Result<Vec<Option<Lease>>, BenchError> {
    let mut leases: Vec<Option<Lease>> = (0..work.len()).map(|_| None).collect();
    for (o, w) in work.iter_mut().enumerate() {
        match (inst.places[placement[o]], &*w) {
            (Place::Ram(_), Work::Expert { object, .. }) => {
                leases[o] = Some(applied.store.acquire(*object)?);
            }
            (Place::Gpu(g), Work::Expert { object, at }) => {
                let lease = applied.store.acquire(*object)?;
                on_card(&lease, g, at, *object)?;
                leases[o] = Some(lease);
            }
            (Place::Gpu(g), Work::Generated(m)) => {
                *w = Work::OnCard(card_mut(cards, g)?.matrix(m)?);
            }
            _ => {}
        }
    }
    Ok(leases)
}

/// A CUDA device for every profile GPU the placement uses (`None` for the
/// others), each with room for the most outputs a token can give it:
/// per stage its trunk components' rows and `top_k` times its largest
/// expert's.
pub(super) fn open_cards(
    inst: &Instance,
    placement: &[usize],
    work: &[Work],
    top_k: usize,
    inputs: &BTreeMap<usize, QuantizedInput>,
) -> Result<Vec<Option<Card>>, BenchError> {
    let mut token_rows = vec![None::<usize>; inst.resources.gpus()];
    for stage in &inst.stages {
        let mut trunk = vec![0; token_rows.len()];
        let mut expert = vec![0; token_rows.len()];
        for &o in &stage.objects {
            if let Place::Gpu(g) = inst.places[placement[o]] {
                let rows = work[o].rows();
                if inst.objects[o].is_expert() {
                    expert[g] = expert[g].max(rows);
                } else {
                    trunk[g] += rows;
                }
                token_rows[g].get_or_insert(0);
            }
        }
        for (g, rows) in token_rows.iter_mut().enumerate() {
            if let Some(rows) = rows {
                *rows += trunk[g] + top_k * expert[g];
            }
        }
    }
    token_rows
        .into_iter()
        .enumerate()
        .map(|(g, rows)| rows.map(|rows| Card::open(g, inputs, rows)).transpose())
        .collect()
}

pub(super) fn card_mut(cards: &mut [Option<Card>], g: usize) -> Result<&mut Card, BenchError> {
    cards.get_mut(g).and_then(Option::as_mut).ok_or_else(|| {
        BenchError::Gpu(format!(
            "gpu:{g} was not opened; a bench bug, please report it"
        ))
    })
}

/// Checks that a GPU-placed expert's lease is in CUDA device `g`'s memory
/// where the kernel can read each projection: weights at 16-byte
/// boundaries (it loads 16 bytes at once), scales at 2.
fn on_card(
    lease: &Lease,
    g: usize,
    at: &[ProjectionAt],
    object: ObjectIndex,
) -> Result<(), BenchError> {
    match lease.device() {
        Some((ordinal, address)) if ordinal as usize == g => {
            let misaligned = at.iter().find(|p| {
                !(address + p.weights.start as u64).is_multiple_of(16)
                    || !(address + p.scales.start as u64).is_multiple_of(2)
            });
            match misaligned {
                None => Ok(()),
                Some(p) => Err(BenchError::Gpu(format!(
                    "object {object} on gpu:{g}: a projection's weights start at byte {} of its bytes, which the GPU kernel cannot read 16 bytes at a time; generate the checkpoint with `residency gen-checkpoint`",
                    p.weights.start
                ))),
            }
        }
        _ => Err(BenchError::Gpu(format!(
            "object {object} is planned on gpu:{g} but the store holds it elsewhere (no CUDA device {g} when the plan was applied)"
        ))),
    }
}

/// Per instance object, its work: expert layouts (checked against the
/// store), generated rows for RAM-placed trunk components.
pub(super) fn prepare(
    inst: &Instance,
    placement: &[usize],
    checkpoint: &Checkpoint,
    applied: &Applied,
    packing: Packing,
    threads: &[(NodeThreads, u32)],
    seed: u64,
) -> Result<Vec<Work>, BenchError> {
    let specs = tensor_specs(checkpoint);
    let moe_layers = checkpoint.config.moe_layers();
    let hidden = checkpoint.config.hidden;
    let row_bytes = packing.row_bytes(hidden) + hidden / packing.group * 2;
    let pools: Vec<_> = threads
        .iter()
        .map(|(_, node)| HostPool::new(Some(*node), 0))
        .collect();
    let mut work = Vec::with_capacity(inst.objects.len());
    for (o, object) in inst.objects.iter().enumerate() {
        let key = match &object.kind {
            ObjectKind::Expert { moe, expert } => ObjectKey::Expert {
                layer: moe_layers[*moe] as u32,
                expert: *expert as u32,
            },
            ObjectKind::Trunk { .. } => {
                // In its node's memory in RAM; on a GPU, in host memory
                // until `bench` copies it to the card.
                let (pool, bytes) = match inst.places[placement[o]] {
                    Place::Ram(n) => (Some(&pools[n]), object.ram_bytes),
                    _ => (None, object.gpu_bytes),
                };
                let rows = bytes as usize / row_bytes;
                let mut m = PackedRows::zeroed(packing, hidden, rows, pool);
                // Seeded by object, not by place: the same rows wherever
                // the plan puts the component.
                m.fill_generated(seed ^ (o as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
                work.push(Work::Generated(m));
                continue;
            }
            ObjectKind::KvGroup { .. } => {
                work.push(Work::None);
                continue;
            }
        };
        let object = applied.index[&key];
        let at = projections_at(applied.loader.extents(object), &specs, packing);
        work.push(Work::Expert { object, at });
    }
    Ok(work)
}
