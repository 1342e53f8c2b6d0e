/* Unit tests for the cluster tier (daemon/cluster.h) against real
 * memcached servers on loopback ports, started by each test
 * (tests/tools/memcached_fixture.h): the cluster.* keys, memcached keys and
 * ketama placement, put/get round trips of raw and zstd records, batched
 * multi-gets across two servers, put-once, cluster.item_max and the
 * servers' -I, a server killed (a miss, not an error; backoff; back once it
 * answers), restarted empty (the stale connection reopened, nothing counted
 * as failed), stopped (timeouts), corrupt items written straight into
 * memcached under presto's keys, and threads sharing one cluster.
 * Skips (77) without Debian's memcached. */
#include <check.h>
#include <errno.h>
#include <libmemcached/memcached.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../tools/memcached_fixture.h"
#include "cluster.h"
#include "proto.h"
#include "step.h"
#include "store.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- records ---- */

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static struct store_key key_of(uint64_t n)
{
    return (struct store_key){.dataset = 0xda7a5e7, .path = mix(n), .fingerprint = 0xf1,
                              .src_size = 1000 + n, .src_mtime_ns = 1700000000000000000ll};
}

/* A record of an h x w x 3 image for key k: noisy (does not compress) or
 * smooth (zstd shrinks it). */
struct rec {
    uint8_t *b;
    size_t len, cap;
};

static void make_img(struct img *im, uint32_t h, uint32_t w, uint64_t seed, int smooth)
{
    *im = (struct img){.fmt = IMG_PIXELS, .h = h, .w = w, .c = 3, .dtype = PROTO_DTYPE_U8};
    ck_assert_int_eq(img_reserve(im, (size_t)h * w * 3), 0);
    im->len = (size_t)h * w * 3;
    uint64_t x = seed;
    for (size_t i = 0; i < im->len; i++)
        im->data[i] = smooth ? (uint8_t)(i / 97 + seed) : (uint8_t)(x = mix(x));
}

static void make_rec(struct rec *r, const struct store_key *k, uint32_t h, uint32_t w,
                     uint64_t seed, int zstd)
{
    struct img im;
    make_img(&im, h, w, seed, zstd);
    ssize_t n = store_encode(NULL, k, &im, zstd ? 3 : 0, &r->b, &r->cap);
    ck_assert_int_gt(n, STORE_HEADER_SIZE);
    r->len = (size_t)n;
    if (zstd)
        ck_assert_uint_lt(r->len, im.len); /* compressed */
    else
        ck_assert_uint_eq(r->len, STORE_HEADER_SIZE + im.len);
    img_free(&im);
}

static void free_rec(struct rec *r)
{
    free(r->b);
    memset(r, 0, sizeof(*r));
}

/* ---- servers and the cluster ---- */

static void need_memcached(void)
{
    if (!mcd_available()) {
        printf("no %s (Debian's memcached): skipped\n", MCD_BIN);
        exit(77);
    }
}

static void start(struct mcd *m)
{
    ck_assert_int_eq(mcd_start(m, 0, "-m", "64", NULL), 0);
}

/* The backoff of the tests: long enough that the requests a test sends
 * within it surely fall in it, on a loaded machine too. */
#define TEST_BACKOFF_MS 400u

static struct cluster *make_cluster(struct mcd *m, int n, uint32_t timeout_ms,
                                    uint64_t item_max)
{
    struct cluster_config cfg;
    char err[256], num[32];
    cluster_config_init(&cfg);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(cluster_config_set(&cfg, "memcached", m[i].spec, err, sizeof(err)), 0);
    snprintf(num, sizeof(num), "%u", timeout_ms);
    ck_assert_int_eq(cluster_config_set(&cfg, "timeout_ms", num, err, sizeof(err)), 0);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)item_max);
    ck_assert_int_eq(cluster_config_set(&cfg, "item_max", num, err, sizeof(err)), 0);
    cfg.backoff_min_ms = TEST_BACKOFF_MS;
    cfg.backoff_max_ms = 4 * TEST_BACKOFF_MS;
    struct cluster *cl;
    int rc = cluster_create(&cl, &cfg, err, sizeof(err));
    if (rc < 0)
        printf("cluster_create: %s\n", err);
    ck_assert_int_eq(rc, 0);
    cluster_config_free(&cfg);
    return cl;
}

static uint64_t stat_of(struct cluster *cl, uint32_t i, enum cluster_stat k)
{
    struct cluster_server_stats st;
    cluster_get_server_stats(cl, i, &st);
    return st.v[k];
}

static uint64_t stat_sum(struct cluster *cl, enum cluster_stat k)
{
    uint64_t s = 0;
    for (uint32_t i = 0; i < cluster_nservers(cl); i++)
        s += stat_of(cl, i, k);
    return s;
}

/* Every lookup is accounted for exactly once. */
static void check_lookups_balance(struct cluster *cl)
{
    for (uint32_t i = 0; i < cluster_nservers(cl); i++) {
        struct cluster_server_stats st;
        cluster_get_server_stats(cl, i, &st);
        ck_assert_uint_eq(st.v[CLUSTER_STAT_lookups],
                          st.v[CLUSTER_STAT_hits] + st.v[CLUSTER_STAT_misses] +
                              st.v[CLUSTER_STAT_corrupt] + st.v[CLUSTER_STAT_lost] +
                              st.v[CLUSTER_STAT_skipped]);
    }
}

/* A direct handle on one server, for what presto never does itself. */
static memcached_st *direct(const struct mcd *m)
{
    memcached_st *mc = memcached_create(NULL);
    ck_assert_ptr_nonnull(mc);
    memcached_behavior_set(mc, MEMCACHED_BEHAVIOR_BINARY_PROTOCOL, 1);
    ck_assert_int_eq(memcached_server_add(mc, "127.0.0.1", m->port), MEMCACHED_SUCCESS);
    return mc;
}

static int direct_has(const struct mcd *m, const struct store_key *k)
{
    char key[CLUSTER_KEY_LEN + 1];
    cluster_key(k, key);
    memcached_st *mc = direct(m);
    memcached_return_t rc = memcached_exist(mc, key, CLUSTER_KEY_LEN);
    memcached_free(mc);
    return rc == MEMCACHED_SUCCESS;
}

static void direct_set(const struct mcd *m, const struct store_key *k, const void *v,
                       size_t len, uint32_t flags)
{
    char key[CLUSTER_KEY_LEN + 1];
    cluster_key(k, key);
    memcached_st *mc = direct(m);
    ck_assert_int_eq(memcached_set(mc, key, CLUSTER_KEY_LEN, v, len, 0, flags),
                     MEMCACHED_SUCCESS);
    memcached_free(mc);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Looks keys[0..n) up in one batch; returns the hits, each checked
 * against recs (when given) byte for byte. */
static int get_batch(struct cluster_conn *c, const struct store_key *keys, unsigned n,
                     const struct rec *recs, uint8_t *hit)
{
    struct cluster_lookup *l = calloc(n, sizeof(*l));
    ck_assert_ptr_nonnull(l);
    for (unsigned i = 0; i < n; i++)
        l[i].key = &keys[i];
    int hits = cluster_get(c, l, n);
    ck_assert_int_ge(hits, 0);
    int seen = 0;
    for (unsigned i = 0; i < n; i++) {
        if (hit)
            hit[i] = l[i].rec != NULL;
        if (!l[i].rec)
            continue;
        seen++;
        ck_assert_int_eq(store_check(&keys[i], l[i].rec, l[i].len), 0);
        if (recs) {
            ck_assert_uint_eq(l[i].len, recs[i].len);
            ck_assert_int_eq(memcmp(l[i].rec, recs[i].b, recs[i].len), 0);
        }
    }
    ck_assert_int_eq(seen, hits);
    free(l);
    return hits;
}

/* ---- configuration, keys, placement ---- */

START_TEST(test_config)
{
    struct cluster_config cfg;
    char err[256], host[CLUSTER_HOST_MAX];
    uint16_t port;
    cluster_config_init(&cfg);
    ck_assert_uint_eq(cfg.timeout_ms, CLUSTER_TIMEOUT_MS_DEFAULT);
    ck_assert_uint_eq(cfg.item_max, CLUSTER_ITEM_MAX_DEFAULT);
    ck_assert_uint_eq(cfg.backoff_min_ms, CLUSTER_BACKOFF_MIN_MS);
    ck_assert_uint_eq(cfg.backoff_max_ms, CLUSTER_BACKOFF_MAX_MS);
    ck_assert_uint_eq(cfg.nservers, 0);

    ck_assert_int_eq(cluster_parse_server("cache-3.example:11211", host, &port, err,
                                          sizeof(err)), 0);
    ck_assert_str_eq(host, "cache-3.example");
    ck_assert_uint_eq(port, 11211);
    ck_assert_int_eq(cluster_parse_server("[::1]:11212", host, &port, err, sizeof(err)), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_uint_eq(port, 11212);
    static const char *bad[] = {"localhost", "localhost:", ":11211", "host:0", "host:65536",
                                "host:12x", "::1:11211", "[::1]11211", "[::1", "a b:1",
                                "a/b:1", "host:-1"};
    for (size_t i = 0; i < NELEM(bad); i++) {
        err[0] = 0;
        ck_assert_msg(cluster_parse_server(bad[i], host, &port, err, sizeof(err)) == -EINVAL,
                      "%s accepted", bad[i]);
        ck_assert_msg(strstr(err, bad[i]) != NULL, "error for %s: %s", bad[i], err);
    }

    ck_assert_int_eq(cluster_config_set(&cfg, "timeout_ms", "50", err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg.timeout_ms, 50);
    ck_assert_int_eq(cluster_config_set(&cfg, "item_max", "4194304", err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg.item_max, 4194304);
    ck_assert_int_eq(cluster_config_set(&cfg, "timeout_ms", "0", err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "from 1 to 60000"));
    ck_assert_int_eq(cluster_config_set(&cfg, "timeout_ms", "60001", err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(cluster_config_set(&cfg, "timeout_ms", "5ms", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(cluster_config_set(&cfg, "item_max", "512", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(cluster_config_set(&cfg, "item_max", "-1", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(cluster_config_set(&cfg, "servers", "a:1", err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "unknown key"));
    ck_assert_uint_eq(cfg.timeout_ms, 50); /* the bad values changed nothing */

    struct cluster *cl;
    ck_assert_int_eq(cluster_create(&cl, &cfg, err, sizeof(err)), -EINVAL); /* no servers */
    ck_assert_ptr_null(cl);
    ck_assert_int_eq(cluster_config_set(&cfg, "memcached", "127.0.0.1:1", err, sizeof(err)), 0);
    ck_assert_int_eq(cluster_config_set(&cfg, "memcached", "nope", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(cluster_config_set(&cfg, "memcached", "127.0.0.1:1", err, sizeof(err)), 0);
    ck_assert_int_eq(cluster_create(&cl, &cfg, err, sizeof(err)), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "listed twice"));
    cluster_config_free(&cfg);

    cluster_config_init(&cfg);
    for (unsigned i = 0; i < CLUSTER_MAX_SERVERS; i++) {
        char spec[32];
        snprintf(spec, sizeof(spec), "127.0.0.1:%u", 20000 + i);
        ck_assert_int_eq(cluster_config_set(&cfg, "memcached", spec, err, sizeof(err)), 0);
    }
    ck_assert_int_eq(cluster_config_set(&cfg, "memcached", "127.0.0.1:1", err, sizeof(err)),
                     -EINVAL);
    ck_assert_int_eq(cluster_create(&cl, &cfg, err, sizeof(err)), 0);
    ck_assert_uint_eq(cluster_nservers(cl), CLUSTER_MAX_SERVERS);
    cluster_destroy(cl);
    cluster_config_free(&cfg);
}
END_TEST

START_TEST(test_keys_and_ring)
{
    char k1[CLUSTER_KEY_LEN + 1], k2[CLUSTER_KEY_LEN + 1];
    struct store_key a = key_of(1), b = a;
    cluster_key(&a, k1);
    ck_assert_uint_eq(strlen(k1), CLUSTER_KEY_LEN);
    ck_assert_uint_le(CLUSTER_KEY_LEN, 250); /* memcached's limit */
    ck_assert_int_eq(strncmp(k1, CLUSTER_KEY_PREFIX, strlen(CLUSTER_KEY_PREFIX)), 0);
    for (size_t i = strlen(CLUSTER_KEY_PREFIX); i < CLUSTER_KEY_LEN; i++)
        ck_assert(strchr("0123456789abcdef", k1[i]) != NULL);
    /* Every field of the record key is in the memcached key. */
    uint64_t *f[] = {&b.dataset, &b.path, &b.fingerprint, &b.src_size,
                     (uint64_t *)&b.src_mtime_ns};
    for (size_t i = 0; i < NELEM(f); i++) {
        b = a;
        *f[i] ^= 1;
        cluster_key(&b, k2);
        ck_assert_str_ne(k1, k2);
    }

    /* Placement: ketama spreads keys over the servers, the same for every
     * cluster built from the same list; a third server takes keys only
     * for itself, about a third of them. */
    struct cluster_config cfg;
    char err[256];
    struct cluster *two, *two_again, *three;
    cluster_config_init(&cfg);
    cluster_config_set(&cfg, "memcached", "10.0.0.1:11211", err, sizeof(err));
    cluster_config_set(&cfg, "memcached", "10.0.0.2:11211", err, sizeof(err));
    ck_assert_int_eq(cluster_create(&two, &cfg, err, sizeof(err)), 0);
    ck_assert_int_eq(cluster_create(&two_again, &cfg, err, sizeof(err)), 0);
    cluster_config_set(&cfg, "memcached", "10.0.0.3:11211", err, sizeof(err));
    ck_assert_int_eq(cluster_create(&three, &cfg, err, sizeof(err)), 0);
    cluster_config_free(&cfg);
    unsigned on[3] = {0}, moved = 0, n = 3000;
    for (unsigned i = 0; i < n; i++) {
        struct store_key k = key_of(i);
        uint32_t s2 = cluster_server_of(two, &k), s3 = cluster_server_of(three, &k);
        ck_assert_uint_lt(s2, 2);
        ck_assert_uint_eq(cluster_server_of(two_again, &k), s2);
        on[s2]++;
        if (s3 != s2) {
            ck_assert_uint_eq(s3, 2); /* moved only to the new server */
            moved++;
        }
    }
    ck_assert_uint_gt(on[0], n * 35 / 100);
    ck_assert_uint_gt(on[1], n * 35 / 100);
    ck_assert_uint_gt(moved, n * 20 / 100);
    ck_assert_uint_lt(moved, n * 47 / 100);
    cluster_destroy(two);
    cluster_destroy(two_again);
    cluster_destroy(three);
}
END_TEST

/* ---- round trips ---- */

START_TEST(test_roundtrip)
{
    need_memcached();
    struct mcd m;
    start(&m);
    struct cluster *cl = make_cluster(&m, 1, 1000, CLUSTER_ITEM_MAX_DEFAULT);
    struct cluster_conn *c;
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);

    /* Raw (noise) and zstd (smooth) records, small and near 150 KiB. */
    struct store_key keys[4] = {key_of(1), key_of(2), key_of(3), key_of(4)};
    struct rec recs[4] = {{0}};
    make_rec(&recs[0], &keys[0], 8, 8, 1, 0);
    make_rec(&recs[1], &keys[1], 224, 224, 2, 0);
    make_rec(&recs[2], &keys[2], 8, 8, 3, 1);
    make_rec(&recs[3], &keys[3], 224, 224, 4, 1);
    ck_assert_int_eq(get_batch(c, keys, 4, NULL, NULL), 0); /* empty: all miss */
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(cluster_put(c, &keys[i], recs[i].b, recs[i].len), 0);
    struct cluster_lookup l[4];
    for (int i = 0; i < 4; i++)
        l[i] = (struct cluster_lookup){.key = &keys[i]};
    ck_assert_int_eq(cluster_get(c, l, 4), 4);
    /* The records decode (no disk tier needed) into the images encoded. */
    static const uint32_t side[4] = {8, 224, 8, 224};
    for (int i = 0; i < 4; i++) {
        struct img want, got = {0};
        make_img(&want, side[i], side[i], (uint64_t)i + 1, i >= 2);
        ck_assert_int_eq(store_decode(NULL, &keys[i], l[i].rec, l[i].len, &got), 0);
        ck_assert_uint_eq(got.len, want.len);
        ck_assert_uint_eq(got.h, side[i]);
        ck_assert_int_eq(memcmp(got.data, want.data, want.len), 0);
        ck_assert_int_eq(store_decode(NULL, &keys[(i + 1) % 4], l[i].rec, l[i].len, &got),
                         -EBADMSG);
        img_free(&want);
        img_free(&got);
    }
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_hits), 4);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_misses), 4);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_puts), 4);
    uint64_t bytes = 0;
    for (int i = 0; i < 4; i++)
        bytes += recs[i].len;
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_bytes_written), bytes);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_bytes_read), bytes);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_errors), 0);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_up), 1);
    check_lookups_balance(cl);
    ck_assert_uint_ge(cluster_conn_bytes(c), recs[1].len + recs[3].len);

    /* A second conn (another thread's) sees the same records. */
    struct cluster_conn *c2;
    ck_assert_int_eq(cluster_conn_open(cl, &c2), 0);
    ck_assert_int_eq(get_batch(c2, keys, 4, recs, NULL), 4);
    cluster_conn_close(c2);

    for (int i = 0; i < 4; i++)
        free_rec(&recs[i]);
    cluster_conn_close(c);
    cluster_destroy(cl);
    mcd_stop(&m, SIGKILL);
}
END_TEST

#define MANY 300

/* Many keys over two servers in batches of a chunk and in one batch:
 * every key on the server the ring names, every record back whole. */
START_TEST(test_mget_two_servers)
{
    need_memcached();
    struct mcd m[2];
    start(&m[0]);
    start(&m[1]);
    struct cluster *cl = make_cluster(m, 2, 1000, CLUSTER_ITEM_MAX_DEFAULT);
    struct cluster_conn *c;
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    static struct store_key keys[MANY];
    static struct rec recs[MANY];
    for (unsigned i = 0; i < MANY; i++) {
        keys[i] = key_of(100 + i);
        make_rec(&recs[i], &keys[i], 16 + i % 64, 32, i, i % 3 == 0);
    }
    /* Two thirds stored; the rest miss. */
    unsigned stored = 0;
    for (unsigned i = 0; i < MANY; i++)
        if (i % 3 != 2) {
            ck_assert_int_eq(cluster_put(c, &keys[i], recs[i].b, recs[i].len), 0);
            stored++;
        }
    unsigned on[2] = {0};
    for (unsigned i = 0; i < MANY; i++) {
        uint32_t s = cluster_server_of(cl, &keys[i]);
        ck_assert_int_eq(direct_has(&m[s], &keys[i]), i % 3 != 2);
        ck_assert_int_eq(direct_has(&m[1 - s], &keys[i]), 0);
        on[s] += i % 3 != 2;
    }
    ck_assert_uint_gt(on[0], 0);
    ck_assert_uint_gt(on[1], 0);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_puts), on[0]);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_puts), on[1]);

    static uint8_t hit[MANY];
    for (unsigned b = 0; b < MANY; b += 32) {
        unsigned n = MANY - b < 32 ? MANY - b : 32;
        get_batch(c, keys + b, n, recs + b, hit + b);
        for (unsigned i = b; i < b + n; i++)
            ck_assert_int_eq(hit[i], i % 3 != 2);
    }
    ck_assert_int_eq(get_batch(c, keys, MANY, recs, hit), (int)stored);
    for (uint32_t s = 0; s < 2; s++) {
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_hits), 2 * on[s]);
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_errors), 0);
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_lost), 0);
    }
    ck_assert_uint_eq(stat_sum(cl, CLUSTER_STAT_misses), 2 * (MANY - stored));
    check_lookups_balance(cl);
    for (unsigned i = 0; i < MANY; i++)
        free_rec(&recs[i]);
    cluster_conn_close(c);
    cluster_destroy(cl);
    mcd_stop(&m[0], SIGKILL);
    mcd_stop(&m[1], SIGKILL);
}
END_TEST

/* Put-once: a key present is not rewritten, whoever puts it. */
START_TEST(test_put_once)
{
    need_memcached();
    struct mcd m;
    start(&m);
    struct cluster *cl = make_cluster(&m, 1, 1000, CLUSTER_ITEM_MAX_DEFAULT);
    struct cluster_conn *c, *c2;
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    ck_assert_int_eq(cluster_conn_open(cl, &c2), 0);
    struct store_key k = key_of(7);
    struct rec first = {0}, second = {0};
    make_rec(&first, &k, 32, 32, 1, 0);
    make_rec(&second, &k, 32, 32, 2, 0);
    ck_assert_int_eq(cluster_put(c, &k, first.b, first.len), 0);
    ck_assert_int_eq(cluster_put(c2, &k, second.b, second.len), -EEXIST);
    ck_assert_int_eq(cluster_put(c, &k, first.b, first.len), -EEXIST);
    ck_assert_int_eq(get_batch(c, &k, 1, &first, NULL), 1);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_puts), 1);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_put_exists), 2);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_bytes_written), first.len);
    free_rec(&first);
    free_rec(&second);
    cluster_conn_close(c);
    cluster_conn_close(c2);
    cluster_destroy(cl);
    mcd_stop(&m, SIGKILL);
}
END_TEST

/* Records over cluster.item_max are not sent; over the server's -I the
 * server refuses them; both are counted, neither is an error. A server
 * out of memory (-M) refuses puts and keeps what it has. */
START_TEST(test_item_max)
{
    need_memcached();
    struct mcd m;
    ck_assert_int_eq(mcd_start(&m, 0, "-m", "64", "-I", "64k", "-o", "slab_chunk_max=32768",
                               NULL), 0);
    struct store_key k1 = key_of(1), k2 = key_of(2), k3 = key_of(3);
    struct rec small = {0}, mid = {0}, big = {0};
    make_rec(&small, &k1, 64, 64, 1, 0);   /* 12 KiB */
    make_rec(&mid, &k2, 128, 128, 2, 0);   /* 48 KiB */
    make_rec(&big, &k3, 160, 160, 3, 0);   /* 75 KiB */

    /* item_max 32 KiB: mid and big are not clustered, not even sent. */
    struct cluster *cl = make_cluster(&m, 1, 1000, 32 << 10);
    struct cluster_conn *c;
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    ck_assert_int_eq(cluster_put(c, &k1, small.b, small.len), 0);
    ck_assert_int_eq(cluster_put(c, &k2, mid.b, mid.len), -EFBIG);
    ck_assert_int_eq(cluster_put(c, &k3, big.b, big.len), -EFBIG);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_put_too_large), 2);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_bytes_written), small.len);
    ck_assert(!direct_has(&m, &k2));
    cluster_conn_close(c);
    cluster_destroy(cl);

    /* item_max above the server's -I 64k: the server refuses big. */
    cl = make_cluster(&m, 1, 1000, 1 << 20);
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    ck_assert_int_eq(cluster_put(c, &k2, mid.b, mid.len), 0);
    ck_assert_int_eq(cluster_put(c, &k3, big.b, big.len), -EFBIG);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_put_too_large), 1);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_errors), 0);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_up), 1);
    struct store_key both[3] = {k1, k2, k3};
    uint8_t hit[3];
    ck_assert_int_eq(get_batch(c, both, 3, NULL, hit), 2);
    ck_assert(hit[0] && hit[1] && !hit[2]);
    cluster_conn_close(c);
    cluster_destroy(cl);
    mcd_stop(&m, SIGKILL);

    /* A full server (-M -m 2: no evictions) refuses, keeps the rest. */
    ck_assert_int_eq(mcd_start(&m, 0, "-M", "-m", "2", NULL), 0);
    cl = make_cluster(&m, 1, 1000, 1 << 20);
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    int full = 0;
    unsigned stored = 0;
    struct rec r = {0};
    for (unsigned i = 0; i < 200 && !full; i++) {
        struct store_key k = key_of(1000 + i);
        make_rec(&r, &k, 128, 128, i, 0);
        int rc = cluster_put(c, &k, r.b, r.len);
        ck_assert_msg(rc == 0 || rc == -ENOSPC, "put: %d", rc);
        full = rc == -ENOSPC;
        stored += rc == 0;
    }
    ck_assert_msg(full, "2 MiB took 200 records of 48 KiB");
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_put_full), 1);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_errors), 0);
    struct store_key k0 = key_of(1000);
    ck_assert_int_eq(get_batch(c, &k0, 1, NULL, NULL), 1); /* the first is kept */
    free_rec(&r);
    cluster_conn_close(c);
    cluster_destroy(cl);
    mcd_stop(&m, SIGKILL);
    free_rec(&small);
    free_rec(&mid);
    free_rec(&big);
}
END_TEST

/* ---- failures ---- */

#define NFAIL 64

/* Two servers and a cluster holding NFAIL records, on1 of them on
 * server 1, each checked to come back whole. */
struct two {
    struct mcd m[2];
    struct cluster *cl;
    struct cluster_conn *c;
    struct store_key keys[NFAIL];
    struct rec recs[NFAIL];
    uint8_t hit[NFAIL];
    unsigned on1;
};

static int two_get(struct two *t);

static struct two *two_setup(uint32_t timeout_ms)
{
    need_memcached();
    struct two *t = calloc(1, sizeof(*t));
    ck_assert_ptr_nonnull(t);
    start(&t->m[0]);
    start(&t->m[1]);
    t->cl = make_cluster(t->m, 2, timeout_ms, CLUSTER_ITEM_MAX_DEFAULT);
    ck_assert_int_eq(cluster_conn_open(t->cl, &t->c), 0);
    for (unsigned i = 0; i < NFAIL; i++) {
        t->keys[i] = key_of(500 + i);
        make_rec(&t->recs[i], &t->keys[i], 24, 24, i, 0);
        ck_assert_int_eq(cluster_put(t->c, &t->keys[i], t->recs[i].b, t->recs[i].len), 0);
        t->on1 += cluster_server_of(t->cl, &t->keys[i]) == 1;
    }
    ck_assert_uint_gt(t->on1, 0);
    ck_assert_uint_lt(t->on1, NFAIL);
    ck_assert_int_eq(two_get(t), NFAIL);
    return t;
}

static void two_teardown(struct two *t)
{
    check_lookups_balance(t->cl);
    for (unsigned i = 0; i < NFAIL; i++)
        free_rec(&t->recs[i]);
    cluster_conn_close(t->c);
    cluster_destroy(t->cl);
    mcd_stop(&t->m[0], SIGKILL);
    mcd_stop(&t->m[1], SIGKILL);
    free(t);
}

/* Looks every record up in one batch (t->hit says which came back). */
static int two_get(struct two *t)
{
    return get_batch(t->c, t->keys, NFAIL, t->recs, t->hit);
}

/* A lookup batch while server 1 is out: every key hits exactly when it
 * is server 0's, and the caller sees no error. */
static void two_get_server0_only(struct two *t)
{
    ck_assert_int_eq(two_get(t), NFAIL - t->on1);
    for (unsigned i = 0; i < NFAIL; i++)
        ck_assert_int_eq(t->hit[i], cluster_server_of(t->cl, &t->keys[i]) == 0);
}

/* Puts server 1's records again, each expected to return rc. */
static void two_put_server1(struct two *t, int rc)
{
    for (unsigned i = 0; i < NFAIL; i++)
        if (cluster_server_of(t->cl, &t->keys[i]) == 1)
            ck_assert_int_eq(cluster_put(t->c, &t->keys[i], t->recs[i].b, t->recs[i].len), rc);
}

/* Waits (up to 10 s) until a lookup batch finds server 1 up again. */
static void two_wait_up(struct two *t)
{
    for (int i = 0; i < 500; i++) {
        two_get(t);
        if (stat_of(t->cl, 1, CLUSTER_STAT_up))
            return;
        sleep_ms(20);
    }
    ck_abort_msg("server 1 never came back");
}

/* A server killed: its keys miss, the other's still hit; nothing is an
 * error to the caller; the server is not asked again until its backoff
 * ends; once it answers (restarted, empty) it is used again. */
START_TEST(test_server_killed)
{
    struct two *t = two_setup(500);
    struct cluster *cl = t->cl;
    mcd_stop(&t->m[1], SIGKILL);
    two_get_server0_only(t);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_up), 0);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_downs), 1);
    ck_assert_uint_ge(stat_of(cl, 1, CLUSTER_STAT_errors), 1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_lost), t->on1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_backoff_ms), TEST_BACKOFF_MS);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_errors), 0);

    /* Within the backoff nothing is sent to it: skipped, not failed. */
    uint64_t errors = stat_of(cl, 1, CLUSTER_STAT_errors);
    two_get_server0_only(t);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_skipped), t->on1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_errors), errors);
    two_put_server1(t, -EAGAIN);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_put_skipped), t->on1);

    /* A retry after the backoff fails and doubles it. */
    sleep_ms(TEST_BACKOFF_MS + 50);
    two_get(t);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_retries), 1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_errors), errors + 1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_backoff_ms), 2 * TEST_BACKOFF_MS);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_downs), 1);

    /* Back, empty: its keys miss until put again, then hit. */
    ck_assert_int_eq(mcd_restart(&t->m[1]), 0);
    two_wait_up(t);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_backoff_ms), 0);
    two_get_server0_only(t);
    two_put_server1(t, 0);
    ck_assert_int_eq(two_get(t), NFAIL);
    two_teardown(t);
}
END_TEST

/* A server restarted empty between two requests: the broken connection
 * is reopened and the request sent again; its keys miss, nothing failed. */
START_TEST(test_server_restarted_empty)
{
    struct two *t = two_setup(1000);
    struct cluster *cl = t->cl;
    ck_assert_int_eq(mcd_restart(&t->m[1]), 0);
    two_get_server0_only(t);
    for (uint32_t s = 0; s < 2; s++) {
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_errors), 0);
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_lost), 0);
        ck_assert_uint_eq(stat_of(cl, s, CLUSTER_STAT_up), 1);
    }
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_misses), t->on1);
    /* Puts on a connection the restart broke go through as well. */
    ck_assert_int_eq(mcd_restart(&t->m[1]), 0);
    two_put_server1(t, 0);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_put_failed), 0);
    ck_assert_int_eq(two_get(t), NFAIL);
    two_teardown(t);
}
END_TEST

/* A server that stops answering (SIGSTOP): its requests time out after
 * cluster.timeout_ms, its keys miss; once it answers again (SIGCONT) and
 * the backoff is over, its records (still there) hit again. */
START_TEST(test_server_slow)
{
    struct two *t = two_setup(250);
    struct cluster *cl = t->cl;
    mcd_stop(&t->m[1], SIGSTOP);
    two_get_server0_only(t);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_timeouts), 1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_lost), t->on1);
    ck_assert_uint_eq(stat_of(cl, 1, CLUSTER_STAT_up), 0);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_timeouts), 0);
    two_put_server1(t, -EAGAIN); /* not sent while down */
    mcd_stop(&t->m[1], SIGCONT);
    two_wait_up(t);
    ck_assert_int_eq(two_get(t), NFAIL);
    two_teardown(t);
}
END_TEST

/* Items written straight into memcached under presto's keys: a flipped
 * payload byte, a flipped header byte, another key's record, a record cut
 * short, presto's record under other flags, and bytes that are no record:
 * each is a miss, counted as corrupt; the untouched records still hit. */
START_TEST(test_corrupt_items)
{
    need_memcached();
    struct mcd m;
    start(&m);
    struct cluster *cl = make_cluster(&m, 1, 1000, CLUSTER_ITEM_MAX_DEFAULT);
    struct cluster_conn *c;
    ck_assert_int_eq(cluster_conn_open(cl, &c), 0);
    enum { N = 8, BAD = 6 };
    struct store_key keys[N];
    struct rec recs[N] = {{0}};
    for (unsigned i = 0; i < N; i++) {
        keys[i] = key_of(900 + i);
        make_rec(&recs[i], &keys[i], 32, 32, i, i % 2);
        ck_assert_int_eq(cluster_put(c, &keys[i], recs[i].b, recs[i].len), 0);
    }
    uint8_t *v = malloc(recs[0].len);
    memcpy(v, recs[0].b, recs[0].len);
    v[recs[0].len - 1] ^= 0x01; /* payload */
    direct_set(&m, &keys[0], v, recs[0].len, CLUSTER_ITEM_FLAGS);
    memcpy(v, recs[1].b, recs[1].len);
    v[40] ^= 0x80; /* header (the path in the key) */
    direct_set(&m, &keys[1], v, recs[1].len, CLUSTER_ITEM_FLAGS);
    direct_set(&m, &keys[2], recs[3].b, recs[3].len, CLUSTER_ITEM_FLAGS); /* key 3's */
    direct_set(&m, &keys[3], recs[3].b, recs[3].len - 5, CLUSTER_ITEM_FLAGS);
    direct_set(&m, &keys[4], recs[4].b, recs[4].len, 0);
    direct_set(&m, &keys[5], "not a record", 12, CLUSTER_ITEM_FLAGS);
    free(v);
    uint8_t hit[N];
    ck_assert_int_eq(get_batch(c, keys, N, recs, hit), N - BAD);
    for (unsigned i = 0; i < N; i++)
        ck_assert_int_eq(hit[i], i >= BAD);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_corrupt), BAD);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_errors), 0);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_up), 1);
    check_lookups_balance(cl);
    /* The bad items were deleted: the next lookup misses them (not
     * corrupt again), and put-once puts the good records back. */
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_removed), BAD);
    ck_assert_int_eq(get_batch(c, keys, N, recs, NULL), N - BAD);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_corrupt), BAD);
    for (unsigned i = 0; i < BAD; i++)
        ck_assert_int_eq(cluster_put(c, &keys[i], recs[i].b, recs[i].len), 0);
    ck_assert_int_eq(get_batch(c, keys, N, recs, hit), N);
    ck_assert_uint_eq(stat_of(cl, 0, CLUSTER_STAT_corrupt), BAD);
    check_lookups_balance(cl);
    for (unsigned i = 0; i < N; i++)
        free_rec(&recs[i]);
    cluster_conn_close(c);
    cluster_destroy(cl);
    mcd_stop(&m, SIGKILL);
}
END_TEST

/* ---- threads ---- */

#define THREADS 4
#define PER_THREAD 48

struct worker {
    struct cluster *cl;
    unsigned id;
    int hits;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct cluster_conn *c;
    if (cluster_conn_open(w->cl, &c) < 0)
        return NULL;
    struct store_key keys[PER_THREAD];
    struct rec recs[PER_THREAD];
    memset(recs, 0, sizeof(recs));
    /* Every thread puts the same keys (put-once races) and reads them. */
    for (unsigned i = 0; i < PER_THREAD; i++) {
        keys[i] = key_of(7000 + i);
        make_rec(&recs[i], &keys[i], 20, 20, i, i % 2);
        int rc = cluster_put(c, &keys[i], recs[i].b, recs[i].len);
        if (rc != 0 && rc != -EEXIST)
            w->hits = -1000;
    }
    for (int round = 0; round < 4; round++)
        w->hits += get_batch(c, keys, PER_THREAD, recs, NULL);
    for (unsigned i = 0; i < PER_THREAD; i++)
        free_rec(&recs[i]);
    cluster_conn_close(c);
    return NULL;
}

START_TEST(test_threads)
{
    need_memcached();
    struct mcd m[2];
    start(&m[0]);
    start(&m[1]);
    struct cluster *cl = make_cluster(m, 2, 2000, CLUSTER_ITEM_MAX_DEFAULT);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.cl = cl, .id = i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(w[i].hits, 4 * PER_THREAD);
    }
    ck_assert_uint_eq(stat_sum(cl, CLUSTER_STAT_puts), PER_THREAD);
    ck_assert_uint_eq(stat_sum(cl, CLUSTER_STAT_put_exists), (THREADS - 1) * PER_THREAD);
    ck_assert_uint_eq(stat_sum(cl, CLUSTER_STAT_errors), 0);
    check_lookups_balance(cl);
    cluster_destroy(cl);
    mcd_stop(&m[0], SIGKILL);
    mcd_stop(&m[1], SIGKILL);
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config);
    tcase_add_test(tc, test_keys_and_ring);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_mget_two_servers);
    tcase_add_test(tc, test_put_once);
    tcase_add_test(tc, test_item_max);
    tcase_add_test(tc, test_server_killed);
    tcase_add_test(tc, test_server_restarted_empty);
    tcase_add_test(tc, test_server_slow);
    tcase_add_test(tc, test_corrupt_items);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (!mcd_available()) {
        printf("no %s (Debian's memcached): skipped\n", MCD_BIN);
        return 77;
    }
    SRunner *sr = srunner_create(cluster_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
