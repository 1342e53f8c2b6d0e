/* Per-thread counters: see stats.h. */
#include "stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t stats_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int stats_percpu_init(struct stats_percpu *pc, unsigned threads, unsigned n)
{
    /* Each thread's counters on cache lines of their own. */
    unsigned stride = (n + 7) & ~7u;
    void *p = NULL;
    memset(pc, 0, sizeof(*pc));
    if (posix_memalign(&p, 64, (size_t)(threads ? threads : 1) * (stride ? stride : 8) * 8) != 0)
        return -ENOMEM;
    memset(p, 0, (size_t)(threads ? threads : 1) * (stride ? stride : 8) * 8);
    pc->v = p;
    pc->n = n;
    pc->stride = stride;
    pc->threads = threads;
    return 0;
}

void stats_percpu_free(struct stats_percpu *pc)
{
    free(pc->v);
    memset(pc, 0, sizeof(*pc));
}

void stats_percpu_sum(const struct stats_percpu *pc, uint64_t *out)
{
    for (unsigned i = 0; i < pc->n; i++)
        out[i] = 0;
    for (unsigned t = 0; t < pc->threads; t++)
        for (unsigned i = 0; i < pc->n; i++)
            out[i] += __atomic_load_n(&pc->v[(size_t)t * pc->stride + i], __ATOMIC_RELAXED);
}
