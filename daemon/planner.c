/* The planner: see planner.h. */
#include "planner.h"

#include <errno.h>
#include <stdlib.h>

#include "hash.h"

int planner_make(struct plan *p, uint32_t n, uint64_t seed, uint64_t epoch,
                 int shuffle, uint32_t rank, uint32_t world,
                 uint32_t batch_size, int drop_last)
{
    p->ids = NULL;
    p->count = p->batches = 0;
    p->batch_size = batch_size;
    if (n == 0 || world == 0 || rank >= world || batch_size == 0)
        return -EINVAL;

    uint32_t *all = malloc((size_t)n * sizeof(*all));
    if (!all)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        all[i] = i;
    if (shuffle) {
        /* Fisher-Yates from a splitmix64 stream seeded by (seed, epoch). */
        uint64_t state = hash_mix64(seed ^ hash_mix64(epoch + 0x9e3779b97f4a7c15ull));
        for (uint32_t i = n - 1; i > 0; i--) {
            uint32_t j = (uint32_t)(hash_rand01(&state) * (double)(i + 1));
            if (j > i)
                j = i;
            uint32_t t = all[i];
            all[i] = all[j];
            all[j] = t;
        }
    }

    /* DistributedSampler: pad to a multiple of world by repeating the head,
     * then take every world-th id from rank on. */
    uint64_t per_rank = ((uint64_t)n + world - 1) / world;
    p->ids = malloc(per_rank * sizeof(*p->ids));
    if (!p->ids) {
        free(all);
        return -ENOMEM;
    }
    for (uint64_t k = 0; k < per_rank; k++)
        p->ids[k] = all[(rank + k * world) % n];
    free(all);

    p->count = per_rank;
    if (drop_last)
        p->count = per_rank / batch_size * batch_size;
    p->batches = (p->count + batch_size - 1) / batch_size;
    return 0;
}

void planner_free(struct plan *p)
{
    free(p->ids);
    p->ids = NULL;
    p->count = p->batches = 0;
}

void planner_batch(const struct plan *p, uint64_t b, uint64_t *first, uint32_t *len)
{
    uint64_t start = b * p->batch_size;
    uint64_t end = start + p->batch_size;
    if (start > p->count)
        start = p->count;
    if (end > p->count)
        end = p->count;
    *first = start;
    *len = (uint32_t)(end - start);
}
