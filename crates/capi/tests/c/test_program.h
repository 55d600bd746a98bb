/* What the C test programs share: failing a step with residency's last
 * error, and the checksum tests/c_abi.rs recomputes in Rust. */

#ifndef RESIDENCY_TEST_PROGRAM_H
#define RESIDENCY_TEST_PROGRAM_H

#include "residency.h"

#include <stdint.h>
#include <stdio.h>

/* Says on stderr that `what` failed, with its status and the last error;
 * the program's exit status. */
static int fail(const char *what, int status) {
    fprintf(stderr, "%s failed with status %d: %s\n", what, status, residency_last_error());
    return 1;
}

/* FNV-1a, 64 bits: simple enough that the test recomputes it in Rust. */
static uint64_t fnv1a64(const uint8_t *bytes, size_t len) {
    uint64_t hash = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++) {
        hash ^= bytes[i];
        hash *= 0x100000001b3ULL;
    }
    return hash;
}

#endif
