/*
 * The memory tier: materialized samples (the output of a dataset's offline
 * steps), keyed by (dataset, offline-steps fingerprint, sample id).
 *
 * A byte budget is never exceeded: an entry is admitted only while it fits,
 * and admitted entries are never evicted. For a dataset larger than the
 * budget that admits a fixed subset, which under a fresh permutation every
 * epoch hits exactly budget/dataset of the time, where LRU would thrash
 * (CoorDL's MinIO policy; see DESIGN.md). Entries are immutable once
 * published, so readers take no lock: a slot is an atomic pointer.
 */
#ifndef PRESTO_CACHE_H
#define PRESTO_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "step.h"

struct cache;

struct cache_entry {
    uint64_t fingerprint;
    uint32_t dataset, sample;
    uint32_t h, w, c, dtype;
    size_t len;
    uint8_t data[];
};

struct cache_stats {
    uint64_t budget, bytes, entries, rejected;
};

/* nsamples[i] is the sample count of dataset i. Returns 0 or -ENOMEM. */
int cache_create(struct cache **out, uint64_t budget, const uint32_t *nsamples,
                 uint32_t ndatasets);
void cache_destroy(struct cache *c);
/* NULL on a miss (or an entry of another fingerprint). */
const struct cache_entry *cache_get(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample);
/* Copies im (IMG_PIXELS) in. Returns the resident entry (this one, or one
 * another thread published first), or NULL when the budget has no room. */
const struct cache_entry *cache_put(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample,
                                    const struct img *im);
/* A read-only img view of an entry (data not owned). */
void cache_entry_img(const struct cache_entry *e, struct img *im);
void cache_get_stats(struct cache *c, struct cache_stats *st);

#endif
