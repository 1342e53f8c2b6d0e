/* ImageFolder indexing and source reads: see dataset.h. */
#define _GNU_SOURCE /* qsort_r */
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "log.h"
#include "proto.h"

/* Refused symbolic links logged one by one per dataset; the rest summed up. */
#define DATASET_REFUSED_LOGGED 5

struct index_state {
    struct dataset *ds;
    size_t samples_cap, paths_cap;
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

static int add_sample(struct index_state *st, const char *rel, uint32_t label,
                      const struct stat *sb)
{
    struct dataset *ds = st->ds;
    size_t len = strlen(rel) + 1;
    if (ds->nsamples == UINT32_MAX)
        return -EOVERFLOW;
    if (ds->nsamples == st->samples_cap) {
        size_t cap = st->samples_cap ? st->samples_cap * 2 : 1024;
        struct dataset_sample *s = realloc(ds->samples, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        ds->samples = s;
        st->samples_cap = cap;
    }
    if (ds->paths_len + len > st->paths_cap) {
        size_t cap = st->paths_cap ? st->paths_cap * 2 : 65536;
        while (cap < ds->paths_len + len)
            cap *= 2;
        char *p = realloc(ds->paths, cap);
        if (!p)
            return -ENOMEM;
        ds->paths = p;
        st->paths_cap = cap;
    }
    struct dataset_sample *s = &ds->samples[ds->nsamples++];
    s->path_off = ds->paths_len;
    s->path_hash = store_hash64(rel, len - 1);
    s->label = label;
    s->size = (uint64_t)sb->st_size;
    s->mtime_ns = mtime_ns(sb);
    memcpy(ds->paths + ds->paths_len, rel, len);
    ds->paths_len += len;
    return 0;
}

/* stat() of an entry of the tree. Unless follow_symlinks, a symbolic link
 * whose target resolves outside the root is refused: counted, logged (the
 * first few) and left out. Returns 0, or 1 when the entry is left out
 * (refused, or unreadable: then counted as ignored). */
static int entry_stat(struct index_state *st, const char *path, struct stat *sb)
{
    struct dataset *ds = st->ds;
    if (lstat(path, sb) < 0) {
        st->ignored++;
        return 1;
    }
    if (S_ISLNK(sb->st_mode) && !ds->cfg->follow_symlinks) {
        int inside = access_path_within(ds->real_root, path);
        if (inside == 0) {
            if (ds->refused++ < DATASET_REFUSED_LOGGED)
                log_warn("dataset '%s': refused %s: a symbolic link that leaves the root %s "
                         "(follow_symlinks: true serves such links)",
                         ds->cfg->name, path, ds->real_root);
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
    if (snprintf(dir, sizeof(dir), "%s/%s", st->ds->cfg->root, rel) >= (int)sizeof(dir))
        return -ENAMETOOLONG;
    if ((rc = list_dir(dir, &names, &n)) < 0)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat sb;
        if (snprintf(child, sizeof(child), "%s/%s", rel, names[i]) >= (int)sizeof(child)) {
            rc = -ENAMETOOLONG;
            break;
        }
        if (snprintf(dir, sizeof(dir), "%s/%s", st->ds->cfg->root, child) >= (int)sizeof(dir)) {
            rc = -ENAMETOOLONG;
            break;
        }
        if (entry_stat(st, dir, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode))
            rc = index_dir(st, child, label, depth + 1);
        else if (S_ISREG(sb.st_mode) && is_jpeg_name(names[i]))
            rc = add_sample(st, child, label, &sb);
        else
            st->ignored++;
    }
    free_names(names, n);
    return rc;
}

/* Writers first: a strategy switch waits for the batches in flight, and
 * new ones wait for it, instead of it waiting for a quiet moment. */
static void strategy_lock_init(struct dataset *ds)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&ds->strategy_lock, &a);
    pthread_rwlockattr_destroy(&a);
}

static void dataset_shape(struct dataset *ds)
{
    const struct config_dataset *cfg = ds->cfg;
    uint32_t h = 0, w = 0, c = 0, dtype = PROTO_DTYPE_U8, layout = STEP_LAYOUT_NHWC;
    uint64_t fp = 0xcbf29ce484222325ull;
    ds->mat_h = ds->mat_w = ds->mat_c = ds->mat_dtype = 0;
    ds->mat_bytes = 0;
    for (uint32_t i = 0; i < cfg->nsteps; i++) {
        step_out_shape(&cfg->steps[i], h, w, c, &h, &w, &c);
        dtype = step_out_dtype(&cfg->steps[i], dtype);
        layout = step_out_layout(&cfg->steps[i], layout);
        if (i < ds->split)
            fp = step_fingerprint(&cfg->steps[i], fp);
        if (i + 1 == ds->split) {
            ds->mat_h = h;
            ds->mat_w = w;
            ds->mat_c = c;
            ds->mat_dtype = dtype;
            ds->mat_bytes = (size_t)h * w * c * proto_dtype_size(dtype);
        }
    }
    ds->fingerprint = fp;
    ds->out_h = h;
    ds->out_w = w;
    ds->out_c = c;
    ds->out_dtype = dtype;
    ds->out_layout = layout;
    ds->sample_bytes = (size_t)h * w * c * proto_dtype_size(ds->out_dtype);
}

/* Orders sample ids by path hash (ties, two paths with one 64-bit hash,
 * by id). */
static int cmp_path_hash(const void *a, const void *b, void *arg)
{
    const struct dataset *ds = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint64_t hx = ds->samples[x].path_hash, hy = ds->samples[y].path_hash;
    if (hx != hy)
        return hx < hy ? -1 : 1;
    return (x > y) - (x < y);
}

int dataset_open(struct dataset *ds, uint32_t id, const struct config_dataset *cfg,
                 char *err, size_t errlen)
{
    struct index_state st = {ds, 0, 0, 0};
    char **names = NULL;
    size_t n = 0;
    int rc = 0;

    memset(ds, 0, sizeof(*ds));
    ds->id = id;
    ds->cfg = cfg;
    ds->split = cfg->split;
    ds->zstd_level = cfg->zstd_level;
    strategy_lock_init(ds);
    if (!(ds->real_root = realpath(cfg->root, NULL)) ||
        (ds->root_fd = open(ds->real_root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
        (rc = list_dir(cfg->root, &names, &n)) < 0) {
        rc = rc < 0 ? rc : -errno;
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root,
                 strerror(-rc));
        if (ds->real_root && ds->root_fd < 0) { /* nothing to close */
            free(ds->real_root);
            ds->real_root = NULL;
        }
        dataset_close(ds);
        return rc;
    }
    ds->classes = calloc(n ? n : 1, sizeof(*ds->classes));
    if (!ds->classes) {
        free_names(names, n);
        dataset_close(ds);
        return -ENOMEM;
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
        ds->classes[ds->nclasses] = names[i];
        names[i] = NULL;
        rc = index_dir(&st, ds->classes[ds->nclasses], ds->nclasses, 0);
        ds->nclasses++;
    }
    free_names(names, n);
    if (rc == 0 && ds->nsamples == 0)
        rc = -ENOENT;
    if (rc == 0 && !(ds->bad_logged = calloc(ds->nsamples, 1)))
        rc = -ENOMEM;
    if (rc < 0) {
        snprintf(err, errlen, "dataset '%s': indexing %s: %s", cfg->name, cfg->root,
                 rc == -ENOENT ? "no CLASS/IMAGE.jpg files found" : strerror(-rc));
        dataset_close(ds);
        return rc;
    }
    dataset_shape(ds);
    ds->name_hash = store_hash64(cfg->name, strlen(cfg->name));
    if (!(ds->by_path = malloc((size_t)ds->nsamples * sizeof(*ds->by_path)))) {
        snprintf(err, errlen, "dataset '%s': out of memory", cfg->name);
        dataset_close(ds);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < ds->nsamples; i++)
        ds->by_path[i] = i;
    qsort_r(ds->by_path, ds->nsamples, sizeof(*ds->by_path), cmp_path_hash, ds);
    log_info("dataset '%s': %u samples in %u classes from %s (%llu other entries ignored)",
             cfg->name, ds->nsamples, ds->nclasses, cfg->root,
             (unsigned long long)st.ignored);
    if (ds->refused)
        log_warn("dataset '%s': %llu symbolic links refused: they leave the root %s",
                 cfg->name, (unsigned long long)ds->refused, ds->real_root);
    return 0;
}

void dataset_hold(struct dataset *ds)
{
    ds->refs++;
}

void dataset_release(struct dataset *ds)
{
    if (--ds->refs == 0 && ds->released)
        ds->released(ds);
}

void dataset_close(struct dataset *ds)
{
    if (ds->subset) { /* the index is the parent's */
        ds->classes = NULL;
        ds->paths = NULL;
        ds->by_path = NULL;
        ds->real_root = NULL; /* and so is the root */
    }
    if (ds->real_root) {
        close(ds->root_fd);
        free(ds->real_root);
    }
    pthread_rwlock_destroy(&ds->strategy_lock);
    if (ds->classes)
        for (uint32_t i = 0; i < ds->nclasses; i++)
            free(ds->classes[i]);
    free(ds->classes);
    free(ds->samples);
    free(ds->paths);
    free(ds->bad_logged);
    free(ds->by_path);
    free(ds->on_disk);
    memset(ds, 0, sizeof(*ds));
}

const char *dataset_path(const struct dataset *ds, uint32_t sample)
{
    return ds->paths + ds->samples[sample].path_off;
}

void dataset_open_error(const struct dataset *ds, int rc, char *err, size_t errlen)
{
    if (rc == -EXDEV && ds->real_root)
        snprintf(err, errlen, "open: refused: the path leaves the dataset root %s "
                 "(a symbolic link?)", ds->real_root);
    else
        snprintf(err, errlen, "open: %s", strerror(-rc));
}

int dataset_open_file(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                      struct dataset_file *f, char *err, size_t errlen)
{
    char path[4096];
    struct stat sb;
    int rc;

    if (ds->real_root && !ds->cfg->follow_symlinks) {
        f->fd = access_open_beneath(ds->root_fd, ds->real_root, dataset_path(ds, sample));
        rc = f->fd;
    } else {
        snprintf(path, sizeof(path), "%s/%s", ds->cfg->root, dataset_path(ds, sample));
        f->fd = open(path, O_RDONLY | O_CLOEXEC);
        rc = f->fd < 0 ? -errno : 0;
    }
    if (f->fd < 0) {
        f->fd = -1;
        dataset_open_error(ds, rc, err, errlen);
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

int dataset_read(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                 struct img *out, struct dataset_file *fout, char *err, size_t errlen)
{
    struct dataset_file f;
    int rc = dataset_open_file(ds, sample, max_size, &f, err, errlen);
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

void dataset_set_strategy(struct dataset *ds, uint32_t split, int zstd_level)
{
    ds->split = split;
    ds->zstd_level = zstd_level;
    dataset_shape(ds);
    if (ds->on_disk)
        memset(ds->on_disk, 0, ds->nsamples);
    ds->n.disk_entries = 0;
    ds->n.disk_bytes_raw = 0;
    ds->n.disk_bytes_stored = 0;
}

int dataset_subset(struct dataset *out, const struct dataset *ds, const uint32_t *ids,
                   uint32_t n, uint32_t split, int zstd_level)
{
    memset(out, 0, sizeof(*out));
    out->cfg = ds->cfg;
    out->subset = 1;
    out->classes = ds->classes;
    out->nclasses = ds->nclasses;
    out->paths = ds->paths;
    out->paths_len = ds->paths_len;
    out->root_fd = ds->root_fd;
    out->real_root = ds->real_root;
    out->name_hash = ds->name_hash;
    out->split = split;
    out->zstd_level = zstd_level;
    strategy_lock_init(out);
    out->nsamples = n;
    out->samples = malloc((n ? n : 1) * sizeof(*out->samples));
    out->bad_logged = malloc(n ? n : 1);
    out->on_disk = calloc(n ? n : 1, 1);
    if (!out->samples || !out->bad_logged || !out->on_disk) {
        dataset_close(out);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < n; i++)
        out->samples[i] = ds->samples[ids[i]];
    memset(out->bad_logged, 1, n); /* "logged already": trials stay quiet */
    dataset_shape(out);
    return 0;
}

int dataset_first_error(struct dataset *ds, uint32_t sample)
{
    return __atomic_exchange_n(&ds->bad_logged[sample], 1, __ATOMIC_RELAXED) == 0;
}

void dataset_key(const struct dataset *ds, uint32_t sample, const struct dataset_file *f,
                 struct store_key *key)
{
    const struct dataset_sample *s = &ds->samples[sample];
    key->dataset = ds->name_hash;
    key->path = s->path_hash;
    key->fingerprint = ds->fingerprint;
    key->src_size = f ? f->size : s->size;
    key->src_mtime_ns = f ? f->mtime_ns : s->mtime_ns;
}

/* The first position in by_path whose hash is >= path_hash. */
static size_t find_pos(const struct dataset *ds, uint64_t path_hash)
{
    size_t lo = 0, hi = ds->nsamples;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->samples[ds->by_path[mid]].path_hash < path_hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint32_t dataset_find_path(const struct dataset *ds, uint64_t path_hash)
{
    size_t pos = find_pos(ds, path_hash);
    if (pos < ds->nsamples && ds->samples[ds->by_path[pos]].path_hash == path_hash)
        return ds->by_path[pos];
    return UINT32_MAX;
}

int dataset_key_current(const struct dataset *ds, const struct store_key *key)
{
    int live = 0;
    pthread_rwlock_t *lock = (pthread_rwlock_t *)&ds->strategy_lock;
    pthread_rwlock_rdlock(lock);
    if (key->dataset != ds->name_hash || key->fingerprint != ds->fingerprint)
        goto out;
    /* Every sample with that path hash (two paths may share one). */
    for (size_t pos = find_pos(ds, key->path); pos < ds->nsamples; pos++) {
        const struct dataset_sample *s = &ds->samples[ds->by_path[pos]];
        if (s->path_hash != key->path)
            break;
        if (s->size == key->src_size && s->mtime_ns == key->src_mtime_ns) {
            live = 1;
            break;
        }
    }
out:
    pthread_rwlock_unlock(lock);
    return live;
}
