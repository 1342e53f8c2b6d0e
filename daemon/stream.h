/*
 * Epoch streams: one trainer's epoch (dataset, batch size, seed, epoch,
 * rank/world, shuffle, drop_last), planned up front (whole, also when it
 * resumes the epoch at a later batch: start_batch) and produced by the
 * worker pool as batch jobs, at most `prefetch` batches ahead of what the
 * client has taken. Batches go to the stream's reply (reply.h) in order,
 * straight from the buffers the workers filled (no copy), then the end.
 *
 * Bad samples under on_error: skip leave the epoch, not holes: the stream
 * is the planned ids with the bad ones removed, cut into full batches (only
 * the last may be short, and drop_last drops it), whatever the worker count
 * or timing; batch indices stay consecutive and the end counts the batches
 * and samples really sent and the samples skipped, so the start's counts
 * are upper bounds. A batch that straddles two jobs goes out by reference
 * from both (samples are copied only where two short jobs meet), and the
 * jobs it waits in do not count against prefetch. Under on_error: fail the
 * first bad sample in epoch order fails the stream (-EBADMSG) naming the
 * file.
 *
 * With shared memory (params.shm) the workers write batches into the slots
 * of a memfd ring the client maps, and only slot numbers go out; a slot
 * comes back with stream_release. Each job owns one slot for the stream's
 * life.
 *
 * A stream lives on the event loop thread. Its owner calls stream_close()
 * once the stream's reply said done or failed, or when the client went
 * away; the stream frees itself once no worker and no reply holds a piece
 * of it.
 *
 * The streams of a daemon share a `struct streams`: what they run on (the
 * event loop, the workers, the pipeline, the read-ahead) and their counters
 * and gauges, which only the stream module writes.
 */
#ifndef PRESTO_STREAM_H
#define PRESTO_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "budget.h"
#include "dataset.h"
#include "pipeline.h"
#include "reply.h"
#include "ring.h"
#include "stats.h"
#include "workers.h"

struct event_base;
struct readahead;
struct stream;
struct streams;

/* What one stream asks for. */
struct stream_params {
    uint64_t seed, epoch;
    uint32_t rank, world, batch_size;
    uint32_t prefetch; /* batches ahead */
    int shuffle, drop_last;
    int shm;           /* shared memory wanted (else the socket) */
    uint32_t id;       /* for logs and the ring's name */
    size_t room;       /* bytes the reply wants free before each batch's samples */
    /* The client memory budget (budget.h; NULL: none): the stream owns
     * `charge` bytes charged to uid once stream_open succeeded, and gives
     * them back when the last of its memory is freed. */
    struct budget *budget;
    uid_t uid;
    uint64_t charge;
    /* Resuming (see proto.h): the stream starts at this batch of the
     * epoch's plan, computes nothing before it and keeps the plan's batch
     * indices; at or past the epoch's batches it is empty. */
    uint64_t start_batch;
    int info;          /* OPENED carries the dataset's size and fingerprint */
    int labels;        /* the client takes a label tensor (PROTO_OPEN_LABELS):
                          OPENED says the dataset's label format; without it
                          a dataset whose labels are not int64 [n] refuses */
};

/* The streams' counters and gauges (event loop thread), at the top of the
 * stats document, and its "shm" section. */
#define STREAMS_STATS(X)                                                              \
    X(streams, GAUGE, "streams", "epoch streams open", "streams_open")                 \
    X(streams_total, COUNTER, "streams", "epoch streams opened")                       \
    X(samples_served, COUNTER, "samples", "samples delivered in batches")              \
    X(batches_served, COUNTER, "batches", "batches delivered")                         \
    X(bytes_served, COUNTER, "bytes",                                                  \
      "batch bytes delivered: whole frames through the socket, samples through shared memory") \
    X(samples_skipped, COUNTER, "samples", "bad samples left out of epochs (on_error: skip)")

#define STREAMS_SHM_STATS(X)                                                          \
    X(rings, GAUGE, "rings", "shared-memory rings: the streams' and those kept for the next")    \
    X(ring_bytes, GAUGE, "bytes", "bytes of those rings")                              \
    X(streams_total, COUNTER, "streams", "streams on the shared-memory transport")     \
    X(fallbacks, COUNTER, "streams", "streams that asked for shared memory and got the socket") \
    X(rings_kept, COUNTER, "streams", "streams on the ring their connection kept")     \
    X(releases, COUNTER, "slots", "slots released by clients")                        \
    X(release_timeouts, COUNTER, "clients",                                            \
      "clients dropped for holding every slot for limits.release_timeout")             \
    X(copies, COUNTER, "batches",                                                      \
      "batches clients copied out of their slot: they held every other slot")         \
    X(release_timeout_s, GAUGE, "seconds", "limits.release_timeout", "release_timeout_seconds")

/* readahead may be NULL (workers read every batch themselves). */
int streams_create(struct streams **out, struct event_base *base, struct workers *workers,
                   struct pipeline *pipe, struct readahead *readahead);
/* After every stream is freed. NULL is fine. */
void streams_destroy(struct streams *ss);
/* limits.release_timeout, seconds (see stream_release); for new streams. */
void streams_set_release_timeout(struct streams *ss, uint32_t seconds);
/* The top-level fields (STREAMS_STATS) and the "shm" section. */
void streams_stats(const struct streams *ss, struct stats_out *o);
void streams_shm_stats(const struct streams *ss, struct stats_out *o);
/* Bytes of the streams' batch buffers and rings. */
uint64_t streams_buffer_bytes(const struct streams *ss);
/* Clients dropped for holding their slots (limits.release_timeout's hits). */
uint64_t streams_release_timeouts(const struct streams *ss);

/* The most memory a stream of these parameters can ever hold, for the
 * client memory budget: its plan, its batch buffers (or its ring and the
 * jobs on it), the frames of batches it can have queued on the socket, and
 * through shared memory what it would hold on the socket if it fell back.
 * A stream never holds more: its jobs are bounded by its prefetch. */
uint64_t stream_memory(const struct dataset *ds, const struct stream_params *p);

/* Plans the epoch and starts it: the reply's first word is OPENED. On a bad
 * request returns -EINVAL (or -ENOMEM) with a message in err, and says
 * nothing. spare (may be NULL) is the ring the owner kept from its previous
 * stream: a shared-memory stream of the same geometry takes it over (the
 * client has it mapped already), any other stream frees it. */
/* "float32 [n, 10] soft labels (mixup/cutmix)", ...: a label format in
 * words, for messages. */
void stream_labels_describe(const struct proto_labels *f, char *buf, size_t len);
int stream_open(struct stream **out, struct streams *ss, struct dataset *ds,
                const struct stream_params *p, const struct reply *reply, struct ring *spare,
                char *err, size_t errlen);
/* A shared-memory stream that ended well (its reply said done) gives its
 * ring to the owner for the next stream (1; moved into *out, which must be
 * empty), before stream_close, with ring_bytes(out) of its charge (the
 * owner gives those back to the budget when it frees the ring); 0 when it has none to give (socket, failed,
 * dropped). The client reuses it only once it is done with every batch of
 * this stream: it opens the next stream after closing this one. */
int stream_take_ring(struct stream *s, struct ring *out);
/* Frees a ring taken with stream_take_ring (nothing when r->fd < 0). With
 * a budget, the ring stays charged to uid until the client's last
 * descriptor and mapping of it are gone too (budget_linger). */
void stream_ring_free(struct streams *ss, struct ring *r, struct budget *b, uid_t uid);
/* Shared memory: the client is done with a slot it was sent; copied says
 * it copied the batch out because it held every other slot (it keeps
 * batches): counted (shm.copies), and logged once per stream. A slot it
 * does not hold is refused (-EINVAL, message in err). A stream whose
 * client holds slots and releases none for release_timeout seconds while
 * the ring is full fails with -ETIMEDOUT and says so in stream_dropped:
 * the owner then drops the client. */
int stream_release(struct stream *s, uint32_t slot, int copied, char *err, size_t errlen);
int stream_dropped(const struct stream *s);
/* Stops producing and says nothing more; frees when idle. */
void stream_close(struct stream *s);

/* A shared-memory stream's ring slots for its prefetch: at least 2 (the
 * profiler's trial runs as many batches in flight: profile.c). */
static inline uint32_t stream_ring_slots(uint32_t prefetch)
{
    return prefetch < 2 ? 2 : prefetch;
}

#endif
