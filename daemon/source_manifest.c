/*
 * A manifest as a dataset's source (source.h): ROOT.csv or ROOT.jsonl, one
 * sample per line in file order (manifest.h parses it; a bad line refuses
 * the dataset at start with FILE:LINE). A relative path is relative to the
 * manifest's directory (resolved once, at indexing); each file is statted
 * at indexing for the disk tier's key. A file missing then is indexed with
 * size 0 and is a bad sample when read (the on_error policy applies), so
 * sample ids stay the line order. A manifest whose rows are URLs (all
 * s3:// of one bucket, or all http(s)://) is read by source_s3.c
 * (source_s3_rows_new); a URL among local paths is refused, naming the
 * line.
 *
 * Files are read whole by the I/O ring from their absolute paths; the
 * manifest is the operator's config, so its paths may be anywhere.
 */
#define _GNU_SOURCE
#include "source_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io.h"
#include "log.h"
#include "manifest.h"

#define SOURCE_MANIFEST_MAX_BYTES (1ull << 32) /* a manifest file over 4 GiB is refused */

static void manifest_close(struct source *s)
{
    (void)s;
}

static void manifest_open_error(const struct source *s, int rc, char *err, size_t errlen)
{
    (void)s;
    snprintf(err, errlen, "open: %s", strerror(-rc));
}

static int manifest_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                              uint64_t max_size, struct source_file *f, char *err,
                              size_t errlen)
{
    int fd = open(index_path(ix, sample), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        f->fd = -1;
        manifest_open_error(s, rc, err, errlen);
        return rc;
    }
    return source_file_stat(f, fd, max_size, err, errlen);
}

static void manifest_req(const struct source *s, const struct index *ix, uint32_t sample,
                         void *buf, size_t len, struct io_req *q)
{
    (void)s;
    q->fd = AT_FDCWD;
    q->buf = buf;
    q->len = len;
    q->off = 0;
    q->path = index_path(ix, sample); /* absolute */
    q->direct = 0;
    q->real_root = NULL;
}

static const struct source_ops manifest_ops = {
    .close = manifest_close,
    .open_error = manifest_open_error,
    .open_file = manifest_open_file,
    .req = manifest_req,
};

/* The manifest file's text, NUL-terminated. */
static int read_manifest(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
    struct source_file f;
    struct img buf = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s", strerror(errno));
        return rc;
    }
    if ((rc = source_file_stat(&f, fd, SOURCE_MANIFEST_MAX_BYTES, err, errlen)) < 0)
        return rc;
    rc = source_pread(fd, 0, (size_t)f.size + 1, &buf, err, errlen);
    close(fd);
    if (rc < 0) {
        img_free(&buf);
        return rc;
    }
    *len = buf.len < f.size + 1 ? buf.len : (size_t)f.size;
    buf.data[*len] = 0;
    *text = (char *)buf.data;
    return 0;
}

/* The samples of m into ix: statted, URLs refused. */
static int index_manifest(const struct config_dataset *cfg, const struct manifest *m,
                          struct index *ix, char *err, size_t errlen)
{
    uint64_t missing = 0;
    uint32_t max_label = 0;
    int rc = 0;
    size_t n = manifest_count(m);
    for (uint32_t c = 0; c < manifest_nclasses(m) && rc == 0; c++) {
        char *name = strdup(manifest_class(m, c));
        rc = name ? index_add_class(ix, name) : -ENOMEM;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *path = manifest_path(m, i);
        struct stat sb;
        errno = 0;
        if (manifest_is_url(m, i)) {
            snprintf(err, errlen, "%s:%llu: %s: a URL among local paths (a manifest's rows "
                     "are all local paths or all URLs)", cfg->root,
                     (unsigned long long)manifest_line(m, i), path);
            return -EINVAL;
        }
        if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode)) {
            if (missing++ < 5)
                log_warn("dataset '%s': %s:%llu: %s: %s (a bad sample when read)", cfg->name,
                         cfg->root, (unsigned long long)manifest_line(m, i), path,
                         errno ? strerror(errno) : "not a regular file");
            memset(&sb, 0, sizeof(sb));
        }
        uint32_t label = manifest_label(m, i);
        if (label > max_label)
            max_label = label;
        rc = index_add_sample(ix, path, label, (uint64_t)sb.st_size, source_mtime_ns(&sb));
    }
    if (rc == 0 && manifest_nclasses(m) == 0)
        rc = source_int_classes(ix, max_label + 1);
    if (rc == 0)
        rc = index_finish(ix);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 rc == -E2BIG ? SOURCE_INT_CLASSES_MSG : strerror(-rc));
        return rc;
    }
    log_info("dataset '%s': %u samples in %u classes from the manifest %s%s", cfg->name, ix->n,
             ix->nclasses, cfg->root, missing ? " (some files missing: see above)" : "");
    if (missing)
        log_warn("dataset '%s': %llu files of %s missing at indexing", cfg->name,
                 (unsigned long long)missing, cfg->root);
    return 0;
}

int source_manifest_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                        char *err, size_t errlen)
{
    char *text = NULL, *real = NULL, msg[512] = "";
    struct manifest *m = NULL;
    size_t len = 0;
    int rc;

    if (!(real = realpath(cfg->root, NULL))) {
        rc = -errno;
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root,
                 strerror(errno));
        return rc;
    }
    if ((rc = read_manifest(real, &text, &len, msg, sizeof(msg))) < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root, msg);
        free(real);
        return rc;
    }
    /* Messages name the file as configured, paths join its real directory. */
    rc = manifest_parse(cfg->root, dirname(real), text, len, &m, msg, sizeof(msg));
    free(text);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': %s", cfg->name, msg);
    } else if (manifest_count(m) && manifest_is_url(m, 0)) { /* objects by URL */
        rc = source_s3_rows_new(s, cfg, m, ix, err, errlen);
        manifest_free(m);
        free(real);
        return rc;
    } else if ((rc = index_manifest(cfg, m, ix, msg, sizeof(msg))) < 0) {
        if (strncmp(msg, "dataset '", 9) == 0)
            snprintf(err, errlen, "%s", msg);
        else
            snprintf(err, errlen, "dataset '%s': %s", cfg->name, msg);
    }
    manifest_free(m);
    free(real);
    if (rc < 0)
        return rc;
    s->ops = &manifest_ops;
    return 0;
}
