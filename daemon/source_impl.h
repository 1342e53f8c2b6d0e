/*
 * What a kind of source implements behind source.h (source.c dispatches).
 * Each kind's open function fills s->ops and s->impl and indexes into ix;
 * the functions get the index source_open filled.
 */
#ifndef PRESTO_SOURCE_IMPL_H
#define PRESTO_SOURCE_IMPL_H

#include <sys/types.h>

#include "source.h"

struct stats_out;

struct source_ops {
    void (*close)(struct source *s);
    void (*open_error)(const struct source *s, int rc, char *err, size_t errlen);
    int (*open_file)(const struct source *s, const struct index *ix, uint32_t sample,
                     uint64_t max_size, struct source_file *f, char *err, size_t errlen);
    void (*req)(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                size_t len, struct io_req *q);
    /* NULL: source.c reads the file open_file opens, whole */
    int (*read)(const struct source *s, const struct index *ix, uint32_t sample,
                uint64_t max_size, struct img *out, struct source_file *f, char *err,
                size_t errlen);
    /* Remote sources (NULL for files: the caller's I/O ring runs req's
     * requests): a request made by req handed to the source, waited for
     * (taken back once *stop is set), taken back; the waiters woken to
     * look at their stop flags; and the source's own stats section. */
    void (*submit)(const struct source *s, struct io_req *q);
    void (*kick)(const struct source *s); /* submitted ones go out (wait does too) */
    ssize_t (*wait)(const struct source *s, struct io_req *q, const int *stop);
    void (*wake)(const struct source *s);
    void (*cancel)(const struct source *s, struct io_req *q);
    void (*stats)(const struct source *s, struct stats_out *o);
};

struct source {
    enum source_kind kind;
    const struct source_ops *ops;
    void *impl;
    uint64_t refused; /* entries refused at indexing */
};

/* The kinds' open functions (s zeroed but for kind). */
int source_dir_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                   char *err, size_t errlen);
int source_manifest_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                        char *err, size_t errlen);
int source_s3_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                  char *err, size_t errlen);
int source_tar_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                   char *err, size_t errlen);
/* A manifest whose rows are URLs (source_manifest.c hands it over): all
 * s3://BUCKET/KEY of one bucket (listed for sizes and ETags) or all
 * http(s):// (each probed, all at once), read as S3 objects are. */
struct manifest;
int source_s3_rows_new(struct source *s, const struct config_dataset *cfg,
                       const struct manifest *m, struct index *ix, char *err, size_t errlen);

/* Tar shards in the WebDataset layout, local (source_tar.c) or remote
 * (source_s3.c): what indexing needs of a shard. */
struct source_shard {
    const char *name;    /* its path or key: messages, and its samples'
                            paths "NAME'S LAST COMPONENT/KEY.EXT" */
    const char *locator; /* the key of its member list in cache.dir (shardidx.h) */
    uint64_t size;
    uint64_t version;    /* mtime_ns, or the ETag's id: the disk tier's mtime */
    /* reads len bytes at off into out (fewer only at the end); 0 or -errno
     * with a message */
    int (*read)(void *arg, uint64_t off, size_t len, struct img *out, char *err,
                size_t errlen);
    void *arg;
};
/* Indexes shards[0..n) into ix (wds.h's grouping): from their member lists
 * in cfg's cache.dir where they match, else by walking their headers
 * through read (and keeping the lists); logs what it found. Each sample's
 * shard and its image member's offset go to *shard_of and *offset
 * (malloc'ed). Returns the count of unsafe member names skipped (>= 0), or
 * -errno with a message naming the dataset and the shard. */
int source_shards_index(const struct source_shard *shards, size_t n,
                        const struct config_dataset *cfg, struct index *ix,
                        uint32_t **shard_of, uint64_t **offset, char *err, size_t errlen);

/* Reads len bytes at off of fd whole into out (fmt IMG_ENCODED; fewer at
 * the file's end). 0, or -errno with a message in err. */
int source_pread(int fd, uint64_t off, size_t len, struct img *out, char *err, size_t errlen);
/* Makes f the file fd (opened by the caller): fstat, size checked
 * against max_size. 0, or -errno (fd closed, f->fd -1) with a message. */
int source_file_stat(struct source_file *f, int fd, uint64_t max_size, char *err,
                     size_t errlen);
/* Classes "0", "1", ... for integer labels below nclasses. 0, -ENOMEM, or
 * -E2BIG past SOURCE_MAX_INT_CLASSES (a stray huge label must not make a
 * million names). */
#define SOURCE_MAX_INT_CLASSES (1u << 20)
#define SOURCE_INT_CLASSES_MSG "an integer label over 1048575 (at most 2^20 classes)"
int source_int_classes(struct index *ix, uint32_t nclasses);
/* The end of an ImageFolder's listing (a directory's or a bucket's), rc
 * what the listing returned: nothing found is -ENOENT, else ix is
 * finished. A failure is said in err ("no WHAT found (the extensions)").
 * Returns 0 or -errno. */
/* Whether the dataset's samples are audio files (its pipeline starts with
 * decode_audio): the folder sources index .wav .flac .ogg .mp3, not images. */
int source_audio(const struct config_dataset *cfg);

int source_folder_finish(struct index *ix, int rc, const struct config_dataset *cfg,
                         const char *what, char *err, size_t errlen);
/* "N .jpg, M .png" for the image extensions counted (fileext.h's order). */
void source_ext_summary(const uint64_t *per_ext, char *buf, size_t len);
/* st_mtim of sb in nanoseconds. */
struct stat;
int64_t source_mtime_ns(const struct stat *sb);

#endif
