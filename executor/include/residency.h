/* residency: the C ABI of the executor (DESIGN 7). See src/ffi.rs. */

#ifndef RESIDENCY_H
#define RESIDENCY_H

/* Generated from executor/src/ffi.rs by cbindgen; do not edit. Regenerate with
   RESIDENCY_WRITE_HEADER=1 cargo test --release -p residency-executor --test c_abi */

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
 * Colibri's VRAM tier does (colibri-formats.md section 4).
 */
#define RESIDENCY_DEFAULT_HEAT_HALVE_EVERY_TOKENS 1024

/**
 * An applied plan: the store with its residents, and live heat. Opaque.
 */
typedef struct ResidencyHandle ResidencyHandle;

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
 * `handle` is NULL or from `residency_open` and not closed; each `out_*` is
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
 * `lease` is NULL or from an acquire and not released; `out_device` and
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
 * `lease` is NULL or from an acquire and not released before.
 */
int residency_release(struct ResidencyLease *lease);

/**
 * Reports the experts `experts[0..count]` one token was routed to in MoE
 * layer `moe_layer` (an ordinal from 0, as in heat tables, not a
 * transformer layer): live heat. Nothing is counted when an argument is
 * out of range. `experts` may be NULL when `count` is 0. Thread-safe.
 *
 * # Safety
 * `handle` is NULL or from `residency_open` and not closed; `experts` is
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
 * `handle` is NULL or from `residency_open` and not closed.
 */
const char *residency_heat_json(const struct ResidencyHandle *handle);

/**
 * The store's telemetry (DESIGN 7) as one line of JSON. The string belongs
 * to the handle, as `residency_heat_json`'s does. NULL on failure.
 *
 * # Safety
 * `handle` is NULL or from `residency_open` and not closed.
 */
const char *residency_telemetry_json(const struct ResidencyHandle *handle);

/**
 * The store's telemetry in the Prometheus text format (metrics
 * `residency_*`). The string belongs to the handle, as
 * `residency_heat_json`'s does. NULL on failure.
 *
 * # Safety
 * `handle` is NULL or from `residency_open` and not closed.
 */
const char *residency_telemetry_prometheus(const struct ResidencyHandle *handle);

/**
 * Closes a handle: frees the store's residents once no lease holds them
 * (leases still out stay valid until released). NULL does nothing.
 *
 * # Safety
 * `handle` is NULL or from `residency_open` and not closed before; no
 * other call on it runs or follows.
 */
int residency_close(struct ResidencyHandle *handle);

/**
 * The message of the last failed call on this thread, one line; "" when
 * none failed. Valid until the next failure on this thread. Never NULL.
 */
const char *residency_last_error(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* RESIDENCY_H */
