/* A directory (ImageFolder) as a dataset's source: see source_dir.h. */
#define _GNU_SOURCE /* O_PATH */
#include "source_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "io.h"
#include "log.h"

/* Refused symbolic links logged one by one per dataset; the rest summed up. */
#define SOURCE_DIR_REFUSED_LOGGED 5

struct index_state {
    struct source_dir *src;
    struct index *ix;
    const char *name; /* the dataset's, for logs */
    uint64_t ignored;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_jpeg_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

/* Sorted names of the entries of dir (without . and ..). */
static int list_dir(const char *dir, char ***names, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t cap = 0;
    *names = NULL;
    *n = 0;
    if (!d)
        return -errno;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (*n == cap) {
            char **nn = realloc(*names, (cap = cap ? cap * 2 : 64) * sizeof(*nn));
            if (!nn)
                goto nomem;
            *names = nn;
        }
        if (!((*names)[*n] = strdup(e->d_name)))
            goto nomem;
        (*n)++;
    }
    closedir(d);
    qsort(*names, *n, sizeof(**names), cmp_str);
    return 0;
nomem:
    closedir(d);
    for (size_t i = 0; i < *n; i++)
        free((*names)[i]);
    free(*names);
    *names = NULL;
    *n = 0;
    return -ENOMEM;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int64_t mtime_ns(const struct stat *sb)
{
    return (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
}

/* stat() of an entry of the tree. Unless follow_symlinks, a symbolic link
 * whose target resolves outside the root is refused: counted, logged (the
 * first few) and left out. Returns 0, or 1 when the entry is left out
 * (refused, or unreadable: then counted as ignored). */
static int entry_stat(struct index_state *st, const char *path, struct stat *sb)
{
    struct source_dir *src = st->src;
    if (lstat(path, sb) < 0) {
        st->ignored++;
        return 1;
    }
    if (S_ISLNK(sb->st_mode) && !src->follow_symlinks) {
        int inside = access_path_within(src->real_root, path);
        if (inside == 0) {
            if (src->refused++ < SOURCE_DIR_REFUSED_LOGGED)
                log_warn("dataset '%s': refused %s: a symbolic link that leaves the root %s "
                         "(follow_symlinks: true serves such links)",
                         st->name, path, src->real_root);
            return 1;
        }
    }
    if (S_ISLNK(sb->st_mode) && stat(path, sb) < 0) {
        st->ignored++;
        return 1;
    }
    return 0;
}

/* Walks root/rel recursively in sorted order, adding JPEG files. */
static int index_dir(struct index_state *st, const char *rel, uint32_t label, int depth)
{
    char dir[4096], child[4096];
    char **names;
    size_t n;
    int rc;

    if (depth > 32)
        return -ELOOP;
    if (snprintf(dir, sizeof(dir), "%s/%s", st->src->root, rel) >= (int)sizeof(dir))
        return -ENAMETOOLONG;
    if ((rc = list_dir(dir, &names, &n)) < 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat sb;
        if (snprintf(child, sizeof(child), "%s/%s", rel, names[i]) >= (int)sizeof(child)) {
            rc = -ENAMETOOLONG;
            break;
        }
        if (snprintf(dir, sizeof(dir), "%s/%s", st->src->root, child) >= (int)sizeof(dir)) {
            rc = -ENAMETOOLONG;
            break;
        }
        if (entry_stat(st, dir, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode))
            rc = index_dir(st, child, label, depth + 1);
        else if (S_ISREG(sb.st_mode) && is_jpeg_name(names[i]))
            rc = index_add_sample(st->ix, child, label, (uint64_t)sb.st_size, mtime_ns(&sb));
        else
            st->ignored++;
    }
    free_names(names, n);
    return rc;
}

int source_dir_open(struct source_dir *src, const struct config_dataset *cfg,
                    struct index *ix, char *err, size_t errlen)
{
    struct index_state st = {src, ix, cfg->name, 0};
    char **names = NULL;
    size_t n = 0;
    int rc = 0;

    memset(src, 0, sizeof(*src));
    src->root = cfg->root;
    src->root_fd = -1;
    src->follow_symlinks = cfg->follow_symlinks;
    if (!(src->real_root = realpath(cfg->root, NULL)) ||
        (src->root_fd = open(src->real_root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (rc = list_dir(cfg->root, &names, &n)) < 0) {
        rc = rc < 0 ? rc : -errno;
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root,
                 strerror(-rc));
        source_dir_close(src);
        return rc;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", cfg->root, names[i]);
        if (entry_stat(&st, path, &sb) != 0)
            continue;
        if (!S_ISDIR(sb.st_mode)) {
            st.ignored++;
            continue;
        }
        uint32_t label = ix->nclasses;
        rc = index_add_class(ix, names[i]);
        names[i] = NULL;
        if (rc == 0)
            rc = index_dir(&st, ix->classes[label], label, 0);
    }
    free_names(names, n);
    if (rc == 0 && ix->n == 0)
        rc = -ENOENT;
    if (rc == 0)
        rc = index_finish(ix);
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 rc == -ENOENT ? "no CLASS/IMAGE.jpg files found" : strerror(-rc));
        source_dir_close(src);
        return rc;
    }
    log_info("dataset '%s': %u samples in %u classes from %s (%llu other entries ignored)",
             cfg->name, ix->n, ix->nclasses, cfg->root, (unsigned long long)st.ignored);
    if (src->refused)
        log_warn("dataset '%s': %llu symbolic links refused: they leave the root %s",
                 cfg->name, (unsigned long long)src->refused, src->real_root);
    return 0;
}

void source_dir_close(struct source_dir *src)
{
    if (src->root_fd >= 0)
        close(src->root_fd);
    free(src->real_root);
    memset(src, 0, sizeof(*src));
    src->root_fd = -1;
}

void source_dir_open_error(const struct source_dir *src, int rc, char *err, size_t errlen)
{
    if (rc == -EXDEV && src->real_root)
        snprintf(err, errlen, "open: refused: the path leaves the dataset root %s "
                 "(a symbolic link?)", src->real_root);
    else
        snprintf(err, errlen, "open: %s", strerror(-rc));
}

int source_dir_open_file(const struct source_dir *src, const char *path, uint64_t max_size,
                         struct source_file *f, char *err, size_t errlen)
{
    char full[4096];
    struct stat sb;
    int rc;

    if (src->real_root && !src->follow_symlinks) {
        f->fd = access_open_beneath(src->root_fd, src->real_root, path);
        rc = f->fd;
    } else {
        snprintf(full, sizeof(full), "%s/%s", src->root, path);
        f->fd = open(full, O_RDONLY | O_CLOEXEC);
        rc = f->fd < 0 ? -errno : 0;
    }
    if (f->fd < 0) {
        f->fd = -1;
        source_dir_open_error(src, rc, err, errlen);
        return rc;
    }
    if (fstat(f->fd, &sb) < 0) {
        rc = -errno;
        snprintf(err, errlen, "fstat: %s", strerror(-rc));
    } else if ((uint64_t)sb.st_size > max_size) {
        rc = -EFBIG;
        snprintf(err, errlen, "file is %lld bytes, over the limit of %llu",
                 (long long)sb.st_size, (unsigned long long)max_size);
    } else {
        f->size = (uint64_t)sb.st_size;
        f->mtime_ns = mtime_ns(&sb);
        return 0;
    }
    close(f->fd);
    f->fd = -1;
    return rc;
}

int source_dir_read(const struct source_dir *src, const char *path, uint64_t max_size,
                    struct img *out, struct source_file *fout, char *err, size_t errlen)
{
    struct source_file f;
    int rc = source_dir_open_file(src, path, max_size, &f, err, errlen);
    if (rc < 0)
        return rc;
    if ((rc = img_reserve(out, (size_t)f.size)) < 0) {
        snprintf(err, errlen, "no memory for %llu bytes", (unsigned long long)f.size);
    } else {
        size_t got = 0, want = (size_t)f.size;
        while (got < want) {
            ssize_t r = pread(f.fd, out->data + got, want - got, (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = -errno;
                snprintf(err, errlen, "read: %s", strerror(errno));
                break;
            }
            if (r == 0)
                break; /* shrank under us: decode sees what is there */
            got += (size_t)r;
        }
        out->fmt = IMG_ENCODED;
        out->len = got;
    }
    close(f.fd);
    if (fout) {
        *fout = f;
        fout->fd = -1;
    }
    return rc;
}

void source_dir_req(const struct source_dir *src, const char *path, void *buf, size_t len,
                    struct io_req *q)
{
    q->fd = src->root_fd;
    q->buf = buf;
    q->len = len;
    q->off = 0;
    q->path = path;
    q->direct = 0;
    /* Links out of the root stay refused at open (access.h). */
    q->real_root = src->follow_symlinks ? NULL : src->real_root;
}
