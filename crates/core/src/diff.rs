//! Comparing two placements of one instance: which objects move, the bytes
//! each link must carry (design §4.5: disk to RAM at the drive's read rate,
//! RAM to GPU at the card's upload rate, GPU to GPU through the host), the
//! seconds that takes, and the predicted change of token time.

use crate::cost::{Instance, ObjectKind, Place, Resources};
use std::collections::BTreeMap;

/// Bytes and objects moved from one place to another.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkMove {
    pub from: Place,
    pub to: Place,
    pub objects: usize,
    pub bytes: u64,
    /// Seconds to carry `bytes` over the slowest hop of the link.
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PlanDiff {
    pub moved_experts: usize,
    pub moved_trunk: usize,
    pub moved_kv: usize,
    pub links: Vec<LinkMove>,
    pub move_seconds: f64,
    pub token_seconds_before: f64,
    pub token_seconds_after: f64,
}

/// Bytes per second of the slowest hop from `from` to `to`; `None` when the
/// move carries no bytes (a weight evicted to disk is discarded, a KV group
/// dropped or taken up is filled by its next prefill).
fn link_rate(r: &Resources, from: Place, to: Place) -> Option<f64> {
    let fastest_drive = r.drive_read_bytes_per_s.iter().copied().fold(0.0, f64::max);
    // Where the bytes come from: a drive read, or a copy already in memory.
    let source = match from {
        Place::Disk(d) => r.drive_read_bytes_per_s[d],
        Place::Gpu(g) => r.gpu_upload_bytes_per_s[g],
        Place::Ram(_) => f64::INFINITY,
        Place::Recompute => return None,
    };
    match to {
        Place::Disk(_) | Place::Recompute => None,
        Place::Ram(_) => Some(if source.is_finite() {
            source
        } else {
            fastest_drive.max(f64::MIN_POSITIVE)
        }),
        Place::Gpu(g) => Some(source.min(r.gpu_upload_bytes_per_s[g])),
    }
}

/// Seconds to carry `bytes` from `from` to `to` (design §4.5) over the
/// slowest hop; 0 when nothing is carried. The one move cost: the solver's
/// re-planning, `plan --from` and the serving loop's re-planner all price
/// a move with it.
pub fn carry_seconds(resources: &Resources, bytes: u64, from: Place, to: Place) -> f64 {
    if from == to {
        return 0.0;
    }
    link_rate(resources, from, to).map_or(0.0, |rate| bytes as f64 / rate)
}

/// Seconds to move object `o` from place index `from` to `to`: its bytes
/// at `to`, carried.
pub fn move_seconds(inst: &Instance, o: usize, from: usize, to: usize) -> f64 {
    let (from, to) = (inst.places[from], inst.places[to]);
    carry_seconds(&inst.resources, inst.objects[o].bytes_at(to), from, to)
}

/// Bytes that moving object `o` from place index `from` to `to` carries
/// over a link: its bytes at `to`, or 0 when nothing is carried (it stays,
/// or a weight is dropped to disk, a KV group dropped or taken up). What a
/// re-plan's move budget counts.
pub fn carried_bytes(inst: &Instance, o: usize, from: usize, to: usize) -> u64 {
    let (from, to) = (inst.places[from], inst.places[to]);
    if from == to || link_rate(&inst.resources, from, to).is_none() {
        return 0;
    }
    inst.objects[o].bytes_at(to)
}

pub fn diff(inst: &Instance, before: &[usize], after: &[usize]) -> PlanDiff {
    let mut links: BTreeMap<(Place, Place), LinkMove> = BTreeMap::new();
    let (mut moved_experts, mut moved_trunk, mut moved_kv) = (0, 0, 0);
    for (o, (&a, &b)) in before.iter().zip(after).enumerate() {
        if a == b {
            continue;
        }
        let object = &inst.objects[o];
        match object.kind {
            ObjectKind::Expert { .. } => moved_experts += 1,
            ObjectKind::Trunk { .. } => moved_trunk += 1,
            ObjectKind::KvGroup { .. } => moved_kv += 1,
        }
        let (from, to) = (inst.places[a], inst.places[b]);
        let entry = links.entry((from, to)).or_insert(LinkMove {
            from,
            to,
            objects: 0,
            bytes: 0,
            seconds: 0.0,
        });
        entry.objects += 1;
        entry.bytes += carried_bytes(inst, o, a, b);
        entry.seconds += move_seconds(inst, o, a, b);
    }
    let links: Vec<LinkMove> = links.into_values().collect();
    PlanDiff {
        moved_experts,
        moved_trunk,
        moved_kv,
        // A fold from +0: an empty f64 sum is -0, which prints as "-0.000".
        move_seconds: links.iter().fold(0.0, |total, l| total + l.seconds),
        links,
        token_seconds_before: inst.evaluate(before).token_seconds,
        token_seconds_after: inst.evaluate(after).token_seconds,
    }
}
