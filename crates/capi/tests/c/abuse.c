/* The C ABI under abuse, built and run by tests/c_abi.rs: from 16 threads
 * at once, every entry point is called with NULL handles, NULL or missing
 * arguments, files that are not there, sizes that do not fit, handles
 * closed or released already, of another kind or made up, on a live KV
 * store shared by the threads. Each call must return the error code it
 * documents and leave one line (no newline) in `residency_last_error`,
 * which is the calling thread's own.
 *
 * usage: abuse (no arguments). Prints `ok <calls>` and exits 0, or a line
 * on stderr naming the call that misbehaved and exits 1. */

#include "residency.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { THREADS = 16, ROUNDS = 50, BLOCK_TOKENS = 4, BYTES_PER_TOKEN = 3 };

static ResidencyKv *shared_kv;

/* Whether `status` is `expected`, with this thread's last error one line
 * and, for a failure, not empty. */
static int check(const char *call, int status, int expected) {
    const char *line = residency_last_error();
    if (status != expected) {
        fprintf(stderr, "%s returned %d, expected %d: %s\n", call, status, expected, line);
        return 0;
    }
    if (line == NULL || strchr(line, '\n') != NULL || (expected != RESIDENCY_OK && line[0] == '\0')) {
        fprintf(stderr, "%s left no one-line error: [%s]\n", call, line ? line : "(NULL)");
        return 0;
    }
    return 1;
}

#define CHECK(call, expected)                  \
    do {                                       \
        if (!check(#call, (call), (expected))) \
            return (void *)1;                  \
        calls++;                               \
    } while (0)

static void *abuse(void *arg) {
    unsigned long *count = arg;
    unsigned long calls = 0;
    for (int round = 0; round < ROUNDS; round++) {
        /* The store: NULL everywhere, and files that are not there. */
        ResidencyHandle *handle = (ResidencyHandle *)&handle; /* overwritten with NULL */
        CHECK(residency_open(NULL, NULL, NULL, &handle), RESIDENCY_ERR_ARGUMENT);
        if (handle != NULL) {
            fprintf(stderr, "residency_open left a handle after a failure\n");
            return (void *)1;
        }
        CHECK(residency_open("no-such-plan.json", "no-such-dir", NULL, &handle), RESIDENCY_ERR_INPUT);
        CHECK(residency_open("no-such-plan.json", "no-such-dir", NULL, NULL), RESIDENCY_ERR_ARGUMENT);
        ResidencyLease *lease = (ResidencyLease *)&lease;
        const uint8_t *ptr = (const uint8_t *)&ptr;
        size_t len = 7;
        CHECK(residency_acquire_expert(NULL, 0, 0, &lease, &ptr, &len), RESIDENCY_ERR_ARGUMENT);
        if (lease != NULL || ptr != NULL || len != 0) {
            fprintf(stderr, "residency_acquire_expert left outputs after a failure\n");
            return (void *)1;
        }
        CHECK(residency_acquire_trunk(NULL, NULL, -1, &lease, &ptr, &len), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_acquire_trunk(NULL, "lm_head", -1, NULL, NULL, NULL), RESIDENCY_ERR_ARGUMENT);
        uint32_t device = 0;
        uint64_t address = 0;
        CHECK(residency_lease_device(NULL, &device, &address), RESIDENCY_ERR_ARGUMENT);
        uint32_t experts[2] = {0, 1};
        CHECK(residency_report_route(NULL, 0, experts, 2), RESIDENCY_ERR_ARGUMENT);
        if (residency_heat_json(NULL) != NULL || residency_telemetry_json(NULL) != NULL ||
            residency_telemetry_prometheus(NULL) != NULL) {
            fprintf(stderr, "a string of a NULL handle is not NULL\n");
            return (void *)1;
        }
        CHECK(residency_release(NULL), RESIDENCY_OK);
        CHECK(residency_close(NULL), RESIDENCY_OK);

        /* The KV store: NULL handles and options, sizes that do not fit. */
        ResidencyKv *kv = (ResidencyKv *)&kv;
        CHECK(residency_kv_open(NULL, &kv), RESIDENCY_ERR_ARGUMENT);
        ResidencyKvOptions none = {0};
        CHECK(residency_kv_open(&none, &kv), RESIDENCY_ERR_ARGUMENT);
        ResidencyKvIdentity identity = {0};
        identity.model = "m";
        uint32_t tokens[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
        ResidencyKvKey keys[3];
        size_t key_count = 0;
        CHECK(residency_kv_block_keys(NULL, tokens, 10, BLOCK_TOKENS, keys, 3, &key_count),
              RESIDENCY_ERR_ARGUMENT);
        /* 10 tokens in blocks of 4 are 2 full blocks: room for 1 key
         * writes one and says 2, as snprintf does. */
        CHECK(residency_kv_block_keys(&identity, tokens, 10, BLOCK_TOKENS, keys, 1, &key_count),
              RESIDENCY_OK);
        if (key_count != 2) {
            fprintf(stderr, "residency_kv_block_keys counted %zu blocks, not 2\n", key_count);
            return (void *)1;
        }
        CHECK(residency_kv_block_keys(&identity, tokens, 10, 0, keys, 3, &key_count),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_block_keys(&identity, tokens, 10, BLOCK_TOKENS, keys, 3, &key_count),
              RESIDENCY_OK);
        ResidencyKvPrefix *prefix = NULL;
        size_t blocks = 0;
        CHECK(residency_kv_lookup(NULL, keys, key_count, &prefix, &blocks), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_lookup(shared_kv, NULL, 3, &prefix, &blocks), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_lookup(shared_kv, keys, key_count, &prefix, &blocks), RESIDENCY_OK);
        uint8_t bytes[BLOCK_TOKENS * BYTES_PER_TOKEN] = {0};
        /* A block of 4 tokens of 3 bytes is 12 bytes: 11 do not fit. */
        CHECK(residency_kv_insert(shared_kv, prefix, &keys[0], BLOCK_TOKENS,
                                  bytes, sizeof bytes - 1),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_insert(NULL, prefix, &keys[0], BLOCK_TOKENS, bytes, sizeof bytes),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_insert(shared_kv, NULL, &keys[0], BLOCK_TOKENS, bytes, sizeof bytes),
              RESIDENCY_ERR_ARGUMENT);
        const uint8_t *block = NULL;
        size_t block_len = 0;
        CHECK(residency_kv_prefix_block(NULL, 0, &block, &block_len), RESIDENCY_ERR_ARGUMENT);
        /* A block past the prefix's end. */
        CHECK(residency_kv_prefix_block(prefix, blocks + 5, &block, &block_len),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_release(prefix), RESIDENCY_OK);
        CHECK(residency_kv_release(NULL), RESIDENCY_OK);
        ResidencyKvCounters counters;
        CHECK(residency_kv_counters(NULL, &counters), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_counters(shared_kv, NULL), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_close(NULL), RESIDENCY_OK);

        /* Handles closed or released already, of another kind, made up. */
        ResidencyKvOptions own = {0};
        own.kv_bytes_per_token = BYTES_PER_TOKEN;
        own.ram_blocks = 4;
        ResidencyKv *closed = NULL;
        CHECK(residency_kv_open(&own, &closed), RESIDENCY_OK);
        CHECK(residency_kv_close(closed), RESIDENCY_OK);
        CHECK(residency_kv_counters(closed, &counters), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_lookup(closed, keys, key_count, &prefix, &blocks), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_close(closed), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_lookup(shared_kv, keys, key_count, &prefix, &blocks), RESIDENCY_OK);
        CHECK(residency_kv_counters((ResidencyKv *)prefix, &counters), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_close((ResidencyHandle *)prefix), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_release(prefix), RESIDENCY_OK);
        CHECK(residency_kv_release(prefix), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_prefix_block(prefix, 0, &block, &block_len), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_insert(shared_kv, prefix, &keys[0], BLOCK_TOKENS, bytes, sizeof bytes),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_acquire_expert((ResidencyHandle *)shared_kv, 0, 0, &lease, &ptr, &len),
              RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_release((ResidencyLease *)(uintptr_t)0x1230), RESIDENCY_ERR_ARGUMENT);
        CHECK(residency_kv_counters((ResidencyKv *)(uintptr_t)0xdeadbee0, &counters),
              RESIDENCY_ERR_ARGUMENT);
    }
    *count = calls;
    return NULL;
}

int main(void) {
    ResidencyKvOptions options = {0};
    options.block_tokens = BLOCK_TOKENS;
    options.kv_bytes_per_token = BYTES_PER_TOKEN;
    options.ram_blocks = 64;
    if (residency_kv_open(&options, &shared_kv) != RESIDENCY_OK) {
        fprintf(stderr, "residency_kv_open failed: %s\n", residency_last_error());
        return 1;
    }
    pthread_t threads[THREADS];
    unsigned long counts[THREADS] = {0};
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, abuse, &counts[t]);
    int failed = 0;
    unsigned long calls = 0;
    for (int t = 0; t < THREADS; t++) {
        void *result = NULL;
        pthread_join(threads[t], &result);
        failed |= result != NULL;
        calls += counts[t];
    }
    if (residency_kv_close(shared_kv) != RESIDENCY_OK) failed = 1;
    if (failed) return 1;
    printf("ok %lu\n", calls);
    return 0;
}
