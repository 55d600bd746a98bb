/* residency: the C ABI of the object store and the KV prefix cache; link libresidency.a. */

#ifndef RESIDENCY_H
#define RESIDENCY_H

/* Generated from crates/capi/src/ by cbindgen; do not edit. Regenerate with
   RESIDENCY_WRITE_HEADER=1 cargo test --release -p residency-capi --test c_abi */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/**
 * Success.
 */
#define RESIDENCY_OK 0

/**
 * A NULL pointer, a string that is not UTF-8, a layer or expert outside the
 * model.
 */
#define RESIDENCY_ERR_ARGUMENT 1

/**
 * The plan has no such object, or a lease in host memory was asked for its
 * device address.
 */
#define RESIDENCY_ERR_NOT_FOUND 2

/**
 * A budget could not make room in time; the message names it.
 */
#define RESIDENCY_ERR_BUDGET 3

/**
 * Reading or validating an object's bytes failed (the drive, a truncated
 * shard).
 */
#define RESIDENCY_ERR_LOAD 4

/**
 * The plan or the checkpoint is wrong or unreadable, or they do not belong
 * together; the message names the file, the place and the fix.
 */
#define RESIDENCY_ERR_INPUT 5

/**
 * A bug in residency: a panic, caught at the boundary.
 */
#define RESIDENCY_ERR_PANIC 6

/**
 * Live heat's default decay: every counter halved every 1024 tokens, as
 * Colibri's VRAM tier does (docs/formats.md section 4).
 */
#define RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS 1024

/**
 * `ResidencyKvOptions.policy`: least recently used block.
 */
#define RESIDENCY_KV_POLICY_LRU 0

/**
 * Least recently used leaf of the prefix tree (SGLang's radix cache).
 */
#define RESIDENCY_KV_POLICY_LRU_LEAF 1

/**
 * Lowest `P(reuse) * prefill seconds avoided / bytes`, learned online.
 */
#define RESIDENCY_KV_POLICY_UTILITY 2

/**
 * Bytes of a `ResidencyKvKey`.
 */
#define RESIDENCY_KV_KEY_BYTES 16

/**
 * An applied plan: the store with its residents, and live heat. Opaque.
 */
typedef struct ResidencyHandle ResidencyHandle;

/**
 * A KV block store (RAM and disk tiers). Opaque.
 */
typedef struct ResidencyKv ResidencyKv;

/**
 * Leases on a chain of blocks from a request's first: found by
 * `residency_kv_lookup`, grown by `residency_kv_insert`. Opaque.
 */
typedef struct ResidencyKvPrefix ResidencyKvPrefix;

/**
 * A lease on one object: its bytes stay where they are until it is
 * released. Opaque.
 */
typedef struct ResidencyLease ResidencyLease;

/**
 * Options of `residency_open`. A zero field takes its default, so
 * `ResidencyOptions options = {0};` is the defaults.
 */
typedef struct ResidencyOptions {
  /**
   * Objects loaded at once while the plan is applied (0: 8).
   */
  uint32_t load_threads;
  /**
   * Live heat: each MoE layer's counters are halved every this many
   * tokens reported for that layer (0:
   * `RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS`).
   */
  uint64_t heat_halve_every_tokens;
} ResidencyOptions;

/**
 * Options of `residency_kv_open`. A zero field takes its default where it
 * has one.
 */
typedef struct ResidencyKvOptions {
  /**
   * Tokens per block (0: 64).
   */
  uint32_t block_tokens;
  /**
   * KV bytes of one token, all layers (required).
   */
  uint64_t kv_bytes_per_token;
  /**
   * Blocks host RAM holds (required).
   */
  uint64_t ram_blocks;
  /**
   * Directory of the disk tier, created if needed; NULL: no disk tier.
   */
  const char *disk_dir;
  /**
   * Blocks the disk tier holds.
   */
  uint64_t disk_blocks;
  /**
   * `RESIDENCY_KV_POLICY_*`.
   */
  uint32_t policy;
  /**
   * The prefill speed `utility` prices blocks with (0: 10000).
   */
  double prefill_tokens_per_second;
} ResidencyKvOptions;

/**
 * Everything besides the tokens that changes a block's KV. Each string is
 * NUL-terminated UTF-8, or NULL for none; compared exactly, so give each a
 * canonical spelling (the model's content hash, the template's hash,
 * `rope theta=1e6 scaling=yarn factor=4`, ...). `multimodal[i]` points to
 * `multimodal_lens[i]` bytes (a payload's hash); `tenant_salt` to
 * `tenant_salt_len` bytes, mixed into a request's first block so tenants
 * never share one (NULL with length 0: no salt).
 */
typedef struct ResidencyKvIdentity {
  const char *model;
  const char *tokenizer;
  const char *chat_template;
  const char *rope;
  const char *kv_version;
  const char *adapter;
  const uint8_t *const *multimodal;
  const size_t *multimodal_lens;
  size_t multimodal_count;
  const uint8_t *tenant_salt;
  size_t tenant_salt_len;
} ResidencyKvIdentity;

/**
 * The key of one KV block: 128 bits of a chained SHA-256 of the parent's
 * key, the block's tokens and the identity (`residency_kv_block_keys`).
 */
typedef struct ResidencyKvKey {
  uint8_t bytes[RESIDENCY_KV_KEY_BYTES];
} ResidencyKvKey;

/**
 * What a KV store has done since it was opened, and holds now.
 */
typedef struct ResidencyKvCounters {
  uint64_t lookups;
  uint64_t ram_hit_blocks;
  uint64_t disk_hit_blocks;
  uint64_t inserted_blocks;
  uint64_t deduplicated_inserts;
  uint64_t ram_evicted_blocks;
  uint64_t demoted_blocks;
  uint64_t disk_evicted_blocks;
  /**
   * Disk blocks that failed verification at a read (never served).
   */
  uint64_t discarded_blocks;
  uint64_t disk_errors;
  uint64_t ram_blocks;
  uint64_t disk_blocks;
} ResidencyKvCounters;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

/**
 * Reads the plan at `plan_path` (from `residency plan`), applies it to the
 * checkpoint in `checkpoint_dir` (loading every planned resident before it
 * returns) and sets `*out_handle`. `options` may be NULL (the defaults).
 *
 * # Safety
 * `plan_path` and `checkpoint_dir` are NULL or NUL-terminated strings;
 * `options` is NULL or points to a `ResidencyOptions`; `out_handle` is NULL
 * or points to writable storage for a pointer.
 */
int residency_open(const char *plan_path,
                   const char *checkpoint_dir,
                   const struct ResidencyOptions *options,
                   struct ResidencyHandle **out_handle);

/**
 * Acquires routed expert `expert` of transformer layer `layer` (the
 * checkpoint's numbering): `*out_lease` pins it until
 * `residency_release`; `*out_ptr` and `*out_len` are its bytes (`*out_ptr`
 * is NULL when they are on a GPU: see `residency_lease_device`). Loads it
 * first when it is not resident. Thread-safe.
 *
 * # Safety
 * `handle` is any value (NULL, one closed already or not from
 * `residency_open` is refused); each `out_*` is
 * NULL or points to writable storage of its type.
 */
int residency_acquire_expert(const struct ResidencyHandle *handle,
                             uint32_t layer,
                             uint32_t expert,
                             struct ResidencyLease **out_lease,
                             const uint8_t **out_ptr,
                             size_t *out_len);

/**
 * Acquires the trunk component `name` (`attn`, `lm_head`, ...) of
 * transformer layer `layer`, or the unlayered one when `layer` is -1; as
 * `residency_acquire_expert` otherwise.
 *
 * # Safety
 * As `residency_acquire_expert`; `name` is NULL or a NUL-terminated string.
 */
int residency_acquire_trunk(const struct ResidencyHandle *handle,
                            const char *name,
                            int64_t layer,
                            struct ResidencyLease **out_lease,
                            const uint8_t **out_ptr,
                            size_t *out_len);

/**
 * For a lease whose bytes are in device memory: the device ordinal and the
 * device address. `RESIDENCY_ERR_NOT_FOUND` when they are in host memory
 * (use the pointer the acquire gave).
 *
 * # Safety
 * `lease` is any value (NULL or one released already is refused);
 * `out_device` and
 * `out_address` are NULL or point to writable storage of their type.
 */
int residency_lease_device(const struct ResidencyLease *lease,
                           uint32_t *out_device,
                           uint64_t *out_address);

/**
 * Ends a lease: the object may be evicted or moved again. NULL does
 * nothing. A lease may outlive its handle's `residency_close`.
 *
 * # Safety
 * `lease` is any value: NULL does nothing, and one released already, or
 * not from an acquire, is refused.
 */
int residency_release(struct ResidencyLease *lease);

/**
 * Reports the experts `experts[0..count]` one token was routed to in MoE
 * layer `moe_layer` (an ordinal from 0, as in heat tables, not a
 * transformer layer): live heat. Nothing is counted when an argument is
 * out of range. `experts` may be NULL when `count` is 0. Thread-safe.
 *
 * # Safety
 * `handle` is any value (NULL or one closed already is refused); `experts` is
 * NULL or points to `count` readable `uint32_t`.
 */
int residency_report_route(const struct ResidencyHandle *handle,
                           uint32_t moe_layer,
                           const uint32_t *experts,
                           size_t count);

/**
 * Live heat as our `json` heat format (`{"model":..,"layers":[[..],..]}`,
 * decayed counts per MoE ordinal and expert), which `residency plan
 * --heat` reads. The string belongs to the handle: valid until the next
 * `residency_heat_json` or `residency_telemetry_*` call on it, or
 * `residency_close`; call these from one thread at a time. NULL on
 * failure.
 *
 * # Safety
 * `handle` is any value (NULL or one closed already gives NULL).
 */
const char *residency_heat_json(const struct ResidencyHandle *handle);

/**
 * The store's telemetry (docs/design.md §7) as one line of JSON. The string belongs
 * to the handle, as `residency_heat_json`'s does. NULL on failure.
 *
 * # Safety
 * `handle` is any value (NULL or one closed already gives NULL).
 */
const char *residency_telemetry_json(const struct ResidencyHandle *handle);

/**
 * The store's telemetry in the Prometheus text format (metrics
 * `residency_*`). The string belongs to the handle, as
 * `residency_heat_json`'s does. NULL on failure.
 *
 * # Safety
 * `handle` is any value (NULL or one closed already gives NULL).
 */
const char *residency_telemetry_prometheus(const struct ResidencyHandle *handle);

/**
 * Closes a handle: frees the store's residents once no lease holds them
 * (leases still out stay valid until released). NULL does nothing.
 *
 * # Safety
 * `handle` is any value: NULL does nothing, and a second close, or a
 * handle not from `residency_open`, is refused. A call on it still
 * running keeps it until that call returns; later calls are refused.
 */
int residency_close(struct ResidencyHandle *handle);

/**
 * The message of the last failed call on this thread, one line; "" when
 * none failed. Valid until the next failure on this thread. Never NULL.
 */
const char *residency_last_error(void);

/**
 * Opens a KV block store; with `disk_dir`, the directory is created or
 * reopened (temporary files removed, every block verified, the corrupt
 * ones deleted).
 *
 * # Safety
 * `options` is NULL or points to a `ResidencyKvOptions` whose `disk_dir`
 * is NULL or NUL-terminated; `out_kv` is NULL or points to writable
 * storage for a pointer.
 */
int residency_kv_open(const struct ResidencyKvOptions *options, struct ResidencyKv **out_kv);

/**
 * The keys of the full blocks of `tokens[0..token_count]` under
 * `identity`, `block_tokens` tokens each (a partial last block has none).
 * Writes up to `key_capacity` keys to `out_keys` (NULL when 0) and sets
 * `*out_key_count` to the number of full blocks, as snprintf does.
 *
 * # Safety
 * `identity` is NULL or a `ResidencyKvIdentity` whose pointers follow its
 * contract; `tokens` is NULL or points to `token_count` values; `out_keys`
 * to `key_capacity` writable keys; `out_key_count` to a `size_t`.
 */
int residency_kv_block_keys(const struct ResidencyKvIdentity *identity,
                            const uint32_t *tokens,
                            size_t token_count,
                            uint32_t block_tokens,
                            struct ResidencyKvKey *out_keys,
                            size_t key_capacity,
                            size_t *out_key_count);

/**
 * Leases the longest cached prefix of `keys[0..key_count]` (a request's
 * block keys, first to last), reading blocks from the disk tier back into
 * RAM on the way; `*out_prefix` holds the leases (release it with
 * `residency_kv_release`) and `*out_blocks` is their number (0 is a
 * valid, empty prefix). Thread-safe.
 *
 * # Safety
 * `kv` is any value (NULL or one closed already is refused); `keys` is NULL
 * or points to `key_count` keys; the outputs are NULL or writable.
 */
int residency_kv_lookup(const struct ResidencyKv *kv,
                        const struct ResidencyKvKey *keys,
                        size_t key_count,
                        struct ResidencyKvPrefix **out_prefix,
                        size_t *out_blocks);

/**
 * Block `index` of a prefix: the host address of its KV and its length
 * (`tokens x kv_bytes_per_token` bytes), valid until the prefix is
 * released.
 *
 * # Safety
 * `prefix` is any value (NULL or one released already is refused); the
 * outputs are NULL or writable.
 */
int residency_kv_prefix_block(const struct ResidencyKvPrefix *prefix,
                              size_t index,
                              const uint8_t **out_ptr,
                              size_t *out_len);

/**
 * Inserts the block `key` of `tokens` tokens after the last block of
 * `prefix` (its parent; an empty prefix: a request's first block), with
 * `bytes[0..len]` (copied; `tokens x kv_bytes_per_token` bytes), and
 * appends its lease to `prefix`. A key cached already is leased as it is.
 * `RESIDENCY_ERR_BUDGET` when every RAM block is leased.
 *
 * # Safety
 * `kv` and `prefix` are any values (NULL, or one closed or released
 * already, is refused), `prefix` from a lookup on the same store; `key`
 * is NULL or points to a key; `bytes` is NULL or points to `len` readable
 * bytes.
 */
int residency_kv_insert(const struct ResidencyKv *kv,
                        struct ResidencyKvPrefix *prefix,
                        const struct ResidencyKvKey *key,
                        uint32_t tokens,
                        const uint8_t *bytes,
                        size_t len);

/**
 * Releases a prefix's leases, its last block first (so its first block
 * ends most recent). NULL does nothing.
 *
 * # Safety
 * `prefix` is any value: NULL does nothing, and one released already, or
 * not from a lookup, is refused.
 */
int residency_kv_release(struct ResidencyKvPrefix *prefix);

/**
 * The store's counters and current block counts.
 *
 * # Safety
 * `kv` is any value (NULL or one closed already is refused); `out_counters`
 * is NULL or writable.
 */
int residency_kv_counters(const struct ResidencyKv *kv, struct ResidencyKvCounters *out_counters);

/**
 * Closes a KV store. Prefixes still out stay valid until released. NULL
 * does nothing.
 *
 * # Safety
 * `kv` is any value: NULL does nothing, and a second close, or a store not
 * from `residency_kv_open`, is refused. A call on it still running keeps
 * it until that call returns; later calls are refused.
 */
int residency_kv_close(struct ResidencyKv *kv);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* RESIDENCY_H */
