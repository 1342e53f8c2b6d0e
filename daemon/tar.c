/*
 * The tar reader (tar.h): a state machine over header blocks that asks
 * for exactly the bytes it needs.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tar.h"

enum { ST_HEADER, ST_LONGNAME, ST_PAX, ST_DATA, ST_END };

/* Header fields (POSIX ustar layout). */
#define H_NAME 0
#define H_SIZE 124
#define H_CHKSUM 148
#define H_TYPE 156
#define H_MAGIC 257
#define H_PREFIX 345

static int fail(struct tar_reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct tar_reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof(r->err), fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

static uint64_t padded(uint64_t size)
{
    return (size + TAR_BLOCK - 1) & ~(uint64_t)(TAR_BLOCK - 1);
}

void tar_reader_init(struct tar_reader *r, uint64_t shard_size)
{
    memset(r, 0, sizeof(*r));
    r->shard_size = shard_size;
    r->state = ST_HEADER;
}

int tar_reader_want(const struct tar_reader *r, uint64_t *off, size_t *len)
{
    switch (r->state) {
    case ST_HEADER:
        *off = r->pos;
        *len = TAR_BLOCK;
        return 0;
    case ST_LONGNAME:
    case ST_PAX:
        *off = r->pos + TAR_BLOCK;
        *len = (size_t)r->ext_size;
        return 0;
    case ST_DATA:
        *off = r->cur.offset;
        *len = (size_t)r->cur.size;
        return 0;
    default:
        return 1;
    }
}

int tar_reader_want_data(struct tar_reader *r)
{
    if (r->state != ST_HEADER || r->members == 0 || r->cur.type != TAR_FILE)
        return -EINVAL;
    if (r->cur.size > TAR_DATA_MAX)
        return -E2BIG;
    r->state = ST_DATA;
    return 0;
}

/* An octal field (leading spaces or NULs, ended by a space or NUL), or
 * GNU base-256 when the top bit of the first byte is set. */
static int number(const uint8_t *f, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80) /* negative or over 2^(8n-1): refused */
            return -1;
        for (size_t i = 1; i < n; i++) {
            if (x >> 56)
                return -1;
            x = x << 8 | f[i];
        }
        *v = x;
        return 0;
    }
    size_t i = 0;
    while (i < n && (f[i] == ' ' || f[i] == '\0'))
        i++;
    size_t digits = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (x >> 60)
            return -1;
        x = x << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    *v = x;
    return 0;
}

static int checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (number(h + H_CHKSUM, 8, &want) < 0)
        return 0;
    uint64_t u = 0;
    int64_t s = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        uint8_t b = i >= H_CHKSUM && i < H_CHKSUM + 8 ? ' ' : h[i];
        u += b;
        s += (int8_t)b;
    }
    return u == want || (uint64_t)s == want;
}

/* Copies a field of at most n bytes (NUL-terminated or full). */
static size_t field(char *dst, const uint8_t *src, size_t n)
{
    size_t k = strnlen((const char *)src, n);
    memcpy(dst, src, k);
    dst[k] = '\0';
    return k;
}

/* pax records "LEN KEY=VALUE\n": path and size are what matter here. */
static int parse_pax(struct tar_reader *r, const uint8_t *buf, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (buf[i] == '\0') /* padding some writers leave */
            break;
        size_t rec = 0, j = i;
        while (j < len && buf[j] >= '0' && buf[j] <= '9' && rec < len)
            rec = rec * 10 + (size_t)(buf[j++] - '0');
        if (j == i || j >= len || buf[j] != ' ' || rec <= j - i + 1 || rec > len - i ||
            buf[i + rec - 1] != '\n')
            return fail(r, "malformed pax record at offset %llu",
                        (unsigned long long)(r->pos + TAR_BLOCK + i));
        const char *kv = (const char *)buf + j + 1;
        size_t kvlen = i + rec - 1 - (j + 1);
        const char *eq = memchr(kv, '=', kvlen);
        if (eq == NULL)
            return fail(r, "pax record without '=' at offset %llu",
                        (unsigned long long)(r->pos + TAR_BLOCK + i));
        size_t klen = (size_t)(eq - kv), vlen = kvlen - klen - 1;
        const char *val = eq + 1;
        if (klen == 4 && memcmp(kv, "path", 4) == 0) {
            if (vlen > TAR_NAME_MAX || memchr(val, '\0', vlen) != NULL)
                return fail(r, "pax path of %zu bytes", vlen);
            memcpy(r->pax_path, val, vlen);
            r->pax_path[vlen] = '\0';
            r->have_pax_path = 1;
        } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
            uint64_t v = 0;
            if (vlen == 0 || vlen > 19)
                return fail(r, "bad pax size");
            for (size_t k = 0; k < vlen; k++) {
                if (val[k] < '0' || val[k] > '9')
                    return fail(r, "bad pax size");
                v = v * 10 + (uint64_t)(val[k] - '0');
            }
            r->pax_size = v;
            r->have_pax_size = 1;
        }
        i += rec;
    }
    return 0;
}

static int feed_header(struct tar_reader *r, const uint8_t *h, size_t got, struct tar_entry *e)
{
    unsigned long long at = (unsigned long long)r->pos;
    if (got == 0 && (r->shard_size == UINT64_MAX || r->pos == r->shard_size) &&
        !r->have_long_name && !r->have_pax_path && !r->have_pax_size) {
        r->state = ST_END; /* the shard ends at a header boundary */
        return 0;
    }
    if (got < TAR_BLOCK)
        return fail(r, "truncated header at offset %llu (%zu of 512 bytes)", at, got);
    int zero = 1;
    for (int i = 0; i < TAR_BLOCK && zero; i++)
        zero = h[i] == 0;
    if (zero) {
        r->state = ST_END;
        return 0;
    }
    if (!checksum_ok(h))
        return fail(r, "bad header checksum at offset %llu (not a tar file?)", at);
    uint64_t size;
    if (number(h + H_SIZE, 12, &size) < 0 || size > ((uint64_t)1 << 62))
        return fail(r, "bad size field at offset %llu", at);
    uint8_t type = h[H_TYPE];
    if (type == 'L' || type == 'x') {
        uint64_t max = type == 'L' ? TAR_NAME_MAX + 1 : TAR_PAX_MAX;
        if (size == 0 || size > max)
            return fail(r, "%s of %llu bytes at offset %llu",
                        type == 'L' ? "long name" : "pax header", (unsigned long long)size, at);
        r->ext_size = size;
        r->state = type == 'L' ? ST_LONGNAME : ST_PAX;
        return 0;
    }
    uint64_t data = r->pos + TAR_BLOCK;
    if (type == 'g' || type == 'K') { /* global pax header, GNU long link */
        r->pos = data + padded(size);
        return 0;
    }
    if (r->shard_size != UINT64_MAX) {
        uint64_t real = r->have_pax_size ? r->pax_size : size;
        if (real > r->shard_size || data > r->shard_size - real)
            return fail(r, "member at offset %llu claims %llu bytes, past the shard's end (%llu)",
                        at, (unsigned long long)real, (unsigned long long)r->shard_size);
    }
    if (r->have_pax_path) {
        strcpy(r->name, r->pax_path);
    } else if (r->have_long_name) {
        strcpy(r->name, r->long_name);
    } else {
        size_t k = 0;
        /* POSIX ustar: the prefix; GNU keeps times there instead. */
        if (memcmp(h + H_MAGIC, "ustar\0", 6) == 0 && h[H_PREFIX] != '\0') {
            k = field(r->name, h + H_PREFIX, 155);
            r->name[k++] = '/';
        }
        field(r->name + k, h + H_NAME, 100);
    }
    if (r->have_pax_size)
        size = r->pax_size;
    r->have_pax_path = r->have_long_name = r->have_pax_size = 0;

    r->cur = (struct tar_entry){
        .name = r->name,
        .offset = data,
        .size = size,
        .type = type == '0' || type == '\0' || type == '7' ? TAR_FILE
                : type == '5'                             ? TAR_DIR
                                                          : TAR_OTHER,
    };
    if (size > UINT64_MAX - data - TAR_BLOCK)
        return fail(r, "size overflow at offset %llu", at);
    r->pos = data + padded(size);
    r->members++;
    *e = r->cur;
    return 1;
}

int tar_reader_feed(struct tar_reader *r, const uint8_t *buf, size_t got, struct tar_entry *e)
{
    switch (r->state) {
    case ST_HEADER:
        return feed_header(r, buf, got, e);
    case ST_LONGNAME:
    case ST_PAX: {
        if (got < r->ext_size)
            return fail(r, "truncated %s at offset %llu",
                        r->state == ST_PAX ? "pax header" : "long name",
                        (unsigned long long)(r->pos + TAR_BLOCK));
        int rc = 0;
        if (r->state == ST_LONGNAME) {
            size_t k = strnlen((const char *)buf, (size_t)r->ext_size);
            if (k > TAR_NAME_MAX)
                return fail(r, "long name of %zu bytes", k);
            memcpy(r->long_name, buf, k);
            r->long_name[k] = '\0';
            r->have_long_name = 1;
        } else {
            rc = parse_pax(r, buf, (size_t)r->ext_size);
        }
        r->pos += TAR_BLOCK + padded(r->ext_size);
        r->state = ST_HEADER;
        return rc;
    }
    case ST_DATA:
        if (got < r->cur.size)
            return fail(r, "truncated data of %s at offset %llu", r->name,
                        (unsigned long long)r->cur.offset);
        r->cur.data = buf;
        r->state = ST_HEADER;
        *e = r->cur;
        r->cur.data = NULL;
        return 1;
    default:
        return 0;
    }
}

int tar_name_unsafe(const char *name)
{
    if (name[0] == '\0' || name[0] == '/')
        return 1;
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 1;
        p += n + (slash != NULL);
    }
    return 0;
}
