/*
 * The object-store client (objstore.h): curl's multi interface on a
 * libevent loop, as curl's hiperfifo example drives it: curl tells us
 * which sockets to watch (socket callback) and when to wake it (timer
 * callback); events call curl_multi_socket_action back, and finished
 * transfers are read with curl_multi_info_read.
 *
 * A request is queued, active (its easy handle in the multi), or waiting
 * out a backoff before it is queued again (at the front). Every state
 * change goes through this file's few functions, on the loop thread.
 */
#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "objstore.h"
#include "s3xml.h"
#include "vec.h"

#define ERRBODY_MAX 16384
/* SHA-256 of the empty body, which every GET signs (a constant, so no
 * hashing here; curl signs the request itself). */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

enum req_state { RQ_QUEUED, RQ_ACTIVE, RQ_WAITING, RQ_FAILING };

struct list_job;

struct req {
    struct objstore *os;
    enum req_state state;
    struct req *prev, *next;
    CURL *easy;
    char *url;
    uint64_t off, len;  /* asked for; len 0: to the end */
    uint64_t got;       /* body bytes kept so far (over attempts) */
    uint64_t skip;      /* bytes of this response to drop first */
    int ranged;         /* this attempt sent a Range */
    int resumable;      /* a retry continues where the last stopped */
    int complete_early; /* had every byte wanted; the rest was cut off */
    uint8_t *buf;
    size_t cap;
    objstore_sink_fn sink;
    void *sink_arg;
    objstore_done_fn done;
    void *arg;
    struct list_job *list;
    unsigned attempt;
    long status;
    int status_known;
    char etag[S3XML_ETAG_MAX];
    int must_match;     /* etag was given (If-Match on every attempt) */
    int changed;        /* this response's ETag is not etag */
    uint64_t size;
    int fail_rc;
    char msg[512];
    char curlerr[CURL_ERROR_SIZE];
    char *errbody;
    size_t errlen;
    struct curl_slist *hdrs;
    struct event *timer;
    uint64_t t0;
};

struct sock {
    curl_socket_t fd;
    struct event *ev;
    struct objstore *os;
    struct sock *prev, *next;
};

struct list_job {
    struct objstore *os;
    char *bucket, *prefix;
    uint32_t page_keys;
    char token[S3XML_TOKEN_MAX + 1];
    struct objstore_listing out;
    size_t cap;
    objstore_list_fn done;
    void *arg;
};

struct objstore {
    struct event_base *base;
    CURLM *multi;
    struct event *timeout;
    int s3, path_style;
    char *endpoint, *region, *ak, *sk, *token;
    char sigv4[128];
    uint32_t depth, retries, timeout_ms, connect_timeout_ms, backoff_ms, backoff_max_ms;
    uint64_t max_bytes;
    struct req *q_head, *q_tail; /* queued */
    struct req *active, *waiting;
    struct sock *socks;
    uint32_t n_active, n_queued, n_waiting;
    CURL **pool;
    uint32_t n_pool;
    uint64_t rng;
    int freeing;
    struct objstore_stats st;
    uint32_t lat[OBJSTORE_LAT_WINDOW];
    uint32_t lat_n, lat_i;
    uint64_t sec, sec_bytes, prev_bytes;
};

static void start_next(struct objstore *os);
static int list_page(struct list_job *job);

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t rnd(struct objstore *os)
{
    uint64_t x = os->rng; /* xorshift64* */
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    os->rng = x;
    return x * 2685821657736338717ull;
}

static char *dup_or_null(const char *s)
{
    return s && *s ? strdup(s) : NULL;
}

static void wipe_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

int objstore_global_init(void)
{
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -ENOMEM;
}

void objstore_global_cleanup(void)
{
    curl_global_cleanup();
}

int objstore_encode(const char *s, int keep_slash, char *buf, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
        if (k + (plain ? 1 : 3) >= len)
            return -ENAMETOOLONG;
        if (plain) {
            buf[k++] = (char)c;
        } else {
            buf[k++] = '%';
            buf[k++] = hex[c >> 4];
            buf[k++] = hex[c & 15];
        }
    }
    buf[k] = '\0';
    return (int)k;
}

/* ---- lists of requests ---- */

static void unlink_req(struct req **head, struct req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void push_front(struct req **head, struct req *r)
{
    r->prev = NULL;
    r->next = *head;
    if (*head)
        (*head)->prev = r;
    *head = r;
}

static void queue_push(struct objstore *os, struct req *r, int front)
{
    r->state = RQ_QUEUED;
    r->prev = r->next = NULL;
    if (front) {
        r->next = os->q_head;
        if (os->q_head)
            os->q_head->prev = r;
        os->q_head = r;
        if (os->q_tail == NULL)
            os->q_tail = r;
    } else {
        r->prev = os->q_tail;
        if (os->q_tail)
            os->q_tail->next = r;
        os->q_tail = r;
        if (os->q_head == NULL)
            os->q_head = r;
    }
    os->n_queued++;
}

static struct req *queue_pop(struct objstore *os)
{
    struct req *r = os->q_head;
    if (r == NULL)
        return NULL;
    os->q_head = r->next;
    if (os->q_head)
        os->q_head->prev = NULL;
    else
        os->q_tail = NULL;
    r->next = NULL;
    os->n_queued--;
    return r;
}

/* ---- stats ---- */

static void count_bytes(struct objstore *os, size_t n)
{
    uint64_t sec = now_ns() / 1000000000ull;
    if (sec != os->sec) {
        os->prev_bytes = sec == os->sec + 1 ? os->sec_bytes : 0;
        os->sec = sec;
        os->sec_bytes = 0;
    }
    os->sec_bytes += n;
    os->st.bytes += n;
}

static void count_latency(struct objstore *os, uint64_t ns)
{
    uint64_t us = ns / 1000;
    os->lat[os->lat_i] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    os->lat_i = (os->lat_i + 1) % OBJSTORE_LAT_WINDOW;
    if (os->lat_n < OBJSTORE_LAT_WINDOW)
        os->lat_n++;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void objstore_stats(const struct objstore *os, struct objstore_stats *out)
{
    *out = os->st;
    out->in_flight = os->n_active;
    out->queued = os->n_queued;
    out->waiting = os->n_waiting;
    out->depth = os->depth;
    uint64_t sec = now_ns() / 1000000000ull;
    out->bytes_per_s = sec == os->sec ? os->prev_bytes : sec == os->sec + 1 ? os->sec_bytes : 0;
    out->lat_p50_us = out->lat_p99_us = out->lat_max_us = 0;
    if (os->lat_n) {
        uint32_t *v = malloc(os->lat_n * sizeof(*v));
        if (v != NULL) {
            memcpy(v, os->lat, os->lat_n * sizeof(*v));
            qsort(v, os->lat_n, sizeof(*v), cmp_u32);
            out->lat_p50_us = v[(os->lat_n - 1) / 2];
            out->lat_p99_us = v[(size_t)((os->lat_n - 1) * 0.99 + 0.5)];
            out->lat_max_us = v[os->lat_n - 1];
            free(v);
        }
    }
}

/* ---- curl callbacks ---- */

static int fail_req(struct req *r, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_req(struct req *r, int rc, const char *fmt, ...)
{
    r->fail_rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
    va_end(ap);
    return rc;
}

static int keep(struct req *r, const char *p, size_t n)
{
    struct objstore *os = r->os;
    if (os->max_bytes && r->got + n > os->max_bytes)
        return fail_req(r, -EFBIG, "GET %s: more than %llu bytes", r->url,
                        (unsigned long long)os->max_bytes);
    if (r->sink) {
        int rc = r->sink(r->sink_arg, (const uint8_t *)p, n);
        if (rc < 0)
            return fail_req(r, rc, "GET %s: the reader stopped (%s)", r->url, strerror(-rc));
    } else {
        uint8_t *b = vec_grow(r->buf, &r->cap, (size_t)r->got + n, 1,
                              r->len ? (size_t)r->len : 65536);
        if (b == NULL)
            return fail_req(r, -ENOMEM, "GET %s: out of memory", r->url);
        r->buf = b;
        memcpy(r->buf + r->got, p, n);
    }
    r->got += n;
    count_bytes(os, n);
    return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct req *r = userdata;
    size_t n = size * nmemb, total = n;
    if (!r->status_known) {
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
        r->status_known = 1;
        /* A whole object for a ranged request: drop what is not wanted. */
        if (r->status == 200 && r->ranged)
            r->skip = r->off + r->got;
        if (r->changed && r->status >= 200 && r->status < 300) {
            fail_req(r, -ESTALE, "GET %s: the object changed (ETag \"%s\" asked for)", r->url,
                     r->etag);
            return 0;
        }
    }
    if (r->status < 200 || r->status >= 300) {
        size_t room = ERRBODY_MAX - r->errlen;
        if (room && r->errbody == NULL)
            r->errbody = malloc(ERRBODY_MAX + 1);
        if (r->errbody != NULL) {
            size_t k = n < room ? n : room;
            memcpy(r->errbody + r->errlen, p, k);
            r->errlen += k;
        }
        return total;
    }
    if (r->skip) {
        size_t k = n < r->skip ? n : (size_t)r->skip;
        r->skip -= k;
        p += k;
        n -= k;
    }
    if (r->len && r->got + n > r->len)
        n = (size_t)(r->len - r->got);
    if (n && keep(r, p, n) < 0)
        return 0;
    if (r->len && r->got == r->len && n < total && r->skip == 0) {
        r->complete_early = 1; /* a server sending more than the range */
        return 0;
    }
    return total;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *userdata)
{
    struct req *r = userdata;
    size_t n = size * nmemb;
    char line[512];
    size_t k = n < sizeof(line) - 1 ? n : sizeof(line) - 1;
    memcpy(line, p, k);
    line[k] = '\0';
    while (k && (line[k - 1] == '\r' || line[k - 1] == '\n'))
        line[--k] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) { /* a new response (redirects) */
        r->status_known = 0;
        r->changed = 0;
        r->size = 0;
        return n;
    }
    char *colon = strchr(line, ':');
    if (colon == NULL)
        return n;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (strcasecmp(line, "ETag") == 0) {
        size_t vl = strlen(v);
        if (vl >= 2 && v[0] == '"' && v[vl - 1] == '"')
            v++, vl -= 2;
        if (r->must_match) { /* a server that ignored If-Match: checked here */
            r->changed = vl != strlen(r->etag) || memcmp(v, r->etag, vl) != 0;
            return n;
        }
        if (vl < sizeof(r->etag)) {
            memcpy(r->etag, v, vl);
            r->etag[vl] = '\0';
        }
    } else if (strcasecmp(line, "Content-Range") == 0) {
        const char *slash = strrchr(v, '/');
        if (slash && slash[1] != '*')
            r->size = strtoull(slash + 1, NULL, 10);
    } else if (strcasecmp(line, "Content-Length") == 0 && r->size == 0) {
        /* the object's size when the whole of it comes (200) */
        long st = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &st);
        if (st == 200)
            r->size = strtoull(v, NULL, 10);
    }
    return n;
}

/* ---- sockets and timers ---- */

static void check_done(struct objstore *os);

static void on_socket_event(evutil_socket_t fd, short what, void *arg)
{
    struct objstore *os = arg;
    int action = (what & EV_READ ? CURL_CSELECT_IN : 0) | (what & EV_WRITE ? CURL_CSELECT_OUT : 0);
    int running;
    curl_multi_socket_action(os->multi, fd, action, &running);
    check_done(os);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct objstore *os = arg;
    int running;
    curl_multi_socket_action(os->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(os);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct objstore *os = userp;
    struct sock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            event_free(s->ev);
            if (s->prev)
                s->prev->next = s->next;
            else
                os->socks = s->next;
            if (s->next)
                s->next->prev = s->prev;
            free(s);
            curl_multi_assign(os->multi, fd, NULL);
        }
        return 0;
    }
    short kind = (short)((what & CURL_POLL_IN ? EV_READ : 0) |
                         (what & CURL_POLL_OUT ? EV_WRITE : 0) | EV_PERSIST);
    if (s == NULL) {
        s = calloc(1, sizeof(*s));
        if (s == NULL)
            return -1;
        s->fd = fd;
        s->os = os;
        s->next = os->socks;
        if (os->socks)
            os->socks->prev = s;
        os->socks = s;
        curl_multi_assign(os->multi, fd, s);
    } else {
        event_free(s->ev);
    }
    s->ev = event_new(os->base, fd, kind, on_socket_event, os);
    if (s->ev == NULL || event_add(s->ev, NULL) < 0)
        return -1;
    return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct objstore *os = userp;
    if (timeout_ms < 0) {
        evtimer_del(os->timeout);
        return 0;
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return evtimer_add(os->timeout, &tv);
}

/* ---- attempts ---- */

static void release_easy(struct objstore *os, struct req *r)
{
    if (r->easy == NULL)
        return;
    if (os->n_pool < os->depth) {
        curl_easy_reset(r->easy);
        os->pool[os->n_pool++] = r->easy;
    } else {
        curl_easy_cleanup(r->easy);
    }
    r->easy = NULL;
}

static void free_req(struct req *r)
{
    release_easy(r->os, r);
    curl_slist_free_all(r->hdrs);
    if (r->timer)
        event_free(r->timer);
    free(r->errbody);
    free(r->buf);
    free(r->url);
    free(r);
}

/* Hands the outcome to its owner and frees the request. */
static void complete(struct req *r, int rc)
{
    struct objstore *os = r->os;
    if (rc == 0)
        os->st.completed++;
    else if (rc == -ECANCELED)
        os->st.cancelled++;
    else
        os->st.failed++;
    struct objstore_result res = {
        .data = rc == 0 ? r->buf : NULL,
        .len = rc == 0 ? (size_t)r->got : 0,
        .status = r->status,
        .size = r->size,
        .attempts = r->attempt,
        .message = rc ? r->msg : NULL,
    };
    memcpy(res.etag, r->etag, sizeof(res.etag));
    if (rc == 0)
        r->buf = NULL; /* the callee owns it now */
    r->done(r->arg, rc, &res);
    free_req(r);
}

static void start_attempt(struct req *r);

static void on_req_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    struct req *r = arg;
    struct objstore *os = r->os;
    if (r->state == RQ_FAILING) {
        complete(r, r->fail_rc);
        return;
    }
    /* backoff over: first in line */
    unlink_req(&os->waiting, r);
    os->n_waiting--;
    queue_push(os, r, 1);
    start_next(os);
}

/* Fails r from outside curl's callbacks without re-entering its owner:
 * the completion runs from the loop. */
static void fail_later(struct req *r)
{
    r->state = RQ_FAILING;
    struct timeval zero = {0, 0};
    if (r->timer == NULL || evtimer_add(r->timer, &zero) < 0)
        complete(r, r->fail_rc);
}

static void start_attempt(struct req *r)
{
    struct objstore *os = r->os;
    if (r->easy == NULL)
        r->easy = os->n_pool ? os->pool[--os->n_pool] : curl_easy_init();
    if (r->easy == NULL) {
        fail_req(r, -ENOMEM, "GET %s: cannot create a transfer", r->url);
        fail_later(r);
        return;
    }
    CURL *e = r->easy;
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;
    if (!r->resumable && r->got) { /* a list page: start over */
        r->got = 0;
    }
    r->status = 0;
    r->status_known = 0;
    r->changed = 0;
    r->skip = 0;
    r->complete_early = 0;
    r->errlen = 0;
    r->curlerr[0] = '\0';
    r->attempt++;

    struct curl_slist *h = NULL;
    if (os->s3) {
        h = curl_slist_append(h, "x-amz-content-sha256: " EMPTY_SHA256);
        if (h && os->token) {
            char th[8192];
            snprintf(th, sizeof(th), "x-amz-security-token: %s", os->token);
            h = curl_slist_append(h, th);
            explicit_bzero(th, sizeof(th));
        }
    }
    if (r->etag[0] && (r->got || r->must_match)) { /* the same object or nothing */
        char im[128];
        snprintf(im, sizeof(im), "If-Match: \"%s\"", r->etag);
        h = curl_slist_append(h, im);
    }
    r->hdrs = h;
    char range[64] = "";
    uint64_t from = r->off + r->got;
    r->ranged = from || r->len;
    if (r->ranged) {
        if (r->len)
            snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)from,
                     (unsigned long long)(r->off + r->len - 1));
        else
            snprintf(range, sizeof(range), "%llu-", (unsigned long long)from);
    }
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curlerr);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(e, CURLOPT_RANGE, r->ranged ? range : NULL);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)os->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)os->connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "prestod/" PRESTO_VERSION);
    if (os->max_bytes)
        curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)os->max_bytes);
    if (os->s3) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, os->sigv4);
        curl_easy_setopt(e, CURLOPT_USERNAME, os->ak ? os->ak : "");
        curl_easy_setopt(e, CURLOPT_PASSWORD, os->sk ? os->sk : "");
    } else {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    }
    r->t0 = now_ns();
    r->state = RQ_ACTIVE;
    push_front(&os->active, r);
    os->n_active++;
    os->st.attempts++;
    CURLMcode mc = curl_multi_add_handle(os->multi, e);
    if (mc != CURLM_OK) {
        unlink_req(&os->active, r);
        os->n_active--;
        fail_req(r, -ENOMEM, "GET %s: %s", r->url, curl_multi_strerror(mc));
        fail_later(r);
    }
}

static void start_next(struct objstore *os)
{
    while (os->n_active < os->depth && os->q_head != NULL)
        start_attempt(queue_pop(os));
}

static int retryable_curl(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int curl_errno(CURLcode c)
{
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    case CURLE_FILESIZE_EXCEEDED:
        return -EFBIG;
    case CURLE_OUT_OF_MEMORY:
        return -ENOMEM;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_WEIRD_SERVER_REPLY:
        return -EPROTO;
    default:
        return -EIO;
    }
}

static int http_errno(long status)
{
    switch (status) {
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 412:
        return -ESTALE;
    case 416:
        return -ERANGE;
    default:
        return -EIO;
    }
}

/* "HTTP 403 SignatureDoesNotMatch: The request signature ..." */
static void http_message(struct req *r, char *buf, size_t len)
{
    char code[64] = "", message[256] = "";
    if (r->errbody != NULL && r->errlen) {
        r->errbody[r->errlen] = '\0';
        if (s3xml_error(r->errbody, r->errlen, code, sizeof(code), message,
                        sizeof(message)) < 0)
            code[0] = message[0] = '\0';
    }
    if (code[0])
        snprintf(buf, len, "HTTP %ld %s: %s", r->status, code, message);
    else
        snprintf(buf, len, "HTTP %ld", r->status);
}

static void finish_attempt(struct req *r, CURLcode res)
{
    struct objstore *os = r->os;
    curl_multi_remove_handle(os->multi, r->easy);
    unlink_req(&os->active, r);
    os->n_active--;
    count_latency(os, now_ns() - r->t0);
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
    if (r->status >= 500)
        os->st.status_5xx++;
    else if (r->status == 429)
        os->st.status_429++;
    else if (r->status >= 400)
        os->st.status_4xx++;

    int ok = 0, retry = 0, rc = 0;
    char why[400];
    if (r->complete_early) {
        ok = 1;
    } else if (r->fail_rc) {
        rc = r->fail_rc;
        if (rc == -ESTALE)
            os->st.failed_changed++;
    } else if (res == CURLE_OK && r->status >= 200 && r->status < 300) {
        uint64_t want = r->len;
        if (want && r->got < want && !(r->size && r->off + r->got >= r->size)) {
            snprintf(why, sizeof(why), "%llu of %llu bytes", (unsigned long long)r->got,
                     (unsigned long long)want);
            retry = 1; /* a body cut short */
            rc = -ECONNRESET;
        } else {
            ok = 1;
        }
    } else if (res == CURLE_OK) {
        http_message(r, why, sizeof(why));
        retry = r->status >= 500 || r->status == 429;
        rc = retry ? -EIO : http_errno(r->status);
        if (!retry)
            os->st.failed_http++;
        if (rc == -ESTALE)
            os->st.failed_changed++;
    } else {
        snprintf(why, sizeof(why), "%s", r->curlerr[0] ? r->curlerr : curl_easy_strerror(res));
        retry = retryable_curl(res);
        rc = curl_errno(res);
    }
    release_easy(os, r);
    if (ok) {
        complete(r, 0);
        start_next(os);
        return;
    }
    if (retry && r->attempt <= os->retries && !os->freeing) {
        /* full jitter: a uniform delay in [0, min(cap, base * 2^k)] */
        uint64_t bound = (uint64_t)os->backoff_ms << (r->attempt - 1 < 20 ? r->attempt - 1 : 20);
        if (bound > os->backoff_max_ms)
            bound = os->backoff_max_ms;
        uint64_t ms = bound ? rnd(os) % (bound + 1) : 0;
        struct timeval tv = {.tv_sec = (long)(ms / 1000), .tv_usec = (long)(ms % 1000) * 1000};
        os->st.retries++;
        r->state = RQ_WAITING;
        push_front(&os->waiting, r);
        os->n_waiting++;
        if (evtimer_add(r->timer, &tv) < 0) {
            unlink_req(&os->waiting, r);
            os->n_waiting--;
            queue_push(os, r, 1);
        }
        start_next(os);
        return;
    }
    if (!r->fail_rc) {
        if (retry && rc == -EIO)
            os->st.failed_http++;
        else if (rc == -ETIMEDOUT)
            os->st.failed_timeout++;
        else if (rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -EHOSTUNREACH)
            os->st.failed_connect++;
        fail_req(r, rc, "GET %s: %s (%u %s)", r->url, why, r->attempt,
                 r->attempt == 1 ? "try" : "tries");
    }
    complete(r, r->fail_rc);
    start_next(os);
}

static void check_done(struct objstore *os)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(os->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct req *r = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (r != NULL)
            finish_attempt(r, msg->data.result);
    }
}

/* ---- the public side ---- */

int objstore_new(struct event_base *base, const struct objstore_config *cfg,
                 struct objstore **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->s3 && cfg->endpoint && *cfg->endpoint && strncmp(cfg->endpoint, "http://", 7) &&
        strncmp(cfg->endpoint, "https://", 8)) {
        snprintf(err, errlen, "endpoint '%s' is not an http:// or https:// URL", cfg->endpoint);
        return -EINVAL;
    }
    struct objstore *os = calloc(1, sizeof(*os));
    if (os == NULL)
        return -ENOMEM;
    os->base = base;
    os->s3 = cfg->s3;
    os->depth = cfg->depth ? cfg->depth : 128;
    os->retries = cfg->retries;
    os->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 30000;
    os->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 5000;
    os->backoff_ms = cfg->backoff_ms ? cfg->backoff_ms : 100;
    os->backoff_max_ms = cfg->backoff_max_ms ? cfg->backoff_max_ms : 5000;
    os->max_bytes = cfg->max_bytes;
    os->rng = now_ns() ^ (uint64_t)(uintptr_t)os ^ 0x9e3779b97f4a7c15ull;
    const char *region = cfg->region && *cfg->region ? cfg->region : "us-east-1";
    os->region = strdup(region);
    int aws = !(cfg->endpoint && *cfg->endpoint);
    if (aws) {
        char ep[200];
        snprintf(ep, sizeof(ep), "https://s3.%s.amazonaws.com", region);
        os->endpoint = strdup(ep);
    } else {
        os->endpoint = strdup(cfg->endpoint);
        size_t n = strlen(os->endpoint);
        while (n > 8 && os->endpoint[n - 1] == '/')
            os->endpoint[--n] = '\0';
    }
    os->path_style = !aws && !cfg->virtual_host;
    os->ak = dup_or_null(cfg->access_key);
    os->sk = dup_or_null(cfg->secret_key);
    os->token = dup_or_null(cfg->session_token);
    snprintf(os->sigv4, sizeof(os->sigv4), "aws:amz:%s:s3", region);
    os->pool = calloc(os->depth, sizeof(*os->pool));
    os->multi = curl_multi_init();
    os->timeout = evtimer_new(base, on_timeout, os);
    if (os->region == NULL || os->endpoint == NULL || os->pool == NULL || os->multi == NULL ||
        os->timeout == NULL) {
        objstore_free(os);
        return -ENOMEM;
    }
    curl_multi_setopt(os->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(os->multi, CURLMOPT_SOCKETDATA, os);
    curl_multi_setopt(os->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(os->multi, CURLMOPT_TIMERDATA, os);
    curl_multi_setopt(os->multi, CURLMOPT_MAXCONNECTS, (long)os->depth);
    curl_multi_setopt(os->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)os->depth);
    curl_multi_setopt(os->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    *out = os;
    return 0;
}

void objstore_free(struct objstore *os)
{
    if (os == NULL)
        return;
    os->freeing = 1;
    struct req *r;
    while ((r = os->active) != NULL) {
        curl_multi_remove_handle(os->multi, r->easy);
        unlink_req(&os->active, r);
        os->n_active--;
        fail_req(r, -ECANCELED, "GET %s: cancelled", r->url);
        complete(r, -ECANCELED);
    }
    while ((r = os->waiting) != NULL) {
        unlink_req(&os->waiting, r);
        os->n_waiting--;
        fail_req(r, -ECANCELED, "GET %s: cancelled", r->url);
        complete(r, -ECANCELED);
    }
    while ((r = queue_pop(os)) != NULL) {
        fail_req(r, -ECANCELED, "GET %s: cancelled", r->url);
        complete(r, -ECANCELED);
    }
    for (uint32_t i = 0; i < os->n_pool; i++)
        curl_easy_cleanup(os->pool[i]);
    if (os->multi)
        curl_multi_cleanup(os->multi);
    while (os->socks) {
        struct sock *s = os->socks;
        os->socks = s->next;
        event_free(s->ev);
        free(s);
    }
    if (os->timeout)
        event_free(os->timeout);
    free(os->pool);
    free(os->endpoint);
    free(os->region);
    wipe_free(os->ak);
    wipe_free(os->sk);
    wipe_free(os->token);
    explicit_bzero(os->sigv4, sizeof(os->sigv4));
    free(os);
}

/* The URL of t (with query, for S3 list pages), malloc'ed; NULL when too
 * long or out of memory. */
static char *target_url(const struct objstore *os, const struct objstore_target *t,
                        const char *query)
{
    if (t->url)
        return strdup(t->url);
    char key[3 * 1024 + 1] = "";
    if (t->key && objstore_encode(t->key, 1, key, sizeof(key)) < 0)
        return NULL;
    size_t n = strlen(os->endpoint) + strlen(t->bucket) + strlen(key) +
               (query ? strlen(query) : 0) + 8;
    char *url = malloc(n);
    if (url == NULL)
        return NULL;
    if (os->path_style) {
        snprintf(url, n, "%s/%s/%s%s%s", os->endpoint, t->bucket, key, query ? "?" : "",
                 query ? query : "");
    } else {
        const char *host = strstr(os->endpoint, "://") + 3;
        snprintf(url, n, "%.*s%s.%s/%s%s%s", (int)(host - os->endpoint), os->endpoint,
                 t->bucket, host, key, query ? "?" : "", query ? query : "");
    }
    return url;
}

void objstore_url(const struct objstore *os, const struct objstore_target *t, char *buf,
                  size_t len)
{
    char *u = target_url(os, t, NULL);
    snprintf(buf, len, "%s", u ? u : "(URL too long)");
    free(u);
}

static int valid_bucket(const char *b)
{
    size_t n = strlen(b);
    if (n < 1 || n > 255)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= 'A' && b[i] <= 'Z') ||
              (b[i] >= '0' && b[i] <= '9') || b[i] == '-' || b[i] == '.' || b[i] == '_'))
            return 0;
    return 1;
}

static int submit(struct objstore *os, char *url, const char *if_match, uint64_t offset,
                  uint64_t length, objstore_sink_fn sink, void *sink_arg,
                  objstore_done_fn done, void *arg, struct list_job *list)
{
    struct req *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        free(url);
        return -ENOMEM;
    }
    r->os = os;
    r->url = url;
    r->off = offset;
    r->len = length;
    r->sink = sink;
    r->sink_arg = sink_arg;
    r->done = done;
    r->arg = arg;
    r->list = list;
    r->resumable = list == NULL;
    if (if_match && *if_match) {
        snprintf(r->etag, sizeof(r->etag), "%s", if_match);
        r->must_match = 1;
    }
    r->timer = evtimer_new(os->base, on_req_timer, r);
    if (r->timer == NULL) {
        free_req(r);
        return -ENOMEM;
    }
    os->st.requests++;
    queue_push(os, r, 0);
    start_next(os);
    return 0;
}

int objstore_get(struct objstore *os, const struct objstore_target *t, uint64_t offset,
                 uint64_t length, objstore_sink_fn sink, void *sink_arg,
                 objstore_done_fn done, void *arg)
{
    if (os->freeing)
        return -ECANCELED;
    if (t->url == NULL && (!os->s3 || t->bucket == NULL || t->key == NULL ||
                           !valid_bucket(t->bucket) || t->key[0] == '\0'))
        return -EINVAL;
    if (t->url && strncmp(t->url, "http://", 7) && strncmp(t->url, "https://", 8))
        return -EINVAL;
    if (length && offset > UINT64_MAX - length)
        return -EINVAL;
    if (t->if_match && strlen(t->if_match) >= S3XML_ETAG_MAX)
        return -EINVAL;
    char *url = target_url(os, t, NULL);
    if (url == NULL)
        return -ENAMETOOLONG;
    return submit(os, url, t->if_match, offset, length, sink, sink_arg, done, arg, NULL);
}

/* The request of done argument arg in list (linked by next), or NULL. */
static struct req *find_req(struct req *list, void *arg)
{
    for (; list; list = list->next)
        if (list->list == NULL && list->arg == arg)
            return list;
    return NULL;
}

int objstore_cancel(struct objstore *os, void *arg)
{
    struct req *r;
    if ((r = find_req(os->active, arg)) != NULL) {
        curl_multi_remove_handle(os->multi, r->easy);
        unlink_req(&os->active, r);
        os->n_active--;
        /* its connection may be mid-response: not reused */
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
    } else if ((r = find_req(os->waiting, arg)) != NULL) {
        evtimer_del(r->timer);
        unlink_req(&os->waiting, r);
        os->n_waiting--;
    } else if ((r = find_req(os->q_head, arg)) != NULL) {
        if (os->q_tail == r)
            os->q_tail = r->prev;
        unlink_req(&os->q_head, r);
        os->n_queued--;
    } else {
        return -ENOENT;
    }
    fail_req(r, -ECANCELED, "GET %s: cancelled", r->url);
    complete(r, -ECANCELED);
    start_next(os);
    return 0;
}

/* ---- listing ---- */

static void list_end(struct list_job *job, int rc, const char *msg)
{
    struct objstore_listing *l = rc == 0 ? &job->out : NULL;
    job->done(job->arg, rc, l, msg);
    if (rc != 0)
        objstore_listing_free(&job->out);
    free(job->bucket);
    free(job->prefix);
    free(job);
}

static void list_page_done(void *arg, int rc, struct objstore_result *res)
{
    struct list_job *job = arg;
    if (rc < 0) {
        list_end(job, rc, res->message);
        return;
    }
    struct s3xml_page page;
    char err[256] = "";
    rc = s3xml_list((const char *)res->data, res->len, &page, err, sizeof(err));
    free(res->data);
    if (rc == 0 && page.n) {
        struct s3xml_object *o =
            vec_grow(job->out.objects, &job->cap, job->out.n + page.n, sizeof(*o), 1024);
        if (o == NULL)
            rc = -ENOMEM;
        else
            job->out.objects = o;
    }
    if (rc < 0) {
        char msg[400];
        snprintf(msg, sizeof(msg), "listing s3://%s/%s: %s", job->bucket, job->prefix,
                 rc == -ENOMEM ? "out of memory" : err);
        s3xml_page_free(&page);
        list_end(job, rc, msg);
        return;
    }
    for (size_t i = 0; i < page.n; i++) { /* the keys move over */
        job->out.objects[job->out.n++] = page.objects[i];
        page.objects[i].key = NULL;
    }
    job->out.pages++;
    int more = page.truncated;
    if (more)
        memcpy(job->token, page.next_token, sizeof(job->token));
    s3xml_page_free(&page);
    if (!more) {
        list_end(job, 0, NULL);
        return;
    }
    rc = list_page(job);
    if (rc < 0)
        list_end(job, rc, "listing: cannot request the next page");
}

/* Requests the next page (the query's parameters in sorted order: curl
 * signs the query as it is written). */
static int list_page(struct list_job *job)
{
    struct objstore *os = job->os;
    char tok[3 * S3XML_TOKEN_MAX + 1], pre[3 * 1024 + 1], query[sizeof(tok) + sizeof(pre) + 96];
    if (objstore_encode(job->token, 0, tok, sizeof(tok)) < 0 ||
        objstore_encode(job->prefix, 0, pre, sizeof(pre)) < 0)
        return -ENAMETOOLONG;
    char keys[32] = "";
    if (job->page_keys)
        snprintf(keys, sizeof(keys), "&max-keys=%u", job->page_keys);
    snprintf(query, sizeof(query), "%s%s%slist-type=2%s&prefix=%s",
             job->token[0] ? "continuation-token=" : "", tok, job->token[0] ? "&" : "", keys,
             pre);
    struct objstore_target t = {.bucket = job->bucket, .key = NULL};
    char *url = target_url(os, &t, query);
    return url ? submit(os, url, NULL, 0, 0, NULL, NULL, list_page_done, job, job) : -ENOMEM;
}

int objstore_list(struct objstore *os, const char *bucket, const char *prefix,
                  uint32_t page_keys, objstore_list_fn done, void *arg)
{
    if (os->freeing)
        return -ECANCELED;
    if (!os->s3 || !valid_bucket(bucket) || strlen(prefix) > 1024)
        return -EINVAL;
    struct list_job *job = calloc(1, sizeof(*job));
    if (job == NULL)
        return -ENOMEM;
    job->os = os;
    job->bucket = strdup(bucket);
    job->prefix = strdup(prefix);
    job->page_keys = page_keys;
    job->done = done;
    job->arg = arg;
    if (job->bucket == NULL || job->prefix == NULL) {
        free(job->bucket);
        free(job->prefix);
        free(job);
        return -ENOMEM;
    }
    int rc = list_page(job);
    if (rc < 0) {
        free(job->bucket);
        free(job->prefix);
        free(job);
    }
    return rc;
}

void objstore_listing_free(struct objstore_listing *l)
{
    s3xml_objects_free(l->objects, l->n);
    memset(l, 0, sizeof(*l));
}
