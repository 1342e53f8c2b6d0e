/*
 * Churn against one real prestod: 10,000 connect/disconnect cycles (bare
 * connects, handles, stats calls, streams opened and abandoned mid-epoch
 * on both transports, half-sent headers) and 1,000 garbage frames (bad
 * magic, oversized body_len, truncated bodies, unknown types and
 * versions, malformed OPEN/CLOSE/WARM/RELEASE/RELOAD bodies). After it the
 * daemon's descriptors (/proc/PID/fd) are back to their count before it,
 * its resident set (/proc/PID/status VmRSS) within CHURN_RSS_SLACK_KB of
 * it, and an epoch is served byte for byte as before.
 *
 * The baseline is taken after a warm-up round of the same traffic (a
 * tenth of it), so that what is allocated once and kept (glibc's
 * per-thread arenas, libevent's tables, the memory tier's entries, the
 * workers' buffers) is in it. The slack, 2 MiB, is the allocator's
 * leeway: freed chunks stay in malloc's free lists and top chunk, which
 * glibc trims only past its threshold. A leak of 200 bytes a cycle would
 * be 2 MB over the 10,000 cycles and fail it; the descriptor count must
 * match exactly. Under AddressSanitizer (its quarantine holds freed
 * memory) and ThreadSanitizer (shadow memory) and valgrind the RSS check
 * only reports; the sanitizers and valgrind find leaks themselves.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define NSAMPLES 24
#define CYCLES 10000
#define GARBAGE 1000
#define WARMUP_DIV 10
#define CHURN_RSS_SLACK_KB 2048
#define CASE_TIMEOUT_S 600

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_MEANINGFUL 0
#else
#define RSS_MEANINGFUL 1
#endif

static struct harness H;
static char data_root[HARNESS_PATH_MAX];
/* A connection kept open through the test for the stats: one made and
 * closed for each look could still be open in the daemon when its
 * descriptors are counted. */
static presto_t *probe;

static void daemon_setup(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "limits:\n"
             "  connections: 64\n"
             "datasets:\n"
             "  - name: churn\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}, {random_flip: 0.5}]\n",
             data_root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

static int raw(void)
{
    int fd = harness_raw_connect(&H);
    ck_assert_msg(fd >= 0, "connect: %s", strerror(-fd));
    return fd;
}

static void open_body(struct proto_wbuf *w, uint32_t flags)
{
    struct proto_open m = {.batch_size = 4, .seed = 9, .world = 1, .flags = flags,
                           .prefetch = 2};
    snprintf(m.dataset, sizeof(m.dataset), "churn");
    proto_wbuf_init(w);
    proto_put_open(w, &m);
    ck_assert(!w->failed);
}

/* One connect/disconnect cycle of kind i % 6. */
static void cycle(unsigned i)
{
    struct proto_header h;
    uint8_t body[128];
    struct proto_wbuf w;
    presto_t *p;
    char *json;
    int fd;

    switch (i % 6) {
    case 0: /* connect, close */
        close(raw());
        break;
    case 1: /* a handle, nothing asked */
        ck_assert_int_eq(harness_connect(&H, &p), 0);
        presto_close(p);
        break;
    case 2: /* a stats call */
        ck_assert_int_eq(harness_connect(&H, &p), 0);
        ck_assert_int_eq(presto_stats(p, &json), 0);
        free(json);
        presto_close(p);
        break;
    case 3: /* a stream (socket), abandoned after OPENED */
    case 4: /* the same on shared memory: the ring's fd is dropped unread */
        fd = raw();
        open_body(&w, i % 6 == 4 ? PROTO_OPEN_SHM | PROTO_OPEN_SHUFFLE : PROTO_OPEN_SHUFFLE);
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_OPEN, i, w.data,
                                            (uint32_t)w.len), 0);
        proto_wbuf_free(&w);
        ck_assert_int_eq(harness_read_frame(fd, 10000, &h, body, sizeof(body)), 0);
        ck_assert_msg(h.type == PROTO_OPENED, "OPEN got a %s", proto_type_name(h.type));
        close(fd);
        break;
    case 5: /* half a header */
        fd = raw();
        proto_header_encode(body, PROTO_STATS, i, 0);
        ck_assert_int_eq(send(fd, body, PROTO_HEADER_SIZE / 2, MSG_NOSIGNAL),
                         PROTO_HEADER_SIZE / 2);
        close(fd);
        break;
    }
}

/* Expects an ERROR with this code, then (close_after) the daemon's close. */
static void expect_error(int fd, uint32_t code, int close_after)
{
    struct proto_header h;
    uint8_t body[512];
    int rc = harness_read_frame(fd, 10000, &h, body, sizeof(body));
    ck_assert_msg(rc == 0, "no reply to garbage (%d)", rc);
    ck_assert_msg(h.type == PROTO_ERROR, "garbage got a %s", proto_type_name(h.type));
    ck_assert_uint_eq(harness_error_code(body), code);
    if (close_after)
        ck_assert_int_ge(harness_read_until_eof(fd, 10000), 0);
}

/* The connection still answers STATS after what came before. */
static void expect_alive(int fd)
{
    struct proto_header h;
    uint8_t body[64];
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_STATS, 77, NULL, 0), 0);
    ck_assert_int_eq(harness_read_frame(fd, 10000, &h, body, sizeof(body)), 0);
    ck_assert_uint_eq(h.type, PROTO_STATS_REPLY);
}

/* One garbage frame of kind i % 10, on a connection of its own. */
static void garbage(unsigned i)
{
    uint8_t junk[64];
    int fd = raw();
    for (size_t k = 0; k < sizeof(junk); k++)
        junk[k] = (uint8_t)(i * 131 + k * 7 + 1);
    switch (i % 10) {
    case 0: /* not a presto client */
        ck_assert_int_eq(send(fd, junk, PROTO_HEADER_SIZE, MSG_NOSIGNAL), PROTO_HEADER_SIZE);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    case 1: { /* a body_len far over limits.frame_size */
        uint8_t hdr[PROTO_HEADER_SIZE];
        proto_header_encode(hdr, PROTO_OPEN, i, 0x40000000u + i);
        ck_assert_int_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
        expect_error(fd, PROTO_E_TOOBIG, 1);
        break;
    }
    case 2: { /* a body cut short, then gone */
        uint8_t hdr[PROTO_HEADER_SIZE];
        proto_header_encode(hdr, PROTO_OPEN, i, 100);
        ck_assert_int_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
        ck_assert_int_eq(send(fd, junk, 50, MSG_NOSIGNAL), 50);
        break;
    }
    case 3: /* an unknown type: refused, the connection stays */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, 999, i, junk, 8), 0);
        expect_error(fd, PROTO_E_PROTO, 0);
        expect_alive(fd);
        break;
    case 4: /* an unknown version: likewise */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION + 1 + i % 7, PROTO_STATS, i,
                                            NULL, 0), 0);
        expect_error(fd, PROTO_E_VERSION, 0);
        expect_alive(fd);
        break;
    case 5: /* OPEN with a body too short for it */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_OPEN, i, junk, 7), 0);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    case 6: /* CLOSE with three bytes */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_CLOSE, i, junk, 3), 0);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    case 7: /* WARM whose name's length points past the body */
        junk[0] = 0xff;
        junk[1] = 0xff;
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_WARM, i, junk, 12), 0);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    case 8: /* RELEASE with five bytes */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_RELEASE, i, junk, 5), 0);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    case 9: /* RELOAD and DROP_CACHE take no body */
        ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION,
                                            i % 20 == 9 ? PROTO_RELOAD : PROTO_DROP_CACHE, i,
                                            junk, 4), 0);
        expect_error(fd, PROTO_E_PROTO, 1);
        break;
    }
    close(fd);
}

/* Waits (up to 30 s) until the probe is the only connection left, with
 * no stream and no job. */
static void wait_quiet(void)
{
    static const struct {
        const char *key;
        double want;
    } quiet[] = {{"connections", 1}, {"streams", 0}, {"jobs_queued", 0}, {"workers_busy", 0}};
    for (int tries = 0;; tries++) {
        char *json = NULL;
        size_t ok = 0;
        double v = -1;
        ck_assert_int_eq(presto_stats(probe, &json), 0);
        for (; ok < sizeof(quiet) / sizeof(quiet[0]); ok++) {
            ck_assert_int_eq(harness_json_number(json, NULL, quiet[ok].key, &v), 0);
            if (v != quiet[ok].want)
                break;
        }
        free(json);
        if (ok == sizeof(quiet) / sizeof(quiet[0]))
            return;
        ck_assert_msg(tries < 1500, "%s is %g after 30 s", quiet[ok].key, v);
        usleep(20000);
    }
}

static void traffic(unsigned cycles, unsigned frames)
{
    for (unsigned i = 0; i < cycles; i++) {
        cycle(i);
        if (frames && i % (cycles / frames) == 0)
            garbage(i / (cycles / frames));
    }
    wait_quiet();
}

static uint64_t epoch_fnv(void)
{
    struct harness_epoch e;
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = "churn";
    o.batch_size = 5;
    o.seed = 3;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES);
    return e.fnv;
}

START_TEST(test_churn)
{
    int valgrind = strcmp(harness_env("PRESTO_VALGRIND", "0"), "1") == 0;
    ck_assert_int_eq(harness_connect(&H, &probe), 0);
    uint64_t fnv0 = epoch_fnv();
    traffic(CYCLES / WARMUP_DIV, GARBAGE / WARMUP_DIV);
    int fds0 = harness_proc_fds(H.pid);
    long rss0 = harness_proc_status_kb(H.pid, "VmRSS");
    ck_assert_int_gt(fds0, 0);
    ck_assert_int_gt(rss0, 0);

    traffic(CYCLES, GARBAGE);
    int fds1 = harness_proc_fds(H.pid);
    long rss1 = harness_proc_status_kb(H.pid, "VmRSS");
    printf("after %d cycles and %d garbage frames: fds %d -> %d, VmRSS %ld -> %ld kB "
           "(%+ld kB)\n", CYCLES, GARBAGE, fds0, fds1, rss0, rss1, rss1 - rss0);
    ck_assert_msg(fds1 == fds0, "descriptors: %d before, %d after", fds0, fds1);
    if (RSS_MEANINGFUL && !valgrind)
        ck_assert_msg(rss1 <= rss0 + CHURN_RSS_SLACK_KB,
                      "VmRSS grew from %ld to %ld kB (slack %d kB)", rss0, rss1,
                      CHURN_RSS_SLACK_KB);
    double v;
    presto_close(probe);
    ck_assert_int_eq(harness_stat(&H, NULL, "connections_total", &v), 0);
    ck_assert_msg(v >= CYCLES + CYCLES / WARMUP_DIV, "connections_total %g", v);
    ck_assert_int_eq(harness_stat(&H, NULL, "protocol_errors", &v), 0);
    ck_assert_msg(v >= (GARBAGE + GARBAGE / WARMUP_DIV) * 8 / 10, "protocol_errors %g", v);

    /* It still serves, byte for byte. */
    ck_assert_uint_eq(epoch_fnv(), fnv0);
    ck_assert(harness_alive(&H));
}
END_TEST

static Suite *churn_suite(void)
{
    Suite *s = suite_create("churn");
    TCase *tc = tcase_create("churn");
    tcase_add_unchecked_fixture(tc, daemon_setup, daemon_teardown);
    tcase_set_timeout(tc, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_churn);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, "churn", NSAMPLES, 3, 8, 48, 80, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(churn_suite()));
}
