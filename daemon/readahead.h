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
 * event loop thread; the budget is the only thing workers touch (as they
 * drop the chunks they ran: its gauges are atomics, its kept buffers under
 * its lock, a leaf). io.readahead bounds the arenas of all streams
 * together; each chunk is also charged to its stream's uid in the client
 * memory budget (budget.h) from arming until its job is done, on the event
 * loop: a uid without room gets no read-ahead, its workers read.
 */
#ifndef PRESTO_READAHEAD_H
#define PRESTO_READAHEAD_H

#include <stdint.h>
#include <sys/types.h>

#include "io.h"
#include "pipeline.h"
#include "stats.h"

struct budget;
struct event_base;
struct readahead;

/* The "readahead" section of the stats' I/O. */
#define READAHEAD_STATS(X)                                                            \
    X(on, GAUGE, "", "1 when batches are read ahead on the event loop")               \
    X(budget, GAUGE, "bytes", "io.readahead: bytes of chunks read ahead at most")      \
    X(bytes, GAUGE, "bytes", "bytes of chunks read ahead now")                         \
    X(kept, GAUGE, "bytes", "buffers of chunks run, kept for the next (within the budget)") \
    X(batches, COUNTER, "batches", "batches read ahead")                               \
    X(batches_without_reads, COUNTER, "batches", "batches with nothing to read (memory hits)") \
    X(over_budget, COUNTER, "batches", "batches left to the worker: the budget was in use") \
    X(over_user, COUNTER, "batches",                                                  \
      "batches left to the worker: their uid's client memory budget had no room")     \
    X(buffered_disk, COUNTER, "batches",                                              \
      "batches left to the worker: buffered disk records, whose copies would run here") \
    X(waited, COUNTER, "times",                                                       \
      "a batch waited for room in the budget (a batch before it gives some back)")  \
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
/* A job's read-ahead: the chunk read ahead for it, and what that is
 * charged to its stream's uid in the client memory budget (budget.h). */
struct readahead_slot {
    struct pipeline_ahead *a; /* NULL, or the chunk (armed until a worker ran it) */
    struct budget *budget;    /* the stream's (NULL: nothing is charged) */
    uid_t uid;
    uint64_t charged;         /* bytes charged for a: its arena and itself */
};

/* Reads the first chunk of batch ids[0..n) of ds ahead into slot->a, when
 * its arena and structure fit in what slot's uid may be charged for
 * read-ahead (budget_ahead_room) and in io.readahead: charged to the uid
 * until readahead_done. Returns 1 when reads are in flight: ready(arg)
 * comes from the event loop once they are done, and slot->a is armed; 0
 * when the caller submits the job now (nothing read ahead, or slot->a armed
 * with reads the ring deferred at once, which the worker makes); with
 * may_wait (a job of the caller's, run or read ahead now, will give budget
 * back), -ENOBUFS when io.readahead is in use: nothing was done, the caller
 * asks again later. */
int readahead_batch(struct readahead *ra, struct pipeline *pipe, struct dataset *ds,
                    const uint32_t *ids, uint32_t n, struct readahead_slot *slot, int may_wait,
                    void (*ready)(void *arg), void *arg);
/* Event loop: the job of slot is done (its worker ran the chunk and let go
 * of its arena), or never runs: the chunk is dropped where still armed,
 * its charge given back and its structure kept for the next. Nothing in
 * the slot is fine. */
void readahead_done(struct readahead *ra, struct readahead_slot *slot);
void readahead_stats(const struct readahead *ra, struct stats_out *o);
/* Bytes read ahead and the chunks' own structures (for the memory stats). */
uint64_t readahead_buffer_bytes(const struct readahead *ra);
/* Adds the ring's I/O counters to *sum. */
void readahead_io_stats(const struct readahead *ra, struct io_stats *sum);

#endif
