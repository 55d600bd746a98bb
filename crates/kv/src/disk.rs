//! The disk tier's files (design §8 "Persistence"): one file per block,
//! `<key hex>.kvb`, a fixed header and the block's bytes.
//!
//! Header (little-endian, 88 bytes): magic `RKVB`, version (u32), flags
//! (u32; bit 0: has a parent), tokens (u32), payload length (u64), key
//! (16 bytes), parent key (16 bytes, zero without a parent), then the
//! SHA-256 of the 56 bytes before it and the payload. The key is also the
//! file name, so a file renamed or copied under another key is refused.
//!
//! Writing: a temporary name (`.<key>.tmp<pid>`), all bytes, fsync, rename
//! to the final name, fsync of the directory. A crash at any point leaves
//! either no final file or a complete one, plus perhaps a temporary file.
//! Opening removes temporary files and verifies every block (magic,
//! version, key against the name, length against the file's, checksum);
//! a block that fails is deleted and reported, never served. Reads verify
//! again, since a drive can go bad after the open.

use super::key::{BlockKey, KEY_BYTES};
use super::KvError;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 4] = *b"RKVB";
const VERSION: u32 = 1;
const FLAG_PARENT: u32 = 1;
/// Header bytes covered by the checksum.
const FIELDS_BYTES: usize = 4 + 4 + 4 + 4 + 8 + KEY_BYTES + KEY_BYTES;
pub const HEADER_BYTES: usize = FIELDS_BYTES + 32;
const EXTENSION: &str = "kvb";

/// What the header of a verified block says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskBlock {
    pub key: BlockKey,
    pub parent: Option<BlockKey>,
    pub tokens: u32,
    pub len: u64,
}

/// What opening a directory found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Blocks verified and kept.
    pub blocks: usize,
    /// Blocks deleted, each with why (file: problem).
    pub discarded: Vec<String>,
    /// Temporary files of unfinished writes, deleted.
    pub temporaries_removed: usize,
}

/// The directory of a disk tier.
#[derive(Debug, Clone)]
pub struct DiskDir {
    dir: PathBuf,
}

fn io_error(path: &Path, action: &str, e: std::io::Error) -> KvError {
    KvError::file(
        path,
        format!("cannot {action} ({e})"),
        "check the KV disk directory's path, free space and permissions",
    )
}

fn fields(block: &DiskBlock) -> [u8; FIELDS_BYTES] {
    let mut out = [0u8; FIELDS_BYTES];
    let flags = if block.parent.is_some() {
        FLAG_PARENT
    } else {
        0
    };
    let mut at = 0;
    for part in [
        &MAGIC[..],
        &VERSION.to_le_bytes(),
        &flags.to_le_bytes(),
        &block.tokens.to_le_bytes(),
        &block.len.to_le_bytes(),
        &block.key.0,
        &block.parent.unwrap_or_default().0,
    ] {
        out[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    out
}

fn checksum(fields: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(fields);
    hash.update(payload);
    hash.finalize().into()
}

/// The block whose file starts with `header` (up to `HEADER_BYTES`) and
/// continues with `payload`, named for `named`; or why it is refused.
fn verify(header: &[u8], payload: &[u8], named: &BlockKey) -> Result<DiskBlock, String> {
    if header.len() < HEADER_BYTES {
        return Err(format!(
            "{} bytes, shorter than the {HEADER_BYTES}-byte header",
            header.len()
        ));
    }
    let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
    let key_at = |at: usize| BlockKey(header[at..at + KEY_BYTES].try_into().unwrap());
    if header[..4] != MAGIC {
        return Err("no RKVB magic".into());
    }
    if u32_at(4) != VERSION {
        return Err(format!("version {}, expected {VERSION}", u32_at(4)));
    }
    let len = u64::from_le_bytes(header[16..24].try_into().unwrap());
    if payload.len() as u64 != len {
        return Err(format!(
            "the header says {len} bytes of KV, the file holds {}",
            payload.len()
        ));
    }
    let key = key_at(24);
    if key != *named {
        return Err(format!("the header's key is {key}, the name says {named}"));
    }
    if checksum(&header[..FIELDS_BYTES], payload)[..] != header[FIELDS_BYTES..HEADER_BYTES] {
        return Err("checksum mismatch".into());
    }
    Ok(DiskBlock {
        key,
        parent: (u32_at(8) & FLAG_PARENT != 0).then(|| key_at(24 + KEY_BYTES)),
        tokens: u32_at(12),
        len,
    })
}

/// Reads the file at `path` as a header and a payload.
fn read_file(path: &Path) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut header = Vec::with_capacity(HEADER_BYTES);
    (&mut file)
        .take(HEADER_BYTES as u64)
        .read_to_end(&mut header)?;
    let mut payload = Vec::new();
    if header.len() == HEADER_BYTES {
        let len = u64::from_le_bytes(header[16..24].try_into().unwrap());
        // The header's length only sizes the buffer; a lying length costs
        // a reallocation, never a wrong answer (verify compares).
        payload.reserve(len.min(1 << 30) as usize);
        file.read_to_end(&mut payload)?;
    }
    Ok((header, payload))
}

impl DiskDir {
    /// Opens (creating) `dir`: removes temporary files, verifies every
    /// block, deletes the ones that fail; returns the good ones.
    pub fn open(dir: &Path) -> Result<(DiskDir, Vec<DiskBlock>, OpenReport), KvError> {
        std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "create the directory", e))?;
        let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, "list the directory", e))?;
        let mut report = OpenReport::default();
        let mut blocks = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|e| io_error(dir, "list the directory", e))?
                .path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with('.') && name.contains(".tmp") {
                std::fs::remove_file(&path)
                    .map_err(|e| io_error(&path, "remove a temporary file", e))?;
                report.temporaries_removed += 1;
                continue;
            }
            let Some(stem) = name.strip_suffix(&format!(".{EXTENSION}")) else {
                continue; // not ours
            };
            let verified = match BlockKey::from_hex(stem) {
                None => Err("the name is not a block key".to_string()),
                Some(key) => match read_file(&path) {
                    Ok((header, payload)) => verify(&header, &payload, &key),
                    Err(e) => Err(format!("unreadable ({e})")),
                },
            };
            match verified {
                Ok(block) => blocks.push(block),
                Err(problem) => {
                    std::fs::remove_file(&path)
                        .map_err(|e| io_error(&path, "remove a corrupt block", e))?;
                    report
                        .discarded
                        .push(format!("{}: {problem}", path.display()));
                }
            }
        }
        if report.temporaries_removed > 0 || !report.discarded.is_empty() {
            sync_dir(dir)?;
        }
        report.blocks = blocks.len();
        // Directory order is arbitrary; key order makes opens repeatable.
        blocks.sort_by_key(|b| b.key);
        Ok((
            DiskDir {
                dir: dir.to_path_buf(),
            },
            blocks,
            report,
        ))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, key: &BlockKey) -> PathBuf {
        self.dir.join(format!("{key}.{EXTENSION}"))
    }

    /// Writes a block atomically: temporary file, fsync, rename, fsync of
    /// the directory. Returns after the block is durable.
    pub fn write(&self, block: &DiskBlock, payload: &[u8]) -> Result<(), KvError> {
        assert_eq!(
            block.len,
            payload.len() as u64,
            "DiskBlock.len of the payload"
        );
        let fields = fields(block);
        let tmp = self
            .dir
            .join(format!(".{}.tmp{}", block.key, std::process::id()));
        let result = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&fields)?;
            file.write_all(&checksum(&fields, payload))?;
            file.write_all(payload)?;
            file.sync_all()?;
            std::fs::rename(&tmp, self.path(&block.key))
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error(&self.path(&block.key), "write the block", e));
        }
        sync_dir(&self.dir)
    }

    /// The header and payload of `key`, verified; `Err(problem)` when the
    /// file is missing, unreadable or fails verification (the caller
    /// discards it).
    pub fn read(&self, key: &BlockKey) -> Result<(DiskBlock, Vec<u8>), String> {
        let path = self.path(key);
        let (header, payload) =
            read_file(&path).map_err(|e| format!("{}: unreadable ({e})", path.display()))?;
        let block = verify(&header, &payload, key)
            .map_err(|problem| format!("{}: {problem}", path.display()))?;
        Ok((block, payload))
    }

    /// Deletes `key`'s file (a missing file is not an error).
    pub fn remove(&self, key: &BlockKey) -> Result<(), KvError> {
        let path = self.path(key);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&path, "remove the block", e)),
        }
    }
}

fn sync_dir(dir: &Path) -> Result<(), KvError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, "sync the directory", e))
}

#[cfg(test)]
mod tests;
