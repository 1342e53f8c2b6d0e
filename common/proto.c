/* Wire protocol codec: see proto.h for the format. */
#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void le_put(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void proto_header_encode(uint8_t out[PROTO_HEADER_SIZE], uint16_t type,
                         uint32_t req_id, uint32_t body_len)
{
    le_put(out, PROTO_MAGIC, 4);
    le_put(out + 4, PROTO_VERSION, 2);
    le_put(out + 6, type, 2);
    le_put(out + 8, 0, 4);
    le_put(out + 12, req_id, 4);
    le_put(out + 16, body_len, 4);
}

int proto_header_decode(const uint8_t in[PROTO_HEADER_SIZE], uint32_t max_body,
                        struct proto_header *h)
{
    h->magic = (uint32_t)le_get(in, 4);
    if (h->magic != PROTO_MAGIC)
        return -PROTO_E_PROTO;
    h->version = (uint16_t)le_get(in + 4, 2);
    h->type = (uint16_t)le_get(in + 6, 2);
    h->flags = (uint32_t)le_get(in + 8, 4);
    h->req_id = (uint32_t)le_get(in + 12, 4);
    h->body_len = (uint32_t)le_get(in + 16, 4);
    if (h->body_len > max_body)
        return -PROTO_E_TOOBIG;
    if (h->version != PROTO_VERSION)
        return -PROTO_E_VERSION;
    return 0;
}

int proto_default_socket(char *buf, size_t len)
{
    const char *env = getenv("PRESTO_SOCKET");
    const char *run = getenv("XDG_RUNTIME_DIR");
    int n;
    if (env && *env)
        n = snprintf(buf, len, "%s", env);
    else if (run && *run)
        n = snprintf(buf, len, "%s/presto/prestod.sock", run);
    else
        n = snprintf(buf, len, "/tmp/presto-%u/prestod.sock", (unsigned)getuid());
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

const char *proto_type_name(uint16_t type)
{
    static const char *const names[PROTO_TYPE_MAX] = {
        [PROTO_ERROR] = "ERROR",       [PROTO_STATS] = "STATS",
        [PROTO_STATS_REPLY] = "STATS_REPLY",
        [PROTO_DATASETS] = "DATASETS", [PROTO_DATASETS_REPLY] = "DATASETS_REPLY",
        [PROTO_OPEN] = "OPEN",         [PROTO_OPENED] = "OPENED",
        [PROTO_BATCH] = "BATCH",       [PROTO_END] = "END",
        [PROTO_CLOSE] = "CLOSE",       [PROTO_CLOSED] = "CLOSED",
        [PROTO_WARM] = "WARM",         [PROTO_PROGRESS] = "PROGRESS",
        [PROTO_DONE] = "DONE",
        [PROTO_BATCH_SHM] = "BATCH_SHM", [PROTO_RELEASE] = "RELEASE",
        [PROTO_METRICS] = "METRICS",   [PROTO_METRICS_REPLY] = "METRICS_REPLY",
        [PROTO_RELOAD] = "RELOAD",     [PROTO_RELOAD_REPLY] = "RELOAD_REPLY",
        [PROTO_DROP_CACHE] = "DROP_CACHE", [PROTO_DROP_CACHE_REPLY] = "DROP_CACHE_REPLY",
        [PROTO_PROFILE] = "PROFILE",   [PROTO_PROFILE_PROGRESS] = "PROFILE_PROGRESS",
        [PROTO_PROFILE_RESULT] = "PROFILE_RESULT",
    };
    if (type < PROTO_TYPE_MAX && names[type])
        return names[type];
    return "UNKNOWN";
}

const char *proto_strerror(int code)
{
    static const char *const msgs[PROTO_E_MAX] = {
        [PROTO_OK] = "success",
        [PROTO_E_PROTO] = "malformed message",
        [PROTO_E_VERSION] = "unsupported protocol version",
        [PROTO_E_TOOBIG] = "message too large",
        [PROTO_E_NODATASET] = "no such dataset",
        [PROTO_E_INVAL] = "invalid argument",
        [PROTO_E_LIMIT] = "limit reached",
        [PROTO_E_SAMPLE] = "bad sample",
        [PROTO_E_SHUTDOWN] = "daemon is shutting down",
        [PROTO_E_IO] = "connection or I/O error",
        [PROTO_E_NOMEM] = "out of memory",
        [PROTO_E_INTERNAL] = "internal error",
        [PROTO_E_DENIED] = "permission denied",
    };
    unsigned u = code < 0 ? 0u - (unsigned)code : (unsigned)code;
    if (u < PROTO_E_MAX && msgs[u])
        return msgs[u];
    return "unknown error";
}

size_t proto_dtype_size(uint32_t dtype)
{
    switch (dtype) {
    case PROTO_DTYPE_U8: return 1;
    case PROTO_DTYPE_F32: return 4;
    case PROTO_DTYPE_I16: return 2;
    case PROTO_DTYPE_I64: return 8;
    default: return 0;
    }
}

/* ---- writer ---- */

void proto_wbuf_init(struct proto_wbuf *w)
{
    memset(w, 0, sizeof(*w));
}

void proto_wbuf_free(struct proto_wbuf *w)
{
    free(w->data);
    memset(w, 0, sizeof(*w));
}

static uint8_t *wbuf_reserve(struct proto_wbuf *w, size_t n)
{
    if (w->failed)
        return NULL;
    if (n > SIZE_MAX / 2 - w->len) {
        w->failed = 1;
        return NULL;
    }
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 64;
        while (cap < w->len + n)
            cap *= 2;
        uint8_t *p = realloc(w->data, cap);
        if (!p) {
            w->failed = 1;
            return NULL;
        }
        w->data = p;
        w->cap = cap;
    }
    uint8_t *p = w->data + w->len;
    w->len += n;
    return p;
}

static void put_le(struct proto_wbuf *w, uint64_t v, int n)
{
    uint8_t *p = wbuf_reserve(w, (size_t)n);
    if (p)
        le_put(p, v, n);
}

void proto_put_u8(struct proto_wbuf *w, uint8_t v) { put_le(w, v, 1); }
void proto_put_u16(struct proto_wbuf *w, uint16_t v) { put_le(w, v, 2); }
void proto_put_u32(struct proto_wbuf *w, uint32_t v) { put_le(w, v, 4); }
void proto_put_u64(struct proto_wbuf *w, uint64_t v) { put_le(w, v, 8); }
void proto_put_i64(struct proto_wbuf *w, int64_t v) { put_le(w, (uint64_t)v, 8); }

void proto_put_bytes(struct proto_wbuf *w, const void *src, size_t len)
{
    uint8_t *p = wbuf_reserve(w, len);
    if (p && len)
        memcpy(p, src, len);
}

void proto_put_str(struct proto_wbuf *w, const char *s, size_t len)
{
    if (len > UINT32_MAX) {
        w->failed = 1;
        return;
    }
    proto_put_u32(w, (uint32_t)len);
    proto_put_bytes(w, s, len);
}

void proto_frame_begin(struct proto_wbuf *w, uint16_t type, uint32_t req_id)
{
    w->len = 0;
    w->failed = 0;
    uint8_t *p = wbuf_reserve(w, PROTO_HEADER_SIZE);
    if (p)
        proto_header_encode(p, type, req_id, 0);
}

void proto_frame_finish(struct proto_wbuf *w)
{
    if (w->failed || w->len < PROTO_HEADER_SIZE)
        return;
    if (w->len - PROTO_HEADER_SIZE > UINT32_MAX) {
        w->failed = 1;
        return;
    }
    le_put(w->data + 16, w->len - PROTO_HEADER_SIZE, 4);
}

/* ---- reader ---- */

void proto_rbuf_init(struct proto_rbuf *r, const void *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->off = 0;
    r->failed = 0;
}

static const uint8_t *rbuf_take(struct proto_rbuf *r, size_t n)
{
    if (r->failed || n > r->len - r->off) {
        r->failed = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

#define GET_LE(name, type, n)                                   \
    int name(struct proto_rbuf *r, type *v)                     \
    {                                                           \
        const uint8_t *p = rbuf_take(r, n);                     \
        if (!p)                                                 \
            return -PROTO_E_PROTO;                              \
        *v = (type)le_get(p, n);                                \
        return 0;                                               \
    }
GET_LE(proto_get_u8, uint8_t, 1)
GET_LE(proto_get_u16, uint16_t, 2)
GET_LE(proto_get_u32, uint32_t, 4)
GET_LE(proto_get_u64, uint64_t, 8)
GET_LE(proto_get_i64, int64_t, 8)
#undef GET_LE

int proto_get_bytes(struct proto_rbuf *r, const void **out, size_t len)
{
    const uint8_t *p = rbuf_take(r, len);
    if (!p)
        return -PROTO_E_PROTO;
    *out = p;
    return 0;
}

int proto_get_str(struct proto_rbuf *r, const char **s, uint32_t *len, uint32_t max)
{
    uint32_t n;
    const void *p;
    if (max < PROTO_MAX_STR)
        max = PROTO_MAX_STR;
    if (proto_get_u32(r, &n) < 0)
        return -PROTO_E_PROTO;
    if (n > max) {
        r->failed = 1;
        return -PROTO_E_PROTO;
    }
    if (proto_get_bytes(r, &p, n) < 0)
        return -PROTO_E_PROTO;
    *s = p;
    *len = n;
    return 0;
}

size_t proto_remaining(const struct proto_rbuf *r)
{
    return r->failed ? 0 : r->len - r->off;
}

/* ---- messages ---- */

void proto_put_open(struct proto_wbuf *w, const struct proto_open *m)
{
    proto_put_str(w, m->dataset, strnlen(m->dataset, sizeof(m->dataset)));
    proto_put_u32(w, m->batch_size);
    proto_put_u64(w, m->seed);
    proto_put_u64(w, m->epoch);
    proto_put_u32(w, m->rank);
    proto_put_u32(w, m->world);
    proto_put_u32(w, m->flags);
    proto_put_u32(w, m->prefetch);
    if (m->flags & PROTO_OPEN_START)
        proto_put_u64(w, m->start_batch);
}

/* A dataset name: 1 to cap - 1 bytes, no NUL; copied NUL-terminated. */
static int get_name(struct proto_rbuf *r, char *out, size_t cap)
{
    const char *s;
    uint32_t n;
    if (proto_get_str(r, &s, &n, 0) < 0 || n == 0 || n >= cap || memchr(s, '\0', n))
        return -PROTO_E_PROTO;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

int proto_get_open(struct proto_rbuf *r, struct proto_open *m)
{
    memset(m, 0, sizeof(*m));
    if (get_name(r, m->dataset, sizeof(m->dataset)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u32(r, &m->batch_size);
    proto_get_u64(r, &m->seed);
    proto_get_u64(r, &m->epoch);
    proto_get_u32(r, &m->rank);
    proto_get_u32(r, &m->world);
    proto_get_u32(r, &m->flags);
    proto_get_u32(r, &m->prefetch);
    if (m->flags & PROTO_OPEN_START)
        proto_get_u64(r, &m->start_batch);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_opened(struct proto_wbuf *w, const struct proto_opened *m)
{
    proto_put_u32(w, m->stream_id);
    proto_put_u64(w, m->samples);
    proto_put_u64(w, m->batches);
    proto_put_u32(w, m->h);
    proto_put_u32(w, m->w);
    proto_put_u32(w, m->c);
    proto_put_u32(w, m->dtype);
    proto_put_u32(w, m->layout);
    proto_put_u32(w, m->transport);
    proto_put_u32(w, m->slots);
    proto_put_u64(w, m->slot_bytes);
    if (m->has_info || m->has_labels) {
        proto_put_u64(w, m->dataset_samples);
        proto_put_u64(w, m->fingerprint);
    }
    if (m->has_labels) {
        proto_put_u32(w, m->labels.dtype);
        proto_put_u32(w, m->labels.classes);
        proto_put_u32(w, m->labels.lengths);
    }
}

int proto_labels_valid(const struct proto_labels *f)
{
    if (f->lengths > 1)
        return 0;
    if (f->dtype == PROTO_DTYPE_I64)
        return f->classes == 0;
    return f->dtype == PROTO_DTYPE_F32 && f->classes >= 1 &&
           f->classes <= PROTO_LABEL_CLASSES_MAX;
}

uint64_t proto_label_row(const struct proto_labels *f)
{
    if (!proto_labels_valid(f))
        return 0;
    return f->dtype == PROTO_DTYPE_I64 ? 8 : 4 * (uint64_t)f->classes;
}

uint64_t proto_labels_size(const struct proto_labels *f, uint32_t n)
{
    uint64_t row = proto_label_row(f);
    return row ? (uint64_t)n * (row + (f->lengths ? 8 : 0)) : 0;
}

int proto_get_opened(struct proto_rbuf *r, struct proto_opened *m)
{
    proto_get_u32(r, &m->stream_id);
    proto_get_u64(r, &m->samples);
    proto_get_u64(r, &m->batches);
    proto_get_u32(r, &m->h);
    proto_get_u32(r, &m->w);
    proto_get_u32(r, &m->c);
    proto_get_u32(r, &m->dtype);
    proto_get_u32(r, &m->layout);
    proto_get_u32(r, &m->transport);
    proto_get_u32(r, &m->slots);
    proto_get_u64(r, &m->slot_bytes);
    m->has_info = proto_remaining(r) > 0;
    m->dataset_samples = m->fingerprint = 0;
    if (m->has_info) {
        proto_get_u64(r, &m->dataset_samples);
        proto_get_u64(r, &m->fingerprint);
    }
    m->has_labels = proto_remaining(r) > 0;
    m->labels = PROTO_LABELS_INT64;
    if (m->has_labels) {
        proto_get_u32(r, &m->labels.dtype);
        proto_get_u32(r, &m->labels.classes);
        proto_get_u32(r, &m->labels.lengths);
    }
    if (r->failed || proto_remaining(r) || m->layout > PROTO_LAYOUT_NCHW ||
        m->transport > PROTO_TRANSPORT_SHM_KEPT || !proto_labels_valid(&m->labels))
        return -PROTO_E_PROTO;
    return 0;
}

void proto_put_batch_shm(struct proto_wbuf *w, const struct proto_batch_shm *m)
{
    proto_put_u32(w, m->stream_id);
    proto_put_u64(w, m->index);
    proto_put_u32(w, m->n);
    proto_put_u32(w, m->h);
    proto_put_u32(w, m->w);
    proto_put_u32(w, m->c);
    proto_put_u32(w, m->dtype);
    proto_put_u32(w, m->slot);
    proto_put_u64(w, m->offset);
}

int proto_get_batch_shm(struct proto_rbuf *r, struct proto_batch_shm *m)
{
    proto_get_u32(r, &m->stream_id);
    proto_get_u64(r, &m->index);
    proto_get_u32(r, &m->n);
    proto_get_u32(r, &m->h);
    proto_get_u32(r, &m->w);
    proto_get_u32(r, &m->c);
    proto_get_u32(r, &m->dtype);
    proto_get_u32(r, &m->slot);
    proto_get_u64(r, &m->offset);
    return r->failed ? -PROTO_E_PROTO : 0;
}

void proto_put_release(struct proto_wbuf *w, const struct proto_release *m)
{
    proto_put_u32(w, m->stream_id);
    proto_put_u32(w, m->slot);
    if (m->flags)
        proto_put_u32(w, m->flags);
}

int proto_get_release(struct proto_rbuf *r, struct proto_release *m)
{
    proto_get_u32(r, &m->stream_id);
    proto_get_u32(r, &m->slot);
    m->flags = 0;
    if (proto_remaining(r) > 0 && (proto_get_u32(r, &m->flags) < 0 || m->flags == 0))
        return -PROTO_E_PROTO; /* flags go on the wire only when not 0 */
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_batch_hdr(struct proto_wbuf *w, const struct proto_batch_hdr *m)
{
    proto_put_u32(w, m->stream_id);
    proto_put_u64(w, m->index);
    proto_put_u32(w, m->n);
    proto_put_u32(w, m->h);
    proto_put_u32(w, m->w);
    proto_put_u32(w, m->c);
    proto_put_u32(w, m->dtype);
}

int proto_get_batch_hdr(struct proto_rbuf *r, struct proto_batch_hdr *m)
{
    return proto_get_batch_hdr_fmt(r, m, &PROTO_LABELS_INT64);
}

int proto_get_batch_hdr_fmt(struct proto_rbuf *r, struct proto_batch_hdr *m,
                            const struct proto_labels *f)
{
    proto_get_u32(r, &m->stream_id);
    proto_get_u64(r, &m->index);
    proto_get_u32(r, &m->n);
    proto_get_u32(r, &m->h);
    proto_get_u32(r, &m->w);
    proto_get_u32(r, &m->c);
    proto_get_u32(r, &m->dtype);
    if (r->failed)
        return -PROTO_E_PROTO;
    /* The rest of the body must be exactly n labels and n samples. */
    size_t ds = proto_dtype_size(m->dtype);
    uint64_t lab = proto_labels_size(f, 1);
    if (!ds || m->dtype == PROTO_DTYPE_I64 || !lab)
        return -PROTO_E_PROTO;
    uint64_t per = (uint64_t)m->h * m->w * m->c * ds + lab;
    if (m->n && (per == lab || proto_remaining(r) / per != m->n ||
                 proto_remaining(r) % per != 0))
        return -PROTO_E_PROTO;
    if (!m->n && proto_remaining(r))
        return -PROTO_E_PROTO;
    return 0;
}

size_t proto_batch_prefix_size(uint32_t n)
{
    return proto_batch_prefix_size_raw((size_t)n * 8);
}

size_t proto_batch_prefix_size_raw(size_t labels_len)
{
    return PROTO_HEADER_SIZE + PROTO_BATCH_FIXED_SIZE + labels_len;
}

/* The header and the fixed part; returns where the labels go. */
static uint8_t *batch_prefix_fixed(uint8_t *out, uint32_t req_id,
                                   const struct proto_batch_hdr *m, size_t labels_len,
                                   size_t data_len)
{
    size_t body = proto_batch_prefix_size_raw(labels_len) - PROTO_HEADER_SIZE + data_len;
    uint8_t *p = out + PROTO_HEADER_SIZE;
    proto_header_encode(out, PROTO_BATCH, req_id, (uint32_t)body);
    le_put(p, m->stream_id, 4);
    le_put(p + 4, m->index, 8);
    le_put(p + 12, m->n, 4);
    le_put(p + 16, m->h, 4);
    le_put(p + 20, m->w, 4);
    le_put(p + 24, m->c, 4);
    le_put(p + 28, m->dtype, 4);
    return p + PROTO_BATCH_FIXED_SIZE;
}

void proto_batch_prefix_encode(uint8_t *out, uint32_t req_id,
                               const struct proto_batch_hdr *m,
                               const int64_t *labels, size_t data_len)
{
    uint8_t *p = batch_prefix_fixed(out, req_id, m, (size_t)m->n * 8, data_len);
    for (uint32_t i = 0; i < m->n; i++, p += 8)
        le_put(p, (uint64_t)labels[i], 8);
}

void proto_batch_prefix_encode_raw(uint8_t *out, uint32_t req_id,
                                   const struct proto_batch_hdr *m, const void *labels,
                                   size_t labels_len, size_t data_len)
{
    uint8_t *p = batch_prefix_fixed(out, req_id, m, labels_len, data_len);
    if (labels_len)
        memcpy(p, labels, labels_len);
}

void proto_put_end(struct proto_wbuf *w, const struct proto_end *m)
{
    proto_put_u32(w, m->stream_id);
    proto_put_u64(w, m->batches);
    proto_put_u64(w, m->samples);
    proto_put_u64(w, m->skipped);
}

int proto_get_end(struct proto_rbuf *r, struct proto_end *m)
{
    proto_get_u32(r, &m->stream_id);
    proto_get_u64(r, &m->batches);
    proto_get_u64(r, &m->samples);
    proto_get_u64(r, &m->skipped);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_warm(struct proto_wbuf *w, const struct proto_warm *m)
{
    proto_put_str(w, m->dataset, strlen(m->dataset));
    proto_put_u32(w, m->flags);
}

int proto_get_warm(struct proto_rbuf *r, struct proto_warm *m)
{
    memset(m, 0, sizeof(*m));
    if (get_name(r, m->dataset, sizeof(m->dataset)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u32(r, &m->flags);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_progress(struct proto_wbuf *w, const struct proto_progress *m)
{
    proto_put_u64(w, m->done);
    proto_put_u64(w, m->total);
    proto_put_u64(w, m->bytes);
    proto_put_u64(w, m->failed);
    proto_put_u64(w, m->computed);
}

int proto_get_progress(struct proto_rbuf *r, struct proto_progress *m)
{
    proto_get_u64(r, &m->done);
    proto_get_u64(r, &m->total);
    proto_get_u64(r, &m->bytes);
    proto_get_u64(r, &m->failed);
    proto_get_u64(r, &m->computed);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

/* ---- the profiler ---- */

void proto_put_f64(struct proto_wbuf *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    proto_put_u64(w, u);
}

int proto_get_f64(struct proto_rbuf *r, double *v)
{
    uint64_t u = 0;
    int rc = proto_get_u64(r, &u);
    memcpy(v, &u, sizeof(*v));
    return rc;
}

static void put_text(struct proto_wbuf *w, const char *s)
{
    proto_put_str(w, s, strlen(s));
}

/* A short text, possibly empty: cap - 1 bytes at most, no NUL. */
static int get_text(struct proto_rbuf *r, char *out, size_t cap)
{
    const char *s;
    uint32_t n;
    if (proto_get_str(r, &s, &n, 0) < 0 || n >= cap || memchr(s, '\0', n))
        return -PROTO_E_PROTO;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

void proto_put_profile(struct proto_wbuf *w, const struct proto_profile *m)
{
    put_text(w, m->dataset);
    proto_put_u32(w, m->samples);
    uint32_t flags = m->flags & ~PROTO_PROFILE_BATCH;
    if (m->batch_size) /* appended: only when asked (older daemons) */
        flags |= PROTO_PROFILE_BATCH;
    proto_put_u32(w, flags);
    proto_put_f64(w, m->w_throughput);
    proto_put_f64(w, m->w_offline);
    proto_put_f64(w, m->w_storage);
    if (flags & PROTO_PROFILE_VERIFY) /* appended: only then (older daemons) */
        proto_put_u32(w, m->verify_top);
    if (flags & PROTO_PROFILE_BATCH)
        proto_put_u32(w, m->batch_size);
}

int proto_get_profile(struct proto_rbuf *r, struct proto_profile *m)
{
    memset(m, 0, sizeof(*m));
    if (get_name(r, m->dataset, sizeof(m->dataset)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u32(r, &m->samples);
    proto_get_u32(r, &m->flags);
    proto_get_f64(r, &m->w_throughput);
    proto_get_f64(r, &m->w_offline);
    proto_get_f64(r, &m->w_storage);
    if (m->flags & PROTO_PROFILE_VERIFY)
        proto_get_u32(r, &m->verify_top);
    if (m->flags & PROTO_PROFILE_BATCH)
        proto_get_u32(r, &m->batch_size);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_profile_progress(struct proto_wbuf *w, const struct proto_profile_progress *m)
{
    proto_put_u32(w, m->strategy);
    proto_put_u32(w, m->strategies);
    put_text(w, m->name);
    put_text(w, m->phase);
    proto_put_f64(w, m->fraction);
    proto_put_f64(w, m->eta_s);
}

int proto_get_profile_progress(struct proto_rbuf *r, struct proto_profile_progress *m)
{
    memset(m, 0, sizeof(*m));
    proto_get_u32(r, &m->strategy);
    proto_get_u32(r, &m->strategies);
    if (get_text(r, m->name, sizeof(m->name)) < 0 ||
        get_text(r, m->phase, sizeof(m->phase)) < 0)
        return -PROTO_E_PROTO;
    proto_get_f64(r, &m->fraction);
    proto_get_f64(r, &m->eta_s);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_profile_result(struct proto_wbuf *w, const struct proto_profile_result *m)
{
    put_text(w, m->dataset);
    proto_put_u64(w, m->samples);
    proto_put_u32(w, m->sample_size);
    proto_put_u32(w, m->workers);
    proto_put_u32(w, m->profile_workers);
    proto_put_u64(w, m->memory_budget);
    proto_put_u64(w, m->disk_budget);
    proto_put_f64(w, m->w_throughput);
    proto_put_f64(w, m->w_offline);
    proto_put_f64(w, m->w_storage);
    proto_put_f64(w, m->seconds);
    proto_put_u32(w, m->winner);
    proto_put_u32(w, m->applied);
    proto_put_u32(w, m->count);
}

int proto_get_profile_result(struct proto_rbuf *r, struct proto_profile_result *m)
{
    memset(m, 0, sizeof(*m));
    if (get_name(r, m->dataset, sizeof(m->dataset)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u64(r, &m->samples);
    proto_get_u32(r, &m->sample_size);
    proto_get_u32(r, &m->workers);
    proto_get_u32(r, &m->profile_workers);
    proto_get_u64(r, &m->memory_budget);
    proto_get_u64(r, &m->disk_budget);
    proto_get_f64(r, &m->w_throughput);
    proto_get_f64(r, &m->w_offline);
    proto_get_f64(r, &m->w_storage);
    proto_get_f64(r, &m->seconds);
    proto_get_u32(r, &m->winner);
    proto_get_u32(r, &m->applied);
    proto_get_u32(r, &m->count);
    if (r->failed || (m->count && m->winner >= m->count) || m->applied > PROTO_APPLIED_UNCHANGED)
        return -PROTO_E_PROTO;
    return m->count == 0 && proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_profile_disk(struct proto_wbuf *w, const struct proto_profile_disk *m)
{
    proto_put_f64(w, m->read_bw);
    proto_put_f64(w, m->write_bw);
    proto_put_f64(w, m->probe_bytes);
    proto_put_u32(w, m->probe_depth);
    proto_put_f64(w, m->writeback_bw);
    proto_put_f64(w, m->source_s);
    proto_put_f64(w, m->admit_bw);
}

int proto_get_profile_disk(struct proto_rbuf *r, struct proto_profile_disk *m)
{
    memset(m, 0, sizeof(*m));
    proto_get_f64(r, &m->read_bw);
    proto_get_f64(r, &m->write_bw);
    proto_get_f64(r, &m->probe_bytes);
    proto_get_u32(r, &m->probe_depth);
    proto_get_f64(r, &m->writeback_bw);
    proto_get_f64(r, &m->source_s);
    proto_get_f64(r, &m->admit_bw);
    return r->failed || proto_remaining(r) ? -PROTO_E_PROTO : 0;
}

void proto_put_profile_strategy(struct proto_wbuf *w, const struct proto_profile_strategy *m)
{
    put_text(w, m->name);
    proto_put_u32(w, m->split);
    put_text(w, m->last_step);
    proto_put_u32(w, (uint32_t)m->zstd_level);
    proto_put_u32(w, m->samples);
    proto_put_u32(w, m->failed);
    const double f[] = {m->offline_s,       m->stored_bytes,   m->raw_bytes,
                        m->memory_rate,     m->disk_rate,      m->memory_cpu_s,
                        m->disk_cpu_s,      m->total_offline_s, m->total_bytes,
                        m->memory_fraction, m->epoch_memory_s, m->epoch_disk_s,
                        m->expected_rate,   m->expected_epoch_s, m->score,
                        m->cold_rate,       m->memory_spread,  m->disk_spread,
                        m->cold_spread};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        proto_put_f64(w, f[i]);
    proto_put_u32(w, m->fits_memory);
    proto_put_u32(w, m->fits_disk);
    proto_put_u32(w, m->feasible);
    proto_put_u32(w, m->rank);
    proto_put_f64(w, m->memory_interval);
    proto_put_f64(w, m->disk_interval);
    proto_put_f64(w, m->cold_interval);
}

int proto_get_profile_strategy(struct proto_rbuf *r, struct proto_profile_strategy *m,
                               int last)
{
    uint32_t level = 0;
    memset(m, 0, sizeof(*m));
    if (get_text(r, m->name, sizeof(m->name)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u32(r, &m->split);
    if (get_text(r, m->last_step, sizeof(m->last_step)) < 0)
        return -PROTO_E_PROTO;
    proto_get_u32(r, &level);
    m->zstd_level = (int32_t)level;
    proto_get_u32(r, &m->samples);
    proto_get_u32(r, &m->failed);
    double *f[] = {&m->offline_s,       &m->stored_bytes,   &m->raw_bytes,
                   &m->memory_rate,     &m->disk_rate,      &m->memory_cpu_s,
                   &m->disk_cpu_s,      &m->total_offline_s, &m->total_bytes,
                   &m->memory_fraction, &m->epoch_memory_s, &m->epoch_disk_s,
                   &m->expected_rate,   &m->expected_epoch_s, &m->score,
                   &m->cold_rate,       &m->memory_spread,  &m->disk_spread,
                   &m->cold_spread};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        proto_get_f64(r, f[i]);
    proto_get_u32(r, &m->fits_memory);
    proto_get_u32(r, &m->fits_disk);
    proto_get_u32(r, &m->feasible);
    proto_get_u32(r, &m->rank);
    proto_get_f64(r, &m->memory_interval);
    proto_get_f64(r, &m->disk_interval);
    proto_get_f64(r, &m->cold_interval);
    return r->failed || (last && proto_remaining(r)) ? -PROTO_E_PROTO : 0;
}

void proto_put_profile_verified(struct proto_wbuf *w, const struct proto_profile_verified *m)
{
    proto_put_u32(w, m->verified);
    proto_put_u32(w, m->samples);
    const double f[] = {m->cold_rate,       m->memory_rate,  m->disk_rate,
                        m->memory_fraction, m->stored_bytes, m->seconds};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        proto_put_f64(w, f[i]);
    put_text(w, m->note);
}

int proto_get_profile_verified(struct proto_rbuf *r, struct proto_profile_verified *m, int last)
{
    memset(m, 0, sizeof(*m));
    proto_get_u32(r, &m->verified);
    proto_get_u32(r, &m->samples);
    double *f[] = {&m->cold_rate,       &m->memory_rate,  &m->disk_rate,
                   &m->memory_fraction, &m->stored_bytes, &m->seconds};
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        proto_get_f64(r, f[i]);
    if (r->failed || get_text(r, m->note, sizeof(m->note)) < 0)
        return -PROTO_E_PROTO;
    return r->failed || (last && proto_remaining(r)) ? -PROTO_E_PROTO : 0;
}

void proto_put_error(struct proto_wbuf *w, uint32_t code, const char *msg)
{
    size_t n = strlen(msg);
    if (n > PROTO_MAX_STR)
        n = PROTO_MAX_STR;
    proto_put_u32(w, code);
    proto_put_str(w, msg, n);
}

int proto_get_error(struct proto_rbuf *r, uint32_t *code, char *buf, size_t bufsz)
{
    const char *s;
    uint32_t n;
    if (proto_get_u32(r, code) < 0 || proto_get_str(r, &s, &n, 0) < 0 ||
        proto_remaining(r))
        return -PROTO_E_PROTO;
    if (bufsz) {
        size_t k = n < bufsz - 1 ? n : bufsz - 1;
        memcpy(buf, s, k);
        buf[k] = '\0';
    }
    return 0;
}
