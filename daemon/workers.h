/*
 * The worker pool: threads that run pipeline work so the event loop never
 * decodes. A job is submitted from the event loop thread; a worker runs
 * job->run(); the finished job goes on a completion list and an eventfd
 * wakes the event loop, which calls job->done() on its own thread. Jobs run
 * in submission order (FIFO), which shares workers fairly between streams
 * that each keep a bounded number of jobs queued.
 *
 * Lock order: workers.lock is a leaf; nothing else is locked while it is held.
 */
#ifndef PRESTO_WORKERS_H
#define PRESTO_WORKERS_H

#include <stdint.h>

#include "stats.h"
#include "step.h"

struct event_base;
struct workers;

/* What a worker thread owns: its stats block and its step state. */
struct worker_ctx {
    unsigned index;
    struct stats_thread *stats;
    struct step_ctx step;
    struct img scratch[3]; /* file bytes and two ping-pong images */
};

struct work {
    void (*run)(struct work *w, struct worker_ctx *ctx); /* worker thread */
    void (*done)(struct work *w, int cancelled);        /* event loop thread */
    struct work *next;
    int state; /* internal */
};

/* stats points at n per-thread blocks, one per worker. */
int workers_create(struct workers **out, struct event_base *base, unsigned n,
                   struct stats_thread *stats, uint64_t max_pixels);
/* Stops the threads after their current job; queued jobs get done(w, 1). */
void workers_destroy(struct workers *p);
void workers_submit(struct workers *p, struct work *w);
/* Takes a job off the queue if no worker has started it: its done() runs
 * with cancelled = 1 before this returns 0. -EBUSY when it is running or
 * finished (its done() will still come through the event loop). */
int workers_cancel(struct workers *p, struct work *w);
unsigned workers_count(const struct workers *p);
unsigned workers_busy(struct workers *p);
unsigned workers_queued(struct workers *p);

#endif
