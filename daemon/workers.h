/*
 * The worker pool: threads that run pipeline work so the event loop never
 * decodes. A job is submitted from the event loop thread; a worker runs
 * job->run(); the finished job goes on a completion list and an eventfd
 * wakes the event loop, which calls job->done() on its own thread. Jobs run
 * in submission order (FIFO), which shares workers fairly between streams
 * that each keep a bounded number of jobs queued.
 *
 * Each worker thread owns an I/O ring (io.h) for its batched reads, made
 * for it by workers_create with the configured depth and backend; the
 * backend in use, and why when io_uring was refused, is logged once.
 *
 * Lock order: workers.lock is a leaf; nothing else is locked while it is held.
 */
#ifndef PRESTO_WORKERS_H
#define PRESTO_WORKERS_H

#include <stdint.h>

#include "io.h"
#include "stats.h"
#include "step.h"

struct event_base;
struct workers;

/* What a worker thread owns: its index (0 to threads - 1: where modules
 * keep its per-thread counters, stats.h), step state, I/O ring, and the
 * buffers of whoever runs on it (`local`, freed with local_free when the
 * pool stops). */
struct worker_ctx {
    unsigned index;
    struct step_ctx step;
    struct img scratch[3]; /* file bytes and two ping-pong images */
    struct io_ring *io;
    void *local;
    void (*local_free)(void *local);
    uint64_t mem_bytes; /* gauge (relaxed atomic): buffers this thread holds */
    /* Set by the job running (NULL: none): once *stop is nonzero (an
     * atomic int, set with source_wake after it), its remote reads are
     * taken back and the job ends early (a stream closed under it). */
    const int *stop;
};

struct workers_config {
    unsigned threads;
    uint64_t max_pixels;  /* decode limit (limits.pixels) */
    unsigned io_depth;    /* reads in flight per thread (io.depth) */
    int io_force_pread;   /* io.backend: pread */
    uint32_t max_audio_seconds, max_audio_channels; /* decode_audio's limits */
};

struct work {
    void (*run)(struct work *w, struct worker_ctx *ctx); /* worker thread */
    void (*done)(struct work *w, int cancelled);        /* event loop thread */
    struct work *next;
    int state; /* internal */
    /* Set by the submitter of a long job that touches nothing a paused
     * pool's caller may change (no cache, no served dataset): workers_pause
     * does not wait for it (a reload's indexing). */
    int unpaused;
};

int workers_create(struct workers **out, struct event_base *base,
                   const struct workers_config *cfg);
/* Stops the threads after their current job; queued jobs get done(w, 1). */
void workers_destroy(struct workers *p);
void workers_submit(struct workers *p, struct work *w);
/* Takes a job off the queue if no worker has started it: its done() runs
 * with cancelled = 1 before this returns 0. -EBUSY when it is running or
 * finished (its done() will still come through the event loop). */
int workers_cancel(struct workers *p, struct work *w);
/* Event loop thread: waits until no job runs (but those marked unpaused)
 * and keeps workers from starting new ones (submits queue up), so the
 * caller may change what jobs read (the cache's tables, the datasets
 * served) with no lock; then workers_resume. Blocks the loop for as long as
 * the running jobs take (one batch each). */
void workers_pause(struct workers *p);
void workers_resume(struct workers *p);
unsigned workers_count(const struct workers *p);

/* The pool's gauges (top of the stats document), and what the I/O section
 * says of the threads' rings: the backend ("io_uring", "pread", or "mixed"
 * when some fell back at run time) and the depth. */
#define WORKERS_STATS(X)                                                  \
    X(workers, GAUGE, "threads", "worker threads")                         \
    X(workers_busy, GAUGE, "threads", "worker threads running a job")       \
    X(jobs_queued, GAUGE, "jobs", "jobs waiting for a worker")
#define WORKERS_IO_STATS(X)                                               \
    X(backend, INFO, "", "the workers' I/O backend")                       \
    X(depth, GAUGE, "reads", "reads in flight per worker thread at most (io.depth)")
void workers_stats(struct workers *p, struct stats_out *o);
void workers_io_fields(const struct workers *p, struct stats_out *o);
/* The sum of the threads' I/O counters. */
void workers_io_stats(const struct workers *p, struct io_stats *sum);
/* Bytes of buffers the threads hold (their mem_bytes gauges). */
uint64_t workers_mem_bytes(const struct workers *p);

#endif
