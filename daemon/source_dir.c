/*
 * A directory as a dataset's source (source.h): an ImageFolder tree indexed
 * at start-up. Classes are the sub-directories of the root, sorted by name
 * (byte order, as Python's sorted() does); a class's samples are its files
 * with one of torchvision's image extensions (fileext.h: .jpg .jpeg .png
 * .ppm .bmp .pgm .tif .tiff .webp, case-insensitive), found recursively,
 * sorted; label = class index. This is torchvision's ImageFolder order, so
 * sample ids match a torchvision dataset's indices. The log names how many
 * files of each extension were indexed; a file the decoder cannot read is
 * a bad sample when it is read, never left out here.
 *
 * Unless follow_symlinks, a symbolic link whose target leaves the root is
 * refused at indexing (counted, logged) and files are opened below the
 * root only (access_open_beneath; RESOLVE_BENEATH through the I/O ring).
 */
#define _GNU_SOURCE /* O_PATH */
#include "source_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "fileext.h"
#include "io.h"
#include "log.h"

struct source_dir {
    const char *root;    /* as configured */
    char *real_root;     /* resolved */
    int root_fd;         /* O_PATH */
    int follow_symlinks;
    uint64_t refused;    /* entries refused at indexing: links leaving the root */
};

/* Refused symbolic links logged one by one per dataset; the rest summed up. */
#define SOURCE_DIR_REFUSED_LOGGED 5

struct index_state {
    struct source_dir *src;
    struct index *ix;
    const char *name; /* the dataset's, for logs */
    uint64_t ignored;
    uint64_t per_ext[FILEEXT_COUNT];
    int audio; /* source_audio: index audio files, not images */
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
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

/* Walks root/rel recursively in sorted order, adding image files. */
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
        int ext;
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
        else if (S_ISREG(sb.st_mode) && (ext = fileext_sample(names[i], st->audio)) >= 0) {
            rc = index_add_sample(st->ix, child, label, (uint64_t)sb.st_size,
                                  source_mtime_ns(&sb));
            st->per_ext[ext]++;
        } else {
            st->ignored++;
        }
    }
    free_names(names, n);
    return rc;
}

static void dir_free(struct source_dir *src)
{
    if (src->root_fd >= 0)
        close(src->root_fd);
    free(src->real_root);
    free(src);
}

static void dir_close(struct source *s)
{
    dir_free(s->impl);
    s->impl = NULL;
}

static void dir_open_error(const struct source *s, int rc, char *err, size_t errlen)
{
    const struct source_dir *src = s->impl;
    if (rc == -EXDEV && src->real_root)
        snprintf(err, errlen, "open: refused: the path leaves the dataset root %s "
                 "(a symbolic link?)", src->real_root);
    else
        snprintf(err, errlen, "open: %s", strerror(-rc));
}

static int dir_open_file(const struct source *s, const struct index *ix, uint32_t sample,
                         uint64_t max_size, struct source_file *f, char *err, size_t errlen)
{
    const struct source_dir *src = s->impl;
    const char *path = index_path(ix, sample);
    char full[4096];
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
        dir_open_error(s, rc, err, errlen);
        return rc;
    }
    return source_file_stat(f, f->fd, max_size, err, errlen);
}

static void dir_req(const struct source *s, const struct index *ix, uint32_t sample, void *buf,
                    size_t len, struct io_req *q)
{
    const struct source_dir *src = s->impl;
    q->fd = src->root_fd;
    q->buf = buf;
    q->len = len;
    q->off = 0;
    q->path = index_path(ix, sample);
    q->direct = 0;
    /* Links out of the root stay refused at open (access.h). */
    q->real_root = src->follow_symlinks ? NULL : src->real_root;
}

static const struct source_ops dir_ops = {
    .close = dir_close,
    .open_error = dir_open_error,
    .open_file = dir_open_file,
    .req = dir_req,
};

int source_dir_new(struct source *s, const struct config_dataset *cfg, struct index *ix,
                   char *err, size_t errlen)
{
    struct source_dir *src = calloc(1, sizeof(*src));
    struct index_state st = {.src = src, .ix = ix, .name = cfg->name,
                             .audio = source_audio(cfg)};
    char **names = NULL, exts[256];
    size_t n = 0;
    int rc = 0;

    if (!src) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        return -ENOMEM;
    }
    src->root = cfg->root;
    src->root_fd = -1;
    src->follow_symlinks = cfg->follow_symlinks;
    if (!(src->real_root = realpath(cfg->root, NULL)) ||
        (src->root_fd = open(src->real_root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (rc = list_dir(cfg->root, &names, &n)) < 0) {
        rc = rc < 0 ? rc : -errno;
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root,
                 strerror(-rc));
        dir_free(src);
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
    if ((rc = source_folder_finish(ix, rc, cfg,
                                   st.audio ? "CLASS/AUDIO files" : "CLASS/IMAGE files",
                                   err, errlen)) < 0) {
        dir_free(src);
        return rc;
    }
    source_ext_summary(st.per_ext, exts, sizeof(exts));
    log_info("dataset '%s': %u samples in %u classes from %s (%s; %llu other entries ignored)",
             cfg->name, ix->n, ix->nclasses, cfg->root, exts, (unsigned long long)st.ignored);
    if (src->refused)
        log_warn("dataset '%s': %llu symbolic links refused: they leave the root %s",
                 cfg->name, (unsigned long long)src->refused, src->real_root);
    s->ops = &dir_ops;
    s->impl = src;
    s->refused = src->refused;
    return 0;
}
