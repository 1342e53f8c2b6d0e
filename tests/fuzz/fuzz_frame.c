/*
 * libFuzzer target: the wire protocol's decoders (common/proto.c) on what a
 * peer could send.
 *
 * Input: one knob byte, then a byte stream of frames as a socket delivers
 * them (header, body, header, body, ...). The knob's low bit picks the
 * receiver's limit (the daemon's PROTO_MAX_REQUEST or the client's
 * PROTO_MAX_REPLY); the rest sizes the ERROR message buffer. Each frame's
 * header goes through proto_header_decode, its body through the decoder of
 * its type. Besides "no crash, no sanitizer report", it checks that:
 *   - a header that decodes re-encodes to the same bytes (flags 0);
 *   - every body a decoder accepts re-encodes to exactly the same bytes
 *     (the codec is a bijection on valid bodies: nothing accepted is
 *     silently ignored or truncated);
 *   - an accepted BATCH body holds exactly n labels and n samples;
 *   - a decoder never reads past the body (ASan: bodies are copied to a
 *     buffer of their exact length).
 */
#include <string.h>

#include "fuzz.h"
#include "proto.h"

static void check_same(struct proto_wbuf *w, const uint8_t *body, size_t len)
{
    FUZZ_CHECK(!w->failed);
    FUZZ_CHECK(w->len == len);
    FUZZ_CHECK(len == 0 || memcmp(w->data, body, len) == 0);
}

static void fuzz_error(struct proto_rbuf *r, const uint8_t *body, size_t len,
                       struct proto_wbuf *w, uint8_t knob)
{
    char buf[PROTO_MAX_STR + 1];
    uint32_t code;
    /* 0 (no copy), 1 (just the NUL), small, or room for any message */
    size_t bufsz = (knob >> 1) & 1 ? sizeof(buf) : (size_t)(knob >> 2) % 18;

    if (proto_get_error(r, &code, buf, bufsz) < 0)
        return;
    FUZZ_CHECK(proto_strerror((int)code) != NULL);
    if (bufsz == 0)
        return;
    size_t n = strlen(buf);
    FUZZ_CHECK(n < bufsz);
    FUZZ_CHECK(n <= len - 8);
    if (bufsz == sizeof(buf) && n == len - 8) { /* whole, and no NUL in it */
        proto_put_error(w, code, buf);
        check_same(w, body, len);
    }
}

static void fuzz_reply_str(struct proto_rbuf *r, const uint8_t *body, size_t len,
                           struct proto_wbuf *w)
{
    const char *s;
    uint32_t n;
    if (proto_get_str(r, &s, &n, PROTO_MAX_REPLY) < 0 || proto_remaining(r))
        return;
    FUZZ_CHECK(s == (const char *)body + 4 && (size_t)n + 4 == len);
    proto_put_str(w, s, n);
    check_same(w, body, len);
}

static void fuzz_batch(struct proto_rbuf *r, const uint8_t *body, size_t len)
{
    struct proto_batch_hdr m;
    if (proto_get_batch_hdr(r, &m) < 0)
        return;
    size_t ds = proto_dtype_size(m.dtype);
    FUZZ_CHECK(ds != 0);
    int64_t *labels = malloc((size_t)m.n * sizeof(*labels) + 1);
    FUZZ_CHECK(labels != NULL);
    for (uint32_t i = 0; i < m.n; i++)
        FUZZ_CHECK(proto_get_i64(r, &labels[i]) == 0);
    size_t data_len = proto_remaining(r);
    const void *data;
    FUZZ_CHECK(proto_get_bytes(r, &data, data_len) == 0);
    FUZZ_CHECK(proto_remaining(r) == 0);
    FUZZ_CHECK(data_len == (uint64_t)m.n * m.h * m.w * m.c * ds);

    /* The daemon's zero-copy encoder writes the same prefix. */
    size_t prefix = proto_batch_prefix_size(m.n);
    uint8_t *out = malloc(prefix);
    FUZZ_CHECK(out != NULL);
    proto_batch_prefix_encode(out, 7, &m, labels, data_len);
    struct proto_header h;
    FUZZ_CHECK(proto_header_decode(out, PROTO_MAX_REPLY, &h) == 0);
    FUZZ_CHECK(h.type == PROTO_BATCH && h.req_id == 7 && h.body_len == len);
    FUZZ_CHECK(memcmp(out + PROTO_HEADER_SIZE, body, prefix - PROTO_HEADER_SIZE) == 0);
    free(out);
    free(labels);
}

/* The profiler's bodies: whatever decodes encodes to something that
 * decodes to the same message (texts are re-encoded in canonical form, so
 * the bytes may differ from the input's). */
#define FUZZ_AGAIN(type, get, put, m)                                               \
    do {                                                                             \
        struct type again;                                                           \
        memset(&again, 0, sizeof(again));                                            \
        struct proto_wbuf w2;                                                        \
        struct proto_rbuf r2;                                                        \
        proto_wbuf_init(&w2);                                                        \
        put(&w2, (m));                                                               \
        FUZZ_CHECK(!w2.failed);                                                      \
        proto_rbuf_init(&r2, w2.data, w2.len);                                       \
        FUZZ_CHECK(get(&r2, &again) == 0 && proto_remaining(&r2) == 0);              \
        FUZZ_CHECK(memcmp(&again, (m), sizeof(again)) == 0);                          \
        proto_wbuf_free(&w2);                                                        \
    } while (0)

static int get_strategy_last(struct proto_rbuf *r, struct proto_profile_strategy *m)
{
    return proto_get_profile_strategy(r, m, 1);
}

static void fuzz_profile_result(struct proto_rbuf *r)
{
    struct proto_profile_result m;
    if (proto_get_profile_result(r, &m) < 0)
        return;
    FUZZ_CHECK(m.count == 0 || m.winner < m.count);
    for (uint32_t i = 0; i < m.count; i++) {
        struct proto_profile_strategy st;
        if (proto_get_profile_strategy(r, &st, i + 1 == m.count) < 0)
            return;
        FUZZ_AGAIN(proto_profile_strategy, get_strategy_last, proto_put_profile_strategy,
                   &st);
    }
    FUZZ_CHECK(proto_remaining(r) == 0);
}

static void fuzz_body(uint16_t type, const uint8_t *body, size_t len, uint8_t knob)
{
    struct proto_rbuf r;
    struct proto_wbuf w;
    proto_rbuf_init(&r, body, len);
    proto_wbuf_init(&w);

    switch (type) {
    case PROTO_ERROR:
        fuzz_error(&r, body, len, &w, knob);
        break;
    case PROTO_STATS_REPLY:
    case PROTO_DATASETS_REPLY:
        fuzz_reply_str(&r, body, len, &w);
        break;
    case PROTO_OPEN: {
        struct proto_open m;
        if (proto_get_open(&r, &m) == 0) {
            FUZZ_CHECK(m.dataset[0] && memchr(m.dataset, '\0', sizeof(m.dataset)));
            proto_put_open(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_OPENED: {
        struct proto_opened m;
        if (proto_get_opened(&r, &m) == 0) {
            proto_put_opened(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_BATCH:
        fuzz_batch(&r, body, len);
        break;
    case PROTO_BATCH_SHM: {
        struct proto_batch_shm m;
        int64_t v;
        if (proto_get_batch_shm(&r, &m) == 0) {
            proto_put_batch_shm(&w, &m);
            FUZZ_CHECK(w.len == PROTO_BATCH_SHM_FIXED_SIZE);
            while (proto_remaining(&r) >= 8 && proto_get_i64(&r, &v) == 0)
                proto_put_i64(&w, v);
            if (proto_remaining(&r) == 0)
                check_same(&w, body, len);
        }
        break;
    }
    case PROTO_PROFILE: {
        struct proto_profile m;
        memset(&m, 0, sizeof(m));
        if (proto_get_profile(&r, &m) == 0) {
            FUZZ_CHECK(m.dataset[0] && memchr(m.dataset, '\0', sizeof(m.dataset)));
            FUZZ_AGAIN(proto_profile, proto_get_profile, proto_put_profile, &m);
        }
        break;
    }
    case PROTO_PROFILE_PROGRESS: {
        struct proto_profile_progress m;
        memset(&m, 0, sizeof(m));
        if (proto_get_profile_progress(&r, &m) == 0)
            FUZZ_AGAIN(proto_profile_progress, proto_get_profile_progress,
                       proto_put_profile_progress, &m);
        break;
    }
    case PROTO_PROFILE_RESULT:
        fuzz_profile_result(&r);
        break;
    case PROTO_RELEASE: {
        struct proto_release m;
        if (proto_get_release(&r, &m) == 0) {
            proto_put_release(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_END: {
        struct proto_end m;
        if (proto_get_end(&r, &m) == 0) {
            proto_put_end(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_CLOSE:
    case PROTO_CLOSED: {
        uint32_t id;
        if (proto_get_u32(&r, &id) == 0 && proto_remaining(&r) == 0) {
            proto_put_u32(&w, id);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_WARM: {
        struct proto_warm m;
        if (proto_get_warm(&r, &m) == 0) {
            FUZZ_CHECK(m.dataset[0] && memchr(m.dataset, '\0', sizeof(m.dataset)));
            proto_put_warm(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    case PROTO_PROGRESS:
    case PROTO_DONE: {
        struct proto_progress m;
        if (proto_get_progress(&r, &m) == 0) {
            proto_put_progress(&w, &m);
            check_same(&w, body, len);
        }
        break;
    }
    default: /* STATS, DATASETS (empty requests) and unknown types */
        break;
    }
    /* Whatever happened, the reader never claims more than the body. */
    FUZZ_CHECK(r.off <= len && proto_remaining(&r) <= len);
    proto_wbuf_free(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t knob = data[0];
    uint32_t max_body = knob & 1 ? PROTO_MAX_REPLY : PROTO_MAX_REQUEST;
    size_t off = 1;

    while (size - off >= PROTO_HEADER_SIZE) {
        struct proto_header h;
        uint8_t again[PROTO_HEADER_SIZE];
        int rc = proto_header_decode(data + off, max_body, &h);
        if (rc == -PROTO_E_PROTO)
            return 0; /* bad magic: the connection ends */
        FUZZ_CHECK(rc == 0 || rc == -PROTO_E_VERSION || rc == -PROTO_E_TOOBIG);
        FUZZ_CHECK(proto_type_name(h.type) != NULL);
        if (rc == -PROTO_E_TOOBIG)
            return 0; /* oversized: the connection ends */
        if (rc == 0 && h.flags == 0) {
            proto_header_encode(again, h.type, h.req_id, h.body_len);
            FUZZ_CHECK(memcmp(again, data + off, PROTO_HEADER_SIZE) == 0);
        }
        off += PROTO_HEADER_SIZE;
        if (h.body_len > size - off)
            return 0; /* the peer went away mid-frame */
        /* An exact-size copy, so ASan sees any read past the body. */
        uint8_t *body = malloc(h.body_len ? h.body_len : 1);
        FUZZ_CHECK(body != NULL);
        memcpy(body, data + off, h.body_len);
        if (rc == 0)
            fuzz_body(h.type, body, h.body_len, knob);
        free(body);
        off += h.body_len;
    }
    return 0;
}
