/* A dataset's index: see index.h. */
#define _GNU_SOURCE /* qsort_r */
#include "index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

int index_add_class(struct index *ix, char *name)
{
    if (ix->nclasses == ix->classes_cap) {
        size_t cap = ix->classes_cap ? ix->classes_cap * 2 : 16;
        char **c = realloc(ix->classes, cap * sizeof(*c));
        if (!c) {
            free(name);
            return -ENOMEM;
        }
        ix->classes = c;
        ix->classes_cap = cap;
    }
    ix->classes[ix->nclasses++] = name;
    return 0;
}

int index_add_sample(struct index *ix, const char *path, uint32_t label, uint64_t size,
                     int64_t mtime_ns)
{
    size_t len = strlen(path) + 1;
    if (ix->n == UINT32_MAX)
        return -EOVERFLOW;
    if (ix->n == ix->samples_cap) {
        size_t cap = ix->samples_cap ? ix->samples_cap * 2 : 1024;
        struct index_sample *s = realloc(ix->samples, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        ix->samples = s;
        ix->samples_cap = cap;
    }
    if (ix->paths_len + len > ix->paths_cap) {
        size_t cap = ix->paths_cap ? ix->paths_cap * 2 : 65536;
        while (cap < ix->paths_len + len)
            cap *= 2;
        char *p = realloc(ix->paths, cap);
        if (!p)
            return -ENOMEM;
        ix->paths = p;
        ix->paths_cap = cap;
    }
    struct index_sample *s = &ix->samples[ix->n++];
    s->path_off = ix->paths_len;
    s->path_hash = hash_xxh64(path, len - 1);
    s->label = label;
    s->size = size;
    s->mtime_ns = mtime_ns;
    memcpy(ix->paths + ix->paths_len, path, len);
    ix->paths_len += len;
    return 0;
}

/* Orders sample ids by path hash (ties, two paths with one 64-bit hash,
 * by id). */
static int cmp_path_hash(const void *a, const void *b, void *arg)
{
    const struct index *ix = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint64_t hx = ix->samples[x].path_hash, hy = ix->samples[y].path_hash;
    if (hx != hy)
        return hx < hy ? -1 : 1;
    return (x > y) - (x < y);
}

int index_finish(struct index *ix)
{
    if (!(ix->by_path = malloc((size_t)(ix->n ? ix->n : 1) * sizeof(*ix->by_path))))
        return -ENOMEM;
    for (uint32_t i = 0; i < ix->n; i++)
        ix->by_path[i] = i;
    qsort_r(ix->by_path, ix->n, sizeof(*ix->by_path), cmp_path_hash, ix);
    return 0;
}

void index_free(struct index *ix)
{
    for (uint32_t i = 0; ix->classes && i < ix->nclasses; i++)
        free(ix->classes[i]);
    free(ix->classes);
    free(ix->samples);
    free(ix->paths);
    free(ix->by_path);
    memset(ix, 0, sizeof(*ix));
}

/* The first position in by_path whose hash is >= path_hash. */
static size_t find_pos(const struct index *ix, uint64_t path_hash)
{
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->samples[ix->by_path[mid]].path_hash < path_hash)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint32_t index_find_path(const struct index *ix, uint64_t path_hash, const uint32_t **ids)
{
    size_t pos = find_pos(ix, path_hash), end = pos;
    while (end < ix->n && ix->samples[ix->by_path[end]].path_hash == path_hash)
        end++;
    *ids = ix->by_path + pos;
    return (uint32_t)(end - pos);
}
