/*
 * The pipeline of a batch of samples, on a worker thread, through the
 * cache tiers (tiers.h):
 *
 *   1. for each sample, where it is: a memory entry, a disk record, or in
 *      no tier (tiers_locate); then the disk records' and the source files'
 *      reads are queued, in epoch order, on the worker's own I/O ring
 *      (io.h), which keeps io.depth of them in flight and issues the next
 *      as soon as one completes. A source file is one request, read whole
 *      into room for its size at indexing: open, stat, read and close
 *      chained in the kernel where it allows, so no worker waits on an open.
 *      The reads of the next chunk go out while this chunk's samples run,
 *      so decoding waits only for reads that could not have been issued
 *      earlier;
 *   2. in epoch order, per sample: a disk record is checked and decoded
 *      (tiers_decode; a bad one is recomputed from the source and stored
 *      again) and admitted to memory if the policy says so; a source file
 *      goes through the offline steps, is put in the disk tier (under the
 *      size and mtime of the file as read, so a file changed after indexing
 *      is never stored under a stale key) and admitted to memory; then the
 *      online steps write into the batch.
 *
 * A batch pins the dataset's strategy in force (dataset_strategy) for its
 * whole run. It is taken in chunks bounded in samples and in bytes read at
 * once (PIPELINE_CHUNK_SAMPLES, PIPELINE_CHUNK_BYTES), two at a time (the
 * one running and the next, being read), which bounds a worker's buffers. A
 * file that grew past its indexed size is read again whole, on the worker.
 * Bad samples are reported in order, one callback each, so the caller
 * decides (skip or fail) exactly as with one sample at a time.
 *
 * A struct pipeline is the daemon's (or a profile trial's): the tiers it
 * reads and fills, the file size limit, and its own counters (bad samples
 * by kind, step calls and time), kept per worker thread.
 */
#ifndef PRESTO_PIPELINE_H
#define PRESTO_PIPELINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "io.h"
#include "step.h"
#include "tiers.h"
#include "workers.h"

#define PIPELINE_CHUNK_SAMPLES 256u
#define PIPELINE_CHUNK_BYTES (16u << 20)

struct pipeline;

/* threads: the worker threads that run it (their ctx->index). 0 or -ENOMEM. */
int pipeline_create(struct pipeline **out, struct tiers *tiers, uint64_t max_file_size,
                    unsigned threads);
/* NULL is fine. */
void pipeline_destroy(struct pipeline *p);
struct tiers *pipeline_tiers(const struct pipeline *p);
/* limits.file_size from now on (workers paused: a reload). */
void pipeline_set_max_file_size(struct pipeline *p, uint64_t bytes);

/* Told about each bad sample, in order: i is its index in the batch, err
 * why (-EFBIG, -E2BIG: over a limit; -EBADMSG: a step failed on it; else
 * the read's -errno) and msg says so. Returns nonzero to stop the batch
 * there. */
typedef int (*pipeline_bad_fn)(void *arg, uint32_t i, int err, const char *msg);

struct pipeline_ahead;

/* Runs samples ids[0..n) of ds through every step. The good ones are
 * written in order, compacted: the k-th good one to dst + k * (the
 * output's bytes), its label to labels[k]. Each bad one is counted, logged
 * (once per sample) and passed to bad(). pre (may be NULL) is the batch's
 * first chunk read ahead (pipeline_ahead_start, its reads done): used when
 * it was gathered under the strategy this batch runs and its memory entries
 * are still there, and dropped either way. Returns the number of good
 * samples written. */
uint32_t pipeline_batch(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                        uint32_t n, uint64_t seed, uint64_t epoch, uint8_t *dst,
                        int64_t *labels, struct worker_ctx *ctx, struct pipeline_ahead *pre,
                        pipeline_bad_fn bad, void *arg);
/* The same, for a dataset that pads (batch: {pad: longest}): the k-th good
 * sample goes to dst + k * (the output's bytes) as [C, (F,) max_length],
 * its rows zero-filled after its length (cropped to max_length), which
 * goes to lengths[k]. lengths may be NULL. */
uint32_t pipeline_batch_padded(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                               uint32_t n, uint64_t seed, uint64_t epoch, uint8_t *dst,
                               int64_t *labels, int64_t *lengths, struct worker_ctx *ctx,
                               struct pipeline_ahead *pre, pipeline_bad_fn bad, void *arg);
/* Lays a padded batch out for the client (stream.c, a worker): n samples
 * at data, each [rows, max_length] of elem-byte values, in place as
 * [rows, T] with T the longest of lengths[0..n) (at least 1), the zeros
 * after each length kept. Returns T. */
uint32_t pipeline_pad_relay(uint8_t *data, uint32_t n, size_t rows, uint32_t max_length,
                            size_t elem, const int64_t *lengths);

/* The dataset's batch-level steps (mixup, cutmix; steps/mix.h) on a batch
 * of n good samples at data (the output's shape, float32) whose class
 * indices are labels[0..n): draws the batch's decision from seed
 * (hash_batch_seed), mixes the samples in place, each with the one before
 * it (the first with the last), and writes their n x K float32 soft
 * targets to targets. Returns 0, -ENOMEM (the samples left unmixed, the
 * targets one-hot), or -ERANGE when a label is not below K (its row stays
 * zeros; dataset_open refuses such datasets). */
int pipeline_batch_steps(const struct dataset *ds, uint64_t seed, uint8_t *data, uint32_t n,
                         const int64_t *labels, float *targets);

/* ---- reading batches ahead of their jobs (readahead.h) ----
 *
 * A batch job waits in the worker queue behind the jobs before it; a
 * worker would only then issue its reads, so no more than one batch per
 * worker would ever be read at once. Instead, as a stream submits a job,
 * the event loop gathers the batch's first chunk (memory hits, disk
 * records, source files) and queues its reads on its own ring (IO_NO_SYNC),
 * behind those of the batches before it: every prefetched batch's reads are
 * in flight together. Once they are done the job goes to the workers,
 * whose decoding then never waits for them. Reads the event loop may not
 * do (IO_DEFERRED) are left to the worker's ring. The arenas of chunks read
 * ahead are held to a byte budget shared by every stream. An arena let go
 * of is kept (within the budget, PIPELINE_AHEAD_KEEP of them) for the next
 * chunks: reading each batch into freshly mapped pages cost the event loop
 * more (faulting, zeroing and unmapping them) than the reads themselves. */
#define PIPELINE_AHEAD_KEEP 8u
struct pipeline_ahead_budget {
    uint64_t limit;
    uint64_t used; /* atomic: arenas of chunks read ahead, until dropped,
                      and those kept */
    uint64_t kept; /* atomic: of used, the arenas kept */
    pthread_mutex_t lock; /* a leaf: what follows, and changes of used */
    unsigned nkept;
    void *kept_arena[PIPELINE_AHEAD_KEEP];
    size_t kept_cap[PIPELINE_AHEAD_KEEP];
    /* The event loop's ring (pipeline_ahead_budget_register), or NULL: a
     * new arena is registered with it (io_ring_buf_register), its pages
     * pinned once for all its O_DIRECT reads, and only the loop may
     * unregister it, before it is freed: one let go of on a worker and not
     * kept waits on the dead list (linked through the arenas, counted in
     * used and kept) for the loop's next ahead_arena_get. */
    struct io_ring *reg;
    void *dead;
};

/* Sets up a budget of limit bytes; _release frees the arenas it kept
 * (nothing may be read ahead under it any more). */
void pipeline_ahead_budget_init(struct pipeline_ahead_budget *b, uint64_t limit);
void pipeline_ahead_budget_release(struct pipeline_ahead_budget *b);
/* The ring the arenas under b are read on (the event loop's, before any
 * read ahead), their buffers registered with it; NULL (before the ring is
 * destroyed) stops that: the arenas registered go with the ring. */
void pipeline_ahead_budget_register(struct pipeline_ahead_budget *b, struct io_ring *io);
/* The bytes of b's arenas: in chunks read ahead now, and kept. */
void pipeline_ahead_budget_use(const struct pipeline_ahead_budget *b, uint64_t *armed,
                               uint64_t *kept);

struct pipeline_ahead *pipeline_ahead_new(void);
/* Bytes a pipeline_ahead takes, its arena aside (for the memory stats). */
size_t pipeline_ahead_size(void);
/* 1 when a holds a gathered chunk (its reads issued). */
int pipeline_ahead_armed(const struct pipeline_ahead *a);
/* Event loop: gathers the first chunk of ids[0..n) into a (not armed) and
 * queues its reads on io, an IO_NO_SYNC ring. Returns 1 when reads are in
 * flight: ready(arg) is called on io's thread once the last is done (not
 * from within this call); 2 when a is armed and its reads all ended within
 * the call (deferred: the ring could not take them), so ready is not
 * called; 0 when there is nothing to read (a is not armed); -ENOBUFS (over
 * the budget), -EDQUOT (its arena would be over room, what its stream's
 * client may be charged: budget.h), -EAGAIN (a disk record read through
 * the page cache: its copy would run on io's thread, so the worker's ring
 * reads it) or -ENOMEM when it did not read ahead (a is not armed): the
 * worker reads. */
int pipeline_ahead_start(struct pipeline *p, struct dataset *ds, const uint32_t *ids,
                         uint32_t n, struct pipeline_ahead *a, struct io_ring *io,
                         struct pipeline_ahead_budget *budget, uint64_t room,
                         void (*ready)(void *arg), void *arg);
/* The bytes of a's arena, while it is armed. */
size_t pipeline_ahead_arena(const struct pipeline_ahead *a);
/* Lets go of an armed chunk whose reads are done (pins, arena, budget, its
 * strategy); it is no longer armed. NULL is fine. Any thread. */
void pipeline_ahead_drop(struct pipeline_ahead *a);
/* Drops and frees. NULL is fine. */
void pipeline_ahead_free(struct pipeline_ahead *a);

struct pipeline_warm_result {
    uint64_t done;     /* samples handled, bad ones included */
    uint64_t bytes;    /* materialized bytes of the good ones */
    uint64_t failed;   /* bad samples */
    uint64_t computed; /* good samples run through the offline steps */
};

/* Materializes samples [first, first + n) of ds into the disk tier (when
 * there is one) and into memory as the policy admits: a sample already
 * on disk is read only when memory will take it, and without a (healthy)
 * disk tier only what memory will take is computed. Adds to *res. */
void pipeline_warm(struct pipeline *p, struct dataset *ds, uint32_t first, uint32_t n,
                   struct worker_ctx *ctx, struct pipeline_warm_result *res);

/* ---- stats ---- */

/* Bad samples by kind (section "errors"), and each step kind's calls and
 * time (section "steps", one entry per step: presto_step_*{step="NAME"}),
 * kept per worker thread. */
#define PIPELINE_ERRORS(X)                                                  \
    X(read, COUNTER, "samples", "source files that could not be read")        \
    X(decode, COUNTER, "samples", "source files that did not decode, or a step failed on") \
    X(too_large, COUNTER, "samples", "source files or images over a limit")

enum pipeline_error {
#define PIPELINE_ERROR_ENUM(name, ...) PIPELINE_ERR_##name,
    PIPELINE_ERRORS(PIPELINE_ERROR_ENUM)
#undef PIPELINE_ERROR_ENUM
    PIPELINE_ERR_MAX
};

/* The decode step's inputs by format (found from their bytes:
 * decode_formats.h), in section "formats": metrics
 * presto_formats_*{format="png"}. */
#define PIPELINE_FORMAT_STATS(X)                                            \
    X(decoded, COUNTER, "files", "files of the format decoded")              \
    X(failed, COUNTER, "files", "files of the format that did not decode: bad samples") \
    X(region, COUNTER, "files", "files decoded only where random_resized_crop cut them (the cold path)") \
    X(bytes, COUNTER, "bytes", "bytes of the format's files decoded")

#define PIPELINE_STEP_STATS(X)                                              \
    X(calls, COUNTER, "calls", "times the step ran")                         \
    X(seconds, COUNTER, "seconds", "time the step took")

struct stats_out;
void pipeline_stats(const struct pipeline *p, struct stats_out *o);

#endif
