/*
 * A tar shard's member list in cache.dir (shardidx.h).
 *
 * In memory and on disk the entries are one byte string of records:
 *     u8 type, u8 zero[3], u32 name_len, u64 offset, u64 size, u32 data_len,
 *     name (name_len bytes) and a NUL, data (data_len bytes)
 * (host byte order: the file is this machine's cache). The file is
 * cachedir.h's keyed blob: magic "PRSHIDX1", the shard's locator, size
 * and version, the records' count, the body.
 */
#define _GNU_SOURCE
#include "shardidx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachedir.h"
#include "hash.h"
#include "vec.h"

#define SHARDIDX_MAGIC "PRSHIDX1"
#define SHARDIDX_FORMAT 1u
#define SHARDIDX_FILE_MAX (512ull << 20) /* a larger file is not ours */
#define REC_HEAD 28                      /* the fixed part of a record */

struct shardidx {
    uint8_t *body;  /* the records */
    size_t len, cap;
    size_t *at;     /* where each record starts */
    size_t n, ncap;
};

struct rec {
    uint8_t type;
    uint32_t name_len, data_len;
    uint64_t offset, size;
};

static void rec_get(const uint8_t *p, struct rec *r)
{
    r->type = p[0];
    memcpy(&r->name_len, p + 4, 4);
    memcpy(&r->offset, p + 8, 8);
    memcpy(&r->size, p + 16, 8);
    memcpy(&r->data_len, p + 24, 4);
}

struct shardidx *shardidx_new(void)
{
    return calloc(1, sizeof(struct shardidx));
}

void shardidx_free(struct shardidx *x)
{
    if (!x)
        return;
    free(x->body);
    free(x->at);
    free(x);
}

static int body_reserve(struct shardidx *x, size_t more)
{
    if (more > SIZE_MAX - x->len)
        return -ENOMEM;
    uint8_t *b = vec_grow(x->body, &x->cap, x->len + more, 1, 4096);
    if (!b)
        return -ENOMEM;
    x->body = b;
    return 0;
}

static int at_push(struct shardidx *x, size_t pos)
{
    size_t *a = vec_grow(x->at, &x->ncap, x->n + 1, sizeof(*a), 256);
    if (!a)
        return -ENOMEM;
    x->at = a;
    x->at[x->n++] = pos;
    return 0;
}

int shardidx_add(struct shardidx *x, const struct tar_entry *e)
{
    if (e->data) {
        /* the data of the last header: it is the end of the body */
        struct rec r;
        if (x->n == 0 || e->size > TAR_DATA_MAX)
            return -EINVAL;
        rec_get(x->body + x->at[x->n - 1], &r);
        if (r.data_len || r.size != e->size || body_reserve(x, e->size) < 0)
            return r.data_len || r.size != e->size ? -EINVAL : -ENOMEM;
        uint32_t dl = (uint32_t)e->size;
        memcpy(x->body + x->len, e->data, e->size);
        x->len += e->size;
        memcpy(x->body + x->at[x->n - 1] + 24, &dl, 4);
        return 0;
    }
    size_t nl = strlen(e->name);
    if (nl > TAR_NAME_MAX)
        return -EINVAL;
    if (body_reserve(x, REC_HEAD + nl + 1) < 0 || at_push(x, x->len) < 0)
        return -ENOMEM;
    uint8_t *p = x->body + x->len;
    uint32_t nl32 = (uint32_t)nl, zero = 0;
    memset(p, 0, 4);
    p[0] = (uint8_t)e->type;
    memcpy(p + 4, &nl32, 4);
    memcpy(p + 8, &e->offset, 8);
    memcpy(p + 16, &e->size, 8);
    memcpy(p + 24, &zero, 4);
    memcpy(p + REC_HEAD, e->name, nl + 1);
    x->len += REC_HEAD + nl + 1;
    return 0;
}

size_t shardidx_count(const struct shardidx *x)
{
    return x->n;
}

void shardidx_entry(const struct shardidx *x, size_t i, struct tar_entry *e,
                    const uint8_t **data, size_t *data_len)
{
    const uint8_t *p = x->body + x->at[i];
    struct rec r;
    rec_get(p, &r);
    *e = (struct tar_entry){.name = (const char *)p + REC_HEAD, .offset = r.offset,
                            .size = r.size, .type = (enum tar_type)r.type, .data = NULL};
    *data = r.data_len ? p + REC_HEAD + r.name_len + 1 : NULL;
    *data_len = r.data_len;
}

/* Checks the records of body (len bytes, count of them) against the
 * shard's size, filling x->at. 0 or -EBADMSG / -ENOMEM. */
static int parse_body(struct shardidx *x, uint64_t count, uint64_t shard_size)
{
    size_t pos = 0;
    for (uint64_t i = 0; i < count; i++) {
        struct rec r;
        if (x->len - pos < REC_HEAD)
            return -EBADMSG;
        rec_get(x->body + pos, &r);
        if (r.type > TAR_OTHER || r.name_len > TAR_NAME_MAX || r.offset > shard_size ||
            r.size > shard_size - r.offset || r.data_len > TAR_DATA_MAX ||
            (r.data_len && r.data_len != r.size))
            return -EBADMSG;
        size_t need = REC_HEAD + (size_t)r.name_len + 1 + r.data_len;
        if (x->len - pos < need || x->body[pos + REC_HEAD + r.name_len] != 0 ||
            memchr(x->body + pos + REC_HEAD, 0, r.name_len))
            return -EBADMSG;
        if (at_push(x, pos) < 0)
            return -ENOMEM;
        pos += need;
    }
    return pos == x->len ? 0 : -EBADMSG;
}

static struct cachedir_key key_of(const struct shardidx_id *id)
{
    return (struct cachedir_key){"shard", SHARDIDX_MAGIC, SHARDIDX_FORMAT, id->locator,
                                 id->size, id->version};
}

void shardidx_file_name(const char *locator, char *buf, size_t len)
{
    struct shardidx_id id = {locator, 0, 0};
    struct cachedir_key key = key_of(&id);
    cachedir_blob_name(&key, buf, len);
}

int shardidx_load(const char *cache_dir, const struct shardidx_id *id, struct shardidx **out)
{
    unsigned char *file;
    const unsigned char *body;
    size_t len;
    uint64_t count;
    struct cachedir_key key = key_of(id);
    *out = NULL;
    int rc = cachedir_load_blob(cache_dir, &key, SHARDIDX_FILE_MAX, &file, &body, &len, &count);
    if (rc < 0)
        return rc;
    struct shardidx *x = shardidx_new();
    if (!x || !(x->body = malloc(len ? len : 1))) {
        shardidx_free(x);
        free(file);
        return -ENOMEM;
    }
    memcpy(x->body, body, len);
    x->len = x->cap = len;
    free(file);
    if ((rc = parse_body(x, count, id->size)) < 0) {
        shardidx_free(x);
        return rc == -ENOMEM ? rc : -ENOENT;
    }
    *out = x;
    return 0;
}

int shardidx_save(const char *cache_dir, const struct shardidx_id *id, const struct shardidx *x)
{
    struct cachedir_key key = key_of(id);
    return cachedir_save_blob(cache_dir, &key, x->n, x->body, x->len);
}
