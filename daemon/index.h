/*
 * A dataset's index: what its source says it holds. The samples in id
 * order, each with its label, its path (relative to the source's root) and
 * the identity the disk tier keys it by (path hash, size and mtime when it
 * was indexed), and the class names (label k is classes[k]). A source
 * builds it at indexing with index_add_class / index_add_sample and
 * index_finish; it is fixed from then on and read from any thread.
 *
 * Sources: source_dir.c (an ImageFolder directory) today.
 */
#ifndef PRESTO_INDEX_H
#define PRESTO_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct index_sample {
    uint64_t path_off;  /* into paths */
    uint64_t path_hash; /* hash_xxh64 of the path: the disk tier's key */
    uint64_t size;      /* bytes, at indexing time */
    int64_t mtime_ns;
    uint32_t label;
};

struct index {
    struct index_sample *samples;
    uint32_t n;
    char *paths; /* NUL-separated */
    size_t paths_len;
    char **classes;
    uint32_t nclasses;
    uint32_t *by_path; /* sample ids sorted by path hash (index_finish) */
    size_t samples_cap, paths_cap, classes_cap;
};

/* A sample's source file as a source opened it: fd (-1 once closed), and
 * the size and mtime it really had (the disk tier keys what was read by
 * these, not by what was indexed). */
struct source_file {
    int fd;
    uint64_t size;
    int64_t mtime_ns;
};

/* Takes name (malloc'ed) as class nclasses. 0 or -ENOMEM (name freed). */
int index_add_class(struct index *ix, char *name);
/* 0, -ENOMEM or -EOVERFLOW (2^32 - 1 samples). */
int index_add_sample(struct index *ix, const char *path, uint32_t label, uint64_t size,
                     int64_t mtime_ns);
/* Sorts the path lookup. 0 or -ENOMEM. */
int index_finish(struct index *ix);
void index_free(struct index *ix);

static inline const char *index_path(const struct index *ix, uint32_t sample)
{
    return ix->paths + ix->samples[sample].path_off;
}

/* The samples whose path hashes to path_hash (two paths may share a hash):
 * their count, their ids at *ids. */
uint32_t index_find_path(const struct index *ix, uint64_t path_hash, const uint32_t **ids);

#endif
