/*
 * A manifest's probe cache in cache.dir (probecache.h).
 *
 * The file is cachedir.h's keyed blob: magic "PRPROBE1", the manifest's
 * path, size and mtime, then count records (host byte order: this
 * machine's cache): u64 size, u32 url_len, u32 etag_len, url, NUL, etag,
 * NUL.
 */
#include "probecache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cachedir.h"
#include "hash.h"

#define PROBECACHE_MAGIC "PRPROBE1"
#define PROBECACHE_FORMAT 1u
#define PROBECACHE_FILE_MAX (1ull << 30) /* a larger file is not ours */
#define REC_HEAD 16
#define URL_MAX 8192
#define ETAG_MAX 256

struct probecache {
    unsigned char *file;
    struct probecache_entry *e; /* sorted by url */
    size_t n;
};

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct probecache_entry *)a)->url,
                  ((const struct probecache_entry *)b)->url);
}

void probecache_free(struct probecache *pc)
{
    if (!pc)
        return;
    free(pc->file);
    free(pc->e);
    free(pc);
}

/* The records of body (len bytes): count of them into pc->e. 0 or -ENOENT. */
static int parse(struct probecache *pc, const unsigned char *body, size_t len, uint64_t count)
{
    size_t at = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t size;
        uint32_t ul, el;
        if (len - at < REC_HEAD)
            return -ENOENT;
        memcpy(&size, body + at, 8);
        memcpy(&ul, body + at + 8, 4);
        memcpy(&el, body + at + 12, 4);
        at += REC_HEAD;
        if (ul == 0 || ul > URL_MAX || el > ETAG_MAX || len - at < (size_t)ul + el + 2)
            return -ENOENT;
        const char *url = (const char *)body + at, *etag = url + ul + 1;
        if (url[ul] || etag[el] || memchr(url, 0, ul) || memchr(etag, 0, el))
            return -ENOENT;
        pc->e[pc->n++] = (struct probecache_entry){url, etag, size};
        at += (size_t)ul + el + 2;
    }
    return at == len ? 0 : -ENOENT;
}

static struct cachedir_key key_of(const struct probecache_id *id)
{
    return (struct cachedir_key){"probes", PROBECACHE_MAGIC, PROBECACHE_FORMAT, id->manifest,
                                 id->size, (uint64_t)id->mtime_ns};
}

int probecache_load(const char *cache_dir, const struct probecache_id *id,
                    struct probecache **out)
{
    unsigned char *file;
    const unsigned char *body;
    size_t len;
    uint64_t count;
    struct cachedir_key key = key_of(id);
    *out = NULL;
    int rc = cachedir_load_blob(cache_dir, &key, PROBECACHE_FILE_MAX, &file, &body, &len, &count);
    if (rc < 0)
        return rc;
    if (count > len / (REC_HEAD + 2)) {
        free(file);
        return -ENOENT;
    }
    struct probecache *pc = calloc(1, sizeof(*pc));
    if (!pc || !(pc->e = calloc(count ? count : 1, sizeof(*pc->e)))) {
        free(pc);
        free(file);
        return -ENOMEM;
    }
    pc->file = file;
    if (parse(pc, body, len, count) < 0) {
        probecache_free(pc);
        return -ENOENT;
    }
    qsort(pc->e, pc->n, sizeof(*pc->e), cmp_entry);
    *out = pc;
    return 0;
}

const struct probecache_entry *probecache_find(const struct probecache *pc, const char *url)
{
    struct probecache_entry key = {.url = url};
    return pc && pc->n ? bsearch(&key, pc->e, pc->n, sizeof(key), cmp_entry) : NULL;
}

int probecache_save(const char *cache_dir, const struct probecache_id *id,
                    const struct probecache_entry *e, size_t n)
{
    struct cachedir_key key = key_of(id);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += REC_HEAD + strlen(e[i].url) + strlen(e[i].etag) + 2;
    unsigned char *body = malloc(len ? len : 1), *p = body;
    if (!body)
        return -ENOMEM;
    uint64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t ul = (uint32_t)strlen(e[i].url), el = (uint32_t)strlen(e[i].etag);
        if (ul == 0 || ul > URL_MAX || el > ETAG_MAX)
            continue; /* not kept: asked again at the next start */
        memcpy(p, &e[i].size, 8);
        memcpy(p + 8, &ul, 4);
        memcpy(p + 12, &el, 4);
        memcpy(p + REC_HEAD, e[i].url, ul + 1);
        memcpy(p + REC_HEAD + ul + 1, e[i].etag, el + 1);
        p += REC_HEAD + ul + el + 2;
        count++;
    }
    int rc = cachedir_save_blob(cache_dir, &key, count, body, (size_t)(p - body));
    free(body);
    return rc;
}
