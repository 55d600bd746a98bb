//! Request traces with prefix-block ids: the Mooncake FAST'25 JSONL format
//! (`../shared/data/kv/mooncake-fast25/SOURCES.md`), one request per line
//! with exactly `timestamp`, `input_length`, `output_length` and
//! `hash_ids`. Each id names a whole prefix (a block and everything before
//! it), so equal leading ids mean an equal prefix.
//!
//! The reader checks what the replay relies on and names the line and the
//! fix when it does not hold: one id per block of the input (`len(hash_ids)
//! == ceil(input_length / block_tokens)`), no id twice in a request, and one
//! parent per id across the file (an id that follows two different blocks
//! does not name a prefix).

use residency_core::error::PlannerError;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a trace could not be read: one line naming the file (and the line)
/// and the fix.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}:{line}: {problem}; {fix}", file.display())]
    Line {
        file: PathBuf,
        line: usize,
        problem: String,
        fix: String,
    },
    #[error("{}: {problem}; {fix}", file.display())]
    File {
        file: PathBuf,
        problem: String,
        fix: String,
    },
    #[error("{0}")]
    Argument(String),
}

impl TraceError {
    fn file(path: &Path, problem: impl Into<String>, fix: impl Into<String>) -> TraceError {
        TraceError::File {
            file: path.to_path_buf(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }
}

/// One request: when it came, its prompt and output lengths, and the ids
/// of its prompt's blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvRequest {
    pub arrival_ms: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub block_ids: Vec<u64>,
}

impl KvRequest {
    /// Tokens in block `i`: full blocks, then what is left of the input.
    pub fn block_token_count(&self, i: usize, block_tokens: u32) -> u32 {
        let start = i as u64 * u64::from(block_tokens);
        self.input_tokens
            .saturating_sub(start)
            .min(u64::from(block_tokens)) as u32
    }
}

/// A trace, in file order.
#[derive(Debug, Clone)]
pub struct KvTrace {
    pub path: PathBuf,
    /// Tokens per block the ids stand for.
    pub block_tokens: u32,
    pub requests: Vec<KvRequest>,
}

impl KvTrace {
    pub fn total_tokens(&self) -> u64 {
        self.requests.iter().map(|r| r.input_tokens).sum()
    }

    pub fn block_references(&self) -> usize {
        self.requests.iter().map(|r| r.block_ids.len()).sum()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    timestamp: u64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// Reads a Mooncake trace whose ids stand for blocks of `block_tokens`.
pub fn read_mooncake(path: &Path, block_tokens: u32) -> Result<KvTrace, TraceError> {
    let text = residency_core::error::read_text(path).map_err(|e| match e {
        PlannerError::Input {
            place,
            problem,
            fix,
            ..
        } => TraceError::file(path, format!("{place}: {problem}"), fix),
        PlannerError::Io { error, .. } => TraceError::file(
            path,
            format!("cannot read the trace ({error})"),
            "give --trace a readable Mooncake JSONL file",
        ),
        e => TraceError::Argument(e.to_string()),
    })?;
    read_mooncake_str(&text, path, block_tokens)
}

/// [`read_mooncake`] of text already read; `path` names it in errors.
pub fn read_mooncake_str(
    text: &str,
    path: &Path,
    block_tokens: u32,
) -> Result<KvTrace, TraceError> {
    if block_tokens == 0 {
        return Err(TraceError::Argument(
            "--block-tokens 0: give the tokens per block of the trace's ids (512 for Mooncake)"
                .into(),
        ));
    }
    let bad = |line: usize, problem: String, fix: &str| TraceError::Line {
        file: path.to_path_buf(),
        line,
        problem,
        fix: fix.to_string(),
    };
    // Each id's parent (`None`: a first block) and the line that said so.
    let mut parents: HashMap<u64, (Option<u64>, usize)> = HashMap::new();
    let mut requests = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = n + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(raw).map_err(|e| {
            bad(
                line,
                format!("not a trace request ({e})"),
                "each line must be one JSON object with exactly timestamp, input_length, output_length and hash_ids (the Mooncake FAST'25 format)",
            )
        })?;
        let blocks = parsed.input_length.div_ceil(u64::from(block_tokens));
        if parsed.hash_ids.len() as u64 != blocks {
            return Err(bad(
                line,
                format!(
                    "{} hash_ids for input_length {}, which at {block_tokens} tokens per block is {blocks} blocks",
                    parsed.hash_ids.len(),
                    parsed.input_length
                ),
                "give --block-tokens the block size the trace's ids stand for (512 for the Mooncake traces)",
            ));
        }
        let mut parent = None;
        for (i, &id) in parsed.hash_ids.iter().enumerate() {
            match parents.get(&id) {
                Some(&(p, _)) if p == parent => {}
                Some(&(p, first)) => {
                    // A repeat within the request always shows up here too:
                    // its first repeat has another parent than its first use.
                    let name = |p: Option<u64>| match p {
                        Some(p) => format!("block {p}"),
                        None => "the start of a request".into(),
                    };
                    let problem = if parsed.hash_ids[..i].contains(&id) {
                        format!("hash_ids repeats block id {id}")
                    } else {
                        format!(
                            "block id {id} follows {} here but {} on line {first}",
                            name(parent),
                            name(p)
                        )
                    };
                    return Err(bad(
                        line,
                        problem,
                        "ids must name whole prefixes (a block and all before it), so an id has one parent and appears once per request; fix or drop the line",
                    ));
                }
                None => {
                    parents.insert(id, (parent, line));
                }
            }
            parent = Some(id);
        }
        requests.push(KvRequest {
            arrival_ms: parsed.timestamp,
            input_tokens: parsed.input_length,
            output_tokens: parsed.output_length,
            block_ids: parsed.hash_ids,
        });
    }
    if requests.is_empty() {
        return Err(TraceError::file(
            path,
            "the trace has no requests",
            "give --trace a Mooncake JSONL file with one request per line",
        ));
    }
    Ok(KvTrace {
        path: path.to_path_buf(),
        block_tokens,
        requests,
    })
}

#[cfg(test)]
mod tests;
