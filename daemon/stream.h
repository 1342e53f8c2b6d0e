/*
 * Epoch streams: one trainer's epoch (dataset, batch size, seed, epoch,
 * rank/world, shuffle, drop_last), planned up front (from OPEN's
 * start_batch on, when it resumes one: see proto.h) and produced by the
 * worker pool as batch jobs, at most `prefetch` batches ahead of what the
 * client's socket has taken. Batches are sent in order as BATCH frames
 * straight from the buffers the workers filled (no copy), then END.
 *
 * Bad samples under on_error: skip leave the epoch, not holes: the stream
 * is the planned ids with the bad ones removed, cut into full batches (only
 * the last may be short, and drop_last drops it), whatever the worker count
 * or timing; BATCH indices stay consecutive and END counts the batches and
 * samples really sent and the samples skipped, so OPENED's counts are upper
 * bounds. A batch that straddles two jobs goes out by reference from both
 * (samples are copied only where two short jobs meet), and the jobs it waits
 * in do not count against prefetch. Under on_error: fail the first bad
 * sample in epoch order ends the stream with an ERROR (PROTO_E_SAMPLE)
 * naming the file.
 *
 * With the shared-memory transport (PROTO_OPEN_SHM, see proto.h) the
 * workers write batches into the slots of a memfd ring the client maps, and
 * only BATCH_SHM frames (slot, shape, labels) go through the socket; a slot
 * comes back with RELEASE. Each job owns one slot for the stream's life.
 *
 * A stream lives on the event loop thread. Its owner (a connection) calls
 * stream_close() when the stream finished or the client went away; the
 * stream frees itself once no worker and no socket buffer refers to it.
 */
#ifndef PRESTO_STREAM_H
#define PRESTO_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "pipeline.h"
#include "proto.h"
#include "ring.h"
#include "stats.h"
#include "workers.h"

struct bufferevent;
struct event_base;
struct readahead;
struct stream;

struct stream_env {
    struct event_base *base;
    struct workers *workers;
    struct pipeline_env pipe;
    struct stats_thread *stats; /* the event loop thread's block */
    uint64_t *live_streams;      /* gauge, event loop thread only */
    uint64_t *buffer_bytes;      /* gauge of the streams' batch buffers, likewise */
    uint32_t release_timeout;    /* s, see stream_release */
    uint64_t *live_rings, *ring_bytes; /* gauges of the shared-memory rings */
    struct readahead *readahead; /* NULL: workers read every batch themselves */
};

/* Called (once) when the stream has sent END or an ERROR. */
typedef void (*stream_finished_fn)(struct stream *s, void *owner);

/* Plans the epoch and sends OPENED. On a bad request returns a negative
 * PROTO_E_* code with a message in err, and sends nothing. spare (may be
 * NULL) is the ring the connection kept from its previous stream: a shared
 * memory stream of the same geometry takes it over (the client has it
 * mapped already), any other stream frees it. */
int stream_open(struct stream **out, const struct stream_env *env, struct dataset *ds,
                const struct proto_open *req, uint32_t prefetch, uint32_t id,
                uint32_t req_id, struct bufferevent *bev, struct ring *spare,
                stream_finished_fn finished, void *owner, char *err, size_t errlen);
/* A shared-memory stream that sent END gives its ring to the connection
 * for the next stream (1; moved into *out, which must be empty), from the
 * finished callback before stream_close; 0 when it has none to give
 * (socket, failed, dropped). The client reuses it only once it is done with
 * every batch of this stream: it opens the next stream after closing this
 * one. */
int stream_take_ring(struct stream *s, struct ring *out);
/* Frees a ring taken with stream_take_ring (nothing when r->fd < 0). */
void stream_ring_free(const struct stream_env *env, struct ring *r);
uint32_t stream_id(const struct stream *s);
/* Shared memory: the client is done with a slot it was sent; flags are the
 * RELEASE's (PROTO_RELEASE_COPIED: counted, and logged once per stream). A
 * slot it does not hold is refused (-PROTO_E_INVAL, message in err). A stream whose
 * client holds slots and releases none for release_timeout seconds while
 * the ring is full fails with PROTO_E_LIMIT and says so in stream_dropped:
 * the owner then drops the connection. */
int stream_release(struct stream *s, uint32_t slot, uint32_t flags, char *err,
                   size_t errlen);
int stream_dropped(const struct stream *s);
/* Stops producing, detaches from the connection; frees when idle. */
void stream_close(struct stream *s);

#endif
