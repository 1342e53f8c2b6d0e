/*
 * The planner: which sample ids one rank receives in one epoch, in order.
 *
 * Semantics follow torch.utils.data.DistributedSampler (drop_last=False):
 * with shuffle, the n ids are permuted by a Fisher-Yates shuffle seeded from
 * (seed, epoch); without, they stay in order. The list is padded by
 * repeating its head until it divides by world, and rank r takes every
 * world-th id starting at r. When n divides by world every sample appears
 * exactly once across ranks. Batching (and drop_last of a short last batch)
 * happens on top of this list.
 */
#ifndef PRESTO_PLANNER_H
#define PRESTO_PLANNER_H

#include <stdint.h>

struct plan {
    uint32_t *ids;      /* this rank's sample ids, in epoch order */
    uint64_t count;     /* number of ids */
    uint64_t batches;   /* number of batches */
    uint32_t batch_size;
};

/* Returns 0 or -EINVAL (n == 0, world == 0, rank >= world, batch_size == 0)
 * or -ENOMEM. */
int planner_make(struct plan *p, uint32_t n, uint64_t seed, uint64_t epoch,
                 int shuffle, uint32_t rank, uint32_t world,
                 uint32_t batch_size, int drop_last);
void planner_free(struct plan *p);
/* Range of batch b in p->ids: [*first, *first + *len). */
void planner_batch(const struct plan *p, uint64_t b, uint64_t *first,
                   uint32_t *len);

#endif
