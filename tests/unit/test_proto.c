/*
 * Wire protocol codec (common/proto.c). Every decode reads from a heap copy
 * of exactly the bytes under test, so that under ASan a read past the end
 * is an error rather than luck.
 */
#include "proto.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *dup_exact(const void *p, size_t n)
{
    uint8_t *d = malloc(n);
    ck_assert(d || n == 0);
    if (n)
        memcpy(d, p, n);
    return d;
}

/* ---- sample messages ---- */

static const struct proto_open sample_open = {
    .dataset = "imagenet-train",
    .batch_size = 256,
    .seed = 0x0123456789abcdefull,
    .epoch = UINT64_MAX - 1,
    .rank = 3,
    .world = 8,
    .flags = PROTO_OPEN_SHUFFLE | PROTO_OPEN_DROP_LAST,
    .prefetch = 4,
};

static const struct proto_opened sample_opened = {
    .stream_id = 7,
    .samples = 160146,
    .batches = 626,
    .h = 224,
    .w = 224,
    .c = 3,
    .dtype = PROTO_DTYPE_U8,
};

static const struct proto_end sample_end = {
    .stream_id = 7,
    .batches = 626,
    .samples = 160140,
    .skipped = 6,
};

enum { SAMPLE_N = 3, SAMPLE_H = 2, SAMPLE_W = 3, SAMPLE_C = 3 };
#define SAMPLE_BYTES (SAMPLE_H * SAMPLE_W * SAMPLE_C)
static const struct proto_batch_hdr sample_batch = {
    .stream_id = 7,
    .index = 41,
    .n = SAMPLE_N,
    .h = SAMPLE_H,
    .w = SAMPLE_W,
    .c = SAMPLE_C,
    .dtype = PROTO_DTYPE_U8,
};
static const int64_t sample_labels[SAMPLE_N] = {0, -1, INT64_MIN};

static const char sample_errmsg[] = "no dataset named 'imagenet-train'";
static const struct proto_warm sample_warm = {.dataset = "imagenet-train", .flags = 0};
static const struct proto_progress sample_progress = {
    .done = 1281167, .total = 1281167, .bytes = 192848121856ull, .failed = 3,
    .computed = UINT64_MAX,
};

/* A BATCH body: m's fixed part, then n labels and n samples of bytes (n
 * need not be m->n, to build malformed bodies). */
static void put_batch(struct proto_wbuf *w, const struct proto_batch_hdr *m,
                      const int64_t *labels, uint32_t n, size_t sample_bytes)
{
    proto_put_batch_hdr(w, m);
    for (uint32_t i = 0; i < n; i++)
        proto_put_i64(w, labels[i]);
    for (size_t i = 0; i < (size_t)n * sample_bytes; i++)
        proto_put_u8(w, (uint8_t)(i * 7 + 1));
}

static void enc_open(struct proto_wbuf *w) { proto_put_open(w, &sample_open); }
static void enc_opened(struct proto_wbuf *w) { proto_put_opened(w, &sample_opened); }
static void enc_end(struct proto_wbuf *w) { proto_put_end(w, &sample_end); }
static void enc_warm(struct proto_wbuf *w) { proto_put_warm(w, &sample_warm); }
static void enc_progress(struct proto_wbuf *w) { proto_put_progress(w, &sample_progress); }
static void enc_error(struct proto_wbuf *w)
{
    proto_put_error(w, PROTO_E_NODATASET, sample_errmsg);
}
static void enc_batch(struct proto_wbuf *w)
{
    put_batch(w, &sample_batch, sample_labels, SAMPLE_N, SAMPLE_BYTES);
}

static int dec_open(struct proto_rbuf *r)
{
    struct proto_open m;
    return proto_get_open(r, &m);
}
static int dec_opened(struct proto_rbuf *r)
{
    struct proto_opened m;
    return proto_get_opened(r, &m);
}
static int dec_end(struct proto_rbuf *r)
{
    struct proto_end m;
    return proto_get_end(r, &m);
}
static int dec_warm(struct proto_rbuf *r)
{
    struct proto_warm m;
    return proto_get_warm(r, &m);
}
static int dec_progress(struct proto_rbuf *r)
{
    struct proto_progress m;
    return proto_get_progress(r, &m);
}
static int dec_error(struct proto_rbuf *r)
{
    uint32_t code;
    char buf[64];
    return proto_get_error(r, &code, buf, sizeof(buf));
}
static int dec_batch(struct proto_rbuf *r)
{
    struct proto_batch_hdr m;
    return proto_get_batch_hdr(r, &m);
}

static const struct msg_case {
    const char *name;
    void (*encode)(struct proto_wbuf *w);
    int (*decode)(struct proto_rbuf *r);
} msg_cases[] = {
    {"open", enc_open, dec_open},       {"opened", enc_opened, dec_opened},
    {"end", enc_end, dec_end},          {"error", enc_error, dec_error},
    {"batch", enc_batch, dec_batch},    {"warm", enc_warm, dec_warm},
    {"progress", enc_progress, dec_progress},
};
#define N_CASES (sizeof(msg_cases) / sizeof(msg_cases[0]))

/* Decodes len bytes of w's body from an exact heap copy. */
static int decode_prefix(const struct msg_case *mc, const struct proto_wbuf *w, size_t len)
{
    struct proto_rbuf r;
    uint8_t *p = dup_exact(w->data, len);
    proto_rbuf_init(&r, p, len);
    int rc = mc->decode(&r);
    free(p);
    return rc;
}

/* ---- header ---- */

START_TEST(test_header_round_trip)
{
    uint8_t *raw = malloc(PROTO_HEADER_SIZE);
    struct proto_header h;

    proto_header_encode(raw, PROTO_BATCH, 0xdeadbeef, 12345);
    ck_assert_mem_eq(raw, "PRST", 4);
    ck_assert_int_eq(raw[4], PROTO_VERSION);
    ck_assert_int_eq(raw[5], 0);
    ck_assert_int_eq(raw[6], PROTO_BATCH);
    ck_assert_int_eq(proto_header_decode(raw, 12345, &h), 0);
    ck_assert_uint_eq(h.magic, PROTO_MAGIC);
    ck_assert_uint_eq(h.version, PROTO_VERSION);
    ck_assert_uint_eq(h.type, PROTO_BATCH);
    ck_assert_uint_eq(h.flags, 0);
    ck_assert_uint_eq(h.req_id, 0xdeadbeef);
    ck_assert_uint_eq(h.body_len, 12345);
    free(raw);
}
END_TEST

START_TEST(test_header_bad_magic)
{
    uint8_t *raw = malloc(PROTO_HEADER_SIZE);
    struct proto_header h;

    proto_header_encode(raw, PROTO_STATS, 1, 0);
    raw[0] ^= 0x20;
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REQUEST, &h), -PROTO_E_PROTO);
    free(raw);
}
END_TEST

START_TEST(test_header_bad_version)
{
    uint8_t *raw = malloc(PROTO_HEADER_SIZE);
    struct proto_header h;

    proto_header_encode(raw, PROTO_STATS, 99, 8);
    raw[4] = PROTO_VERSION + 1;
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REQUEST, &h), -PROTO_E_VERSION);
    /* Decoded anyway, so the receiver can reply to req_id and skip the body. */
    ck_assert_uint_eq(h.version, PROTO_VERSION + 1);
    ck_assert_uint_eq(h.type, PROTO_STATS);
    ck_assert_uint_eq(h.req_id, 99);
    ck_assert_uint_eq(h.body_len, 8);
    free(raw);
}
END_TEST

START_TEST(test_header_too_big)
{
    /* The header alone decides: the decoder is given exactly 20 bytes. */
    uint8_t *raw = malloc(PROTO_HEADER_SIZE);
    struct proto_header h;

    proto_header_encode(raw, PROTO_OPEN, 5, PROTO_MAX_REQUEST);
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REQUEST, &h), 0);
    proto_header_encode(raw, PROTO_OPEN, 5, PROTO_MAX_REQUEST + 1);
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REQUEST, &h), -PROTO_E_TOOBIG);
    ck_assert_uint_eq(h.body_len, PROTO_MAX_REQUEST + 1);
    proto_header_encode(raw, PROTO_OPEN, 5, UINT32_MAX);
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REPLY, &h), -PROTO_E_TOOBIG);
    /* An oversized body ends the connection even when the version is also
     * unknown: the receiver must not try to skip it. */
    raw[4] = PROTO_VERSION + 1;
    ck_assert_int_eq(proto_header_decode(raw, PROTO_MAX_REPLY, &h), -PROTO_E_TOOBIG);
    free(raw);
}
END_TEST

START_TEST(test_frame)
{
    struct proto_wbuf w;
    struct proto_header h;
    struct proto_rbuf r;
    struct proto_open m;

    proto_wbuf_init(&w);
    proto_frame_begin(&w, PROTO_OPEN, 42);
    proto_put_open(&w, &sample_open);
    proto_frame_finish(&w);
    ck_assert(!w.failed);
    ck_assert_int_eq(proto_header_decode(w.data, PROTO_MAX_REQUEST, &h), 0);
    ck_assert_uint_eq(h.type, PROTO_OPEN);
    ck_assert_uint_eq(h.req_id, 42);
    ck_assert_uint_eq(h.body_len, w.len - PROTO_HEADER_SIZE);
    proto_rbuf_init(&r, w.data + PROTO_HEADER_SIZE, h.body_len);
    ck_assert_int_eq(proto_get_open(&r, &m), 0);
    ck_assert_str_eq(m.dataset, sample_open.dataset);

    /* A second frame in the same buffer starts afresh. */
    proto_frame_begin(&w, PROTO_STATS, 43);
    proto_frame_finish(&w);
    ck_assert_uint_eq(w.len, PROTO_HEADER_SIZE);
    ck_assert_int_eq(proto_header_decode(w.data, PROTO_MAX_REQUEST, &h), 0);
    ck_assert_uint_eq(h.body_len, 0);
    ck_assert_uint_eq(h.req_id, 43);
    proto_wbuf_free(&w);
}
END_TEST

/* ---- fields ---- */

START_TEST(test_fields_little_endian)
{
    static const uint8_t want[] = {0xab, 0x34, 0x12, 0x04, 0x03, 0x02, 0x01, 0x08, 0x07,
                                   0x06, 0x05, 0x04, 0x03, 0x02, 0x01, 0xfe, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 2,    0,    0,    0,
                                   'h',  'i'};
    struct proto_wbuf w;
    struct proto_rbuf r;
    uint8_t u8;
    uint16_t u16;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    const char *s;
    const void *v;

    proto_wbuf_init(&w);
    proto_put_u8(&w, 0xab);
    proto_put_u16(&w, 0x1234);
    proto_put_u32(&w, 0x01020304);
    proto_put_u64(&w, 0x0102030405060708ull);
    proto_put_i64(&w, -2);
    proto_put_str(&w, "hi", 2);
    ck_assert(!w.failed);
    ck_assert_uint_eq(w.len, sizeof(want));
    ck_assert_mem_eq(w.data, want, sizeof(want));

    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_u8(&r, &u8), 0);
    ck_assert_int_eq(proto_get_u16(&r, &u16), 0);
    ck_assert_int_eq(proto_get_u32(&r, &u32), 0);
    ck_assert_int_eq(proto_get_u64(&r, &u64), 0);
    ck_assert_int_eq(proto_get_i64(&r, &i64), 0);
    ck_assert_int_eq(proto_get_str(&r, &s, &u32, 0), 0);
    ck_assert_uint_eq(u8, 0xab);
    ck_assert_uint_eq(u16, 0x1234);
    ck_assert_uint_eq(u64, 0x0102030405060708ull);
    ck_assert_int_eq(i64, -2);
    ck_assert_uint_eq(u32, 2);
    ck_assert_mem_eq(s, "hi", 2);
    ck_assert_uint_eq(proto_remaining(&r), 0);

    /* One failed get makes every later one fail, even one that would fit. */
    ck_assert_int_eq(proto_get_u8(&r, &u8), -PROTO_E_PROTO);
    ck_assert_int_eq(proto_get_u8(&r, &u8), -PROTO_E_PROTO);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_bytes(&r, &v, w.len + 1), -PROTO_E_PROTO);
    ck_assert_int_eq(proto_get_u8(&r, &u8), -PROTO_E_PROTO);
    ck_assert_uint_eq(proto_remaining(&r), 0);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

START_TEST(test_str_limits)
{
    size_t big = PROTO_MAX_STR + 1;
    char *text = malloc(big);
    struct proto_wbuf w;
    struct proto_rbuf r;
    const char *s;
    uint32_t n;

    memset(text, 'x', big);
    proto_wbuf_init(&w);
    proto_put_str(&w, text, PROTO_MAX_STR);
    proto_put_str(&w, text, big);
    ck_assert(!w.failed);
    uint8_t *p = dup_exact(w.data, w.len);

    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, 0), 0);
    ck_assert_uint_eq(n, PROTO_MAX_STR);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, 0), -PROTO_E_PROTO);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, 0), -PROTO_E_PROTO);

    /* A larger max lets it through; a smaller one never lowers the floor. */
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, (uint32_t)big), 0);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, (uint32_t)big), 0);
    ck_assert_uint_eq(n, big);
    ck_assert_uint_eq(proto_remaining(&r), 0);
    free(p);

    /* A length that claims more than the body holds. */
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    proto_put_u32(&w, 10);
    proto_put_bytes(&w, "abc", 3);
    p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_str(&r, &s, &n, 0), -PROTO_E_PROTO);
    free(p);

    /* ERROR messages are truncated to the maximum on the way out. */
    char *huge = malloc(2 * PROTO_MAX_STR + 1);
    memset(huge, 'e', 2 * PROTO_MAX_STR);
    huge[2 * PROTO_MAX_STR] = '\0';
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    proto_put_error(&w, PROTO_E_INTERNAL, huge);
    ck_assert(!w.failed);
    ck_assert_uint_eq(w.len, 4 + 4 + PROTO_MAX_STR);
    p = dup_exact(w.data, w.len);
    char buf[16];
    uint32_t code;
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_error(&r, &code, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(code, PROTO_E_INTERNAL);
    /* and into the caller's buffer, NUL-terminated */
    ck_assert_uint_eq(strspn(buf, "e"), sizeof(buf) - 1);
    ck_assert_uint_eq(strlen(buf), sizeof(buf) - 1);
    free(p);
    free(huge);

    /* An ERROR whose message is over the limit is malformed. */
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    proto_put_u32(&w, PROTO_E_INTERNAL);
    proto_put_str(&w, text, big);
    p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_error(&r, &code, buf, sizeof(buf)), -PROTO_E_PROTO);
    free(p);
    proto_wbuf_free(&w);
    free(text);
}
END_TEST

/* ---- messages ---- */

START_TEST(test_open_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_open m;

    proto_wbuf_init(&w);
    proto_put_open(&w, &sample_open);
    ck_assert(!w.failed);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_open(&r, &m), 0);
    ck_assert_str_eq(m.dataset, sample_open.dataset);
    ck_assert_uint_eq(m.batch_size, sample_open.batch_size);
    ck_assert_uint_eq(m.seed, sample_open.seed);
    ck_assert_uint_eq(m.epoch, sample_open.epoch);
    ck_assert_uint_eq(m.rank, sample_open.rank);
    ck_assert_uint_eq(m.world, sample_open.world);
    ck_assert_uint_eq(m.flags, sample_open.flags);
    ck_assert_uint_eq(m.prefetch, sample_open.prefetch);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

/* OPEN with a hand-built dataset field of n bytes from name. */
static int decode_open_named(const char *name, size_t n)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_open m;

    proto_wbuf_init(&w);
    proto_put_str(&w, name, n);
    proto_put_u32(&w, 64); /* batch_size */
    proto_put_u64(&w, 0);  /* seed */
    proto_put_u64(&w, 0);  /* epoch */
    proto_put_u32(&w, 0);  /* rank */
    proto_put_u32(&w, 1);  /* world */
    proto_put_u32(&w, 0);  /* flags */
    proto_put_u32(&w, 0);  /* prefetch */
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    int rc = proto_get_open(&r, &m);
    if (rc == 0)
        ck_assert_uint_eq(strlen(m.dataset), n);
    free(p);
    proto_wbuf_free(&w);
    return rc;
}

START_TEST(test_open_dataset_names)
{
    char name[sizeof(((struct proto_open *)0)->dataset) + 1];
    memset(name, 'd', sizeof(name));

    ck_assert_int_eq(decode_open_named(name, 1), 0);
    ck_assert_int_eq(decode_open_named(name, sizeof(name) - 2), 0);
    ck_assert_int_eq(decode_open_named(name, sizeof(name) - 1), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_open_named(name, 0), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_open_named("a\0b", 3), -PROTO_E_PROTO);
}
END_TEST

START_TEST(test_opened_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_opened m;

    proto_wbuf_init(&w);
    proto_put_opened(&w, &sample_opened);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_opened(&r, &m), 0);
    ck_assert_uint_eq(m.stream_id, sample_opened.stream_id);
    ck_assert_uint_eq(m.samples, sample_opened.samples);
    ck_assert_uint_eq(m.batches, sample_opened.batches);
    ck_assert_uint_eq(m.h, sample_opened.h);
    ck_assert_uint_eq(m.w, sample_opened.w);
    ck_assert_uint_eq(m.c, sample_opened.c);
    ck_assert_uint_eq(m.dtype, sample_opened.dtype);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

/* Decodes w's whole body with dec from an exact heap copy. */
static int decode_all(const struct proto_wbuf *w, int (*dec)(struct proto_rbuf *r, void *m),
                      void *m)
{
    struct proto_rbuf r;
    uint8_t *p = dup_exact(w->data, w->len);
    proto_rbuf_init(&r, p, w->len);
    int rc = dec(&r, m);
    free(p);
    return rc;
}
static int get_open(struct proto_rbuf *r, void *m) { return proto_get_open(r, m); }
static int get_opened(struct proto_rbuf *r, void *m) { return proto_get_opened(r, m); }
static int get_release(struct proto_rbuf *r, void *m) { return proto_get_release(r, m); }

/* The optional trailing fields: OPEN's start_batch (with PROTO_OPEN_START
 * only), OPENED's dataset_samples and fingerprint (has_info), RELEASE's
 * flags (only when not 0); each message without them is what an older peer
 * sends and is still accepted. */
START_TEST(test_optional_fields)
{
    struct proto_wbuf w;
    struct proto_open o = sample_open, od;
    size_t base;

    proto_wbuf_init(&w);
    o.start_batch = 77; /* no PROTO_OPEN_START: not sent */
    proto_put_open(&w, &o);
    base = w.len;
    ck_assert_int_eq(decode_all(&w, get_open, &od), 0);
    ck_assert_uint_eq(od.start_batch, 0);
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    o.flags |= PROTO_OPEN_START;
    proto_put_open(&w, &o);
    ck_assert_uint_eq(w.len, base + 8);
    ck_assert_int_eq(decode_all(&w, get_open, &od), 0);
    ck_assert_uint_eq(od.start_batch, 77);
    ck_assert_uint_eq(od.flags, o.flags);
    w.len -= 8; /* the flag without its field */
    ck_assert_int_eq(decode_all(&w, get_open, &od), -PROTO_E_PROTO);
    proto_wbuf_free(&w);

    struct proto_opened op = sample_opened, opd;
    proto_wbuf_init(&w);
    proto_put_opened(&w, &op);
    base = w.len;
    ck_assert_int_eq(decode_all(&w, get_opened, &opd), 0);
    ck_assert(!opd.has_info);
    ck_assert_uint_eq(opd.fingerprint, 0);
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    op.has_info = 1;
    op.dataset_samples = 1281167;
    op.fingerprint = 0xfedcba9876543210ull;
    proto_put_opened(&w, &op);
    ck_assert_uint_eq(w.len, base + 16);
    ck_assert_int_eq(decode_all(&w, get_opened, &opd), 0);
    ck_assert(opd.has_info);
    ck_assert_uint_eq(opd.dataset_samples, 1281167);
    ck_assert_uint_eq(opd.fingerprint, 0xfedcba9876543210ull);
    for (w.len = base + 1; w.len < base + 16; w.len++) /* part of it */
        ck_assert_int_eq(decode_all(&w, get_opened, &opd), -PROTO_E_PROTO);
    proto_wbuf_free(&w);

    struct proto_release rel = {7, 3, 0}, reld;
    proto_wbuf_init(&w);
    proto_put_release(&w, &rel);
    ck_assert_uint_eq(w.len, 8);
    ck_assert_int_eq(decode_all(&w, get_release, &reld), 0);
    ck_assert_uint_eq(reld.flags, 0);
    proto_put_u32(&w, 0); /* flags of 0 are never sent */
    ck_assert_int_eq(decode_all(&w, get_release, &reld), -PROTO_E_PROTO);
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    rel.flags = PROTO_RELEASE_COPIED;
    proto_put_release(&w, &rel);
    ck_assert_uint_eq(w.len, 12);
    ck_assert_int_eq(decode_all(&w, get_release, &reld), 0);
    ck_assert_uint_eq(reld.slot, 3);
    ck_assert_uint_eq(reld.flags, PROTO_RELEASE_COPIED);
    proto_wbuf_free(&w);
}
END_TEST

START_TEST(test_batch_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_batch_hdr m;
    int64_t label;
    const void *data;

    proto_wbuf_init(&w);
    enc_batch(&w);
    ck_assert(!w.failed);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_batch_hdr(&r, &m), 0);
    ck_assert_uint_eq(m.stream_id, sample_batch.stream_id);
    ck_assert_uint_eq(m.index, sample_batch.index);
    ck_assert_uint_eq(m.n, SAMPLE_N);
    ck_assert_uint_eq(m.h, SAMPLE_H);
    ck_assert_uint_eq(m.w, SAMPLE_W);
    ck_assert_uint_eq(m.c, SAMPLE_C);
    ck_assert_uint_eq(m.dtype, PROTO_DTYPE_U8);
    for (int i = 0; i < SAMPLE_N; i++) {
        ck_assert_int_eq(proto_get_i64(&r, &label), 0);
        ck_assert_int_eq(label, sample_labels[i]);
    }
    ck_assert_uint_eq(proto_remaining(&r), SAMPLE_N * SAMPLE_BYTES);
    ck_assert_int_eq(proto_get_bytes(&r, &data, SAMPLE_N * SAMPLE_BYTES), 0);
    ck_assert_uint_eq(((const uint8_t *)data)[1], 8);
    ck_assert_uint_eq(proto_remaining(&r), 0);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

/* proto_get_batch_hdr on a body whose fixed part says hdr but which holds
 * n_real labels and n_real samples of real_bytes each, then extra bytes. */
static int decode_batch_shape(const struct proto_batch_hdr *hdr, uint32_t n_real,
                              size_t real_bytes, size_t extra)
{
    static const int64_t labels[8];
    struct proto_batch_hdr m;
    struct proto_wbuf w;
    struct proto_rbuf r;

    ck_assert_uint_le(n_real, 8);
    proto_wbuf_init(&w);
    put_batch(&w, hdr, labels, n_real, real_bytes);
    for (size_t i = 0; i < extra; i++)
        proto_put_u8(&w, 0);
    ck_assert(!w.failed);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    int rc = proto_get_batch_hdr(&r, &m);
    free(p);
    proto_wbuf_free(&w);
    return rc;
}

START_TEST(test_batch_size_checked)
{
    struct proto_batch_hdr h = sample_batch;
    const size_t sb = SAMPLE_BYTES;

    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), 0);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 1), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb - 1, 0), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N - 1, sb, 0), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N + 1, sb, 0), -PROTO_E_PROTO);
    /* A body of a whole number of samples of another size. */
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb + 8 + sb, 0), -PROTO_E_PROTO);

    /* float32 samples are four bytes an element. */
    h.dtype = PROTO_DTYPE_F32;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, 4 * sb, 0), 0);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), -PROTO_E_PROTO);

    /* int16 samples are two. */
    h.dtype = PROTO_DTYPE_I16;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, 2 * sb, 0), 0);
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), -PROTO_E_PROTO);

    /* Unknown dtypes and empty shapes are malformed. */
    h.dtype = 0;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), -PROTO_E_PROTO);
    h.dtype = 4;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), -PROTO_E_PROTO);
    h = sample_batch;
    h.h = 0;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, 0, 0), -PROTO_E_PROTO);

    /* An empty batch has nothing after the fixed part. */
    h = sample_batch;
    h.n = 0;
    ck_assert_int_eq(decode_batch_shape(&h, 0, sb, 0), 0);
    ck_assert_int_eq(decode_batch_shape(&h, 0, sb, 1), -PROTO_E_PROTO);
    ck_assert_int_eq(decode_batch_shape(&h, 1, sb, 0), -PROTO_E_PROTO);

    /* A sample size that is sb modulo 2^32 must not pass for sb. */
    h = sample_batch;
    h.h = 0x80000000u + SAMPLE_BYTES / 2;
    h.w = 2;
    h.c = 1;
    ck_assert_int_eq(decode_batch_shape(&h, SAMPLE_N, sb, 0), -PROTO_E_PROTO);
}
END_TEST

START_TEST(test_end_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_end m;

    proto_wbuf_init(&w);
    proto_put_end(&w, &sample_end);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_end(&r, &m), 0);
    ck_assert_uint_eq(m.stream_id, sample_end.stream_id);
    ck_assert_uint_eq(m.batches, sample_end.batches);
    ck_assert_uint_eq(m.samples, sample_end.samples);
    ck_assert_uint_eq(m.skipped, sample_end.skipped);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

START_TEST(test_warm_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    struct proto_warm m;
    struct proto_progress pr;

    proto_wbuf_init(&w);
    enc_warm(&w);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_warm(&r, &m), 0);
    ck_assert_str_eq(m.dataset, sample_warm.dataset);
    ck_assert_uint_eq(m.flags, 0);
    free(p);
    proto_wbuf_free(&w);

    /* An empty dataset name is malformed. */
    proto_wbuf_init(&w);
    proto_put_str(&w, "", 0);
    proto_put_u32(&w, 0);
    p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_warm(&r, &m), -PROTO_E_PROTO);
    free(p);
    proto_wbuf_free(&w);

    proto_wbuf_init(&w);
    enc_progress(&w);
    ck_assert_uint_eq(w.len, 40);
    p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_progress(&r, &pr), 0);
    ck_assert_uint_eq(pr.done, sample_progress.done);
    ck_assert_uint_eq(pr.total, sample_progress.total);
    ck_assert_uint_eq(pr.bytes, sample_progress.bytes);
    ck_assert_uint_eq(pr.failed, sample_progress.failed);
    ck_assert_uint_eq(pr.computed, sample_progress.computed);
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

START_TEST(test_error_round_trip)
{
    struct proto_wbuf w;
    struct proto_rbuf r;
    uint32_t code;
    char buf[128], small[8];

    proto_wbuf_init(&w);
    enc_error(&w);
    uint8_t *p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_error(&r, &code, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(code, PROTO_E_NODATASET);
    ck_assert_str_eq(buf, sample_errmsg);

    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_error(&r, &code, small, sizeof(small)), 0);
    ck_assert_str_eq(small, "no data");
    free(p);

    /* An empty message. */
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    proto_put_error(&w, PROTO_E_SHUTDOWN, "");
    p = dup_exact(w.data, w.len);
    proto_rbuf_init(&r, p, w.len);
    ck_assert_int_eq(proto_get_error(&r, &code, buf, sizeof(buf)), 0);
    ck_assert_uint_eq(code, PROTO_E_SHUTDOWN);
    ck_assert_str_eq(buf, "");
    free(p);
    proto_wbuf_free(&w);
}
END_TEST

/* Every proper prefix of every message is rejected, and so is the message
 * with one byte of trailing garbage. */
START_TEST(test_truncated_and_trailing)
{
    for (size_t i = 0; i < N_CASES; i++) {
        const struct msg_case *mc = &msg_cases[i];
        struct proto_wbuf w;

        proto_wbuf_init(&w);
        mc->encode(&w);
        ck_assert(!w.failed);
        ck_assert_msg(decode_prefix(mc, &w, w.len) == 0, "%s: whole message", mc->name);
        for (size_t len = 0; len < w.len; len++)
            ck_assert_msg(decode_prefix(mc, &w, len) == -PROTO_E_PROTO,
                          "%s: prefix of %zu of %zu bytes accepted", mc->name, len, w.len);
        proto_put_u8(&w, 0);
        ck_assert_msg(decode_prefix(mc, &w, w.len) == -PROTO_E_PROTO,
                      "%s: trailing byte accepted", mc->name);
        proto_wbuf_free(&w);
    }
}
END_TEST

/* ---- names ---- */

START_TEST(test_names)
{
    ck_assert_str_eq(proto_type_name(PROTO_ERROR), "ERROR");
    ck_assert_str_eq(proto_type_name(PROTO_OPEN), "OPEN");
    ck_assert_str_eq(proto_type_name(PROTO_BATCH), "BATCH");
    ck_assert_str_eq(proto_type_name(PROTO_CLOSED), "CLOSED");
    ck_assert_str_eq(proto_type_name(PROTO_WARM), "WARM");
    ck_assert_str_eq(proto_type_name(PROTO_DONE), "DONE");
    /* Every type up to the first reserved range has a name; past it, the
     * ranges handed out (lead 15-19, admin 20-29, profiler 30-39) have gaps. */
    for (uint16_t t = PROTO_ERROR; t <= PROTO_DONE; t++)
        ck_assert_str_ne(proto_type_name(t), "UNKNOWN");
    ck_assert_str_eq(proto_type_name(PROTO_RELOAD), "RELOAD");
    ck_assert_str_eq(proto_type_name(PROTO_RELOAD_REPLY), "RELOAD_REPLY");
    ck_assert_str_eq(proto_type_name(PROTO_DROP_CACHE), "DROP_CACHE");
    ck_assert_str_eq(proto_type_name(PROTO_DROP_CACHE_REPLY), "DROP_CACHE_REPLY");
    ck_assert_str_eq(proto_type_name(0), "UNKNOWN");
    ck_assert_str_eq(proto_type_name(PROTO_TYPE_MAX), "UNKNOWN");
    ck_assert_str_eq(proto_type_name(UINT16_MAX), "UNKNOWN");

    ck_assert_str_eq(proto_strerror(PROTO_OK), "success");
    ck_assert_str_eq(proto_strerror(PROTO_E_NODATASET), "no such dataset");
    ck_assert_str_eq(proto_strerror(-PROTO_E_NODATASET), "no such dataset");
    ck_assert_str_eq(proto_strerror(PROTO_E_DENIED), "permission denied");
    for (int e = PROTO_E_PROTO; e < PROTO_E_MAX; e++)
        ck_assert_str_ne(proto_strerror(-e), "unknown error");
    ck_assert_str_eq(proto_strerror(PROTO_E_MAX), "unknown error");
    ck_assert_str_eq(proto_strerror(-1000), "unknown error");
    ck_assert_str_eq(proto_strerror(1000), "unknown error");

    ck_assert_uint_eq(proto_dtype_size(PROTO_DTYPE_U8), 1);
    ck_assert_uint_eq(proto_dtype_size(PROTO_DTYPE_F32), 4);
    ck_assert_uint_eq(proto_dtype_size(PROTO_DTYPE_I16), 2);
    ck_assert_uint_eq(proto_dtype_size(0), 0);
    ck_assert_uint_eq(proto_dtype_size(PROTO_DTYPE_I64), 8);
    ck_assert_uint_eq(proto_dtype_size(5), 0);
}
END_TEST

/* Label formats: which an OPENED may say, their sizes, and OPENED's label
 * fields after the info (PROTO_OPEN_LABELS): round trip, a truncated one,
 * and formats no daemon may say. */
START_TEST(test_label_formats)
{
    const struct proto_labels i64 = PROTO_LABELS_INT64;
    const struct proto_labels soft = {PROTO_DTYPE_F32, 10, 0};
    const struct proto_labels soft_len = {PROTO_DTYPE_F32, 10, 1};
    const struct proto_labels i64_len = {PROTO_DTYPE_I64, 0, 1};
    ck_assert(proto_labels_valid(&i64) && proto_labels_valid(&soft) &&
              proto_labels_valid(&soft_len) && proto_labels_valid(&i64_len));
    ck_assert_uint_eq(proto_label_row(&i64), 8);
    ck_assert_uint_eq(proto_label_row(&soft), 40);
    ck_assert_uint_eq(proto_labels_size(&i64, 4), 32);
    ck_assert_uint_eq(proto_labels_size(&soft, 4), 160);
    ck_assert_uint_eq(proto_labels_size(&soft_len, 4), 192);
    ck_assert_uint_eq(proto_labels_size(&i64_len, 4), 64);
    const struct proto_labels bad[] = {
        {PROTO_DTYPE_I64, 3, 0},                          /* int64 with classes */
        {PROTO_DTYPE_F32, 0, 0},                          /* soft with no classes */
        {PROTO_DTYPE_F32, PROTO_LABEL_CLASSES_MAX + 1, 0}, /* too many classes */
        {PROTO_DTYPE_U8, 0, 0},  {PROTO_DTYPE_I16, 4, 0}, {0, 0, 0},
        {PROTO_DTYPE_I64, 0, 2},                          /* lengths is 0 or 1 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(!proto_labels_valid(&bad[i]), "format %zu", i);
        ck_assert_uint_eq(proto_labels_size(&bad[i], 4), 0);
    }

    struct proto_wbuf w;
    struct proto_opened op = sample_opened, opd;
    proto_wbuf_init(&w);
    proto_put_opened(&w, &op);
    size_t base = w.len;
    proto_wbuf_free(&w);
    proto_wbuf_init(&w);
    op.has_labels = 1; /* the info goes too */
    op.labels = soft_len;
    op.fingerprint = 99;
    proto_put_opened(&w, &op);
    ck_assert_uint_eq(w.len, base + 16 + 12);
    ck_assert_int_eq(decode_all(&w, get_opened, &opd), 0);
    ck_assert(opd.has_info && opd.has_labels);
    ck_assert_uint_eq(opd.fingerprint, 99);
    ck_assert_uint_eq(opd.labels.dtype, PROTO_DTYPE_F32);
    ck_assert_uint_eq(opd.labels.classes, 10);
    ck_assert_uint_eq(opd.labels.lengths, 1);
    for (w.len = base + 17; w.len < base + 28; w.len++) /* part of the labels */
        ck_assert_int_eq(decode_all(&w, get_opened, &opd), -PROTO_E_PROTO);
    proto_put_u32(&w, 0); /* w.len is base + 28 again, then 4 more */
    ck_assert_int_eq(decode_all(&w, get_opened, &opd), -PROTO_E_PROTO);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        proto_wbuf_free(&w);
        proto_wbuf_init(&w);
        op.labels = bad[i];
        proto_put_opened(&w, &op);
        ck_assert_int_eq(decode_all(&w, get_opened, &opd), -PROTO_E_PROTO);
    }
    proto_wbuf_free(&w);
    /* Without the labels: int64 [n], as from a daemon before them. */
    proto_wbuf_init(&w);
    op = sample_opened;
    op.has_info = 1;
    proto_put_opened(&w, &op);
    ck_assert_int_eq(decode_all(&w, get_opened, &opd), 0);
    ck_assert(!opd.has_labels);
    ck_assert_uint_eq(opd.labels.dtype, PROTO_DTYPE_I64);
    ck_assert_uint_eq(opd.labels.classes, 0);
    proto_wbuf_free(&w);
}
END_TEST

/* A BATCH of soft labels (and lengths): the prefix written in place, then
 * the body checked against the stream's label format; against any other
 * format, or a byte short or long, it is malformed. */
START_TEST(test_batch_label_tensor)
{
    enum { N = 4, K = 3 };
    const struct proto_labels soft = {PROTO_DTYPE_F32, K, 1};
    struct proto_batch_hdr h = {5, 9, N, 2, 2, 3, PROTO_DTYPE_U8}, m;
    const size_t sample = 2 * 2 * 3, lab = (size_t)proto_labels_size(&soft, N);
    float targets[N][K];
    int64_t lengths[N];
    uint8_t block[N * K * 4 + N * 8];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < K; k++)
            targets[i][k] = (float)(i * K + k) / 16.0f;
        lengths[i] = 100 + i;
    }
    ck_assert_uint_eq(lab, sizeof(block));
    memcpy(block, targets, sizeof(targets));
    memcpy(block + sizeof(targets), lengths, sizeof(lengths));

    size_t pre = proto_batch_prefix_size_raw(lab);
    ck_assert_uint_eq(pre, PROTO_HEADER_SIZE + PROTO_BATCH_FIXED_SIZE + lab);
    size_t total = pre + N * sample;
    uint8_t *frame = calloc(1, total + 1);
    ck_assert_ptr_nonnull(frame);
    for (size_t i = 0; i < N * sample; i++)
        frame[pre + i] = (uint8_t)i;
    proto_batch_prefix_encode_raw(frame, 11, &h, block, lab, N * sample);
    struct proto_header hd;
    ck_assert_int_eq(proto_header_decode(frame, PROTO_MAX_REPLY, &hd), 0);
    ck_assert_uint_eq(hd.type, PROTO_BATCH);
    ck_assert_uint_eq(hd.body_len, total - PROTO_HEADER_SIZE);

    struct proto_rbuf r;
    const uint8_t *body = frame + PROTO_HEADER_SIZE;
    proto_rbuf_init(&r, body, hd.body_len);
    ck_assert_int_eq(proto_get_batch_hdr_fmt(&r, &m, &soft), 0);
    ck_assert_uint_eq(m.n, N);
    ck_assert_mem_eq(body + PROTO_BATCH_FIXED_SIZE, targets, sizeof(targets));
    ck_assert_mem_eq(body + PROTO_BATCH_FIXED_SIZE + sizeof(targets), lengths, sizeof(lengths));
    /* The same body read as int64 labels, or as soft targets of another K,
     * or without the lengths: malformed. */
    const struct proto_labels others[] = {PROTO_LABELS_INT64, {PROTO_DTYPE_F32, K, 0},
                                          {PROTO_DTYPE_F32, K + 1, 1},
                                          {PROTO_DTYPE_F32, 1, 0}};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        proto_rbuf_init(&r, body, hd.body_len);
        ck_assert_msg(proto_get_batch_hdr_fmt(&r, &m, &others[i]) == -PROTO_E_PROTO,
                      "format %zu", i);
    }
    for (long d = -1; d <= 1; d += 2) { /* a byte short, a byte long */
        proto_rbuf_init(&r, body, hd.body_len + d);
        ck_assert_int_eq(proto_get_batch_hdr_fmt(&r, &m, &soft), -PROTO_E_PROTO);
    }
    /* A format no OPENED may say never passes. */
    const struct proto_labels bad = {PROTO_DTYPE_F32, 0, 0};
    proto_rbuf_init(&r, body, hd.body_len);
    ck_assert_int_eq(proto_get_batch_hdr_fmt(&r, &m, &bad), -PROTO_E_PROTO);
    free(frame);
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, test_header_round_trip);
    tcase_add_test(tc, test_header_bad_magic);
    tcase_add_test(tc, test_header_bad_version);
    tcase_add_test(tc, test_header_too_big);
    tcase_add_test(tc, test_frame);
    tcase_add_test(tc, test_fields_little_endian);
    tcase_add_test(tc, test_str_limits);
    tcase_add_test(tc, test_open_round_trip);
    tcase_add_test(tc, test_open_dataset_names);
    tcase_add_test(tc, test_opened_round_trip);
    tcase_add_test(tc, test_optional_fields);
    tcase_add_test(tc, test_batch_round_trip);
    tcase_add_test(tc, test_batch_size_checked);
    tcase_add_test(tc, test_label_formats);
    tcase_add_test(tc, test_batch_label_tensor);
    tcase_add_test(tc, test_end_round_trip);
    tcase_add_test(tc, test_warm_round_trip);
    tcase_add_test(tc, test_error_round_trip);
    tcase_add_test(tc, test_truncated_and_trailing);
    tcase_add_test(tc, test_names);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(proto_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
