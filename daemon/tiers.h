/*
 * The cache tiers, together: where a materialized sample (the output of a
 * dataset's offline steps) is kept and found. One module owns the policy
 * across the tiers; the tiers themselves stay simple stores:
 *
 *   memory  cache.h: a byte budget never exceeded, a fixed admitted subset
 *           per dataset, entries never evicted;
 *   disk    store.h: append-only segments of checksummed records, its index
 *           rebuilt at open (recovery), compacted when over budget;
 *   (cluster, issue 19: memcached between the disk tier and the source,
 *           looked up after the disk and written after it: see the places
 *           marked "cluster" in tiers.c)
 *   source  the sample's file, read and run through the offline steps by
 *           the pipeline, then put here (tiers_put) and admitted to memory.
 *
 * What the tiers decide:
 *   - lookup (tiers_locate): memory, then disk, else the source; for a
 *     warm-up, what to skip (on disk already and memory will not take it);
 *   - the disk read path, in one place: a record found (pinned) becomes one
 *     read for the I/O rings (tiers_read_req: O_DIRECT geometry when the
 *     store reads with it), then is verified and decoded where it was read
 *     (tiers_decode), and a bad one is counted and logged for the caller to
 *     recompute;
 *   - admission to memory (tiers_admit) and puts to disk (tiers_put), which
 *     keep an in-memory view of which samples the disk holds under the
 *     strategy in force, and ask for a compaction when the disk is full;
 *   - recovery and the disk scan at start (tiers_create), compaction at
 *     start and on demand (on the worker pool, tiers_attach);
 *   - per-dataset shares and counters, and the tiers' stats.
 *
 * Keys. The memory tier keys an entry by (tiers id of the dataset, sample
 * id) and checks the strategy's fingerprint; the disk tier keys a record by
 * (dataset name hash, path hash, fingerprint, source size and mtime): a
 * changed source or changed offline steps never match again.
 *
 * Threads. tiers_begin and everything taking a struct tiers_ctx run on any
 * thread (workers; tiers_locate and tiers_read_req also on the event loop
 * for batches read ahead); `thread` indexes the caller's per-thread
 * counters (a worker's index; the event loop counts nothing). Changing the
 * datasets, the budget or dropping the memory tier happens on the event
 * loop with the workers paused (workers_pause), as the reload does.
 *
 * Lock order: a tiers call may take the store's locks (store.h), and the
 * memory tier's leaf locks (cache.h); tiers.c's own views_lock (the disk
 * views of a dataset) is a leaf taken with none of those held.
 */
#ifndef PRESTO_TIERS_H
#define PRESTO_TIERS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"
#include "dataset.h"
#include "img.h"
#include "store.h"

struct io_req;
struct tiers;
struct tiers_ds;
struct tiers_view;
struct workers;

#define TIERS_COMPACT_INTERVAL_S 30

struct tiers_config {
    uint64_t memory;       /* cache.memory, bytes */
    const char *dir;       /* cache.dir */
    uint64_t disk;         /* cache.disk, bytes; 0: no disk tier */
    uint64_t segment_size; /* cache.segment_size (0: the store's default) */
    int direct_io;         /* cache.direct_io */
    unsigned threads;      /* the worker threads that count through it */
};

/* The memory tier for datasets ds[0..n) (their tiers ids become 0..n-1)
 * and, when cfg->disk, the disk tier: opened (its index recovered),
 * compacted of what no dataset wants any more and scanned for what it holds
 * of each dataset. A disk tier that cannot be opened is logged and left
 * out (tiers_stats says why). Returns 0 or -ENOMEM. */
int tiers_create(struct tiers **out, const struct tiers_config *cfg, struct dataset **ds,
                 uint32_t n);
/* A profile's trial tiers for one dataset: a memory tier of `memory` bytes
 * and, when dir is not NULL, a disk tier there without budget. Returns 0,
 * or -errno with a message in err. */
int tiers_create_trial(struct tiers **out, uint64_t memory, const char *dir,
                       uint64_t segment_size, struct dataset *ds, char *err, size_t errlen);
/* Compaction on demand runs on this pool from now on. */
void tiers_attach(struct tiers *t, struct workers *workers);
/* After workers_destroy (which cancels a queued compaction). NULL is fine. */
void tiers_destroy(struct tiers *t);

/* ---- the datasets served (event loop) ---- */

/* The disk tier's view of ds under its strategy in force: which samples
 * it holds a current record of. Any thread (a reload's indexing job);
 * NULL without a disk tier or offline steps; *err -ENOMEM on failure. */
struct tiers_view *tiers_scan(struct tiers *t, struct dataset *ds, int *err);
void tiers_view_free(struct tiers_view *v);
/* A dataset joins (a reload; workers paused): it gets its id (dataset_set_id),
 * a share of the memory tier and its view (taken; may be NULL). 0 or -ENOMEM. */
int tiers_add_dataset(struct tiers *t, struct dataset *ds, struct tiers_view *view);
/* A dataset no longer served (workers paused): its memory index goes (its
 * entries stay allocated until tiers_drop_memory). */
void tiers_retire_dataset(struct tiers *t, struct dataset *ds);
/* ds is about to be freed (nothing uses it any more): its state goes. */
void tiers_forget(struct tiers *t, struct dataset *ds);
/* The datasets served: compaction keeps their current records (workers
 * paused). */
void tiers_set_served(struct tiers *t, struct dataset **ds, uint32_t n);
/* ds switched strategy (dataset_switch): the disk tier is scanned for the
 * new one; batches of the old one go on with what they pinned. 0 or -ENOMEM
 * (then the disk tier is not used for ds: memory only). */
int tiers_strategy_switched(struct tiers *t, struct dataset *ds);
/* cache.memory from now on (workers paused); lowering it frees nothing. */
void tiers_set_memory_budget(struct tiers *t, uint64_t budget);
/* Empties the memory tier (workers paused): what went into *entries, *bytes. */
void tiers_drop_memory(struct tiers *t, uint64_t *entries, uint64_t *bytes);
/* Trials: the memory tier takes and finds nothing while off. */
void tiers_memory_off(struct tiers *t, int off);
/* 1 when the memory tier holds sample id of ds under st. */
int tiers_in_memory(struct tiers *t, struct dataset *ds, const struct strategy *st,
                    uint32_t id);
/* 1 when the disk tier holds a current record of sample id of ds. */
int tiers_on_disk(struct tiers *t, struct dataset *ds, const struct strategy *st,
                  uint32_t id);
/* The disk tier's store (NULL: none), for what only the store knows. */
struct store *tiers_store(struct tiers *t);

/* ---- a sample's way through the tiers (any thread) ---- */

/* One dataset's tiers under one strategy, for one thread: made by
 * tiers_begin for a batch, a chunk or a warm-up job. */
struct tiers_ctx {
    struct tiers *t;
    struct tiers_ds *d;
    struct tiers_view *v; /* NULL: the disk tier holds nothing of st */
    struct dataset *ds;
    const struct strategy *st;
    unsigned thread;
};
void tiers_begin(struct tiers *t, struct dataset *ds, const struct strategy *st,
                 unsigned thread, struct tiers_ctx *x);

enum tiers_where {
    TIERS_MEMORY, /* a memory entry: item.entry */
    TIERS_DISK,   /* a disk record, pinned: read item.len bytes (tiers_read_req) */
    TIERS_SOURCE, /* in no tier: from the source, then tiers_put */
    TIERS_SKIP,   /* warm-up: nothing to do (item.len: its bytes) */
};

struct tiers_item {
    const struct cache_entry *entry; /* TIERS_MEMORY */
    struct store_loc loc;            /* TIERS_DISK: pinned until tiers_unpin */
    size_t len;                      /* TIERS_DISK: bytes to read; TIERS_SKIP: its size */
    size_t align;                    /* TIERS_DISK: the read buffer's alignment */
    uint32_t lead;                   /* TIERS_DISK: where the record starts in them */
    size_t rec_len;                  /* TIERS_DISK: the record's bytes */
    uint8_t pinned;
};

/* Where sample id is. warm: for a warm-up, which also stores in the disk
 * tier what only memory has, and skips what is on disk already when memory
 * will not take it (and, without a disk tier, what memory will not take). */
enum tiers_where tiers_locate(const struct tiers_ctx *x, uint32_t id, int warm,
                              struct tiers_item *it);
/* The memory entry of sample id, or NULL (a chunk read ahead checks its
 * entries are still there). */
const struct cache_entry *tiers_memory_entry(const struct tiers_ctx *x, uint32_t id);
/* Lets go of a TIERS_DISK item's record once it is read (or not needed). */
void tiers_unpin(const struct tiers_ctx *x, struct tiers_item *it);
/* The read of a TIERS_DISK item into buf (aligned to it->align, it->len
 * bytes): the caller sets on_done and arg and submits q to an I/O ring. */
void tiers_read_req(const struct tiers_item *it, uint8_t *buf, struct io_req *q);
/* The record of sample id read into buf (the read's result res): verified
 * (checksums, key) and decoded; *out is a view of it inside buf (raw) or of
 * scratch (zstd), valid as long as they are. `count`: a stream's read (the
 * disk tier's hits, misses). Returns 0, or -EBADMSG / the read's -errno
 * for a record that cannot be used (counted, logged): recompute it. */
int tiers_decode(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                 ssize_t res, const uint8_t *buf, struct img *scratch, struct img *out,
                 int count);
/* A stream's sample that came from the source: a miss of the disk tier
 * (when it could have held it). */
void tiers_count_source(const struct tiers_ctx *x);
/* A stream's sample looked up in memory: hit or miss. */
void tiers_count_lookup(const struct tiers_ctx *x, int hit);
/* im, admitted to memory if the policy takes it: then the entry's view
 * (in *view), else im. */
const struct img *tiers_admit(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                              struct img *view);
/* Stores a materialized sample in the disk tier under the key of its
 * source as read (f): when that is no longer the indexed file, nobody looks
 * the record up, and compaction reclaims it after the next restart. */
void tiers_put(const struct tiers_ctx *x, uint32_t id, const struct img *im,
               const struct source_file *f);
/* A view of a memory entry (data not owned). */
void tiers_entry_img(const struct cache_entry *e, struct img *im);

/* ---- stats ---- */

struct tiers_stats {
    struct cache_stats mem;
    struct store_stats disk;     /* zeroed without a disk tier */
    int disk_on;
    const char *dir;
    const char *off_reason;      /* why there is no disk tier ("" when there is) */
    uint64_t hits, misses;       /* memory lookups of streams */
    uint64_t disk_hits, disk_misses, disk_bytes_read; /* of the datasets served */
    uint64_t compactions_on_demand;
};

struct tiers_dataset_stats {
    struct cache_dataset_stats mem;
    uint64_t hits, misses;
    uint64_t disk_hits, disk_misses, disk_bad, disk_bytes_read, disk_puts, disk_put_errors;
    uint64_t disk_entries, disk_bytes_raw, disk_bytes_stored; /* current records */
    int disk_degraded;
};

void tiers_get_stats(struct tiers *t, struct tiers_stats *out);
void tiers_get_dataset_stats(struct tiers *t, struct dataset *ds,
                             struct tiers_dataset_stats *out);

#endif
