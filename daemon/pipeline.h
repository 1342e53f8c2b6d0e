/*
 * The pipeline of a batch of samples, on a worker thread, through the
 * cache tiers:
 *
 *   1. memory: cache_get for every sample;
 *   2. disk: for the memory misses the disk tier holds, store_lookup; then
 *      their records and the source files of the true misses are queued,
 *      in epoch order, on the worker's own I/O ring (io.h), which keeps
 *      io.depth of them in flight and issues the next as soon as one
 *      completes. A source file is one request, read whole into room for
 *      its size at indexing: open, stat, read and close chained in the
 *      kernel where it allows, so no worker waits on an open. The reads of
 *      the next chunk go out while this chunk's samples run, so decoding
 *      waits only for reads that could not have been issued earlier;
 *   3. in epoch order, per sample: a disk record is checked and decoded
 *      (store_decode; a bad one is counted, recomputed from the source and
 *      stored again) and admitted to memory if the policy says so; a source
 *      file goes through the offline steps, is stored in the disk tier
 *      (the key carries the size and mtime of the file as read, so a file
 *      changed after indexing is never stored under a stale key) and
 *      admitted to memory; then the online steps write into the batch.
 *
 * A batch is taken in chunks bounded in samples and in bytes read at once
 * (PIPELINE_CHUNK_SAMPLES, PIPELINE_CHUNK_BYTES), two at a time (the one
 * running and the next, being read), which bounds a worker's buffers. A
 * file that grew past its indexed size is read again whole, on the worker.
 * Bad samples are reported in order, one callback each, so the caller
 * decides (skip or fail) exactly as with one sample at a time.
 *
 * The disk tier is optional (env->store NULL), and degrades to none when
 * its writes fail (the store says so in the log, once). Puts refused for
 * the disk budget ask for a compaction, at most one every
 * PIPELINE_COMPACT_INTERVAL_S, run as a job on the worker pool.
 */
#ifndef PRESTO_PIPELINE_H
#define PRESTO_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "dataset.h"
#include "io.h"
#include "store.h"
#include "workers.h"

#define PIPELINE_CHUNK_SAMPLES 256u
#define PIPELINE_CHUNK_BYTES (16u << 20)
#define PIPELINE_COMPACT_INTERVAL_S 30

struct pipeline_compactor;

struct pipeline_env {
    struct cache *cache;
    struct store *store; /* NULL: no disk tier */
    uint64_t max_file_size;
    struct pipeline_compactor *compactor; /* NULL: no compaction on demand */
};

/* Told about each bad sample, in order: i is its index in the batch, err
 * why (-EFBIG, -E2BIG: over a limit; -EBADMSG: a step failed on it; else
 * the read's -errno) and msg says so. Returns nonzero to stop the batch
 * there. */
typedef int (*pipeline_bad_fn)(void *arg, uint32_t i, int err, const char *msg);

struct pipeline_ahead;

/* Runs samples ids[0..n) of ds through every step. The good ones are
 * written in order, compacted: the k-th good one to dst + k *
 * ds->sample_bytes, its label to labels[k]. Each bad one is counted, logged
 * (once per sample) and passed to bad(). pre (may be NULL) is the batch's
 * first chunk read ahead (pipeline_ahead_start, its reads done): used when
 * the dataset's strategy is still the one it was gathered under and its
 * memory entries are still there, and dropped either way. Returns the
 * number of good samples written. */
uint32_t pipeline_batch(const struct pipeline_env *env, struct dataset *ds,
                        const uint32_t *ids, uint32_t n, uint64_t seed, uint64_t epoch,
                        uint8_t *dst, int64_t *labels, struct worker_ctx *ctx,
                        struct pipeline_ahead *pre, pipeline_bad_fn bad, void *arg);

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
 * ahead are held to a byte budget shared by every stream. */
struct pipeline_ahead_budget {
    uint64_t limit;
    uint64_t used; /* atomic: arenas of chunks read ahead, until dropped */
};

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
 * called; 0 when there is nothing to read (a is not armed);
 * -EBUSY (the strategy is changing), -ENOBUFS (over the budget) or
 * -ENOMEM when it did not read ahead (a is not armed): the worker reads. */
int pipeline_ahead_start(const struct pipeline_env *env, struct dataset *ds,
                         const uint32_t *ids, uint32_t n, struct pipeline_ahead *a,
                         struct io_ring *io, struct pipeline_ahead_budget *budget,
                         void (*ready)(void *arg), void *arg);
/* Lets go of an armed chunk whose reads are done (pins, arena, budget); it
 * is no longer armed. NULL is fine. Any thread. */
void pipeline_ahead_drop(const struct pipeline_env *env, struct pipeline_ahead *a);
/* Drops and frees. NULL is fine. */
void pipeline_ahead_free(const struct pipeline_env *env, struct pipeline_ahead *a);

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
void pipeline_warm(const struct pipeline_env *env, struct dataset *ds, uint32_t first,
                   uint32_t n, struct worker_ctx *ctx, struct pipeline_warm_result *res);

/* ---- the disk tier around the pipeline ---- */

/* store_live_fn over the served datasets (arg: struct pipeline_datasets):
 * a key is live when it is the current key of one of their samples. */
struct pipeline_datasets {
    struct dataset **ds;
    uint32_t n;
};
int pipeline_key_live(const struct store_key *key, void *arg);

/* Marks which samples of ds the disk tier holds under their current key
 * (ds->on_disk) and counts their entries and bytes. Once at start-up,
 * before serving. Returns 0 or -ENOMEM. */
int pipeline_disk_scan(struct store *st, struct dataset *ds);

/* Compaction on demand, run on the worker pool. */
int pipeline_compactor_create(struct pipeline_compactor **out, struct store *st,
                              struct workers *workers, const struct pipeline_datasets *dss);
/* The datasets served changed (a reload): compactions keep their records
 * from now on. The caller has paused the workers (workers_pause). */
void pipeline_compactor_set_datasets(struct pipeline_compactor *pc,
                                     const struct pipeline_datasets *dss);
/* After workers_destroy (which cancels a queued run). NULL is fine. */
void pipeline_compactor_destroy(struct pipeline_compactor *pc);
/* Queues a compaction unless one is queued or running, or one started
 * less than PIPELINE_COMPACT_INTERVAL_S ago. Any thread. */
void pipeline_compact_request(struct pipeline_compactor *pc);
/* Compactions run on demand so far. */
uint64_t pipeline_compactor_runs(const struct pipeline_compactor *pc);

#endif
