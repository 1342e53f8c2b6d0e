/*
 * The cache tiers, together: where a materialized sample (the output of a
 * dataset's offline steps) is kept and found. One module owns the policy
 * across the tiers; the tiers themselves stay simple stores:
 *
 *   memory  cache.h: a byte budget never exceeded, a fixed admitted subset
 *           per dataset, entries never evicted;
 *   disk    store.h: append-only segments of checksummed records, its index
 *           rebuilt at open (recovery), compacted when over budget;
 *   cluster cluster.h: records shared by the nodes through memcached
 *           (cluster.memcached), looked up after the disk tier for a
 *           chunk's misses in one batch (tiers_cluster_lookup, on a
 *           worker), written after the disk tier (tiers_put, put-once);
 *           a record found there is also stored in the node's disk tier
 *           and admitted to memory by the same policy as a computed one;
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
 * views of a dataset) is a leaf taken with none of those held. Compaction
 * asks whether keys are live with the store's compact_lock held, and that
 * takes a dataset's strategy lock (a leaf): compact_lock -> strategy lock.
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

struct cluster_config;
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
    int direct_io;         /* cache.direct_io: 0 buffered, 1 O_DIRECT, 2 auto: O_DIRECT
                              where disk is larger than the memory available (the
                              page cache could not hold the tier: reading it
                              through it costs a copy and churns it for nothing) */
    unsigned threads;      /* the worker threads that count through it */
    const struct cluster_config *cluster; /* cluster.*; NULL or no servers: none */
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
    uint32_t id;          /* the dataset's tiers id */
    uint64_t name_hash;   /* its name's, for the disk tier's keys */
};
void tiers_begin(struct tiers *t, struct dataset *ds, const struct strategy *st,
                 unsigned thread, struct tiers_ctx *x);

enum tiers_where {
    TIERS_MEMORY, /* a memory entry: item.entry */
    TIERS_DISK,   /* a disk record, pinned: read item.len bytes (tiers_read_req) */
    TIERS_SOURCE, /* in no tier: from the source, then tiers_put */
    TIERS_SKIP,   /* warm-up: nothing to do (item.len: its bytes) */
    TIERS_CLUSTER, /* a cluster record: item.rec, item.rec_len (tiers_cluster_lookup) */
};

struct tiers_item {
    const struct cache_entry *entry; /* TIERS_MEMORY */
    struct store_loc loc;            /* TIERS_DISK: pinned until tiers_unpin */
    size_t len;                      /* TIERS_DISK: bytes to read; TIERS_SKIP: its size */
    size_t align;                    /* TIERS_DISK: the read buffer's alignment */
    uint32_t lead;                   /* TIERS_DISK: where the record starts in them */
    size_t rec_len;                  /* TIERS_DISK, TIERS_CLUSTER: the record's bytes */
    const uint8_t *rec;              /* TIERS_CLUSTER: the verified record, valid
                                        until the thread's next lookup */
    uint8_t pinned;
};

/* Where sample id is; for TIERS_MEMORY *view is the entry's pixels (not
 * owned). warm: for a warm-up, which also stores in the disk tier what only
 * memory has, and skips what is on disk already when memory will not take
 * it (and, without a disk tier, what memory will not take). */
enum tiers_where tiers_locate(const struct tiers_ctx *x, uint32_t id, int warm,
                              struct tiers_item *it, struct img *view);
/* A TIERS_MEMORY item of sample id found earlier (a chunk read ahead) still
 * there (a DROP_CACHE empties the memory tier): 1, *view refreshed, or 0. */
int tiers_still_in_memory(const struct tiers_ctx *x, uint32_t id, struct tiers_item *it,
                          struct img *view);
/* Lets go of a TIERS_DISK item's record once it is read (or not needed). */
void tiers_unpin(const struct tiers_ctx *x, struct tiers_item *it);
/* The read of a TIERS_DISK item into buf (aligned to it->align, it->len
 * bytes): the caller sets on_done and arg and submits q to an I/O ring. */
void tiers_read_req(const struct tiers_item *it, uint8_t *buf, struct io_req *q);
/* The record of sample id read into buf (the read's result res): verified
 * (checksums, key), decoded into *decoded (a view inside buf when raw, of
 * scratch when zstd) and admitted to memory if the policy takes it; *out
 * is the memory entry's view (in *view) or *decoded. `count`: a stream's
 * read (the disk tier's hits, misses). Returns 0, or -EBADMSG / the read's
 * -errno for a record that cannot be used (counted, logged): recompute it. */
int tiers_decode(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                 ssize_t res, const uint8_t *buf, struct img *scratch, struct img *decoded,
                 struct img *view, const struct img **out, int count);
/* tiers_decode in two halves, for a raw record whose payload the caller
 * checks while it copies it out (one pass over its bytes): the read's
 * result, the header's checks and the key here; *decoded is the payload
 * inside buf, NOT yet to be trusted, and *crc the CRC32C (hash_crc32c)
 * it must have. Returns 0, -EAGAIN for a compressed record (nothing
 * counted: use tiers_decode), or as tiers_decode's failures (counted,
 * logged: recompute it). */
int tiers_decode_unchecked(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                           ssize_t res, const uint8_t *buf, struct img *decoded, uint32_t *crc,
                           int count);
/* The second half: good when the caller's CRC32C matched *crc. Then as
 * tiers_decode's success (counted, admitted: *out), else -EBADMSG as its
 * corrupt record (counted, logged): what was copied out of it must not be
 * used; recompute it. */
int tiers_decode_checked(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                         int good, const struct img *decoded, struct img *view,
                         const struct img **out, int count);
/* The most samples tiers_cluster_lookup looks up at once (a chunk's). */
#define TIERS_CLUSTER_BATCH 256u
/* 1 when the tiers have a cluster tier and x's samples may be in it. */
int tiers_cluster_on(const struct tiers_ctx *x);
/* Worker only (x->thread a worker's): looks the samples ids[0..n) that
 * tiers_locate sent to the source (its[k]) up in the cluster tier, in one
 * batch (cluster_get: one multi-get per server, all sent before any answer
 * is read). A hit becomes TIERS_CLUSTER: its[k]->rec and rec_len set.
 * Every failure is a miss; past TIERS_CLUSTER_BATCH samples, the rest are
 * not looked up. Returns the number of hits. */
unsigned tiers_cluster_lookup(const struct tiers_ctx *x, const uint32_t *ids,
                              struct tiers_item *const *its, unsigned n);
/* A cluster record of sample id (copied to buf, rec_len bytes) decoded
 * into *decoded (a view inside buf when raw, of scratch when zstd), stored
 * in the disk tier when it takes puts, admitted to memory if the policy
 * takes it; *out as tiers_decode's. Returns 0, or -EBADMSG / -ENOMEM: then
 * compute it from the source. */
int tiers_cluster_decode(const struct tiers_ctx *x, uint32_t id, const struct tiers_item *it,
                         const uint8_t *buf, struct img *scratch, struct img *decoded,
                         struct img *view, const struct img **out);
/* A stream's sample, found where: a memory hit or miss, and for one from
 * the source a miss of the disk tier too (when it could have held it; disk
 * records count theirs in tiers_decode). */
void tiers_count(const struct tiers_ctx *x, enum tiers_where where);
/* im, admitted to memory if the policy takes it: then the entry's view
 * (in *view), else im. */
const struct img *tiers_admit(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                              struct img *view);
/* A sample just computed from its source (read as f): stored in the disk
 * tier under the key of the file as read (when that is no longer the
 * indexed file, nobody looks the record up, and compaction reclaims it
 * after the next restart) and in the cluster tier (put-once: a record
 * another node put first stays; x->thread a worker's), then admitted to
 * memory if the policy takes it. Returns the memory entry's
 * view (in *view) or im. */
const struct img *tiers_put(const struct tiers_ctx *x, uint32_t id, const struct img *im,
                            const struct source_file *f, struct img *view);

/* 1 when tiers_put of sample id's offline output would be refused by every
 * tier (no disk or cluster tier takes puts and memory would not admit it
 * now, at its fixed size or else the dataset's learned entry size): the
 * caller may then skip making it whole (the cold path's region decode).
 * 0 when it would be stored, or when nothing is cached (split: auto). */
int tiers_refuses(const struct tiers_ctx *x, uint32_t id);

/* ---- stats ---- */

/* The tiers' sections of the stats document. The memory tier is "cache"
 * and the disk tier "disk" (metrics presto_tier_* labelled tier="memory",
 * tier="disk"); each dataset's are "memory" and "disk" in its entry
 * (presto_dataset_tier_*), after its own lookups. The families both tiers
 * have (entries, hits, misses, hit_rate) share their help. */
#define TIERS_HELP_ENTRIES "entries the tier holds"
#define TIERS_HELP_HITS "samples of streams found in the tier"
#define TIERS_HELP_MISSES "samples of streams looked for in the tier and not found"
#define TIERS_HELP_HIT_RATE "hits over hits and misses"

/* A tier's lookups by streams: in every section of a tier but the memory
 * tier's totals (whose hit rate comes last, where it always was). */
#define TIERS_LOOKUP_STATS(X)                                                         \
    X(hits, COUNTER, "samples", TIERS_HELP_HITS)                                      \
    X(misses, COUNTER, "samples", TIERS_HELP_MISSES)                                  \
    X(hit_rate, GAUGE, "", TIERS_HELP_HIT_RATE)

#define TIERS_MEMORY_STATS(X)                                                         \
    X(memory_budget, GAUGE, "bytes", "cache.memory, the memory tier's budget")        \
    X(memory_bytes, GAUGE, "bytes", "bytes the memory tier takes: entries and index") \
    X(entries, GAUGE, "entries", TIERS_HELP_ENTRIES)                                  \
    X(hits, COUNTER, "samples", TIERS_HELP_HITS)                                      \
    X(misses, COUNTER, "samples", TIERS_HELP_MISSES)                                  \
    X(rejected, COUNTER, "samples", "puts refused: no room left in the budget")       \
    X(not_admitted, COUNTER, "samples", "puts refused: outside the dataset's admitted subset") \
    X(evictions, COUNTER, "entries", "entries evicted: none ever, the tier never evicts") \
    X(index_bytes, GAUGE, "bytes", "bytes of the memory tier's index (8 a sample)")   \
    X(hit_rate, GAUGE, "", TIERS_HELP_HIT_RATE)

/* The disk section's fields the tiers know; the store's follow (store.h). */
#define TIERS_DISK_STATS(X)                                                           \
    X(enabled, GAUGE, "", "1 when there is a disk tier")                               \
    X(dir, INFO, "", "cache.dir, the disk tier's directory")                          \
    X(off_reason, INFO, "", "why there is no disk tier")                              \
    TIERS_LOOKUP_STATS(X)                                                             \
    X(bytes_read, COUNTER, "bytes", "record bytes read from the tier")                \
    X(compactions_on_demand, COUNTER, "runs", "compactions run because puts hit the budget")

#define TIERS_DATASET_STATS(X)                                                        \
    X(hits, COUNTER, "samples", "the dataset's samples streams found in memory")       \
    X(misses, COUNTER, "samples", "the dataset's samples streams did not find in memory") \
    X(hit_rate, GAUGE, "", TIERS_HELP_HIT_RATE)

#define TIERS_DATASET_MEMORY_STATS(X)                                                 \
    X(entries, GAUGE, "entries", TIERS_HELP_ENTRIES)                                  \
    X(bytes, GAUGE, "bytes", "bytes of the dataset's entries")                        \
    TIERS_LOOKUP_STATS(X)                                                             \
    X(admit_fraction, GAUGE, "", "the share of the dataset the memory tier admits")   \
    X(not_admitted, COUNTER, "samples", "puts refused: outside the admitted subset")   \
    X(rejected, COUNTER, "samples", "puts refused: no room left in the budget")

#define TIERS_DATASET_DISK_STATS(X)                                                   \
    X(encoding, INFO, "", "the disk tier's encoding of the dataset's records")        \
    X(degraded, GAUGE, "", "1 when the disk tier takes no more puts")                 \
    X(entries, GAUGE, "entries", TIERS_HELP_ENTRIES)                                  \
    X(bytes_raw, GAUGE, "bytes", "decoded bytes of the dataset's current records")    \
    X(bytes_stored, GAUGE, "bytes", "stored bytes of the dataset's current records")  \
    X(compression_ratio, GAUGE, "", "bytes_raw over bytes_stored")                    \
    TIERS_LOOKUP_STATS(X)                                                             \
    X(bytes_read, COUNTER, "bytes", "record bytes read from the tier")                \
    X(bad_records, COUNTER, "records", "records that could not be used: recomputed")  \
    X(puts, COUNTER, "records", "records written")                                    \
    X(put_errors, COUNTER, "records", "records not written: over the budget or an error")

struct stats_out;
/* The cluster tier's part of a dataset's entry ("cluster"). */
#define TIERS_DATASET_CLUSTER_STATS(X)                                                \
    TIERS_LOOKUP_STATS(X)                                                             \
    X(bad_records, COUNTER, "records", "records that passed the cluster's checks but did not decode") \
    X(puts, COUNTER, "records", "records offered to the cluster tier (put-once)")

/* The "cache", "disk" and (with servers) "cluster" sections. */
void tiers_stats(struct tiers *t, struct stats_out *o);
/* A dataset's lookups and its "memory" and "disk" sections, in its entry. */
void tiers_dataset_stats(struct tiers *t, struct dataset *ds, struct stats_out *o);

/* What the tiers take of the process's memory. */
struct tiers_memory {
    uint64_t budget;      /* the memory tier's */
    uint64_t bytes;       /* accounted to it: entries and index */
    uint64_t index_bytes; /* of that, the index */
    uint64_t store_index; /* the disk tier's index */
};
void tiers_memory_use(struct tiers *t, struct tiers_memory *out);

#endif
