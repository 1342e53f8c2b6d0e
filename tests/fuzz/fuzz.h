/* Shared by the libFuzzer targets in tests/fuzz/: a check that aborts (so
 * libFuzzer records the input as a crash) with the failed condition. */
#ifndef PRESTO_FUZZ_H
#define PRESTO_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond)                                                         \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                             \
        }                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
