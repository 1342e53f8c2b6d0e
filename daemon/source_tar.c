/*
 * Tar shards in the WebDataset layout as a dataset's source (source.h):
 * ROOT.tar, or a brace pattern of shards ("train-{000000..000146}.tar",
 * braces.h), in the order the pattern lists them. Each shard is indexed
 * once at start-up by reading only its headers (tar.h: one small pread per
 * member, the data of .cls members), members grouped by key into samples
 * (wds.h: the image by its extension, the label from .cls, an integer or a
 * class name). A sample is then its image member's byte range in its
 * shard: read with one plain read on the I/O ring, so every epoch keeps
 * the same global shuffle as any other source. The disk tier keys a sample
 * by "SHARD/KEY.EXT", the member's size and the shard's mtime: a shard
 * rewritten invalidates its samples.
 *
 * What the walk of a shard found is kept in cache.dir (shardidx.h), keyed
 * by the shard's real path, size and mtime: a restart replays it instead
 * of reading the shard, a rewritten shard is read again (and its list
 * replaced). The log says how many lists were reused and shards read.
 *
 * Shards stay open (one descriptor each) while the dataset lives.
 */
#define _GNU_SOURCE
#include "source_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "braces.h"
#include "io.h"
#include "log.h"
#include "shardidx.h"
#include "tar.h"
#include "wds.h"

#define SOURCE_TAR_MAX_SHARDS 1000000

struct shard {
    char *path;
    char *locator; /* its real path: the key of its member list (shardidx.h) */
    int fd;
    uint64_t size;
    int64_t mtime_ns;
};

struct source_tar {
    struct shard *shards;
    size_t nshards;
    uint32_t *shard_of; /* per sample */
    uint64_t *offset;   /* per sample: its image member's data in the shard */
};

static void tar_free(struct source_tar *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nshards; i++) {
        if (t->shards[i].fd >= 0)
            close(t->shards[i].fd);
        free(t->shards[i].path);
        free(t->shards[i].locator);
    }
    free(t->shards);
    free(t->shard_of);
    free(t->offset);
    free(t);
}

static void tar_close(struct source *s)
{
    tar_free(s->impl);
    s->impl = NULL;
}

static void tar_open_error(const struct source *s, int rc, char *err, size_t errlen)
{
    (void)s;
    snprintf(err, errlen, "read: %s", strerror(-rc));
}

static int tar_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                         uint64_t max_size, struct source_file *f, char *err, size_t errlen)
{
    const struct source_tar *t = s->impl;
    const struct shard *sh = &t->shards[t->shard_of[sample]];
    int fd = dup(sh->fd);
    if (fd < 0) {
        int rc = -errno;
        f->fd = -1;
        snprintf(err, errlen, "dup: %s", strerror(errno));
        return rc;
    }
    int rc = source_file_stat(f, fd, UINT64_MAX, err, errlen);
    if (rc < 0)
        return rc;
    f->size = ix->samples[sample].size; /* the member's */
    if (f->size > max_size) {
        snprintf(err, errlen, "member is %llu bytes, over the limit of %llu",
                 (unsigned long long)f->size, (unsigned long long)max_size);
        close(fd);
        f->fd = -1;
        return -EFBIG;
    }
    return 0;
}

static int tar_read(const struct source *s, const struct index *ix, uint32_t sample,
                    uint64_t max_size, struct img *out, struct source_file *f, char *err,
                    size_t errlen)
{
    const struct source_tar *t = s->impl;
    const struct index_sample *is = &ix->samples[sample];
    if (is->size > max_size) {
        snprintf(err, errlen, "member is %llu bytes, over the limit of %llu",
                 (unsigned long long)is->size, (unsigned long long)max_size);
        return -EFBIG;
    }
    int rc = source_pread(t->shards[t->shard_of[sample]].fd, t->offset[sample],
                          (size_t)is->size, out, err, errlen);
    if (rc == 0 && f)
        *f = (struct source_file){.fd = -1, .size = is->size, .mtime_ns = is->mtime_ns};
    return rc;
}

static void tar_req(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                    size_t len, struct io_req *q)
{
    const struct source_tar *t = s->impl;
    const struct index_sample *is = &ix->samples[sample];
    q->fd = t->shards[t->shard_of[sample]].fd;
    q->buf = buf;
    q->len = len < is->size ? len : (size_t)is->size;
    q->off = t->offset[sample];
    q->path = NULL; /* a plain read of the member's range */
    q->real_root = NULL;
    q->direct = 0;
    q->size = is->size; /* the identity it is read under: the index's */
    q->mtime_ns = is->mtime_ns;
}

static const struct source_ops tar_ops = {
    .close = tar_close,
    .open_error = tar_open_error,
    .open_file = tar_open_file,
    .req = tar_req,
    .read = tar_read,
};

/* Walks shard k's headers into w, recording what the reader gave into x
 * (NULL: nothing recorded). 0, or -errno with a message. */
static int index_shard(struct wds *w, uint32_t k, const struct source_shard *sh,
                       struct shardidx *x, char *err, size_t errlen)
{
    struct tar_reader *r = malloc(sizeof(*r));
    struct img buf = {0};
    int rc = 0;
    if (!r)
        return -ENOMEM;
    tar_reader_init(r, sh->size);
    for (;;) {
        uint64_t off;
        size_t want;
        struct tar_entry e;
        if (tar_reader_want(r, &off, &want))
            break;
        if ((rc = sh->read(sh->arg, off, want, &buf, err, errlen)) < 0)
            break;
        rc = tar_reader_feed(r, buf.data, buf.len, &e);
        if (rc < 0) {
            snprintf(err, errlen, "%s", r->err);
            break;
        }
        if (rc == 1 && x && shardidx_add(x, &e) < 0)
            rc = -ENOMEM;
        else if (rc == 1 && e.data == NULL) {
            rc = wds_member(w, k, &e);
            if (rc == 1)
                rc = tar_reader_want_data(r);
        } else if (rc == 1) {
            rc = wds_member_data(w, &e);
        }
        if (rc == -EINVAL) {
            snprintf(err, errlen, "%s", wds_error(w));
            break;
        }
        if (rc < 0) {
            snprintf(err, errlen, "%s", strerror(-rc));
            break;
        }
    }
    if (rc >= 0 && (rc = wds_end_shard(w)) < 0)
        snprintf(err, errlen, "%s", rc == -EINVAL ? wds_error(w) : strerror(-rc));
    img_free(&buf);
    free(r);
    return rc < 0 ? rc : 0;
}

/* Gives w shard k's entries as x recorded them (the walk above, without
 * reading the shard). 0, -errno with a message, or -ESTALE when w wants
 * data x does not hold, or x holds data w does not want (a list another
 * version of the grouping made): the shard must be read. */
static int replay_shard(struct wds *w, uint32_t k, const struct shardidx *x, char *err,
                        size_t errlen)
{
    int rc = 0;
    for (size_t i = 0; i < shardidx_count(x) && rc >= 0; i++) {
        struct tar_entry e;
        const uint8_t *data;
        size_t dlen;
        shardidx_entry(x, i, &e, &data, &dlen);
        rc = wds_member(w, k, &e);
        if (rc == 1 && data) {
            e.data = data;
            rc = wds_member_data(w, &e);
        } else if (rc == 1 || (rc == 0 && data)) {
            return -ESTALE;
        }
    }
    if (rc >= 0)
        rc = wds_end_shard(w);
    if (rc < 0)
        snprintf(err, errlen, "%s", rc == -EINVAL ? wds_error(w) : strerror(-rc));
    return rc < 0 ? rc : 0;
}

/* How a dataset's shards are being indexed: whether the member lists in
 * cache.dir are used, whether new ones are kept (not after one could not
 * be: the directory is unusable), how many were used. */
struct tar_lists {
    int use, keep;
    size_t reused;
};

/* Indexes shard k into w: from its member list in cache.dir when one
 * matches, else by reading it (and keeping the list it made).
 * 0, -ESTALE (a list did not fit w: index again without them), or -errno
 * with a message. */
static int index_one(struct wds *w, uint32_t k, const struct source_shard *sh,
                     const struct config_dataset *cfg, struct tar_lists *l, char *err,
                     size_t errlen)
{
    const char *dir = cfg->source.cache_dir;
    struct shardidx_id id = {sh->locator, sh->size, sh->version};
    struct shardidx *x = NULL;
    int rc;
    if (l->use && dir[0] && shardidx_load(dir, &id, &x) == 0) {
        rc = replay_shard(w, k, x, err, errlen);
        shardidx_free(x);
        l->reused += rc == 0;
        return rc;
    }
    x = l->keep && dir[0] ? shardidx_new() : NULL;
    rc = index_shard(w, k, sh, x, err, errlen);
    if (rc == 0 && x && (rc = shardidx_save(dir, &id, x)) < 0) {
        log_warn("dataset '%s': cannot keep tar shards' member lists in cache.dir %s (%s): "
                 "a restart reads the shards again", cfg->name, dir, strerror(-rc));
        l->keep = 0;
        rc = 0;
    }
    shardidx_free(x);
    return rc;
}

/* Opens the shards the root names. */
static int open_shards(struct source_tar *t, const struct config_dataset *cfg, char *err,
                       size_t errlen)
{
    char **names = NULL, msg[300];
    size_t n = 0;
    int rc = braces_expand(cfg->root, SOURCE_TAR_MAX_SHARDS, &names, &n, msg, sizeof(msg));
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root, msg);
        return rc;
    }
    if (!(t->shards = calloc(n ? n : 1, sizeof(*t->shards)))) {
        braces_free(names, n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct shard *sh = &t->shards[i];
        struct source_file f;
        t->nshards++;
        sh->path = names[i];
        names[i] = NULL;
        sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
        rc = sh->fd < 0 ? -errno : source_file_stat(&f, sh->fd, UINT64_MAX, msg, sizeof(msg));
        if (rc < 0) {
            if (sh->fd < 0)
                snprintf(msg, sizeof(msg), "%s", strerror(-rc));
            sh->fd = -1;
            snprintf(err, errlen, "dataset '%s': shard %s: %s", cfg->name, sh->path, msg);
            break;
        }
        sh->size = f.size;
        sh->mtime_ns = f.mtime_ns;
        if (!(sh->locator = realpath(sh->path, NULL)) && !(sh->locator = strdup(sh->path))) {
            rc = -ENOMEM;
            snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
            break;
        }
    }
    braces_free(names, n);
    return rc;
}

/* The index's samples from w: "SHARD/KEY.EXT" (SHARD the last component
 * of the shard's name), the member's size, the shard's version as the
 * disk tier's mtime; each sample's shard and offset into shard_of and
 * offset. */
static int index_samples(const struct source_shard *shards, const struct wds *w,
                         struct index *ix, uint32_t **shard_of, uint64_t **offset)
{
    size_t n = wds_count(w);
    uint32_t max_label = 0;
    int rc = 0;
    if (!(*shard_of = malloc((n ? n : 1) * sizeof(**shard_of))) ||
        !(*offset = malloc((n ? n : 1) * sizeof(**offset))))
        return -ENOMEM;
    for (uint32_t c = 0; c < wds_nclasses(w) && rc == 0; c++) {
        char *name = strdup(wds_class(w, c));
        rc = name ? index_add_class(ix, name) : -ENOMEM;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const struct wds_sample *ws = wds_sample(w, i);
        const struct source_shard *sh = &shards[ws->shard];
        const char *base = strrchr(sh->name, '/');
        char path[TAR_NAME_MAX + 512];
        snprintf(path, sizeof(path), "%s/%s%s", base ? base + 1 : sh->name, wds_key(w, i),
                 fileext_name(ws->ext));
        uint32_t label = wds_label(w, i);
        if (label > max_label)
            max_label = label;
        (*shard_of)[i] = ws->shard;
        (*offset)[i] = ws->offset;
        rc = index_add_sample(ix, path, label, ws->size, (int64_t)sh->version);
    }
    if (rc == 0 && wds_nclasses(w) == 0)
        rc = source_int_classes(ix, n ? max_label + 1 : 0);
    return rc;
}

int source_shards_index(const struct source_shard *shards, size_t nshards,
                        const struct config_dataset *cfg, struct index *ix,
                        uint32_t **shard_of, uint64_t **offset, char *err, size_t errlen)
{
    struct wds *w = wds_new();
    char msg[400] = "";
    int rc = 0;
    *shard_of = NULL;
    *offset = NULL;
    if (!w) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    wds_set_audio(w, source_audio(cfg));
    struct tar_lists lists = {1, 1, 0};
    while (rc == 0) {
        size_t k = 0;
        for (; rc == 0 && k < nshards; k++)
            rc = index_one(w, (uint32_t)k, &shards[k], cfg, &lists, msg, sizeof(msg));
        if (rc == -ESTALE && lists.use) {
            /* a member list that does not fit this grouping: read them all */
            log_warn("dataset '%s': shard %s's member list in cache.dir does not fit; "
                     "reading every shard again", cfg->name, shards[k - 1].name);
            wds_free(w);
            lists = (struct tar_lists){0, lists.keep, 0};
            if ((w = wds_new())) {
                rc = 0;
                continue;
            }
            rc = -ENOMEM;
        }
        if (rc == -ENOMEM) {
            snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
            break;
        }
        if (rc < 0)
            snprintf(err, errlen, "dataset '%s': shard %s: %s", cfg->name, shards[k - 1].name,
                     msg);
        break;
    }
    if (rc == 0 && (rc = wds_finish(w)) < 0)
        snprintf(err, errlen, "dataset '%s': %s: %s", cfg->name, cfg->root,
                 rc == -EINVAL ? wds_error(w) : strerror(-rc));
    if (rc == 0 && wds_count(w) == 0) {
        rc = -ENOENT;
        snprintf(err, errlen, "dataset '%s': %s: no samples (KEY.IMAGE with KEY.cls members) "
                 "in %zu shards", cfg->name, cfg->root, nshards);
    }
    if (rc == 0 && ((rc = index_samples(shards, w, ix, shard_of, offset)) < 0 ||
                    (rc = index_finish(ix)) < 0))
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 rc == -E2BIG ? SOURCE_INT_CLASSES_MSG : strerror(-rc));
    if (rc == 0) {
        const struct wds_counts *c = wds_counts(w);
        char exts[256];
        source_ext_summary(c->images, exts, sizeof(exts));
        log_info("dataset '%s': %u samples in %u classes from %zu tar shards %s (%s; "
                 "member lists: %zu from cache.dir, %zu shards read; "
                 "skipped: %llu without an image, %llu without a label, %llu extra images, "
                 "%llu unsafe names, %llu not files)",
                 cfg->name, ix->n, ix->nclasses, nshards, cfg->root, exts,
                 lists.reused, nshards - lists.reused,
                 (unsigned long long)c->no_image, (unsigned long long)c->no_label,
                 (unsigned long long)c->extra_images, (unsigned long long)c->unsafe_names,
                 (unsigned long long)c->not_files);
        rc = (int)(c->unsafe_names > INT32_MAX ? INT32_MAX : c->unsafe_names);
    }
    wds_free(w);
    if (rc < 0) {
        free(*shard_of);
        free(*offset);
        *shard_of = NULL;
        *offset = NULL;
    }
    return rc;
}

static int shard_pread(void *arg, uint64_t off, size_t len, struct img *out, char *err,
                       size_t errlen)
{
    const struct shard *sh = arg;
    return source_pread(sh->fd, off, len, out, err, errlen);
}

int source_tar_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                   char *err, size_t errlen)
{
    struct source_tar *t = calloc(1, sizeof(*t));
    struct source_shard *shards = NULL;
    int rc;
    if (!t) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    rc = open_shards(t, cfg, err, errlen);
    if (rc == 0 && !(shards = calloc(t->nshards ? t->nshards : 1, sizeof(*shards)))) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        rc = -ENOMEM;
    }
    for (size_t k = 0; rc == 0 && k < t->nshards; k++) {
        const struct shard *sh = &t->shards[k];
        shards[k] = (struct source_shard){sh->path, sh->locator, sh->size,
                                          (uint64_t)sh->mtime_ns, shard_pread, (void *)sh};
    }
    if (rc == 0)
        rc = source_shards_index(shards, t->nshards, cfg, ix, &t->shard_of, &t->offset, err,
                                 errlen);
    free(shards);
    if (rc < 0) {
        tar_free(t);
        return rc;
    }
    s->refused = (uint64_t)rc;
    s->ops = &tar_ops;
    s->impl = t;
    return 0;
}
