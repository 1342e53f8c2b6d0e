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

#include "log.h"
#include "proto.h"

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
        if (stat(dir, &sb) < 0) {
            st->ignored++;
            continue;
        }
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

static void dataset_shape(struct dataset *ds)
{
    const struct config_dataset *cfg = ds->cfg;
    uint32_t h = 0, w = 0, c = 0, dtype = PROTO_DTYPE_U8;
    uint64_t fp = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < cfg->nsteps; i++) {
        step_out_shape(&cfg->steps[i], h, w, c, &h, &w, &c);
        dtype = step_out_dtype(&cfg->steps[i], dtype);
        if (i < cfg->split)
            fp = step_fingerprint(&cfg->steps[i], fp);
        if (i + 1 == cfg->split) {
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
    int rc;

    memset(ds, 0, sizeof(*ds));
    ds->id = id;
    ds->cfg = cfg;
    if ((rc = list_dir(cfg->root, &names, &n)) < 0) {
        snprintf(err, errlen, "dataset '%s': root %s: %s", cfg->name, cfg->root,
                 strerror(-rc));
        return rc;
    }
    ds->classes = calloc(n ? n : 1, sizeof(*ds->classes));
    if (!ds->classes) {
        free_names(names, n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", cfg->root, names[i]);
        if (stat(path, &sb) < 0 || !S_ISDIR(sb.st_mode)) {
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
    return 0;
}

void dataset_close(struct dataset *ds)
{
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

int dataset_open_file(const struct dataset *ds, uint32_t sample, uint64_t max_size,
                      struct dataset_file *f, char *err, size_t errlen)
{
    char path[4096];
    struct stat sb;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", ds->cfg->root, dataset_path(ds, sample));
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "open: %s", strerror(-rc));
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
    if (key->dataset != ds->name_hash || key->fingerprint != ds->fingerprint)
        return 0;
    /* Every sample with that path hash (two paths may share one). */
    for (size_t pos = find_pos(ds, key->path); pos < ds->nsamples; pos++) {
        const struct dataset_sample *s = &ds->samples[ds->by_path[pos]];
        if (s->path_hash != key->path)
            break;
        if (s->size == key->src_size && s->mtime_ns == key->src_mtime_ns)
            return 1;
    }
    return 0;
}
