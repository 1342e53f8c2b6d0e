/*
 * The pipeline of one sample: cache lookup, else source read and the
 * offline steps (materialized into the cache), then the online steps into
 * the batch's slot. Runs on worker threads.
 */
#ifndef PRESTO_PIPELINE_H
#define PRESTO_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "dataset.h"
#include "workers.h"

/* Why a sample was bad, for stats and the error reply. */
enum pipeline_fault { PIPE_OK = 0, PIPE_READ, PIPE_DECODE, PIPE_TOO_LARGE, PIPE_SHAPE };

struct pipeline_env {
    struct cache *cache;
    uint64_t max_file_size;
};

/* The seed of a sample's random steps: a function of (stream seed, epoch,
 * sample id) only, so every epoch is reproducible whatever the worker
 * count, rank or cache state. */
uint64_t pipeline_sample_seed(uint64_t seed, uint64_t epoch, uint32_t sample);

/* Writes sample `sample` of ds, after every step, to dst (ds->sample_bytes).
 * Returns PIPE_OK, or the fault with a message in err. */
enum pipeline_fault pipeline_sample(const struct pipeline_env *env, struct dataset *ds,
                                    uint32_t sample, uint64_t sample_seed, uint8_t *dst,
                                    struct worker_ctx *ctx, char *err, size_t errlen);

#endif
