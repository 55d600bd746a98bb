//! The KV prefix cache through its entry points: keys as the Rust API
//! makes them, a cold and a warm lookup, inserts, counters, NULLs.

use super::*;
use crate::tests::last_error;
use crate::RESIDENCY_OK;
use std::ffi::CString;

#[test]
fn kv_blocks_are_looked_up_inserted_and_released_through_the_abi() {
    let dir = tempfile::tempdir().unwrap();
    let disk = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
    let options = ResidencyKvOptions {
        block_tokens: 4,
        kv_bytes_per_token: 2,
        ram_blocks: 8,
        disk_dir: disk.as_ptr(),
        disk_blocks: 8,
        policy: RESIDENCY_KV_POLICY_UTILITY,
        prefill_tokens_per_second: 0.0,
    };
    let salt = *b"tenant";
    let image = *b"sha256:image";
    let payloads = [image.as_ptr()];
    let lens = [image.len()];
    let identity = ResidencyKvIdentity {
        model: c"sha256:model".as_ptr(),
        tokenizer: ptr::null(),
        chat_template: c"chatml".as_ptr(),
        rope: ptr::null(),
        kv_version: ptr::null(),
        adapter: ptr::null(),
        multimodal: payloads.as_ptr(),
        multimodal_lens: lens.as_ptr(),
        multimodal_count: 1,
        tenant_salt: salt.as_ptr(),
        tenant_salt_len: salt.len(),
    };
    let keys = keys_are_the_rust_apis(&identity, &salt, &image);
    let mut blocks = 0usize;
    let mut kv = ptr::null_mut();
    let mut prefix = ptr::null_mut();
    // SAFETY: every pointer is valid for its contract.
    unsafe {
        assert_eq!(residency_kv_open(&options, &mut kv), RESIDENCY_OK);
        // Cold: an empty prefix; insert both blocks after it.
        assert_eq!(
            residency_kv_lookup(kv, keys.as_ptr(), 2, &mut prefix, &mut blocks),
            RESIDENCY_OK
        );
        assert_eq!(blocks, 0);
        let first = [1u8; 8];
        let second = [2u8; 8];
        assert_eq!(
            residency_kv_insert(kv, prefix, &keys[0], 4, first.as_ptr(), 8),
            RESIDENCY_OK
        );
        assert_eq!(
            residency_kv_insert(kv, prefix, &keys[1], 4, second.as_ptr(), 8),
            RESIDENCY_OK
        );
        let code = residency_kv_insert(kv, prefix, &keys[2], 4, second.as_ptr(), 7);
        assert_eq!(code, RESIDENCY_ERR_ARGUMENT);
        assert!(
            last_error().contains("7 bytes for 4 tokens"),
            "{}",
            last_error()
        );
        assert_eq!(residency_kv_release(prefix), RESIDENCY_OK);
        // Warm: both found, their bytes served.
        assert_eq!(
            residency_kv_lookup(kv, keys.as_ptr(), 2, &mut prefix, &mut blocks),
            RESIDENCY_OK
        );
        assert_eq!(blocks, 2);
        let (mut bytes, mut len) = (ptr::null(), 0usize);
        assert_eq!(
            residency_kv_prefix_block(prefix, 1, &mut bytes, &mut len),
            RESIDENCY_OK
        );
        assert_eq!(std::slice::from_raw_parts(bytes, len), second);
        assert_eq!(
            residency_kv_prefix_block(prefix, 2, &mut bytes, &mut len),
            RESIDENCY_ERR_ARGUMENT
        );
        assert_eq!(last_error(), "index 2: the prefix has 2 blocks");
        assert!(bytes.is_null() && len == 0);
        assert_eq!(residency_kv_release(prefix), RESIDENCY_OK);
        let mut counters = ResidencyKvCounters::default();
        assert_eq!(residency_kv_counters(kv, &mut counters), RESIDENCY_OK);
        assert_eq!(
            (
                counters.lookups,
                counters.ram_hit_blocks,
                counters.inserted_blocks,
                counters.ram_blocks
            ),
            (2, 2, 2, 2)
        );
        assert_eq!(residency_kv_close(kv), RESIDENCY_OK);
    }
    nulls_are_refused_by_name(&identity, &options);
}

/// The block keys of 10 tokens in blocks of 4 through the ABI: a count
/// beyond the capacity given, then the same keys as the Rust API's.
fn keys_are_the_rust_apis(
    identity: &ResidencyKvIdentity,
    salt: &[u8],
    image: &[u8],
) -> [ResidencyKvKey; 4] {
    let tokens: Vec<u32> = (0..10).collect();
    let mut keys = [ResidencyKvKey::default(); 4];
    let mut count = 0usize;
    // SAFETY: every pointer is valid for its contract.
    unsafe {
        // Capacity 1 of 2 keys: one written, the count says 2.
        let code = residency_kv_block_keys(
            identity,
            tokens.as_ptr(),
            10,
            4,
            keys.as_mut_ptr(),
            1,
            &mut count,
        );
        assert_eq!((code, count), (RESIDENCY_OK, 2));
        assert_eq!(
            residency_kv_block_keys(
                identity,
                tokens.as_ptr(),
                10,
                4,
                keys.as_mut_ptr(),
                4,
                &mut count
            ),
            RESIDENCY_OK
        );
        // The same keys as the Rust API's.
        let expected = residency_kv::block_keys(
            &residency_kv::KvIdentity {
                model: "sha256:model".into(),
                chat_template: "chatml".into(),
                multimodal: vec![image.to_vec()],
                ..Default::default()
            }
            .digest(),
            salt,
            &tokens,
            4,
        );
        assert_eq!(
            keys[..2].iter().map(|k| k.bytes).collect::<Vec<_>>(),
            expected.iter().map(|k| k.0).collect::<Vec<_>>()
        );
    }
    keys
}

/// NULLs are refused by name; releasing and closing NULL is fine.
fn nulls_are_refused_by_name(identity: &ResidencyKvIdentity, options: &ResidencyKvOptions) {
    let mut keys = [ResidencyKvKey::default(); 4];
    let (mut count, mut blocks) = (0usize, 0usize);
    let mut kv = ptr::null_mut();
    let mut prefix = ptr::null_mut();
    // SAFETY: every pointer is valid for its contract, or NULL where the
    // call is to refuse it.
    unsafe {
        assert_eq!(
            residency_kv_lookup(ptr::null(), keys.as_ptr(), 2, &mut prefix, &mut blocks),
            RESIDENCY_ERR_ARGUMENT
        );
        assert!(last_error().contains("`kv` is NULL"));
        assert_eq!(
            residency_kv_block_keys(
                identity,
                ptr::null(),
                3,
                4,
                keys.as_mut_ptr(),
                4,
                &mut count
            ),
            RESIDENCY_ERR_ARGUMENT
        );
        assert!(last_error().contains("`tokens` is NULL"));
        let bad = ResidencyKvOptions {
            policy: 7,
            ..*options
        };
        assert_eq!(residency_kv_open(&bad, &mut kv), RESIDENCY_ERR_ARGUMENT);
        assert!(kv.is_null());
        assert_eq!(residency_kv_release(ptr::null_mut()), RESIDENCY_OK);
        assert_eq!(residency_kv_close(ptr::null_mut()), RESIDENCY_OK);
    }
}
