/*
 * Stats: what every module uses to keep and report its own counters.
 * Counters only grow; gauges (connections, streams, workers busy, cache
 * bytes) are read from their owners when the document is built.
 */
#ifndef PRESTO_STATS_H
#define PRESTO_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Counters kept per thread, memcached's way: `n` counters for each of
 * `threads` threads, each thread's on cache lines of its own; a thread adds
 * to its own with relaxed atomics, a reader sums them. For the modules
 * whose counters worker threads bump per sample (the tiers, the pipeline):
 * `thread` is the worker's index. */
struct stats_percpu {
    uint64_t *v;
    unsigned n, stride, threads;
};
/* 0 or -ENOMEM. */
int stats_percpu_init(struct stats_percpu *pc, unsigned threads, unsigned n);
void stats_percpu_free(struct stats_percpu *pc);
static inline void stats_percpu_add(struct stats_percpu *pc, unsigned thread, unsigned i,
                                    uint64_t n)
{
    if (thread < pc->threads)
        __atomic_fetch_add(&pc->v[(size_t)thread * pc->stride + i], n, __ATOMIC_RELAXED);
}
/* out[0..n) = the sums over the threads. */
void stats_percpu_sum(const struct stats_percpu *pc, uint64_t *out);

uint64_t stats_now_ns(void);

#endif
