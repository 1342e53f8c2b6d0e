/*
 * Datasets: what a configured dataset is, for everything that serves it.
 *
 *   - its index: the samples its source lists (index.h: today an ImageFolder
 *     directory, source_dir.c), each with a label, a path and the identity
 *     the disk tier keys it by (path hash, size and mtime at indexing), and
 *     the class names; fixed once opened;
 *   - its output: the shape every sample leaves the pipeline in; fixed;
 *   - the strategy in force (struct strategy): the split point, the disk
 *     encoding, the fingerprint of the offline steps and the shape of what
 *     they make. An immutable snapshot with a reference count: a batch pins
 *     the one in force when it starts (dataset_strategy) and uses it to its
 *     end, whatever happens meanwhile; split: auto switches by publishing a
 *     new one (dataset_switch), which batches started after take. No lock
 *     is held across a batch;
 *   - reading a sample's bytes from its source (dataset_read, dataset_file_req);
 *   - its counters (dataset_count) and who uses it (dataset_hold).
 *
 * Threads. Everything but the strategy, the per-sample "logged as bad"
 * flags and the counters is fixed once dataset_open returns and may be read
 * from any thread. dataset_strategy and strategy_put may be called from any
 * thread; dataset_switch, dataset_hold/release, dataset_auto and
 * dataset_warm_* only on the event loop thread (dataset_switch also at
 * start-up, before serving).
 */
#ifndef PRESTO_DATASET_H
#define PRESTO_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "img.h"
#include "index.h"
#include "proto.h"

struct dataset;
struct io_req;
struct source;

/* A strategy in force: what runs offline and how it is kept. Immutable;
 * pinned with dataset_strategy, let go with strategy_put. */
struct strategy {
    uint32_t split;       /* steps[0..split) run offline, their output cached */
    int zstd_level;       /* disk tier records: 0 raw, else zstd at this level */
    uint64_t fingerprint; /* of the offline steps and their parameters */
    /* What the offline steps make (the tiers hold it); bytes is 0 when it
     * varies per image or nothing runs offline. */
    uint32_t mat_h, mat_w, mat_c, mat_dtype;
    size_t mat_bytes;
    int caching;          /* 0: nothing is cached (split: auto not chosen yet) */
    uint32_t refs;        /* dataset.c's */
};

/* The whole pipeline's output; h == 0 when it varies per image. */
struct dataset_output {
    uint32_t h, w, c, dtype;
    uint32_t layout; /* enum step_layout (PROTO_LAYOUT_*) of float output */
    size_t bytes;    /* of one sample */
    struct step_type type; /* what the last step gives (step.h's sample model) */
    struct proto_labels labels; /* a batch's label tensor: int64 [n], or float32
                                   [n, K] after mixup/cutmix */
};

/* What the disk tier keys a sample's source by: a change of any of these
 * makes its records stale. */
struct dataset_ident {
    uint64_t path_hash; /* hash_xxh64 of its path relative to the root */
    uint64_t size;      /* bytes */
    int64_t mtime_ns;
};

/* A dataset's entry in the stats document ("datasets": metrics
 * presto_dataset_*{dataset="NAME"}): what it is, then its counters of what
 * happened to its samples (relaxed atomics, any thread: dataset_count). */
#define DATASET_STATS(X)                                                      \
    X(name, LABEL, "", "the dataset's name")                                   \
    X(samples, GAUGE, "samples", "samples indexed")                            \
    X(classes, GAUGE, "classes", "classes indexed")                            \
    X(refused, GAUGE, "entries",                                               \
      "entries refused at indexing: links leaving the root, unsafe tar member names")
#define DATASET_COUNTERS(X)                                                   \
    X(errors, COUNTER, "samples", "bad samples met")                           \
    X(computed, COUNTER, "samples", "samples run through the offline steps")   \
    X(source_reads, COUNTER, "files", "source files read")                     \
    X(source_bytes, COUNTER, "bytes", "bytes of source files read")            \
    X(region_unstored, COUNTER, "samples",                                     \
      "misses no tier would store, decoded online with their crop (a JPEG's box alone)")

enum dataset_counter {
#define DATASET_COUNTER_ENUM(name, ...) DATASET_##name,
    DATASET_COUNTERS(DATASET_COUNTER_ENUM)
#undef DATASET_COUNTER_ENUM
    DATASET_COUNTER_MAX
};

struct stats_out;

/* Indexes cfg->root (cfg must outlive the dataset). Returns 0, or -errno
 * with a message. */
int dataset_open(struct dataset **out, const struct config_dataset *cfg, char *err,
                 size_t errlen);
/* NULL is fine. */
void dataset_free(struct dataset *ds);
/* A dataset of the samples ids[0..n) of ds (sample i of it is ids[i] of
 * ds) under the strategy (split, zstd_level), sharing ds's index, root and
 * config (ds must outlive it), with flags and counters of its own; its bad
 * samples are never logged. For the profiler's trials. 0 or -ENOMEM. */
int dataset_subset(struct dataset **out, const struct dataset *ds, const uint32_t *ids,
                   uint32_t n, uint32_t split, int zstd_level);

const struct config_dataset *dataset_config(const struct dataset *ds);
const char *dataset_name(const struct dataset *ds);
uint32_t dataset_size(const struct dataset *ds);
uint32_t dataset_nclasses(const struct dataset *ds);
const char *dataset_class(const struct dataset *ds, uint32_t k);
uint32_t dataset_label(const struct dataset *ds, uint32_t sample);
const char *dataset_path(const struct dataset *ds, uint32_t sample);
void dataset_ident(const struct dataset *ds, uint32_t sample, struct dataset_ident *out);
/* The samples whose path hashes to path_hash (two paths may share a hash):
 * their count, their ids at *ids. */
uint32_t dataset_find_path(const struct dataset *ds, uint64_t path_hash, const uint32_t **ids);
/* hash_xxh64 of the name: the disk tier's key. */
uint64_t dataset_name_hash(const struct dataset *ds);
const struct dataset_output *dataset_output(const struct dataset *ds);
/* Entries refused at indexing: links leaving the root. */
uint64_t dataset_refused(const struct dataset *ds);
/* What clients call the dataset's fingerprint (OPENED, DATASETS): its
 * content hash from DATASET_CONTENT_SEED, computed once when it is opened,
 * never 0. A saved position in an epoch is resumed only on the same. */
uint64_t dataset_fingerprint(const struct dataset *ds);
/* Continues the hash h over everything a served sample's bytes depend on
 * besides the stream's arguments: the samples (count, paths, sizes, mtimes,
 * labels) and every step with all its parameters (not the split or the
 * encoding, which change where bytes are kept, not what they are). */
uint64_t dataset_content_hash(const struct dataset *ds, uint64_t h);
#define DATASET_CONTENT_SEED 0x636f6e74656e7431ull /* "content1" */
/* The tiers' id of the dataset (tiers.h), UINT32_MAX until it has one. */
uint32_t dataset_id(const struct dataset *ds);
void dataset_set_id(struct dataset *ds, uint32_t id);

/* The strategy in force, pinned: the caller strategy_put()s it. */
const struct strategy *dataset_strategy(struct dataset *ds);
void strategy_put(const struct strategy *st);
/* Publishes a new strategy (split, disk encoding; caching 0: none cached)
 * for the batches that start from now on. The split must pass
 * step_split_check. 0 or -ENOMEM (the old one stays). */
int dataset_switch(struct dataset *ds, uint32_t split, int zstd_level, int caching);

/* The message of a failed open of a sample's file (rc a negative errno;
 * -EXDEV: refused, the path leaves the dataset root), for err. */
void dataset_open_error(const struct dataset *ds, int rc, char *err, size_t errlen);
/* Opens a sample's file (below the root unless follow_symlinks) and fstats
 * it. Returns 0, or -errno (-EFBIG: over max_size; the file is closed then)
 * with a message in err. */
int dataset_open_file(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                      struct source_file *f, char *err, size_t errlen);
/* Reads a sample's file whole into out (fmt IMG_ENCODED); f (may be NULL)
 * receives its fstat size and mtime (fd -1). Returns 0, or -errno (-EFBIG
 * over max_size) with a message in err. */
int dataset_read(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                 struct img *out, struct source_file *f, char *err, size_t errlen);
/* Makes q a whole-file read of the sample's source into buf (len bytes at
 * most), for an I/O ring (io.h): opened below the root unless
 * follow_symlinks. The caller sets on_done and arg. */
/* The source its reads go to (source_submit, source_wait: remote sources
 * run their requests themselves). */
const struct source *dataset_source(const struct dataset *ds);
void dataset_file_req(const struct dataset *ds, uint32_t sample, void *buf, size_t len,
                      struct io_req *q);
/* The size of a sample's file at indexing. */
uint64_t dataset_file_size(const struct dataset *ds, uint32_t sample);

/* A bad sample met (msg: why): counted in the dataset's errors and logged
 * the first time (a subset's never). */
void dataset_bad_sample(struct dataset *ds, uint32_t sample, const char *msg);

void dataset_count(struct dataset *ds, enum dataset_counter c, uint64_t n);
/* The fields of DATASET_STATS and DATASET_COUNTERS, in the dataset's entry. */
void dataset_stats(const struct dataset *ds, struct stats_out *o);

/* Streams and warm-ups using the dataset (event loop thread). When a
 * reload takes it out of service, its owner sets on_released, called once
 * the last of them lets go (see reload.h). */
void dataset_hold(struct dataset *ds);
void dataset_release(struct dataset *ds);
uint32_t dataset_users(const struct dataset *ds);
void dataset_on_released(struct dataset *ds, void (*fn)(void *arg), void *arg);

/* One warm-up at a time per dataset (event loop thread): 0, or -EBUSY. */
int dataset_warm_begin(struct dataset *ds);
void dataset_warm_end(struct dataset *ds);

/* split: auto (profile.c, event loop thread): where the choice stands.
 * PENDING: none yet; the default split runs and nothing is cached. */
enum dataset_auto_state { DATASET_SPLIT_FIXED = 0, DATASET_AUTO_PENDING, DATASET_AUTO_CHOSEN };

struct dataset_auto {
    enum dataset_auto_state state;
    int profiling;        /* a profile of this dataset runs */
    uint64_t key;         /* of the files, steps and budgets profiled */
    char strategy[64];    /* the choice's name, e.g. "center_crop/zstd:1" */
    double samples_per_s; /* its expected throughput, as profiled */
    double offline_s;     /* extrapolated offline time of the dataset */
    double storage_bytes; /* extrapolated disk tier bytes of the dataset */
    uint32_t sample_size; /* samples the profile measured */
};

/* The profiler's record of the dataset (profile.c writes it). */
struct dataset_auto *dataset_auto(struct dataset *ds);

#endif
