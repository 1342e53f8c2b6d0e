/*
 * Datasets: an ImageFolder tree indexed at start-up. Classes are the
 * sub-directories of the root, sorted by name (byte order, as Python's
 * sorted() does); a class's samples are its .jpg/.jpeg files found
 * recursively, sorted; label = class index. This is torchvision's
 * ImageFolder order, so sample ids match a torchvision dataset's indices.
 */
#ifndef PRESTO_DATASET_H
#define PRESTO_DATASET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "step.h"
#include "store.h"

struct dataset_sample {
    uint64_t path_off;  /* into dataset.paths: the path relative to root */
    uint64_t path_hash; /* store_hash64 of that path: the disk tier's key */
    uint64_t size;      /* bytes, at indexing time */
    int64_t mtime_ns;
    uint32_t label;
};

/* What the cache tiers did for a dataset: counters (relaxed atomics, they
 * only grow) and the disk tier's gauges (entries, bytes). */
struct dataset_counters {
    uint64_t hits, misses;          /* memory tier lookups */
    uint64_t errors;                /* bad samples met */
    uint64_t disk_hits, disk_misses;/* disk tier lookups after a memory miss */
    uint64_t disk_bad;              /* disk records unreadable or corrupt: recomputed */
    uint64_t disk_bytes_read;       /* record bytes read from the disk tier */
    uint64_t disk_puts, disk_put_errors;
    uint64_t disk_entries;          /* samples with a current record (gauge) */
    uint64_t disk_bytes_raw, disk_bytes_stored; /* of those records (gauges) */
    uint64_t computed;              /* samples run through the offline steps */
    uint64_t source_reads, source_bytes; /* source files read */
};

/* split: auto (profile.c): where the choice stands. PENDING: none yet;
 * the default split runs and nothing is cached (see profile.h). */
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

struct dataset {
    uint32_t id;
    const struct config_dataset *cfg; /* owned by the config, which outlives it */
    char **classes;
    uint32_t nclasses;
    struct dataset_sample *samples;
    uint32_t nsamples;
    char *paths; /* NUL-separated relative paths */
    size_t paths_len;
    uint32_t *by_path;    /* sample ids sorted by path_hash */
    uint64_t name_hash;   /* store_hash64 of the name: the disk tier's key */
    uint64_t fingerprint; /* of the offline steps and their parameters */
    /* Output of the whole pipeline; h == 0 when it varies per image. */
    uint32_t out_h, out_w, out_c, out_dtype;
    uint32_t out_layout; /* enum step_layout (PROTO_LAYOUT_*) of float output */
    size_t sample_bytes;
    /* Output of the offline steps (what the cache tiers hold); mat_bytes
     * is 0 when it varies per image or nothing runs offline. */
    uint32_t mat_h, mat_w, mat_c, mat_dtype;
    size_t mat_bytes;
    /* Per-sample "already logged as bad" flags, so each bad file is logged once. */
    uint8_t *bad_logged;
    /* Per-sample "the disk tier holds a record under the current key"
     * flags (atomic bytes; NULL without a disk tier). */
    uint8_t *on_disk;
    struct dataset_counters n;
    int warming; /* a WARM runs (event loop thread only) */
    /* The strategy in force: steps[0..split) run offline and their output
     * is cached, disk records in zstd_level (0: raw). The config's, or
     * with split: auto the profiler's choice (profile.h). Workers read it,
     * and everything derived from it (fingerprint, mat_*, on_disk), under
     * strategy_lock held for reading (pipeline_batch, pipeline_warm,
     * dataset_key_current); dataset_set_strategy() changes it. */
    uint32_t split;
    int zstd_level;
    pthread_rwlock_t strategy_lock; /* prefers writers */
    struct dataset_auto autos;      /* split: auto (event loop thread) */
    int subset;                     /* a dataset_subset(): shares the index */
    /* The root, opened (O_PATH) and resolved (NULL: not opened): sources are
     * opened below it (access_open_beneath) unless cfg->follow_symlinks. */
    int root_fd;
    char *real_root;
    uint64_t refused; /* entries refused at indexing: links leaving the root */
    /* Streams and warms using the dataset (event loop thread only). When a
     * reload takes it out of service, its owner sets `released`, called
     * once the last of them lets go (see reload.h). */
    uint32_t refs;
    void (*released)(struct dataset *ds);
};

/* A source file opened for reading. */
struct dataset_file {
    int fd;
    uint64_t size;    /* fstat of the open file: what is really read */
    int64_t mtime_ns;
};

/* Indexes cfg->root. Returns 0, or a negative errno with a message. */
int dataset_open(struct dataset *ds, uint32_t id, const struct config_dataset *cfg,
                 char *err, size_t errlen);
void dataset_close(struct dataset *ds);
/* A stream or warm starts or stops using ds (event loop thread). */
void dataset_hold(struct dataset *ds);
void dataset_release(struct dataset *ds);
const char *dataset_path(const struct dataset *ds, uint32_t sample);
/* The message of a failed open of a sample's file (rc a negative errno,
 * -EXDEV: refused, the path leaves the dataset root), for err. */
void dataset_open_error(const struct dataset *ds, int rc, char *err, size_t errlen);
/* Opens a sample's file and fstats it. Returns 0, or a negative errno
 * (-EFBIG: over max_size; the file is closed then) with a message in err. */
int dataset_open_file(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                      struct dataset_file *f, char *err, size_t errlen);
/* Reads a sample's file whole into out (fmt IMG_ENCODED); f (may be NULL)
 * receives its fstat size and mtime (fd -1). Returns 0, or a negative errno
 * (-EFBIG over max_size) with a message in err. */
int dataset_read(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                 struct img *out, struct dataset_file *f, char *err, size_t errlen);
/* Switches ds to another strategy (split, disk encoding): recomputes the
 * offline fingerprint and output, forgets on_disk and the disk tier's
 * gauges (the caller rescans: pipeline_disk_scan). The caller holds
 * strategy_lock for writing, or has the dataset to itself (start-up). The
 * split must pass step_split_check. */
void dataset_set_strategy(struct dataset *ds, uint32_t split, int zstd_level);
/* A dataset of the samples ids[0..n) of ds (in that order: sample i of
 * the subset is ids[i]) under the strategy (split, zstd_level), sharing
 * ds's index and config (ds must outlive it), with its own flags and
 * counters; its bad samples are never logged. For the profiler's trials.
 * Returns 0 or -ENOMEM. Free it with dataset_close(). */
int dataset_subset(struct dataset *out, const struct dataset *ds, const uint32_t *ids,
                   uint32_t n, uint32_t split, int zstd_level);
/* Returns 1 the first time it is called for a sample, 0 after. */
int dataset_first_error(struct dataset *ds, uint32_t sample);

/* The disk tier's key of a sample as indexed (size and mtime at indexing),
 * or, with f, as the opened file really is. */
void dataset_key(const struct dataset *ds, uint32_t sample, const struct dataset_file *f,
                 struct store_key *key);
/* The sample whose path hashes to path_hash, or UINT32_MAX. */
uint32_t dataset_find_path(const struct dataset *ds, uint64_t path_hash);
/* 1 when key is the current key of one of ds's samples (same path, size,
 * mtime and offline steps), else 0. */
int dataset_key_current(const struct dataset *ds, const struct store_key *key);

#endif
