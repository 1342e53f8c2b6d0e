/*
 * Read-ahead of batches: the event loop's own I/O ring, on which the reads
 * of every prefetched batch go out as its stream submits it, before a
 * worker takes it (see "reading batches ahead" in pipeline.h for the
 * pipeline's side). The ring never blocks the loop (IO_NO_SYNC): io_uring
 * signals an eventfd the loop watches, and the loop polls the ring then.
 * With the pread backend, or io.readahead 0, there is no read-ahead and
 * workers read as before.
 *
 * Like memcached's and redis's event loops, everything here runs on the
 * event loop thread; the budget's gauge is the only thing workers touch
 * (an atomic, as they drop the chunks they ran).
 */
#ifndef PRESTO_READAHEAD_H
#define PRESTO_READAHEAD_H

#include <stdint.h>

#include "io.h"
#include "pipeline.h"
#include "stats.h"

struct event_base;
struct readahead;

/* The "readahead" section of the stats' I/O. */
#define READAHEAD_STATS(X)                                                            \
    X(on, GAUGE, "", "1 when batches are read ahead on the event loop")               \
    X(budget, GAUGE, "bytes", "io.readahead: bytes of chunks read ahead at most")      \
    X(bytes, GAUGE, "bytes", "bytes of chunks read ahead now")                         \
    X(batches, COUNTER, "batches", "batches read ahead")                               \
    X(batches_without_reads, COUNTER, "batches", "batches with nothing to read (memory hits)") \
    X(over_budget, COUNTER, "batches", "batches left to the worker: the budget was in use") \
    X(in_flight, GAUGE, "reads", "the event loop ring's reads in the kernel now")     \
    X(max_in_flight, GAUGE, "reads", "the most there ever were at once")               \
    X(deferred, COUNTER, "reads", "reads the event loop left to the workers")

/* depth: reads in flight (io.depth); budget: io.readahead bytes (0: off);
 * force_pread: io.backend pread (off). A refused io_uring leaves it off,
 * which is logged once. Returns 0 or -ENOMEM. */
int readahead_create(struct readahead **out, struct event_base *base, unsigned depth,
                     uint64_t budget, int force_pread);
/* After the workers, before the streams' owners go: waits for the reads
 * in the kernel (their ready callbacks run), cancels the rest (likewise),
 * and reads ahead no more. NULL is fine. */
void readahead_stop(struct readahead *ra);
/* Once every stream is freed (they free their chunks here). NULL is fine. */
void readahead_destroy(struct readahead *ra);
/* Reads the first chunk of batch ids[0..n) of ds ahead into *slot (a
 * pipeline_ahead made or reused here; the caller frees it with
 * readahead_free). Returns 1 when reads are in flight: ready(arg) comes
 * from the event loop once they are done, and *slot is armed; 0 when the
 * caller submits the job now (nothing read ahead, or *slot armed with reads
 * the ring deferred at once, which the worker makes). */
int readahead_batch(struct readahead *ra, struct pipeline *pipe, struct dataset *ds,
                    const uint32_t *ids, uint32_t n, struct pipeline_ahead **slot,
                    void (*ready)(void *arg), void *arg);
/* Frees a pipeline_ahead readahead_batch put in a slot (dropping it first).
 * NULL a is fine. */
void readahead_free(struct readahead *ra, struct pipeline_ahead *a);
void readahead_stats(const struct readahead *ra, struct stats_out *o);
/* Bytes read ahead and the chunks' own structures (for the memory stats). */
uint64_t readahead_buffer_bytes(const struct readahead *ra);
/* Adds the ring's I/O counters to *sum. */
void readahead_io_stats(const struct readahead *ra, struct io_stats *sum);

#endif
