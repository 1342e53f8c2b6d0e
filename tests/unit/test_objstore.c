/* Tests for the object-store client (daemon/objstore.h) against real
 * servers on loopback (tests/tools/objfixture.py): s3rver behind the proxy
 * that checks every request's SigV4 signature with botocore, delays it and
 * fails chosen fractions, and nginx for plain HTTP.
 *
 * What each case asserts:
 *   s3_get        whole and ranged GETs equal the uploaded bytes; ETag and
 *                 object size reported; a streamed GET (sink) sees every
 *                 byte in order, and a sink's error stops it with that
 *                 error; a body over max_bytes is -EFBIG
 *   s3_list       ListObjectsV2 over 7 pages (50 keys a page) gives every
 *                 key once, in order, with its size; a missing bucket is
 *                 -ENOENT naming NoSuchBucket
 *   s3_depth      300 GETs with depth 16 behind 5 ms of latency: never more
 *                 than 16 in flight, all complete, connections reused (the
 *                 proxy saw at most 2 x depth connections)
 *   s3_credentials a wrong secret is -EACCES with SignatureDoesNotMatch, a
 *                 wrong key InvalidAccessKeyId; with a session token
 *                 required, the right token passes and none is refused
 *   s3_missing    a missing key is -ENOENT (NoSuchKey), after one try
 *   s3_retries    30% 503s, then 30% connection resets, then a mix: every
 *                 GET completes with retries counted; with 0 retries the
 *                 503s fail with -EIO naming SlowDown
 *   s3_down       a server that is gone (port closed): -ECONNREFUSED after
 *                 the last try, naming the URL; the proxy down, then up
 *                 again while requests back off: all complete
 *   s3_timeout    500 ms of latency against a 150 ms timeout: -ETIMEDOUT
 *   s3_cancel     freeing the client with requests in flight, queued and
 *                 backing off completes each once with -ECANCELED
 *   http          nginx: whole and ranged GETs by URL, a 404 is -ENOENT
 * Skips (77) when s3rver, node, nginx or botocore is missing. */
#include <check.h>
#include <errno.h>
#include <event2/event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../tools/objfixture.h"
#include "objstore.h"

#define SECRET "presto-test-secret-Zq9"
#define NFILES 320

static char dir[256];
static struct objfixture s3fx, httpfx;
static int have_s3, have_http;
static char s3_endpoint[64];

/* ---- test data: NFILES files of varied sizes, and one of 3 MB ---- */

static size_t file_size(int i)
{
    return i % 37 == 0 ? 0 : (size_t)(i * 7919) % 20000 + 1;
}

static uint8_t file_byte(int i, size_t k)
{
    return (uint8_t)((k * 131 + (size_t)i * 17) ^ (k >> 8));
}

static void make_data(void)
{
    char path[512];
    for (int i = 0; i < NFILES; i++) {
        snprintf(path, sizeof(path), "%s/data/cls_%d", dir, i % 4);
        mkdir(path, 0755);
        snprintf(path, sizeof(path), "%s/data/cls_%d/img_%04d.bin", dir, i % 4, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL) {
            perror(path);
            exit(1);
        }
        for (size_t k = 0; k < file_size(i); k++)
            fputc(file_byte(i, k), f);
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/big", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/big/blob.bin", dir);
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    for (size_t k = 0; k < 3u << 20; k++)
        fputc(file_byte(9999, k), f);
    fclose(f);
}

static void key_of(int i, char *buf, size_t len)
{
    snprintf(buf, len, "train/cls_%d/img_%04d.bin", i % 4, i);
}

/* ---- a loop to run requests on ---- */

struct run {
    struct event_base *base;
    struct objstore *os;
    int pending;
    uint32_t max_in_flight;
};

struct get {
    struct run *run;
    int file;
    uint64_t off, len;
    int rc;
    uint8_t *data;
    size_t n;
    char etag[80];
    uint64_t size;
    unsigned attempts;
    char msg[512];
    int calls;
};

/* A run (its own event base) of an objstore made from cfg. */
static void run_with(struct run *r, const struct objstore_config *cfg)
{
    char err[256];
    memset(r, 0, sizeof(*r));
    r->base = event_base_new();
    ck_assert_ptr_nonnull(r->base);
    ck_assert_msg(objstore_new(r->base, cfg, &r->os, err, sizeof(err)) == 0, "%s", err);
}

static void new_run(struct run *r, const char *secret, const char *token, uint32_t depth,
                    uint32_t retries)
{
    struct objstore_config cfg = {
        .s3 = 1,
        .endpoint = s3_endpoint,
        .region = "us-east-1",
        .access_key = "S3RVER",
        .secret_key = secret,
        .session_token = token,
        .depth = depth,
        .retries = retries,
        .timeout_ms = 10000,
        .connect_timeout_ms = 2000,
        .backoff_ms = 10,
        .backoff_max_ms = 200,
    };
    run_with(r, &cfg);
}

static void end_run(struct run *r)
{
    objstore_free(r->os);
    event_base_free(r->base);
}

static void wait_all(struct run *r)
{
    while (r->pending > 0)
        ck_assert_int_ge(event_base_loop(r->base, EVLOOP_ONCE), 0);
}

static void on_get(void *arg, int rc, struct objstore_result *res)
{
    struct get *g = arg;
    g->calls++;
    g->rc = rc;
    g->data = res->data;
    g->n = res->len;
    g->size = res->size;
    g->attempts = res->attempts;
    memcpy(g->etag, res->etag, sizeof(g->etag));
    snprintf(g->msg, sizeof(g->msg), "%s", res->message ? res->message : "");
    struct objstore_stats st;
    objstore_stats(g->run->os, &st);
    if (st.in_flight > g->run->max_in_flight)
        g->run->max_in_flight = st.in_flight;
    g->run->pending--;
}

static void get_s3(struct run *r, struct get *g, const char *bucket, const char *key,
                   uint64_t off, uint64_t len)
{
    g->run = r;
    g->off = off;
    g->len = len;
    struct objstore_target t = {.bucket = bucket, .key = key};
    ck_assert_int_eq(objstore_get(r->os, &t, off, len, NULL, NULL, on_get, g), 0);
    r->pending++;
}

static void check_bytes(const struct get *g)
{
    size_t full = file_size(g->file);
    size_t from = g->off < full ? (size_t)g->off : full;
    size_t want = g->len ? (from + g->len > full ? full - from : (size_t)g->len) : full - from;
    ck_assert_msg(g->rc == 0, "file %d: %d %s", g->file, g->rc, g->msg);
    ck_assert_uint_eq(g->n, want);
    /* one assertion for the lot: check marks every assertion it passes */
    size_t bad = want;
    for (size_t k = 0; k < want && bad == want; k++)
        if (g->data[k] != file_byte(g->file, from + k))
            bad = k;
    ck_assert_msg(bad == want, "file %d byte %zu differs", g->file, from + bad);
}

static void reset_fixture(void)
{
    objfixture_cmd(&s3fx, "delay 0", NULL, 0);
    objfixture_cmd(&s3fx, "fail 0 503", NULL, 0);
    objfixture_cmd(&s3fx, "token -", NULL, 0);
    objfixture_cmd(&s3fx, "up", NULL, 0);
}

#define NEED_S3()                                                   \
    do {                                                            \
        if (!have_s3) {                                             \
            printf("SKIP: %s\n", s3fx.why);                         \
            return;                                                 \
        }                                                           \
        reset_fixture();                                            \
    } while (0)

/* ---- cases ---- */

START_TEST(test_s3_get)
{
    NEED_S3();
    struct run r;
    new_run(&r, SECRET, NULL, 8, 2);
    struct get g[6] = {{0}};
    char key[64];
    int files[] = {1, 2, 3, 5, 37, 100};
    uint64_t offs[] = {0, 10, 0, 5000, 0, 19990};
    uint64_t lens[] = {0, 100, 1, 0, 0, 1000};
    for (int i = 0; i < 6; i++) {
        g[i].file = files[i];
        key_of(files[i], key, sizeof(key));
        get_s3(&r, &g[i], "data", key, offs[i], lens[i]);
    }
    wait_all(&r);
    for (int i = 0; i < 6; i++) {
        if (files[i] == 100 && offs[i] >= file_size(100)) {
            /* a range past the end: 416 */
            ck_assert_int_eq(g[i].rc, -ERANGE);
            continue;
        }
        check_bytes(&g[i]);
        ck_assert_int_eq(g[i].calls, 1);
        if (file_size(files[i]))
            ck_assert_msg(strlen(g[i].etag) == 32, "etag '%s'", g[i].etag);
        ck_assert_uint_eq(g[i].size, file_size(files[i]));
        free(g[i].data);
    }
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.completed, 5);
    ck_assert_uint_eq(st.failed, 1); /* the range past the end */
    ck_assert_uint_eq(st.in_flight, 0);
    ck_assert_uint_gt(st.lat_p50_us, 0);
    ck_assert_uint_ge(st.lat_p99_us, st.lat_p50_us);
    end_run(&r);
}
END_TEST

struct stream {
    uint64_t n;
    int bad, stop_at;
};

static int sink(void *arg, const uint8_t *p, size_t n)
{
    struct stream *s = arg;
    for (size_t k = 0; k < n; k++)
        if (p[k] != file_byte(9999, s->n + k))
            s->bad++;
    s->n += n;
    return s->stop_at && s->n >= (uint64_t)s->stop_at ? -EPIPE : 0;
}

START_TEST(test_s3_stream)
{
    NEED_S3();
    struct run r;
    new_run(&r, SECRET, NULL, 4, 2);
    struct stream s = {0}, s2 = {.stop_at = 100000};
    struct get g = {.run = &r}, g2 = {.run = &r};
    struct objstore_target t = {.bucket = "data", .key = "big/blob.bin"};
    ck_assert_int_eq(objstore_get(r.os, &t, 0, 0, sink, &s, on_get, &g), 0);
    ck_assert_int_eq(objstore_get(r.os, &t, 0, 0, sink, &s2, on_get, &g2), 0);
    r.pending = 2;
    wait_all(&r);
    ck_assert_msg(g.rc == 0, "%s", g.msg);
    ck_assert_uint_eq(s.n, 3u << 20);
    ck_assert_int_eq(s.bad, 0);
    ck_assert_ptr_null(g.data);
    ck_assert_uint_eq(g.size, 3u << 20);
    ck_assert_int_eq(g2.rc, -EPIPE);
    ck_assert_msg(strstr(g2.msg, "reader stopped") != NULL, "%s", g2.msg);
    end_run(&r);

    /* max_bytes */
    struct run r2;
    memset(&r2, 0, sizeof(r2));
    r2.base = event_base_new();
    struct objstore_config cfg = {.s3 = 1, .endpoint = s3_endpoint, .access_key = "S3RVER",
                                  .secret_key = SECRET, .max_bytes = 1 << 20};
    char err[256];
    ck_assert_int_eq(objstore_new(r2.base, &cfg, &r2.os, err, sizeof(err)), 0);
    struct get g3 = {0};
    get_s3(&r2, &g3, "data", "big/blob.bin", 0, 0);
    wait_all(&r2);
    ck_assert_int_eq(g3.rc, -EFBIG);
    end_run(&r2);
}
END_TEST

struct list_out {
    int rc, calls;
    struct objstore_listing l;
    char msg[512];
    struct run *run;
};

static void on_list(void *arg, int rc, struct objstore_listing *l, const char *message)
{
    struct list_out *o = arg;
    o->calls++;
    o->rc = rc;
    if (l)
        o->l = *l;
    snprintf(o->msg, sizeof(o->msg), "%s", message ? message : "");
    o->run->pending--;
}

START_TEST(test_s3_list)
{
    NEED_S3();
    struct run r;
    new_run(&r, SECRET, NULL, 4, 2);
    struct list_out o = {.run = &r}, missing = {.run = &r};
    ck_assert_int_eq(objstore_list(r.os, "data", "train/", 50, on_list, &o), 0);
    ck_assert_int_eq(objstore_list(r.os, "nosuchbucket", "", 0, on_list, &missing), 0);
    r.pending = 2;
    wait_all(&r);
    ck_assert_msg(o.rc == 0, "%s", o.msg);
    ck_assert_uint_eq(o.l.n, NFILES);
    ck_assert_uint_eq(o.l.pages, (NFILES + 49) / 50);
    for (size_t i = 1; i < o.l.n; i++)
        ck_assert_msg(strcmp(o.l.objects[i - 1].key, o.l.objects[i].key) < 0, "order at %zu", i);
    /* every key once, with its size */
    int seen[NFILES] = {0};
    for (size_t i = 0; i < o.l.n; i++) {
        int cls, idx;
        ck_assert_int_eq(sscanf(o.l.objects[i].key, "train/cls_%d/img_%d.bin", &cls, &idx), 2);
        ck_assert(idx >= 0 && idx < NFILES && !seen[idx]);
        seen[idx] = 1;
        ck_assert_uint_eq(o.l.objects[i].size, file_size(idx));
    }
    objstore_listing_free(&o.l);
    ck_assert_int_eq(missing.rc, -ENOENT);
    ck_assert_msg(strstr(missing.msg, "NoSuchBucket") != NULL, "%s", missing.msg);
    end_run(&r);
}
END_TEST

START_TEST(test_s3_depth)
{
    NEED_S3();
    objfixture_cmd(&s3fx, "delay 5", NULL, 0);
    long conns0 = objfixture_stat(&s3fx, "connections");
    struct run r;
    new_run(&r, SECRET, NULL, 16, 2);
    enum { N = 300 };
    struct get *g = calloc(N, sizeof(*g));
    char key[64];
    for (int i = 0; i < N; i++) {
        g[i].file = i % NFILES;
        key_of(g[i].file, key, sizeof(key));
        get_s3(&r, &g[i], "data", key, 0, 0);
    }
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.in_flight, 16);
    ck_assert_uint_eq(st.queued, N - 16);
    wait_all(&r);
    for (int i = 0; i < N; i++) {
        check_bytes(&g[i]);
        free(g[i].data);
    }
    ck_assert_uint_le(r.max_in_flight, 16);
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.completed, N);
    ck_assert_uint_eq(st.attempts, N);
    long conns = objfixture_stat(&s3fx, "connections") - conns0;
    printf("depth 16: %d GETs over %ld connections, p50 %llu us, p99 %llu us\n", N, conns,
           (unsigned long long)st.lat_p50_us, (unsigned long long)st.lat_p99_us);
    ck_assert_int_le(conns, 32);
    ck_assert_uint_ge(st.lat_p50_us, 5000);
    free(g);
    end_run(&r);
}
END_TEST

START_TEST(test_s3_credentials)
{
    NEED_S3();
    struct run r;
    new_run(&r, "not-the-secret", NULL, 4, 3);
    struct get g = {.file = 1};
    char key[64];
    key_of(1, key, sizeof(key));
    get_s3(&r, &g, "data", key, 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g.rc, -EACCES);
    ck_assert_msg(strstr(g.msg, "SignatureDoesNotMatch") && strstr(g.msg, "data/train"), "%s",
                  g.msg);
    ck_assert_msg(strstr(g.msg, "not-the-secret") == NULL, "the secret in a message: %s", g.msg);
    ck_assert_uint_eq(g.attempts, 1); /* 403 is not retried */
    end_run(&r);

    /* another access key */
    memset(&r, 0, sizeof(r));
    r.base = event_base_new();
    struct objstore_config cfg = {.s3 = 1, .endpoint = s3_endpoint, .access_key = "AKIDWRONG",
                                  .secret_key = SECRET};
    char err[256];
    ck_assert_int_eq(objstore_new(r.base, &cfg, &r.os, err, sizeof(err)), 0);
    struct get g2 = {.file = 1};
    get_s3(&r, &g2, "data", key, 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g2.rc, -EACCES);
    ck_assert_msg(strstr(g2.msg, "InvalidAccessKeyId") != NULL, "%s", g2.msg);
    end_run(&r);

    /* a session token: signed and sent */
    objfixture_cmd(&s3fx, "token tok/en+=123", NULL, 0);
    new_run(&r, SECRET, "tok/en+=123", 4, 1);
    struct get g3 = {.file = 2};
    key_of(2, key, sizeof(key));
    get_s3(&r, &g3, "data", key, 0, 0);
    wait_all(&r);
    check_bytes(&g3);
    free(g3.data);
    end_run(&r);
    new_run(&r, SECRET, NULL, 4, 1);
    struct get g4 = {.file = 2};
    get_s3(&r, &g4, "data", key, 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g4.rc, -EACCES);
    ck_assert_msg(strstr(g4.msg, "InvalidToken") != NULL, "%s", g4.msg);
    end_run(&r);
}
END_TEST

START_TEST(test_s3_missing)
{
    NEED_S3();
    struct run r;
    new_run(&r, SECRET, NULL, 4, 3);
    struct get g = {0};
    get_s3(&r, &g, "data", "train/no/such.jpg", 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g.rc, -ENOENT);
    ck_assert_msg(strstr(g.msg, "NoSuchKey") != NULL, "%s", g.msg);
    ck_assert_uint_eq(g.attempts, 1);
    /* bad targets are refused at once */
    struct objstore_target bad = {.bucket = "a/b", .key = "k"};
    ck_assert_int_eq(objstore_get(r.os, &bad, 0, 0, NULL, NULL, on_get, &g), -EINVAL);
    struct objstore_target file = {.url = "file:///etc/passwd"};
    ck_assert_int_eq(objstore_get(r.os, &file, 0, 0, NULL, NULL, on_get, &g), -EINVAL);
    end_run(&r);
}
END_TEST

static void many(const char *fail, uint32_t retries, int *ok, int *failed, uint64_t *nretries,
                 char *msg, size_t msglen)
{
    objfixture_cmd(&s3fx, fail, NULL, 0);
    struct run r;
    new_run(&r, SECRET, NULL, 16, retries);
    enum { N = 150 };
    struct get *g = calloc(N, sizeof(*g));
    char key[64];
    for (int i = 0; i < N; i++) {
        g[i].file = (i * 7) % NFILES;
        key_of(g[i].file, key, sizeof(key));
        get_s3(&r, &g[i], "data", key, 0, 0);
    }
    wait_all(&r);
    *ok = *failed = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(g[i].calls, 1);
        if (g[i].rc == 0) {
            check_bytes(&g[i]);
            (*ok)++;
        } else {
            (*failed)++;
            snprintf(msg, msglen, "%d %s", g[i].rc, g[i].msg);
        }
        free(g[i].data);
    }
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    *nretries = st.retries;
    free(g);
    end_run(&r);
    objfixture_cmd(&s3fx, "fail 0 503", NULL, 0);
}

START_TEST(test_s3_retries)
{
    NEED_S3();
    int ok, failed;
    uint64_t retries;
    char msg[600] = "";
    /* curl itself sends a request again once when a reused connection
     * dies before any answer: resets need fewer retries of ours */
    static const char *const modes[] = {"fail 0.3 503", "fail 0.3 reset", "fail 0.4 mix"};
    static const uint64_t least[] = {15, 3, 8};
    for (int m = 0; m < 3; m++) {
        long injected0 = objfixture_stat(&s3fx, "failed_503") + objfixture_stat(&s3fx, "failed_reset");
        many(modes[m], 12, &ok, &failed, &retries, msg, sizeof(msg));
        long injected = objfixture_stat(&s3fx, "failed_503") +
                        objfixture_stat(&s3fx, "failed_reset") - injected0;
        printf("%s: %d ok, %d failed, %ld failures injected, %llu retries\n", modes[m], ok,
               failed, injected, (unsigned long long)retries);
        ck_assert_msg(failed == 0, "%s: %s", modes[m], msg);
        ck_assert_uint_gt(retries, least[m]);
        ck_assert_int_ge(injected, (long)retries);
    }
    many("fail 0.3 503", 0, &ok, &failed, &retries, msg, sizeof(msg));
    ck_assert_int_gt(failed, 15);
    ck_assert_uint_eq(retries, 0);
    ck_assert_msg(strstr(msg, "-5 GET") && strstr(msg, "HTTP 503 SlowDown"), "%s", msg);
}
END_TEST

static void on_timer_cmd(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    objfixture_cmd(&s3fx, (const char *)arg, NULL, 0);
}

START_TEST(test_s3_down)
{
    NEED_S3();
    /* nothing listens */
    struct run r;
    memset(&r, 0, sizeof(r));
    r.base = event_base_new();
    char ep[64];
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", s3fx.s3rver_port == 1 ? 2 : 1);
    struct objstore_config cfg = {.s3 = 1, .endpoint = ep, .access_key = "S3RVER",
                                  .secret_key = SECRET, .retries = 3, .backoff_ms = 5,
                                  .backoff_max_ms = 20};
    char err[256];
    ck_assert_int_eq(objstore_new(r.base, &cfg, &r.os, err, sizeof(err)), 0);
    struct get g = {0};
    get_s3(&r, &g, "data", "x", 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g.rc, -ECONNREFUSED);
    ck_assert_uint_eq(g.attempts, 4);
    ck_assert_msg(strstr(g.msg, "http://127.0.0.1:") && strstr(g.msg, "4 tries"), "%s", g.msg);
    end_run(&r);

    /* the proxy goes down for 300 ms while GETs run, and comes back */
    objfixture_cmd(&s3fx, "delay 5", NULL, 0);
    new_run(&r, SECRET, NULL, 16, 30);
    enum { N = 120 };
    struct get *gs = calloc(N, sizeof(*gs));
    char key[64];
    for (int i = 0; i < N; i++) {
        gs[i].file = i % NFILES;
        key_of(gs[i].file, key, sizeof(key));
        get_s3(&r, &gs[i], "data", key, 0, 0);
    }
    struct event *down = evtimer_new(r.base, on_timer_cmd, (void *)"down");
    struct event *up = evtimer_new(r.base, on_timer_cmd, (void *)"up");
    struct timeval t1 = {0, 30000}, t2 = {0, 330000};
    evtimer_add(down, &t1);
    evtimer_add(up, &t2);
    wait_all(&r);
    for (int i = 0; i < N; i++) {
        check_bytes(&gs[i]);
        free(gs[i].data);
    }
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    printf("proxy down 300 ms: %llu retries, all %d GETs complete\n",
           (unsigned long long)st.retries, N);
    ck_assert_uint_gt(st.retries, 0);
    event_free(down);
    event_free(up);
    free(gs);
    end_run(&r);
}
END_TEST

START_TEST(test_s3_timeout)
{
    NEED_S3();
    objfixture_cmd(&s3fx, "delay 500", NULL, 0);
    struct run r;
    struct objstore_config cfg = {.s3 = 1, .endpoint = s3_endpoint, .access_key = "S3RVER",
                                  .secret_key = SECRET, .retries = 1, .timeout_ms = 150,
                                  .backoff_ms = 1, .backoff_max_ms = 1};
    run_with(&r, &cfg);
    struct get g = {.file = 3};
    char key[64];
    key_of(3, key, sizeof(key));
    get_s3(&r, &g, "data", key, 0, 0);
    wait_all(&r);
    ck_assert_int_eq(g.rc, -ETIMEDOUT);
    ck_assert_uint_eq(g.attempts, 2);
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.failed_timeout, 1);
    end_run(&r);
}
END_TEST

static int cancelled, finished;

static void on_cancel(void *arg, int rc, struct objstore_result *res)
{
    (void)arg;
    if (rc == -ECANCELED) {
        ck_assert_ptr_null(res->data);
        cancelled++;
    } else {
        free(res->data);
        finished++;
    }
}

START_TEST(test_s3_cancel)
{
    NEED_S3();
    objfixture_cmd(&s3fx, "delay 200", NULL, 0);
    objfixture_cmd(&s3fx, "fail 0.5 503", NULL, 0);
    struct run r;
    new_run(&r, SECRET, NULL, 4, 5);
    char key[64];
    key_of(4, key, sizeof(key));
    struct objstore_target t = {.bucket = "data", .key = key};
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(objstore_get(r.os, &t, 0, 0, NULL, NULL, on_cancel, NULL), 0);
    /* let some run and some fail into backoff */
    struct timeval tv = {0, 450000};
    event_base_loopexit(r.base, &tv);
    event_base_dispatch(r.base);
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    int done_before = finished;
    ck_assert_int_eq(done_before, (int)(st.completed + st.failed));
    ck_assert_uint_gt(st.in_flight + st.queued + st.waiting, 0);
    objstore_free(r.os);
    /* each request completed once: before the free, or cancelled by it */
    ck_assert_int_eq(finished, done_before);
    ck_assert_int_eq(cancelled + finished, 20);
    ck_assert_int_gt(cancelled, 0);
    event_base_free(r.base);
}
END_TEST

/* objstore_cancel: one request taken back in flight, one queued; the
 * others complete whole, each done runs once. */
START_TEST(test_s3_cancel_one)
{
    NEED_S3();
    objfixture_cmd(&s3fx, "delay 300", NULL, 0);
    struct run r;
    new_run(&r, SECRET, NULL, 2, 0);
    struct get g[6] = {{0}};
    char key[64];
    for (int i = 0; i < 6; i++) {
        g[i].file = i + 1;
        key_of(g[i].file, key, sizeof(key));
        get_s3(&r, &g[i], "data", key, 0, 0);
    }
    struct timeval tv = {0, 100000}; /* 0 and 1 on the wire, 2 to 5 queued */
    event_base_loopexit(r.base, &tv);
    event_base_dispatch(r.base);
    ck_assert_int_eq(objstore_cancel(r.os, &g[0]), 0); /* in flight */
    ck_assert_int_eq(g[0].calls, 1);
    ck_assert_int_eq(g[0].rc, -ECANCELED);
    ck_assert_int_eq(objstore_cancel(r.os, &g[4]), 0); /* queued */
    ck_assert_int_eq(g[4].calls, 1);
    ck_assert_int_eq(g[4].rc, -ECANCELED);
    ck_assert_int_eq(objstore_cancel(r.os, &g[0]), -ENOENT); /* done already */
    wait_all(&r);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(g[i].calls, 1);
        if (i != 0 && i != 4)
            check_bytes(&g[i]);
        free(g[i].data);
    }
    struct objstore_stats st;
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.cancelled, 2);
    ck_assert_uint_eq(st.completed, 4);
    ck_assert_uint_eq(st.failed, 0);
    end_run(&r);
}
END_TEST

/* objstore_cancel of a request waiting out its backoff (every attempt
 * answered 503, the backoff up to seconds): its done runs once, now, with
 * -ECANCELED, nothing is left waiting, and its retry timer never fires
 * (the loop runs on past it; ASan and valgrind would see a freed request
 * used). */
START_TEST(test_s3_cancel_waiting)
{
    NEED_S3();
    objfixture_cmd(&s3fx, "fail 1 503", NULL, 0);
    struct run r;
    struct objstore_config cfg = {.s3 = 1, .endpoint = s3_endpoint, .region = "us-east-1",
                                  .access_key = "S3RVER", .secret_key = SECRET, .depth = 1,
                                  .retries = 20, .timeout_ms = 10000,
                                  .connect_timeout_ms = 2000, .backoff_ms = 2000,
                                  .backoff_max_ms = 2000};
    char key[64];
    run_with(&r, &cfg);
    struct get g = {0};
    key_of(1, key, sizeof(key));
    get_s3(&r, &g, "data", key, 0, 0);
    struct objstore_stats st = {0};
    /* every attempt fails: it is in backoff after each, until its tries end */
    while (g.calls == 0) {
        ck_assert_int_ge(event_base_loop(r.base, EVLOOP_ONCE), 0);
        objstore_stats(r.os, &st);
        if (st.waiting == 1)
            break;
    }
    ck_assert_msg(g.calls == 0 && st.waiting == 1, "never seen in backoff (%d calls)", g.calls);
    uint64_t attempts = st.attempts;
    ck_assert_int_eq(objstore_cancel(r.os, &g), 0);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.rc, -ECANCELED);
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.waiting, 0);
    ck_assert_uint_eq(st.cancelled, 1);
    ck_assert_int_eq(objstore_cancel(r.os, &g), -ENOENT); /* gone */
    /* past the longest backoff: no attempt more, no second done */
    struct timeval tv = {2, 300000};
    event_base_loopexit(r.base, &tv);
    event_base_dispatch(r.base);
    objstore_stats(r.os, &st);
    ck_assert_uint_eq(st.attempts, attempts);
    ck_assert_int_eq(g.calls, 1);
    free(g.data);
    end_run(&r);
}
END_TEST

START_TEST(test_http)
{
    if (!have_http) {
        printf("SKIP: %s\n", httpfx.why);
        return;
    }
    struct run r;
    memset(&r, 0, sizeof(r));
    r.base = event_base_new();
    struct objstore_config cfg = {.depth = 8, .retries = 2};
    char err[256];
    ck_assert_int_eq(objstore_new(r.base, &cfg, &r.os, err, sizeof(err)), 0);
    struct get g[3] = {{.file = 7}, {.file = 11}, {0}};
    char url[3][256];
    snprintf(url[0], 256, "http://127.0.0.1:%d/data/cls_3/img_0007.bin", httpfx.port);
    snprintf(url[1], 256, "http://127.0.0.1:%d/data/cls_3/img_0011.bin", httpfx.port);
    snprintf(url[2], 256, "http://127.0.0.1:%d/data/none.bin", httpfx.port);
    uint64_t off[3] = {0, 100, 0}, len[3] = {0, 50, 0};
    for (int i = 0; i < 3; i++) {
        g[i].run = &r;
        g[i].off = off[i];
        g[i].len = len[i];
        struct objstore_target t = {.url = url[i]};
        ck_assert_int_eq(objstore_get(r.os, &t, off[i], len[i], NULL, NULL, on_get, &g[i]), 0);
        r.pending++;
    }
    wait_all(&r);
    check_bytes(&g[0]);
    check_bytes(&g[1]);
    ck_assert_int_eq(g[2].rc, -ENOENT);
    ck_assert_msg(strstr(g[2].msg, "HTTP 404") != NULL, "%s", g[2].msg);
    free(g[0].data);
    free(g[1].data);
    end_run(&r);
}
END_TEST

START_TEST(test_encode)
{
    char buf[64];
    ck_assert_int_eq(objstore_encode("a b/c~d.e_f-G+=", 1, buf, sizeof(buf)), 21);
    ck_assert_str_eq(buf, "a%20b/c~d.e_f-G%2B%3D");
    ck_assert_int_eq(objstore_encode("a/b", 0, buf, sizeof(buf)), 5);
    ck_assert_str_eq(buf, "a%2Fb");
    ck_assert_int_eq(objstore_encode("\xc3\xa9", 0, buf, sizeof(buf)), 6);
    ck_assert_str_eq(buf, "%C3%A9");
    ck_assert_int_eq(objstore_encode("abcdef", 0, buf, 4), -ENAMETOOLONG);
    /* config checks */
    struct event_base *b = event_base_new();
    struct objstore *os;
    struct objstore_config cfg = {.s3 = 1, .endpoint = "ftp://x"};
    char err[256];
    ck_assert_int_eq(objstore_new(b, &cfg, &os, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "ftp://x") != NULL, "%s", err);
    struct objstore_config aws = {.s3 = 1, .region = "eu-west-3"};
    ck_assert_int_eq(objstore_new(b, &aws, &os, err, sizeof(err)), 0);
    struct objstore_target t = {.bucket = "bk", .key = "a b/c.jpg"};
    objstore_url(os, &t, buf, sizeof(buf));
    ck_assert_str_eq(buf, "https://bk.s3.eu-west-3.amazonaws.com/a%20b/c.jpg");
    objstore_free(os);
    event_base_free(b);
}
END_TEST

static double t_start;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void case_start(void)
{
    t_start = now_s();
}

static void case_end(void)
{
    printf("  (%.1f s)\n", now_s() - t_start);
}

static Suite *suite(void)
{
    Suite *s = suite_create("objstore");
    TCase *tc = tcase_create("objstore");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, case_start, case_end);
    tcase_add_test(tc, test_encode);
    tcase_add_test(tc, test_s3_get);
    tcase_add_test(tc, test_s3_stream);
    tcase_add_test(tc, test_s3_list);
    tcase_add_test(tc, test_s3_depth);
    tcase_add_test(tc, test_s3_credentials);
    tcase_add_test(tc, test_s3_missing);
    tcase_add_test(tc, test_s3_retries);
    tcase_add_test(tc, test_s3_down);
    tcase_add_test(tc, test_s3_timeout);
    tcase_add_test(tc, test_s3_cancel);
    tcase_add_test(tc, test_s3_cancel_one);
    tcase_add_test(tc, test_s3_cancel_waiting);
    tcase_add_test(tc, test_http);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/presto-test-objstore-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[512], args[2048];
    snprintf(path, sizeof(path), "%s/data", dir);
    mkdir(path, 0755);
    make_data();
    objstore_global_init();

    snprintf(args, sizeof(args), "s3 --bucket 'data/train=%s/data' --bucket 'data/big=%s/big' "
                                 "--secret " SECRET,
             dir, dir);
    int rc = objfixture_start(&s3fx, args);
    have_s3 = rc == 0;
    if (rc == -1) {
        printf("the S3 fixture failed: %s\n", s3fx.why);
        return 1;
    }
    snprintf(s3_endpoint, sizeof(s3_endpoint), "http://127.0.0.1:%d", s3fx.port);
    chmod(dir, 0755);
    snprintf(args, sizeof(args), "http --direct --root '%s'", dir);
    rc = objfixture_start(&httpfx, args);
    have_http = rc == 0;
    if (rc == -1) {
        printf("the HTTP fixture failed: %s\n", httpfx.why);
        objfixture_stop(&s3fx);
        return 1;
    }

    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    objfixture_stop(&s3fx);
    objfixture_stop(&httpfx);
    objstore_global_cleanup();
    snprintf(args, sizeof(args), "rm -rf '%s'", dir);
    if (system(args) != 0)
        failed++;
    if (!have_s3 && !have_http) {
        printf("SKIP: %s; %s\n", s3fx.why, httpfx.why);
        return 77;
    }
    return failed ? 1 : 0;
}
