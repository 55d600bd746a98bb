/* A C engine's use of residency.h, built and run by tests/c_abi.rs: open a
 * plan and its checkpoint, acquire experts and checksum their bytes, release
 * them, the same for a trunk component, report a route, read heat and
 * telemetry, provoke two errors, close.
 *
 * usage: use_residency PLAN CHECKPOINT LAYER EXPERT [LAYER EXPERT ...]
 * (transformer layers, as in the checkpoint). One line per step on stdout;
 * exit 1 after a line on stderr when a step that must work does not. */

#include "test_program.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints `what`, the length and the checksum of the bytes (or where they
 * are on a GPU), then releases the lease. */
static int print_and_release(const char *what, ResidencyLease *lease, const uint8_t *bytes,
                             size_t len) {
    if (bytes != NULL) {
        printf("%s bytes %zu fnv1a64 %016" PRIx64 "\n", what, len, fnv1a64(bytes, len));
    } else {
        uint32_t device = 0;
        uint64_t address = 0;
        int status = residency_lease_device(lease, &device, &address);
        if (status != RESIDENCY_OK) return fail("residency_lease_device", status);
        printf("%s bytes %zu device %" PRIu32 " address %" PRIx64 "\n", what, len, device,
               address);
    }
    int status = residency_release(lease);
    if (status != RESIDENCY_OK) return fail("residency_release", status);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc % 2 == 0) {
        fprintf(stderr, "usage: %s PLAN CHECKPOINT LAYER EXPERT [LAYER EXPERT ...]\n", argv[0]);
        return 2;
    }
    ResidencyOptions options = {0};
    options.heat_halve_every_tokens = 4;
    ResidencyHandle *handle = NULL;
    int status = residency_open(argv[1], argv[2], &options, &handle);
    if (status != RESIDENCY_OK) return fail("residency_open", status);
    printf("opened\n");

    char what[64];
    for (int i = 3; i + 1 < argc; i += 2) {
        uint32_t layer = (uint32_t)strtoul(argv[i], NULL, 10);
        uint32_t expert = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        ResidencyLease *lease = NULL;
        const uint8_t *bytes = NULL;
        size_t len = 0;
        status = residency_acquire_expert(handle, layer, expert, &lease, &bytes, &len);
        if (status != RESIDENCY_OK) return fail("residency_acquire_expert", status);
        snprintf(what, sizeof what, "expert %" PRIu32 " %" PRIu32, layer, expert);
        if (print_and_release(what, lease, bytes, len) != 0) return 1;
    }
    {
        ResidencyLease *lease = NULL;
        const uint8_t *bytes = NULL;
        size_t len = 0;
        status = residency_acquire_trunk(handle, "lm_head", -1, &lease, &bytes, &len);
        if (status != RESIDENCY_OK) return fail("residency_acquire_trunk", status);
        if (print_and_release("trunk lm_head", lease, bytes, len) != 0) return 1;
    }
    printf("released\n");

    const uint32_t route[2] = {0, 1};
    status = residency_report_route(handle, 0, route, 2);
    if (status != RESIDENCY_OK) return fail("residency_report_route", status);
    const char *heat = residency_heat_json(handle);
    if (heat == NULL) return fail("residency_heat_json", -1);
    printf("heat %s\n", heat);

    const char *telemetry = residency_telemetry_json(handle);
    if (telemetry == NULL) return fail("residency_telemetry_json", -1);
    printf("telemetry %s\n", telemetry);
    const char *prometheus = residency_telemetry_prometheus(handle);
    if (prometheus == NULL) return fail("residency_telemetry_prometheus", -1);
    printf("prometheus %s", prometheus);

    /* A layer the model does not have, then a NULL output. */
    ResidencyLease *lease = NULL;
    const uint8_t *bytes = NULL;
    size_t len = 0;
    status = residency_acquire_expert(handle, 9999, 0, &lease, &bytes, &len);
    printf("error %d %s\n", status, residency_last_error());
    status = residency_acquire_expert(handle, 0, 0, NULL, &bytes, &len);
    printf("error %d %s\n", status, residency_last_error());

    status = residency_close(handle);
    if (status != RESIDENCY_OK) return fail("residency_close", status);
    printf("closed\n");
    return 0;
}
