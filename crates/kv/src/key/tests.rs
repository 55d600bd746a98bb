//! Tests of `key`.

use super::*;

fn identity() -> KvIdentity {
    KvIdentity {
        model: "sha256:abc".into(),
        tokenizer: "tok-v1".into(),
        chat_template: "chatml".into(),
        rope: "rope theta=1e6".into(),
        kv_version: "bf16 v1".into(),
        adapter: String::new(),
        multimodal: Vec::new(),
    }
}

#[test]
fn first_key_is_sha256_of_the_framed_fields() {
    // Recomputed here by writing the framing out byte by byte, so the
    // test checks the documented layout, not the code against itself.
    let id = identity().digest();
    let mut bytes = Vec::new();
    bytes.extend((TAG_FIRST.len() as u64).to_le_bytes());
    bytes.extend(TAG_FIRST);
    bytes.extend(id.0);
    bytes.extend(4u64.to_le_bytes());
    bytes.extend(b"salt");
    bytes.extend(2u64.to_le_bytes());
    bytes.extend(7u32.to_le_bytes());
    bytes.extend(9u32.to_le_bytes());
    let full: [u8; 32] = Sha256::digest(&bytes).into();
    assert_eq!(first_key(&id, b"salt", &[7, 9]).0, full[..16]);
}

#[test]
fn keys_chain_and_depend_on_the_whole_prefix() {
    let id = identity().digest();
    let a = block_keys(&id, b"", &[1, 2, 3, 4, 5], 2);
    // Two full blocks; the fifth token is a partial tail without a key.
    assert_eq!(a.len(), 2);
    assert_eq!(a[0], first_key(&id, b"", &[1, 2]));
    assert_eq!(a[1], next_key(&a[0], &id, &[3, 4]));
    // The same second block after another first block: another key.
    let b = block_keys(&id, b"", &[9, 2, 3, 4], 2);
    assert_ne!(a[1], b[1]);
    // The same tokens are never a key by themselves: a first block and a
    // later block of equal tokens differ.
    assert_ne!(first_key(&id, b"", &[3, 4]), a[1]);
}

#[test]
fn framing_keeps_fields_apart() {
    let mut one = identity();
    let mut two = identity();
    // Moving a character from one field to the next changes the digest.
    one.tokenizer = "ab".into();
    one.chat_template = "c".into();
    two.tokenizer = "a".into();
    two.chat_template = "bc".into();
    assert_ne!(one.digest(), two.digest());
    let mut three = identity();
    three.multimodal = vec![b"xy".to_vec()];
    let mut four = identity();
    four.multimodal = vec![b"x".to_vec(), b"y".to_vec()];
    assert_ne!(three.digest(), four.digest());
}

#[test]
fn hex_round_trips() {
    let key = first_key(&identity().digest(), b"t", &[1]);
    assert_eq!(BlockKey::from_hex(&key.to_hex()), Some(key));
    assert_eq!(key.to_hex().len(), 32);
    assert_eq!(BlockKey::from_hex("zz"), None);
    assert_eq!(BlockKey::from_hex(&"g".repeat(32)), None);
}
