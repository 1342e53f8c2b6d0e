/*
 * The memory tier: materialized samples (the output of a dataset's offline
 * steps), keyed by (dataset, offline-steps fingerprint, sample id).
 *
 * A byte budget is never exceeded: what is accounted against it (the
 * entries, with their headers and alignment, and the per-dataset slot
 * arrays, the tier's index, 8 bytes a sample) is reserved before it is
 * allocated, and an entry is admitted only while it fits (a budget smaller
 * than the index admits nothing). Admitted entries are never
 * evicted: under a fresh permutation every epoch, LRU over a dataset larger
 * than memory thrashes, while a fixed subset hits exactly subset/dataset of
 * the time (CoorDL's MinIO policy; see DESIGN.md).
 *
 * Admission per dataset. The budget (less the slot arrays) is shared out
 * by water-filling over the datasets' sizes (samples x entry size): a
 * dataset that fits in its share is admitted whole ("everything while it
 * fits"), the room it leaves goes to the others, and a dataset larger
 * than its share gets a fixed subset of that fraction: the samples whose
 * hash of (dataset, sample id) falls below fraction x 2^64 (with a 2%
 * margin for the spread of that sample). The subset is a function of the
 * sample ids only, so it is the same whatever the order samples come in,
 * the same every epoch, and the same after a restart. A dataset's entry
 * size is known up front when its offline steps end in a fixed shape, and
 * is otherwise learned from its first entry (until then it is admitted
 * first-come; the shares are recomputed once, and entries already admitted
 * stay). The hard budget check applies on top of the policy.
 *
 * Entries are immutable once published, so readers take no lock: a slot is
 * an atomic pointer.
 */
#ifndef PRESTO_CACHE_H
#define PRESTO_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "img.h"

struct cache;

struct cache_entry {
    uint64_t fingerprint;
    uint32_t dataset, sample;
    uint32_t h, w, c, dtype;
    uint32_t rate; /* an audio clip's sample rate (img.rate) */
    size_t len;
    uint8_t data[];
};

/* What the cache needs to know of a dataset. */
struct cache_dataset {
    uint32_t nsamples;
    uint64_t entry_bytes; /* image bytes of every entry when fixed, else 0 */
};

struct cache_stats {
    uint64_t budget;
    uint64_t bytes;        /* accounted: entries and index */
    uint64_t index_bytes;  /* of that, the slot arrays */
    uint64_t entries;
    uint64_t rejected;     /* puts refused: no room left in the budget */
    uint64_t not_admitted; /* puts refused: outside the dataset's subset */
    uint64_t evictions;    /* always 0: entries are never evicted */
};

struct cache_dataset_stats {
    uint64_t entries, bytes; /* published entries of the dataset */
    uint64_t rejected, not_admitted;
    uint64_t entry_bytes;    /* image bytes per entry (0: not known yet) */
    double fraction;         /* of the dataset admitted: 1 when it fits */
};

/* ds[i] describes dataset i. Returns 0 or -ENOMEM. */
int cache_create(struct cache **out, uint64_t budget, const struct cache_dataset *ds,
                 uint32_t ndatasets);
void cache_destroy(struct cache *c);
/* NULL on a miss (or an entry of another fingerprint). */
const struct cache_entry *cache_get(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample);
/* 1 when a put of len image bytes for this sample would be admitted now
 * (in the dataset's subset and room in the budget), else 0. */
int cache_admits(struct cache *c, uint32_t dataset, uint32_t sample, size_t len);
/* Copies im (IMG_PIXELS) in if the policy admits it. Returns the resident
 * entry (one there already, this one, or one another thread published
 * first meanwhile: then ours stays allocated and counted), or NULL when
 * it was not admitted. */
const struct cache_entry *cache_put(struct cache *c, uint32_t dataset,
                                    uint64_t fingerprint, uint32_t sample,
                                    const struct img *im);
/* A read-only img view of an entry (data not owned). */
void cache_entry_img(const struct cache_entry *e, struct img *im);
void cache_get_stats(struct cache *c, struct cache_stats *st);

/* Changing the tier while it serves (a reload, DROP_CACHE). The caller
 * makes sure no other thread uses the cache meanwhile (workers_pause). */
/* A new dataset (a reload added it): its id goes to *id. Returns 0 or
 * -ENOMEM. The budget is shared out again. */
int cache_add_dataset(struct cache *c, const struct cache_dataset *ds, uint32_t *id);
/* A dataset no longer served: its index is freed and lookups of it miss;
 * its entries stay allocated and counted until cache_clear (entries are
 * never freed one by one). The budget is shared out again. */
void cache_retire_dataset(struct cache *c, uint32_t id);
/* A new budget: what is admitted from now on; lowering it frees nothing. */
void cache_set_budget(struct cache *c, uint64_t budget);
/* Drops every entry and gives their memory back to the system; the
 * datasets stay, with empty indexes. *entries and *bytes say what went. */
void cache_clear(struct cache *c, uint64_t *entries, uint64_t *bytes);
void cache_get_dataset_stats(struct cache *c, uint32_t dataset,
                             struct cache_dataset_stats *st);

#endif
