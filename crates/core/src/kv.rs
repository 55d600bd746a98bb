//! KV prefix groups (docs/design.md §4.6): reusable prompt prefixes that compete with
//! experts for GPU and RAM bytes in the same plan. A group of prefix blocks
//! has bytes, expected reuses per generated token and the prefill seconds a
//! reuse avoids when the group is on a GPU; from RAM it saves less (it is
//! uploaded first), and a group that is not kept is recomputed. Read from a
//! YAML or JSON file; `residency kv-groups` writes one from a prefix trace.

use crate::error::{from_yaml, read_document, write_atomic, PlannerError, Result};
use crate::limits;
use crate::units::{Bytes, Seconds};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const FORMAT: &str = "residency-kv-groups";

/// One group of KV prefix blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvGroup {
    pub name: String,
    /// Bytes of the group's KV blocks over all layers (`b_k`).
    pub bytes: Bytes,
    /// Expected reuses of the group per generated token (`r_k`).
    pub reuses_per_token: f64,
    /// Prefill seconds one reuse avoids when the group is on a GPU.
    pub prefill_seconds: Seconds,
}

/// The KV groups file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvGroupsFile {
    pub format: String,
    /// Where the groups were measured (a trace) and how, for people.
    #[serde(default)]
    pub source: String,
    pub groups: Vec<KvGroup>,
}

impl KvGroupsFile {
    pub fn new(source: String, groups: Vec<KvGroup>) -> KvGroupsFile {
        KvGroupsFile {
            format: FORMAT.into(),
            source,
            groups,
        }
    }

    /// Reads and checks a groups file (YAML, of which JSON is a subset).
    pub fn read(path: &Path) -> Result<KvGroupsFile> {
        let fix = "see docs/design.md §4.6; `residency kv-groups` writes this file from a trace";
        let file: KvGroupsFile = from_yaml(&read_document(path)?, path, fix)?;
        let err =
            |place: String, problem: String| Err(PlannerError::input(path, place, problem, fix));
        if file.format != FORMAT {
            return err(
                "format".into(),
                format!("is `{}`, expected `{FORMAT}`", file.format),
            );
        }
        if let Some((i, field, problem)) = check_groups(&file.groups) {
            return err(format!("groups[{i}].{field}"), problem);
        }
        Ok(file)
    }

    /// Writes YAML, or JSON when the extension is `.json`; atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = if path.extension().is_some_and(|e| e == "json") {
            serde_json::to_string_pretty(self).expect("groups serialise") + "\n"
        } else {
            serde_norway::to_string(self).expect("groups serialise")
        };
        write_atomic(path, text.as_bytes())
    }
}

/// The first group of `groups` that the planner cannot price, as (index,
/// field, problem): an empty or repeated name, no bytes or over 1 EiB, a
/// reuse or a prefill time out of `limits`' range. What a KV groups file
/// and a plan's `kv` are both checked with.
pub fn check_groups(groups: &[KvGroup]) -> Option<(usize, &'static str, String)> {
    for (i, g) in groups.iter().enumerate() {
        if g.name.is_empty() {
            return Some((i, "name", "is empty".into()));
        }
        if let Some(j) = groups[..i].iter().position(|h| h.name == g.name) {
            return Some((
                i,
                "name",
                format!("`{}` is also the name of group {j}", g.name),
            ));
        }
        if g.bytes.0 == 0 {
            return Some((i, "bytes", "is 0; a group holds at least one block".into()));
        }
        if g.bytes.0 > limits::MAX_BYTES {
            return Some((i, "bytes", format!("is {}, over 1 EiB", g.bytes)));
        }
        if !(0.0..=limits::MAX_REUSES_PER_TOKEN).contains(&g.reuses_per_token) {
            return Some((
                i,
                "reuses_per_token",
                format!("is {}, expected a number from 0 to 1e6", g.reuses_per_token),
            ));
        }
        if !limits::time_in_range(g.prefill_seconds.0) {
            return Some((
                i,
                "prefill_seconds",
                format!(
                    "is {} s, expected a time from 0 to 1e6 s",
                    g.prefill_seconds.0
                ),
            ));
        }
    }
    None
}
