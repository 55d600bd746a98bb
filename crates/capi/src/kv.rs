//! The KV prefix cache's C ABI (docs/design.md §8), an engine's paged prefix
//! cache: `residency_kv_open` a block store, `residency_kv_block_keys` of a
//! request's tokens, `residency_kv_lookup` its longest cached prefix
//! (leases), `residency_kv_insert` the blocks it prefilled after it,
//! `residency_kv_release` the leases, close.

#[cfg(test)]
mod tests;

use super::{
    arg, c_str, guard, handles, out, slice, status, text, Failure, RESIDENCY_ERR_ARGUMENT,
    RESIDENCY_ERR_BUDGET, RESIDENCY_ERR_INPUT,
};
use std::ffi::{c_char, c_int, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, PoisonError};

/// `ResidencyKvOptions.policy`: least recently used block.
pub const RESIDENCY_KV_POLICY_LRU: u32 = 0;
/// Least recently used leaf of the prefix tree (SGLang's radix cache).
pub const RESIDENCY_KV_POLICY_LRU_LEAF: u32 = 1;
/// Lowest `P(reuse) * prefill seconds avoided / bytes`, learned online.
pub const RESIDENCY_KV_POLICY_UTILITY: u32 = 2;
/// Bytes of a `ResidencyKvKey`.
pub const RESIDENCY_KV_KEY_BYTES: usize = 16;
// A literal above, since cbindgen cannot follow a path to its value.
const _: () = assert!(RESIDENCY_KV_KEY_BYTES == residency_kv::key::KEY_BYTES);

/// The key of one KV block: 128 bits of a chained SHA-256 of the parent's
/// key, the block's tokens and the identity (`residency_kv_block_keys`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidencyKvKey {
    pub bytes: [u8; RESIDENCY_KV_KEY_BYTES],
}

/// Everything besides the tokens that changes a block's KV. Each string is
/// NUL-terminated UTF-8, or NULL for none; compared exactly, so give each a
/// canonical spelling (the model's content hash, the template's hash,
/// `rope theta=1e6 scaling=yarn factor=4`, ...). `multimodal[i]` points to
/// `multimodal_lens[i]` bytes (a payload's hash); `tenant_salt` to
/// `tenant_salt_len` bytes, mixed into a request's first block so tenants
/// never share one (NULL with length 0: no salt).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResidencyKvIdentity {
    pub model: *const c_char,
    pub tokenizer: *const c_char,
    pub chat_template: *const c_char,
    pub rope: *const c_char,
    pub kv_version: *const c_char,
    pub adapter: *const c_char,
    pub multimodal: *const *const u8,
    pub multimodal_lens: *const usize,
    pub multimodal_count: usize,
    pub tenant_salt: *const u8,
    pub tenant_salt_len: usize,
}

/// Options of `residency_kv_open`. A zero field takes its default where it
/// has one.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResidencyKvOptions {
    /// Tokens per block (0: 64).
    pub block_tokens: u32,
    /// KV bytes of one token, all layers (required).
    pub kv_bytes_per_token: u64,
    /// Blocks host RAM holds (required).
    pub ram_blocks: u64,
    /// Directory of the disk tier, created if needed; NULL: no disk tier.
    pub disk_dir: *const c_char,
    /// Blocks the disk tier holds.
    pub disk_blocks: u64,
    /// `RESIDENCY_KV_POLICY_*`.
    pub policy: u32,
    /// The prefill speed `utility` prices blocks with (0: 10000).
    pub prefill_tokens_per_second: f64,
}

/// What a KV store has done since it was opened, and holds now.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidencyKvCounters {
    pub lookups: u64,
    pub ram_hit_blocks: u64,
    pub disk_hit_blocks: u64,
    pub inserted_blocks: u64,
    pub deduplicated_inserts: u64,
    pub ram_evicted_blocks: u64,
    pub demoted_blocks: u64,
    pub disk_evicted_blocks: u64,
    /// Disk blocks that failed verification at a read (never served).
    pub discarded_blocks: u64,
    pub disk_errors: u64,
    pub ram_blocks: u64,
    pub disk_blocks: u64,
}

/// A KV block store (RAM and disk tiers). Opaque.
pub struct ResidencyKv(residency_kv::BlockStore);

/// Leases on a chain of blocks from a request's first: found by
/// `residency_kv_lookup`, grown by `residency_kv_insert`. Opaque.
pub struct ResidencyKvPrefix(Mutex<residency_kv::Prefix>);

impl From<residency_kv::KvError> for Failure {
    fn from(e: residency_kv::KvError) -> Failure {
        use residency_kv::KvError;
        let status = match &e {
            KvError::Full { .. } => RESIDENCY_ERR_BUDGET,
            KvError::Argument(_) => RESIDENCY_ERR_ARGUMENT,
            KvError::File { .. } => RESIDENCY_ERR_INPUT,
        };
        Failure::new(status, e.to_string())
    }
}

/// Opens a KV block store; with `disk_dir`, the directory is created or
/// reopened (temporary files removed, every block verified, the corrupt
/// ones deleted).
///
/// # Safety
/// `options` is NULL or points to a `ResidencyKvOptions` whose `disk_dir`
/// is NULL or NUL-terminated; `out_kv` is NULL or points to writable
/// storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_open(
    options: *const ResidencyKvOptions,
    out_kv: *mut *mut ResidencyKv,
) -> c_int {
    use residency_kv::{BlockStore, DiskConfig, EvictionPolicy, KvStoreConfig};
    status(guard(|| {
        // SAFETY (both): the function's contract.
        let out_kv = unsafe { out(out_kv, "out_kv") }?;
        *out_kv = ptr::null_mut();
        let o = unsafe { arg(options, "options") }?;
        let argument = |m: String| Failure::new(RESIDENCY_ERR_ARGUMENT, m);
        let policy = match o.policy {
            RESIDENCY_KV_POLICY_LRU => EvictionPolicy::Lru,
            RESIDENCY_KV_POLICY_LRU_LEAF => EvictionPolicy::LruLeaf,
            RESIDENCY_KV_POLICY_UTILITY => EvictionPolicy::Utility,
            p => {
                return Err(argument(format!(
                    "policy {p}: give a RESIDENCY_KV_POLICY_* value (0, 1 or 2)"
                )))
            }
        };
        if o.kv_bytes_per_token == 0 || o.ram_blocks == 0 {
            return Err(argument(
                "kv_bytes_per_token and ram_blocks are 0; give the model's KV bytes per token and the blocks RAM may hold".into(),
            ));
        }
        let disk = match o.disk_dir.is_null() {
            true => None,
            false => Some(DiskConfig {
                // SAFETY: non-NULL; NUL-terminated by the contract.
                dir: Path::new(OsStr::from_bytes(
                    unsafe { c_str(o.disk_dir, "disk_dir") }?.to_bytes(),
                ))
                .to_path_buf(),
                blocks: o.disk_blocks as usize,
            }),
        };
        let (store, report) = BlockStore::open(KvStoreConfig {
            block_tokens: if o.block_tokens == 0 {
                64
            } else {
                o.block_tokens
            },
            kv_bytes_per_token: o.kv_bytes_per_token,
            ram_blocks: o.ram_blocks as usize,
            disk,
            policy,
            prefill_tokens_per_second: if o.prefill_tokens_per_second == 0.0 {
                10_000.0
            } else {
                o.prefill_tokens_per_second
            },
        })?;
        // Said once, as residency_open does; the engine's stderr is the log.
        for discarded in report.iter().flat_map(|r| &r.discarded) {
            eprintln!("residency: note: discarded a corrupt KV block: {discarded}");
        }
        *out_kv = handles::give(ResidencyKv(store));
        Ok(())
    }))
}

/// The keys of the full blocks of `tokens[0..token_count]` under
/// `identity`, `block_tokens` tokens each (a partial last block has none).
/// Writes up to `key_capacity` keys to `out_keys` (NULL when 0) and sets
/// `*out_key_count` to the number of full blocks, as snprintf does.
///
/// # Safety
/// `identity` is NULL or a `ResidencyKvIdentity` whose pointers follow its
/// contract; `tokens` is NULL or points to `token_count` values; `out_keys`
/// to `key_capacity` writable keys; `out_key_count` to a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_block_keys(
    identity: *const ResidencyKvIdentity,
    tokens: *const u32,
    token_count: usize,
    block_tokens: u32,
    out_keys: *mut ResidencyKvKey,
    key_capacity: usize,
    out_key_count: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_key_count = unsafe { out(out_key_count, "out_key_count") }?;
        *out_key_count = 0;
        let id = unsafe { arg(identity, "identity") }?;
        let tokens = unsafe { slice(tokens, token_count, "tokens") }?;
        if block_tokens == 0 {
            return Err(Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                "block_tokens is 0; give the store's tokens per block",
            ));
        }
        let payloads = unsafe { slice(id.multimodal, id.multimodal_count, "multimodal") }?;
        let lens = unsafe { slice(id.multimodal_lens, id.multimodal_count, "multimodal_lens") }?;
        let multimodal = payloads
            .iter()
            .zip(lens)
            .map(|(&p, &len)| unsafe { slice(p, len, "multimodal[i]") }.map(<[u8]>::to_vec))
            .collect::<Result<Vec<_>, _>>()?;
        let identity = residency_kv::KvIdentity {
            model: unsafe { text(id.model, "model") }?.into(),
            tokenizer: unsafe { text(id.tokenizer, "tokenizer") }?.into(),
            chat_template: unsafe { text(id.chat_template, "chat_template") }?.into(),
            rope: unsafe { text(id.rope, "rope") }?.into(),
            kv_version: unsafe { text(id.kv_version, "kv_version") }?.into(),
            adapter: unsafe { text(id.adapter, "adapter") }?.into(),
            multimodal,
        };
        let salt = unsafe { slice(id.tenant_salt, id.tenant_salt_len, "tenant_salt") }?;
        let keys =
            residency_kv::block_keys(&identity.digest(), salt, tokens, block_tokens as usize);
        if key_capacity > 0 {
            // SAFETY: `key_capacity` writable keys by the contract.
            let out_keys = unsafe { out(out_keys, "out_keys") }?;
            let out_keys = unsafe { std::slice::from_raw_parts_mut(out_keys, key_capacity) };
            for (slot, key) in out_keys.iter_mut().zip(&keys) {
                slot.bytes = key.0;
            }
        }
        *out_key_count = keys.len();
        Ok(())
    }))
}

/// Leases the longest cached prefix of `keys[0..key_count]` (a request's
/// block keys, first to last), reading blocks from the disk tier back into
/// RAM on the way; `*out_prefix` holds the leases (release it with
/// `residency_kv_release`) and `*out_blocks` is their number (0 is a
/// valid, empty prefix). Thread-safe.
///
/// # Safety
/// `kv` is any value (NULL or one closed already is refused); `keys` is NULL
/// or points to `key_count` keys; the outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_lookup(
    kv: *const ResidencyKv,
    keys: *const ResidencyKvKey,
    key_count: usize,
    out_prefix: *mut *mut ResidencyKvPrefix,
    out_blocks: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_prefix = unsafe { out(out_prefix, "out_prefix") }?;
        let out_blocks = unsafe { out(out_blocks, "out_blocks") }?;
        (*out_prefix, *out_blocks) = (ptr::null_mut(), 0);
        let kv = handles::live(kv, "kv")?;
        let keys = unsafe { slice(keys, key_count, "keys") }?;
        let keys: Vec<residency_kv::BlockKey> = keys
            .iter()
            .map(|k| residency_kv::BlockKey(k.bytes))
            .collect();
        let prefix = kv.0.lookup(&keys);
        *out_blocks = prefix.len();
        *out_prefix = handles::give(ResidencyKvPrefix(Mutex::new(prefix)));
        Ok(())
    }))
}

/// Block `index` of a prefix: the host address of its KV and its length
/// (`tokens x kv_bytes_per_token` bytes), valid until the prefix is
/// released.
///
/// # Safety
/// `prefix` is any value (NULL or one released already is refused); the
/// outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_prefix_block(
    prefix: *const ResidencyKvPrefix,
    index: usize,
    out_ptr: *mut *const u8,
    out_len: *mut usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let out_ptr = unsafe { out(out_ptr, "out_ptr") }?;
        let out_len = unsafe { out(out_len, "out_len") }?;
        (*out_ptr, *out_len) = (ptr::null(), 0);
        let prefix = handles::live(prefix, "prefix")?;
        let prefix = prefix.0.lock().unwrap_or_else(PoisonError::into_inner);
        let block = prefix.blocks().get(index).ok_or_else(|| {
            Failure::new(
                RESIDENCY_ERR_ARGUMENT,
                format!("index {index}: the prefix has {} blocks", prefix.len()),
            )
        })?;
        (*out_ptr, *out_len) = (block.bytes().as_ptr(), block.bytes().len());
        Ok(())
    }))
}

/// Inserts the block `key` of `tokens` tokens after the last block of
/// `prefix` (its parent; an empty prefix: a request's first block), with
/// `bytes[0..len]` (copied; `tokens x kv_bytes_per_token` bytes), and
/// appends its lease to `prefix`. A key cached already is leased as it is.
/// `RESIDENCY_ERR_BUDGET` when every RAM block is leased.
///
/// # Safety
/// `kv` and `prefix` are any values (NULL, or one closed or released
/// already, is refused), `prefix` from a lookup on the same store; `key`
/// is NULL or points to a key; `bytes` is NULL or points to `len` readable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_insert(
    kv: *const ResidencyKv,
    prefix: *mut ResidencyKvPrefix,
    key: *const ResidencyKvKey,
    tokens: u32,
    bytes: *const u8,
    len: usize,
) -> c_int {
    status(guard(|| {
        // SAFETY (all): the function's contract.
        let kv = handles::live(kv, "kv")?;
        let prefix = handles::live(prefix.cast_const(), "prefix")?;
        let key = residency_kv::BlockKey(unsafe { arg(key, "key") }?.bytes);
        let bytes = unsafe { slice(bytes, len, "bytes") }?;
        let mut prefix = prefix.0.lock().unwrap_or_else(PoisonError::into_inner);
        let lease = kv.0.insert(prefix.last(), key, tokens, bytes)?;
        prefix.push(lease);
        Ok(())
    }))
}

/// Releases a prefix's leases, its last block first (so its first block
/// ends most recent). NULL does nothing.
///
/// # Safety
/// `prefix` is any value: NULL does nothing, and one released already, or
/// not from a lookup, is refused.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_release(prefix: *mut ResidencyKvPrefix) -> c_int {
    status(guard(|| handles::take(prefix, "prefix")))
}

/// The store's counters and current block counts.
///
/// # Safety
/// `kv` is any value (NULL or one closed already is refused); `out_counters`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_counters(
    kv: *const ResidencyKv,
    out_counters: *mut ResidencyKvCounters,
) -> c_int {
    status(guard(|| {
        // SAFETY (both): the function's contract.
        let out_counters = unsafe { out(out_counters, "out_counters") }?;
        let kv = handles::live(kv, "kv")?;
        let c = kv.0.counters();
        let (ram, disk) = kv.0.blocks();
        *out_counters = ResidencyKvCounters {
            lookups: c.lookups,
            ram_hit_blocks: c.ram_hit_blocks,
            disk_hit_blocks: c.disk_hit_blocks,
            inserted_blocks: c.inserted_blocks,
            deduplicated_inserts: c.deduplicated_inserts,
            ram_evicted_blocks: c.ram_evicted_blocks,
            demoted_blocks: c.demoted_blocks,
            disk_evicted_blocks: c.disk_evicted_blocks,
            discarded_blocks: c.discarded_blocks,
            disk_errors: c.disk_errors,
            ram_blocks: ram as u64,
            disk_blocks: disk as u64,
        };
        Ok(())
    }))
}

/// Closes a KV store. Prefixes still out stay valid until released. NULL
/// does nothing.
///
/// # Safety
/// `kv` is any value: NULL does nothing, and a second close, or a store not
/// from `residency_kv_open`, is refused. A call on it still running keeps
/// it until that call returns; later calls are refused.
#[no_mangle]
pub unsafe extern "C" fn residency_kv_close(kv: *mut ResidencyKv) -> c_int {
    status(guard(|| handles::take(kv, "kv")))
}
