/*
 * Counters, defined once (X-macro) and kept per thread, as memcached does:
 * each worker thread and the event loop thread own one struct stats_thread
 * and bump it with relaxed atomics; a stats request sums them. Counters
 * only grow; gauges (connections, streams, workers busy, cache bytes) are
 * read from their owners when the document is built.
 */
#ifndef PRESTO_STATS_H
#define PRESTO_STATS_H

#include <stdint.h>

#include "step.h"

#define STATS_COUNTERS(X)                                            \
    X(samples_served, "samples delivered in batches")               \
    X(batches_served, "batches delivered")                          \
    X(bytes_served, "batch bytes delivered")                        \
    X(samples_skipped, "bad samples dropped from epochs")           \
    X(cache_hits, "samples found in the memory cache")             \
    X(cache_misses, "samples not found in the memory cache")       \
    X(err_read, "source files that could not be read")              \
    X(err_decode, "source files that did not decode")               \
    X(err_too_large, "source files or images over a limit")         \
    X(connections_total, "connections accepted")                    \
    X(connections_rejected, "connections refused at the limit")     \
    X(limit_connections_per_user, "connections refused: the peer uid's connections") \
    X(limit_idle_timeout, "connections closed: idle for limits.idle_timeout") \
    X(streams_total, "epoch streams opened")                        \
    X(shm_streams_total, "streams on the shared-memory transport")  \
    X(shm_fallbacks, "shared memory asked for, socket used")        \
    X(shm_rings_kept, "streams on the ring their connection kept")   \
    X(shm_releases, "shared-memory slots released by clients")      \
    X(shm_release_timeouts, "clients dropped for releasing nothing") \
    X(protocol_errors, "malformed frames received")                \
    X(access_denied, "admin requests from peers that are not admins") \
    X(limit_streams_per_connection, "OPENs refused: the connection's streams") \
    X(limit_streams_per_user, "OPENs refused: the peer uid's streams") \
    X(limit_batch_size, "OPENs refused: batch_size over limits.batch_size") \
    X(limit_prefetch, "OPENs refused: prefetch over limits.prefetch") \
    X(limit_frame_size, "requests over limits.frame_size (connection closed)") \
    X(limit_output_buffer, "times a connection's requests waited on its output") \
    X(limit_output_timeout, "connections dropped: output stuck over the limit") \
    X(reloads, "configuration reloads applied")                   \
    X(reload_failures, "reloads refused (the running config stayed)") \
    X(cache_drops, "DROP_CACHE requests done")

enum stats_counter {
#define STATS_ENUM(name, doc) STAT_##name,
    STATS_COUNTERS(STATS_ENUM)
#undef STATS_ENUM
    STAT_MAX
};

struct stats_thread {
    uint64_t c[STAT_MAX];
    uint64_t step_calls[STEP_KIND_MAX];
    uint64_t step_ns[STEP_KIND_MAX];
} __attribute__((aligned(64)));

static inline void stats_add(struct stats_thread *t, enum stats_counter c, uint64_t n)
{
    __atomic_fetch_add(&t->c[c], n, __ATOMIC_RELAXED);
}

static inline void stats_step(struct stats_thread *t, enum step_kind k, uint64_t ns)
{
    __atomic_fetch_add(&t->step_calls[k], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&t->step_ns[k], ns, __ATOMIC_RELAXED);
}

/* Sums n per-thread blocks into out. */
void stats_sum(const struct stats_thread *threads, unsigned n, struct stats_thread *out);
const char *stats_name(enum stats_counter c);
uint64_t stats_now_ns(void);

#endif
