/*
 * The cluster tier end to end, on one machine: three prestod processes
 * stand for three nodes (separate sockets, cache directories and memory
 * budgets a third of the dataset, no disk tier), sharing two real
 * memcached servers on loopback ports (tests/tools/memcached_fixture.h).
 *
 *   warm     `prestoctl warm` on one node fills the cluster: the other
 *            nodes' warm-ups and the epoch after compute nothing;
 *   nodes    a world=6 job (ranks 2k and 2k+1 on daemon k) over two epochs
 *            decodes each sample exactly once across the daemons (their
 *            "computed" counters summed), and every rank's epoch equals the
 *            one a single daemon without a cluster tier serves (hash of its
 *            labels and pixels);
 *   failure  a server killed in the middle of epoch 1 (SIGKILL), then
 *            restarted empty on the same port: the epoch completes, equal,
 *            the losses counted (errors, misses) and the samples recomputed;
 *   corrupt  every item rewritten by the test straight into memcached with
 *            one payload byte flipped: fresh daemons count them corrupt,
 *            recompute every sample and serve the same epoch, delete the
 *            bad items and put the good records back (the next fresh
 *            daemons compute nothing).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "../tools/memcached_fixture.h"
#include "harness.h"
#include "presto.h"

#define CASE_TIMEOUT_S 240
#define NODES 3
#define WORLD 6
#define EPOCHS 2
#define SEED 11
#define BATCH 4
#define CROP 56

static struct harness H;         /* the dataset and the reference daemon */
static struct harness N[NODES];  /* the nodes */
static char root[HARNESS_PATH_MAX];
static unsigned count = 48;
static uint64_t ref[EPOCHS][WORLD]; /* hash of each rank's epoch, single daemon */

static void opts(presto_stream_opts_t *o, unsigned epoch, unsigned rank)
{
    presto_stream_opts_init(o);
    o->dataset = "shared";
    o->batch_size = BATCH;
    o->seed = SEED;
    o->epoch = epoch;
    o->rank = rank;
    o->world = WORLD;
}

/* The config of a node (servers: NULL for none). */
static void config(char *text, size_t len, const struct mcd *a, const struct mcd *b)
{
    uint64_t third = (uint64_t)count * CROP * CROP * 3 / NODES;
    int n = snprintf(text, len,
                     "workers: 2\n"
                     "cache:\n"
                     "  memory: %llu\n"
                     "  disk: 0\n"
                     "datasets:\n"
                     "  - name: shared\n"
                     "    root: %s\n"
                     "    steps: [decode, {resize: 64}, {center_crop: %u}, "
                     "{random_flip: 0.5}]\n",
                     (unsigned long long)third, root, CROP);
    if (a)
        snprintf(text + n, len - (size_t)n,
                 "cluster:\n"
                 "  memcached: [%s, %s]\n"
                 "  timeout_ms: 3000\n" /* valgrind, TSan: slow, not failing */,
                 a->spec, b->spec);
}

static void start_nodes(const struct mcd *a, const struct mcd *b)
{
    char text[2048];
    config(text, sizeof(text), a, b);
    for (int k = 0; k < NODES; k++)
        ck_assert_msg(harness_start_config(&N[k], text, NULL) == 0, "node %d did not start", k);
}

static void stop_nodes(void)
{
    for (int k = 0; k < NODES; k++)
        ck_assert_msg(harness_stop(&N[k]) == 0, "node %d did not exit 0 on SIGTERM", k);
}

static double nstat(int k, const char *parent, const char *key)
{
    double v = -1;
    ck_assert_msg(harness_stat(&N[k], parent, key, &v) == 0, "node %d: no %s.%s", k,
                  parent ? parent : "", key);
    return v;
}

/* Samples run through the offline steps, summed over the nodes. */
static double computed(void)
{
    double sum = 0;
    for (int k = 0; k < NODES; k++)
        sum += nstat(k, "datasets", "computed");
    return sum;
}

/* Ranks [from, to) of epoch on their nodes, each equal to the reference. */
static void pull(unsigned epoch, unsigned from, unsigned to)
{
    for (unsigned r = from; r < to; r++) {
        presto_stream_opts_t o;
        struct harness_epoch e;
        opts(&o, epoch, r);
        ck_assert_int_eq(harness_pull_epoch(&N[r / 2], &o, &e), 0);
        ck_assert_uint_eq(e.samples, count / WORLD);
        ck_assert_uint_eq(e.skipped, 0);
        ck_assert_msg(e.fnv == ref[epoch][r], "epoch %u rank %u differs from one daemon's",
                      epoch, r);
    }
}

static void two_servers(struct mcd *a, struct mcd *b)
{
    ck_assert_int_eq(mcd_start(a, 0, "-m", "64", NULL), 0);
    ck_assert_int_eq(mcd_start(b, 0, "-m", "64", NULL), 0);
}

START_TEST(nodes_decode_once)
{
    struct mcd a, b;
    two_servers(&a, &b);
    start_nodes(&a, &b);
    pull(0, 0, WORLD);
    ck_assert_uint_eq((unsigned)computed(), count);
    pull(1, 0, WORLD);
    ck_assert_uint_eq((unsigned)computed(), count); /* epoch 1: nothing decoded */
    double hits = 0, puts = 0;
    for (int k = 0; k < NODES; k++) {
        hits += nstat(k, "cluster", "hits");
        puts += nstat(k, "cluster", "puts");
        ck_assert_uint_eq((unsigned)nstat(k, "cluster", "errors"), 0);
        ck_assert_uint_eq((unsigned)nstat(k, "cluster", "corrupt"), 0);
    }
    ck_assert_uint_eq((unsigned)puts, count); /* each sample put once */
    ck_assert_msg(hits > 0, "no cluster hits in epoch 1");
    stop_nodes();
    mcd_stop(&a, SIGKILL);
    mcd_stop(&b, SIGKILL);
}
END_TEST

START_TEST(server_killed_and_restarted_empty)
{
    struct mcd a, b;
    two_servers(&a, &b);
    start_nodes(&a, &b);
    pull(0, 0, WORLD);
    double before = computed();
    pull(1, 0, 2);
    mcd_stop(&b, SIGKILL); /* mid-epoch: node 1 finds it gone */
    pull(1, 2, 4);
    double lost = nstat(1, "cluster", "errors") + nstat(1, "cluster", "skipped") +
                  nstat(1, "cluster", "lost");
    ck_assert_msg(lost > 0, "node 1 counted no loss of the killed server");
    ck_assert_int_eq(mcd_restart(&b), 0); /* same port, empty */
    usleep(300 * 1000);                    /* past the first backoff */
    pull(1, 4, WORLD);
    ck_assert_msg(nstat(2, "cluster", "misses") > 0, "node 2 missed nothing after the restart");
    double after = computed();
    ck_assert_msg(after > before, "nothing was recomputed");
    ck_assert_msg(after - before <= count, "recomputed %g of %u", after - before, count);
    for (int k = 0; k < NODES; k++)
        ck_assert_msg(harness_alive(&N[k]), "node %d died", k);
    stop_nodes();
    mcd_stop(&a, SIGKILL);
    mcd_stop(&b, SIGKILL);
}
END_TEST

/* `prestoctl warm` on one node fills the cluster tier (a node's memory
 * takes only its third): the others' warm-ups then compute nothing. */
START_TEST(warm_fills_the_cluster)
{
    struct mcd a, b;
    two_servers(&a, &b);
    start_nodes(&a, &b);
    for (int k = 0; k < NODES; k++) {
        presto_t *p;
        ck_assert_int_eq(harness_connect(&N[k], &p), 0);
        ck_assert_msg(presto_warm(p, "shared", NULL, NULL) == 0, "warm on node %d: %s", k,
                      presto_errmsg(p));
        presto_close(p);
        ck_assert_uint_eq((unsigned)computed(), count);
    }
    ck_assert_uint_eq((unsigned)(nstat(0, "cluster", "puts") + nstat(1, "cluster", "puts") +
                                 nstat(2, "cluster", "puts")),
                      count);
    pull(1, 0, WORLD);
    ck_assert_uint_eq((unsigned)computed(), count);
    stop_nodes();
    mcd_stop(&a, SIGKILL);
    mcd_stop(&b, SIGKILL);
}
END_TEST

/* ---- memcached's text protocol, to rewrite items behind presto ---- */

static int mc_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {5, 0};
    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void mc_send(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
}

/* Reads until buf ends with end; returns the length. */
static size_t mc_read_until(int fd, char *buf, size_t cap, const char *end)
{
    size_t n = 0, el = strlen(end);
    while (n < el || memcmp(buf + n - el, end, el) != 0) {
        ck_assert_msg(n + 1 < cap, "memcached's answer is too long");
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        ck_assert_msg(r > 0, "memcached closed or timed out");
        n += (size_t)r;
    }
    buf[n] = '\0';
    return n;
}

/* Every presto item of the server at port, one payload byte flipped.
 * Returns how many. */
static unsigned corrupt_all(uint16_t port)
{
    static char dump[1 << 20], item[1 << 20];
    char keys[256][128];
    unsigned nkeys = 0, done = 0;
    int fd = mc_connect(port);
    const char *cmd = "lru_crawler metadump all\r\n";
    mc_send(fd, cmd, strlen(cmd));
    mc_read_until(fd, dump, sizeof(dump), "END\r\n");
    for (char *line = strstr(dump, "key="); line && nkeys < 256;
         line = strstr(line + 1, "key=")) {
        char *k = keys[nkeys], *p = line + 4;
        size_t n = 0;
        while (*p && *p != ' ' && n + 1 < sizeof(keys[0])) {
            if (p[0] == '%' && p[1] && p[2]) { /* URL-encoded */
                char hex[3] = {p[1], p[2], 0};
                k[n++] = (char)strtol(hex, NULL, 16);
                p += 3;
            } else {
                k[n++] = *p++;
            }
        }
        k[n] = '\0';
        if (strncmp(k, "presto:", 7) == 0)
            nkeys++;
    }
    for (unsigned i = 0; i < nkeys; i++) {
        char req[256];
        unsigned flags;
        size_t bytes;
        int hl;
        snprintf(req, sizeof(req), "get %.127s\r\n", keys[i]);
        mc_send(fd, req, strlen(req));
        size_t n = mc_read_until(fd, item, sizeof(item), "END\r\n");
        if (n < 10 || strncmp(item, "VALUE ", 6) != 0)
            continue; /* gone meanwhile */
        ck_assert_int_eq(sscanf(item, "VALUE %*s %u %zu%n", &flags, &bytes, &hl), 2);
        char *data = strstr(item, "\r\n") + 2;
        ck_assert_uint_gt(bytes, 64);
        data[bytes - 1] ^= 0x5a; /* the payload's last byte */
        snprintf(req, sizeof(req), "set %.127s %u 0 %zu\r\n", keys[i], flags, bytes);
        mc_send(fd, req, strlen(req));
        mc_send(fd, data, bytes);
        mc_send(fd, "\r\n", 2);
        mc_read_until(fd, req, sizeof(req), "\r\n");
        ck_assert_msg(strcmp(req, "STORED\r\n") == 0, "set: %s", req);
        done++;
    }
    close(fd);
    return done;
}

START_TEST(corrupt_items_are_misses)
{
    struct mcd a, b;
    two_servers(&a, &b);
    start_nodes(&a, &b);
    pull(0, 0, WORLD);
    stop_nodes();
    unsigned bad = corrupt_all(a.port) + corrupt_all(b.port);
    ck_assert_uint_eq(bad, count);
    start_nodes(&a, &b); /* empty memory: every sample from the cluster */
    pull(1, 0, WORLD);
    double corrupt = 0;
    for (int k = 0; k < NODES; k++)
        corrupt += nstat(k, "cluster", "corrupt");
    ck_assert_uint_eq((unsigned)corrupt, count);
    ck_assert_uint_eq((unsigned)computed(), count);
    /* Each bad item was deleted and its good record put again: fresh
     * nodes then find every sample in the cluster, intact. */
    double removed = 0, puts = 0;
    for (int k = 0; k < NODES; k++) {
        removed += nstat(k, "cluster", "removed");
        puts += nstat(k, "cluster", "puts");
    }
    ck_assert_uint_eq((unsigned)removed, count);
    ck_assert_uint_eq((unsigned)puts, count);
    stop_nodes();
    start_nodes(&a, &b);
    pull(0, 0, WORLD);
    corrupt = 0;
    for (int k = 0; k < NODES; k++)
        corrupt += nstat(k, "cluster", "corrupt");
    ck_assert_uint_eq((unsigned)corrupt, 0);
    ck_assert_uint_eq((unsigned)computed(), 0);
    stop_nodes();
    mcd_stop(&a, SIGKILL);
    mcd_stop(&b, SIGKILL);
}
END_TEST

/* The reference: one daemon, no cluster tier, every rank of each epoch. */
static int reference(void)
{
    char text[2048];
    config(text, sizeof(text), NULL, NULL);
    if (harness_start_config(&H, text, NULL) < 0)
        return -1;
    for (unsigned ep = 0; ep < EPOCHS; ep++)
        for (unsigned r = 0; r < WORLD; r++) {
            presto_stream_opts_t o;
            struct harness_epoch e;
            opts(&o, ep, r);
            if (harness_pull_epoch(&H, &o, &e) < 0 || e.samples != count / WORLD)
                return -1;
            ref[ep][r] = e.fnv;
        }
    return harness_stop(&H) == 0 ? 0 : -1;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (!mcd_available()) {
        printf("SKIP: no %s (Debian's memcached)\n", MCD_BIN);
        return HARNESS_SKIP;
    }
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    for (int k = 0; k < NODES; k++)
        if (harness_init(&N[k]) < 0)
            return EXIT_FAILURE;
    if (harness_make_dataset(&H, "shared", count, 4, 19, 80, 160, root, sizeof(root)) < 0 ||
        reference() < 0) {
        harness_print_all_logs(&H);
        harness_cleanup(&H);
        for (int k = 0; k < NODES; k++)
            harness_cleanup(&N[k]);
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("cluster_nodes");
    TCase *tc = harness_tcase("nodes", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, nodes_decode_once);
    tcase_add_test(tc, warm_fills_the_cluster);
    tcase_add_test(tc, server_killed_and_restarted_empty);
    tcase_add_test(tc, corrupt_items_are_misses);
    suite_add_tcase(s, tc);
    int failed = harness_run_suite(s);
    for (int k = 0; k < NODES; k++) {
        if (failed)
            harness_print_all_logs(&N[k]);
        harness_cleanup(&N[k]);
    }
    return harness_finish(&H, failed);
}
