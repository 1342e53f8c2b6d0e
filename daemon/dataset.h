/*
 * Datasets: an ImageFolder tree indexed at start-up. Classes are the
 * sub-directories of the root, sorted by name (byte order, as Python's
 * sorted() does); a class's samples are its .jpg/.jpeg files found
 * recursively, sorted; label = class index. This is torchvision's
 * ImageFolder order, so sample ids match a torchvision dataset's indices.
 */
#ifndef PRESTO_DATASET_H
#define PRESTO_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "step.h"

struct dataset_sample {
    uint64_t path_off; /* into dataset.paths: the path relative to root */
    uint32_t label;
    uint64_t size;     /* bytes, at indexing time */
    int64_t mtime_ns;
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
    uint64_t fingerprint; /* of the offline steps and their parameters */
    /* Output of the whole pipeline; h == 0 when it varies per image. */
    uint32_t out_h, out_w, out_c, out_dtype;
    size_t sample_bytes;
    /* Per-sample "already logged as bad" flags, so each bad file is logged once. */
    uint8_t *bad_logged;
    /* Counters (relaxed atomics). */
    uint64_t hits, misses, errors;
};

/* Indexes cfg->root. Returns 0, or a negative errno with a message. */
int dataset_open(struct dataset *ds, uint32_t id, const struct config_dataset *cfg,
                 char *err, size_t errlen);
void dataset_close(struct dataset *ds);
const char *dataset_path(const struct dataset *ds, uint32_t sample);
/* Reads a sample's file whole into out (fmt IMG_ENCODED). Returns 0, or a
 * negative errno (-EFBIG over max_size) with a message in err. */
int dataset_read(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                 struct img *out, char *err, size_t errlen);
/* Returns 1 the first time it is called for a sample, 0 after. */
int dataset_first_error(struct dataset *ds, uint32_t sample);

#endif
