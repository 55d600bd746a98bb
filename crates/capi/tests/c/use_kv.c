/* A C engine's use of the KV prefix cache in residency.h, built and run by
 * tests/c_abi.rs: open a store, key a prompt's blocks, look up its cached
 * prefix (none yet), insert the blocks it prefilled, release, look it up
 * again and checksum the blocks served, provoke an error, close.
 *
 * usage: use_kv (no arguments). One line per step on stdout; exit 1 after
 * a line on stderr when a step that must work does not. */

#include "test_program.h"

#include <inttypes.h>
#include <stdio.h>

enum { BLOCK_TOKENS = 4, BYTES_PER_TOKEN = 3, TOKENS = 10 };

int main(void) {
    ResidencyKvOptions options = {0};
    options.block_tokens = BLOCK_TOKENS;
    options.kv_bytes_per_token = BYTES_PER_TOKEN;
    options.ram_blocks = 16;
    options.policy = RESIDENCY_KV_POLICY_LRU_LEAF;
    ResidencyKv *kv = NULL;
    int status = residency_kv_open(&options, &kv);
    if (status != RESIDENCY_OK) return fail("residency_kv_open", status);
    printf("opened\n");

    const uint8_t salt[] = "tenant-a";
    ResidencyKvIdentity identity = {0};
    identity.model = "sha256:model";
    identity.chat_template = "chatml";
    identity.tenant_salt = salt;
    identity.tenant_salt_len = sizeof salt - 1;
    uint32_t tokens[TOKENS];
    for (uint32_t i = 0; i < TOKENS; i++) tokens[i] = 100 + i;
    ResidencyKvKey keys[4];
    size_t count = 0;
    status = residency_kv_block_keys(&identity, tokens, TOKENS, BLOCK_TOKENS, keys, 4, &count);
    if (status != RESIDENCY_OK) return fail("residency_kv_block_keys", status);
    printf("keys %zu", count);
    for (size_t k = 0; k < count; k++) {
        printf(" ");
        for (size_t b = 0; b < RESIDENCY_KV_KEY_BYTES; b++) printf("%02x", keys[k].bytes[b]);
    }
    printf("\n");

    ResidencyKvPrefix *prefix = NULL;
    size_t blocks = 0;
    status = residency_kv_lookup(kv, keys, count, &prefix, &blocks);
    if (status != RESIDENCY_OK) return fail("residency_kv_lookup", status);
    printf("cold %zu\n", blocks);
    /* The engine prefilled the blocks after the prefix: insert them. */
    uint8_t kv_bytes[BLOCK_TOKENS * BYTES_PER_TOKEN];
    for (size_t k = blocks; k < count; k++) {
        for (size_t b = 0; b < sizeof kv_bytes; b++) kv_bytes[b] = (uint8_t)(k * 16 + b);
        status = residency_kv_insert(kv, prefix, &keys[k], BLOCK_TOKENS, kv_bytes, sizeof kv_bytes);
        if (status != RESIDENCY_OK) return fail("residency_kv_insert", status);
    }
    residency_kv_release(prefix);

    status = residency_kv_lookup(kv, keys, count, &prefix, &blocks);
    if (status != RESIDENCY_OK) return fail("residency_kv_lookup", status);
    printf("warm %zu", blocks);
    for (size_t k = 0; k < blocks; k++) {
        const uint8_t *bytes = NULL;
        size_t len = 0;
        status = residency_kv_prefix_block(prefix, k, &bytes, &len);
        if (status != RESIDENCY_OK) return fail("residency_kv_prefix_block", status);
        printf(" %zu:%016" PRIx64, len, fnv1a64(bytes, len));
    }
    printf("\n");
    status = residency_kv_insert(kv, prefix, &keys[0], BLOCK_TOKENS, kv_bytes, 5);
    printf("error %d %s\n", status, residency_last_error());
    residency_kv_release(prefix);

    ResidencyKvCounters counters;
    status = residency_kv_counters(kv, &counters);
    if (status != RESIDENCY_OK) return fail("residency_kv_counters", status);
    printf("counters lookups %" PRIu64 " hits %" PRIu64 " inserted %" PRIu64 "\n", counters.lookups,
           counters.ram_hit_blocks, counters.inserted_blocks);
    residency_kv_close(kv);
    printf("closed\n");
    return 0;
}
