/* A dataset's source: see source.h. */
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileext.h"
#include "io.h"
#include "stats.h"
#include "source_impl.h"

const char *source_kind_name(enum source_kind k)
{
    static const char *const names[SOURCE_KIND_MAX] = {"directory", "manifest", "tar", "http",
                                                       "s3"};
    return (unsigned)k < SOURCE_KIND_MAX ? names[k] : "unknown";
}

int source_open(struct source **out, const struct config_dataset *cfg, struct index *ix,
                char *err, size_t errlen)
{
    struct source *s = calloc(1, sizeof(*s));
    int rc;
    if (!s) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    s->kind = source_kind_of(cfg->root);
    switch (s->kind) {
    case SOURCE_DIR:
        rc = source_dir_new(s, cfg, ix, err, errlen);
        break;
    case SOURCE_MANIFEST:
        rc = source_manifest_new(s, cfg, ix, err, errlen);
        break;
    case SOURCE_TAR:
        rc = source_tar_new(s, cfg, ix, err, errlen);
        break;
    case SOURCE_S3:
    case SOURCE_HTTP: /* tar shards by URL: the same client (source_s3.c) */
        rc = source_s3_new(s, cfg, ix, err, errlen);
        break;
    default:
        snprintf(err, errlen, "dataset '%s': root %s: %s sources are not served yet "
                 "(a directory, a .csv or .jsonl manifest, .tar shards or s3:// are)",
                 cfg->name, cfg->root, source_kind_name(s->kind));
        rc = -EPROTONOSUPPORT;
        break;
    }
    if (rc < 0) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void source_close(struct source *s)
{
    if (!s)
        return;
    s->ops->close(s);
    free(s);
}

enum source_kind source_kind(const struct source *s)
{
    return s->kind;
}

uint64_t source_refused(const struct source *s)
{
    return s->refused;
}

void source_open_error(const struct source *s, int rc, char *err, size_t errlen)
{
    s->ops->open_error(s, rc, err, errlen);
}

int source_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                     uint64_t max_size, struct source_file *f, char *err, size_t errlen)
{
    return s->ops->open_file(s, ix, sample, max_size, f, err, errlen);
}

int source_read(const struct source *s, const struct index *ix, uint32_t sample,
                uint64_t max_size, struct img *out, struct source_file *fout, char *err,
                size_t errlen)
{
    if (s->ops->read)
        return s->ops->read(s, ix, sample, max_size, out, fout, err, errlen);
    struct source_file f;
    int rc = s->ops->open_file(s, ix, sample, max_size, &f, err, errlen);
    if (rc < 0)
        return rc;
    rc = source_pread(f.fd, 0, (size_t)f.size, out, err, errlen);
    close(f.fd);
    if (fout) {
        *fout = f;
        fout->fd = -1;
    }
    return rc;
}

void source_req(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                size_t len, struct io_req *q)
{
    s->ops->req(s, ix, sample, buf, len, q);
}

int source_remote(const struct source *s)
{
    return s->ops->submit != NULL;
}

void source_submit(const struct source *s, struct io_ring *io, struct io_req *q)
{
    if (s->ops->submit)
        s->ops->submit(s, q);
    else
        io_submit(io, q);
}

ssize_t source_wait(const struct source *s, struct io_ring *io, struct io_req *q,
                    const int *stop)
{
    return s->ops->wait ? s->ops->wait(s, q, stop) : io_wait(io, q);
}

void source_kick(const struct source *s)
{
    if (s->ops->kick)
        s->ops->kick(s);
}

void source_wake(const struct source *s)
{
    if (s && s->ops->wake)
        s->ops->wake(s);
}

void source_cancel(const struct source *s, struct io_ring *io, struct io_req *q)
{
    if (s->ops->cancel)
        s->ops->cancel(s, q);
    else
        io_cancel(io, q);
}

void source_stats(const struct source *s, struct stats_out *o)
{
    if (!s->ops->stats)
        return;
    stats_begin(o, "source", "remote", NULL, NULL); /* the dataset's source_* counters are files */
    s->ops->stats(s, o);
    stats_end(o);
}

/* ---- helpers for the kinds ---- */

int source_pread(int fd, uint64_t off, size_t len, struct img *out, char *err, size_t errlen)
{
    int rc = img_reserve(out, len);
    if (rc < 0) {
        snprintf(err, errlen, "no memory for %zu bytes", len);
        return rc;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, out->data + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(err, errlen, "read: %s", strerror(errno));
            return rc;
        }
        if (r == 0)
            break; /* shrank under us: decode sees what is there */
        got += (size_t)r;
    }
    out->fmt = IMG_ENCODED;
    out->len = got;
    return 0;
}

int source_file_stat(struct source_file *f, int fd, uint64_t max_size, char *err, size_t errlen)
{
    struct stat sb;
    int rc;
    f->fd = fd;
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        snprintf(err, errlen, "fstat: %s", strerror(-rc));
    } else if ((uint64_t)sb.st_size > max_size) {
        rc = -EFBIG;
        snprintf(err, errlen, "file is %lld bytes, over the limit of %llu",
                 (long long)sb.st_size, (unsigned long long)max_size);
    } else {
        f->size = (uint64_t)sb.st_size;
        f->mtime_ns = source_mtime_ns(&sb);
        return 0;
    }
    close(fd);
    f->fd = -1;
    return rc;
}

int source_int_classes(struct index *ix, uint32_t nclasses)
{
    if (nclasses > SOURCE_MAX_INT_CLASSES)
        return -E2BIG;
    for (uint32_t k = 0; k < nclasses; k++) {
        char name[16];
        snprintf(name, sizeof(name), "%u", k);
        char *dup = strdup(name);
        int rc = dup ? index_add_class(ix, dup) : -ENOMEM;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* "N .jpg, M .png" for the extensions indexed. */
int source_folder_finish(struct index *ix, int rc, const struct config_dataset *cfg,
                         const char *what, char *err, size_t errlen)
{
    if (rc == 0 && ix->n == 0)
        rc = -ENOENT;
    if (rc == 0)
        rc = index_finish(ix);
    if (rc == -ENOENT)
        snprintf(err, errlen,
                 "dataset '%s': indexing %s: no %s found (%s)", cfg->name, cfg->root, what,
                 fileext_list(source_audio(cfg)));
    else if (rc < 0)
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 strerror(-rc));
    return rc;
}

int source_audio(const struct config_dataset *cfg)
{
    return cfg->nsteps > 0 && cfg->steps[0].kind == STEP_DECODE_AUDIO;
}

void source_ext_summary(const uint64_t *per_ext, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int e = 0; e < FILEEXT_COUNT && at < len; e++) {
        if (!per_ext[e])
            continue;
        int w = snprintf(buf + at, len - at, "%s%llu %s", at ? ", " : "",
                         (unsigned long long)per_ext[e], fileext_name(e));
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

int64_t source_mtime_ns(const struct stat *sb)
{
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}
