//! Block keys (design §8 "Keys"): what makes two blocks of KV the same.
//!
//! A block's KV depends on every token before it and on everything that
//! shaped the computation: the model, the tokenizer, the chat template, the
//! position/RoPE configuration, the KV representation, the adapter and any
//! multimodal payload. So a key is a chained hash: block 0 hashes the
//! identity, the tenant salt and its tokens; block `i` hashes the key of
//! block `i - 1`, the identity and its tokens. Tokens alone are never a key,
//! and two tenants never share a block unless they share a salt.
//!
//! SHA-256 truncated to 128 bits (the design's minimum, §8): a collision would
//! serve one request another's KV, so the hash must be cryptographic, and
//! 16 bytes keep the per-block metadata small. Every field is length-framed
//! and every hash starts with its own domain tag, so no two different
//! inputs can be written as the same byte string.

use sha2::{Digest, Sha256};
use std::fmt;

/// Bytes of a block key (128 bits).
pub const KEY_BYTES: usize = 16;

/// The key of one block of KV.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct BlockKey(pub [u8; KEY_BYTES]);

impl BlockKey {
    /// Lower-case hex, 32 characters (disk file names, messages).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The key written by [`BlockKey::to_hex`], or `None`.
    pub fn from_hex(text: &str) -> Option<BlockKey> {
        if text.len() != 2 * KEY_BYTES || !text.is_ascii() {
            return None;
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(BlockKey(key))
    }
}

impl fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockKey({})", self.to_hex())
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Everything besides the tokens that changes the KV of a block. Free-form
/// text, compared exactly: give each field a canonical spelling (a content
/// hash for the model, the template's text or hash, `rope=yarn theta=1e6
/// factor=4`, ...). An empty field means "none", e.g. no adapter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KvIdentity {
    /// The model's content id (e.g. the checkpoint's sha256).
    pub model: String,
    pub tokenizer: String,
    pub chat_template: String,
    /// Position encoding and RoPE configuration (type, theta, scaling).
    pub rope: String,
    /// KV representation version: dtype, quantisation, layout.
    pub kv_version: String,
    /// Adapter / LoRA id; empty for the base model.
    pub adapter: String,
    /// Hashes of the request's multimodal payloads (images, audio), in
    /// prompt order. Part of the identity, not of one block, so a request
    /// with a payload shares no block with one without it, even before the
    /// payload's position: never wrong, at the price of some reuse.
    pub multimodal: Vec<Vec<u8>>,
}

/// The identity hashed once; what the keys of its blocks mix in.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdentityDigest(pub [u8; 32]);

impl fmt::Debug for IdentityDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdentityDigest({})", BlockKey(first_16(&self.0)))
    }
}

/// Domain tags: an identity, a first block, a later block.
const TAG_IDENTITY: &[u8] = b"residency kv identity v1";
const TAG_FIRST: &[u8] = b"residency kv first block v1";
const TAG_NEXT: &[u8] = b"residency kv next block v1";

fn framed(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_le_bytes());
    hash.update(bytes);
}

fn tokens_into(hash: &mut Sha256, tokens: &[u32]) {
    hash.update((tokens.len() as u64).to_le_bytes());
    for t in tokens {
        hash.update(t.to_le_bytes());
    }
}

fn first_16(bytes: &[u8; 32]) -> [u8; KEY_BYTES] {
    let mut key = [0u8; KEY_BYTES];
    key.copy_from_slice(&bytes[..KEY_BYTES]);
    key
}

impl KvIdentity {
    pub fn digest(&self) -> IdentityDigest {
        let mut hash = Sha256::new();
        framed(&mut hash, TAG_IDENTITY);
        for field in [
            &self.model,
            &self.tokenizer,
            &self.chat_template,
            &self.rope,
            &self.kv_version,
            &self.adapter,
        ] {
            framed(&mut hash, field.as_bytes());
        }
        hash.update((self.multimodal.len() as u64).to_le_bytes());
        for payload in &self.multimodal {
            framed(&mut hash, payload);
        }
        IdentityDigest(hash.finalize().into())
    }
}

/// The key of a request's first block: identity, tenant salt, tokens.
pub fn first_key(identity: &IdentityDigest, tenant_salt: &[u8], tokens: &[u32]) -> BlockKey {
    let mut hash = Sha256::new();
    framed(&mut hash, TAG_FIRST);
    hash.update(identity.0);
    framed(&mut hash, tenant_salt);
    tokens_into(&mut hash, tokens);
    BlockKey(first_16(&hash.finalize().into()))
}

/// The key of the block after `parent`: parent key, identity, tokens.
pub fn next_key(parent: &BlockKey, identity: &IdentityDigest, tokens: &[u32]) -> BlockKey {
    let mut hash = Sha256::new();
    framed(&mut hash, TAG_NEXT);
    hash.update(parent.0);
    hash.update(identity.0);
    tokens_into(&mut hash, tokens);
    BlockKey(first_16(&hash.finalize().into()))
}

/// The key of the block holding `tokens` after `parent` (`None`: the first).
pub fn block_key(
    parent: Option<&BlockKey>,
    identity: &IdentityDigest,
    tenant_salt: &[u8],
    tokens: &[u32],
) -> BlockKey {
    match parent {
        None => first_key(identity, tenant_salt, tokens),
        Some(p) => next_key(p, identity, tokens),
    }
}

/// The keys of every full block of `tokens`, in order; a partial last block
/// has none (it is still being written: a private tail, never shared).
pub fn block_keys(
    identity: &IdentityDigest,
    tenant_salt: &[u8],
    tokens: &[u32],
    block_tokens: usize,
) -> Vec<BlockKey> {
    assert!(block_tokens > 0, "block_tokens must be positive");
    let mut keys: Vec<BlockKey> = Vec::with_capacity(tokens.len() / block_tokens);
    for block in tokens.chunks_exact(block_tokens) {
        let key = block_key(keys.last(), identity, tenant_salt, block);
        keys.push(key);
    }
    keys
}

#[cfg(test)]
mod tests;
