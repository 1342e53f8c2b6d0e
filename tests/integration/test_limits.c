/*
 * Every configured limit of a real prestod, exceeded once: the request is
 * answered with an ERROR, the daemon keeps serving, and the stats document
 * shows the limit's value and a hit ("limits": {NAME: {"value", "hits"}}).
 *
 *   limits.connections, streams_per_connection, streams_per_user,
 *   batch_size, prefetch, frame_size, and output_buffer / output_timeout:
 *   a client that sends requests and never reads the replies is held to
 *   the output limit (its daemon-side memory stays bounded) and dropped
 *   once it took nothing for output_timeout; one that reads slowly waits
 *   but is never dropped.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define NSAMPLES 16
#define CASE_TIMEOUT_S 120
#define OUTPUT_LIMIT (64 << 10)

static struct harness H;
static char data_root[HARNESS_PATH_MAX];

static void daemon_setup(void)
{
    char yaml[2048];
    snprintf(yaml, sizeof(yaml),
             "workers: 2\n"
             "prefetch: 2\n"
             "limits:\n"
             "  connections: 4\n"
             "  streams_per_connection: 1\n"
             "  streams_per_user: 2\n"
             "  batch_size: 8\n"
             "  prefetch: 4\n"
             "  frame_size: 1KiB\n"
             "  output_buffer: 64KiB\n"
             "  output_timeout: 1\n"
             "datasets:\n"
             "  - name: lim\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
             data_root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

/* limits.NAME's value and hits, with the hits as want. */
static void expect_limit(const char *name, double value, double hits)
{
    char parent[64];
    double v = -1;
    snprintf(parent, sizeof(parent), "limits.%s", name);
    ck_assert_int_eq(harness_stat(&H, parent, "value", &v), 0);
    ck_assert_msg(v == value, "limits.%s.value = %g, want %g", name, v, value);
    int rc = harness_wait_stat(&H, parent, "hits", hits, 3000, &v);
    ck_assert_msg(rc == 0, "limits.%s.hits = %g, want %g", name, v, hits);
}

static presto_stream_opts_t opts(void)
{
    presto_stream_opts_t o;
    presto_stream_opts_init(&o);
    o.dataset = "lim";
    o.batch_size = 4;
    return o;
}

/* Opens a stream (on a connection of its own; the handle's control
 * connection is closed again at once): the code. */
static int try_open(const presto_stream_opts_t *o, presto_stream_t **s, char *err,
                    size_t errlen)
{
    presto_t *p;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    int rc = presto_stream_open(p, o, s);
    snprintf(err, errlen, "%s", presto_errmsg(p));
    presto_close(p);
    return rc;
}

/* limits.NAME.hits grew to at least min (a count of waits, not of
 * requests: the output may cross the limit more than once). */
static void expect_hits_at_least(const char *name, double min)
{
    char parent[64];
    double v = -1;
    snprintf(parent, sizeof(parent), "limits.%s", name);
    for (int i = 0; i < 150; i++) {
        ck_assert_int_eq(harness_stat(&H, parent, "hits", &v), 0);
        if (v >= min)
            return;
        usleep(20000);
    }
    ck_assert_msg(0, "limits.%s.hits = %g, want at least %g", name, v, min);
}

/* Reads frames until an ERROR for req_id comes: its code. */
static uint32_t read_error_for(int fd, uint32_t req_id)
{
    struct proto_header h;
    uint8_t body[512];
    for (;;) {
        int rc = harness_read_frame(fd, 5000, &h, body, sizeof(body));
        ck_assert_msg(rc == 0, "no ERROR for request %u (%d)", req_id, rc);
        if (h.type == PROTO_ERROR && h.req_id == req_id)
            return harness_error_code(body);
    }
}

START_TEST(test_connections)
{
    presto_t *p[3];
    char *json = NULL;
    double v = -1;
    /* First, over one connection, until the daemon has seen every earlier
     * one close (the harness's start-up probe): then it holds just this. */
    ck_assert_int_eq(harness_connect(&H, &p[0]), 0);
    for (int i = 0; i < 250 && v != 1; i++) {
        ck_assert_int_eq(presto_stats(p[0], &json), 0);
        ck_assert_int_eq(harness_json_number(json, NULL, "connections", &v), 0);
        free(json);
        if (v != 1)
            usleep(20000);
    }
    ck_assert_int_eq((int)v, 1);
    for (int i = 1; i < 3; i++)
        ck_assert_int_eq(harness_connect(&H, &p[i]), 0);
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    int fd2 = harness_raw_connect(&H);
    ck_assert_int_ge(fd2, 0);
    /* The fifth is refused with an ERROR, then closed. */
    struct proto_header h;
    uint8_t body[256];
    ck_assert_int_eq(harness_read_frame(fd2, 5000, &h, body, sizeof(body)), 0);
    ck_assert_uint_eq(h.type, PROTO_ERROR);
    ck_assert_uint_eq(harness_error_code(body), PROTO_E_LIMIT);
    ck_assert_int_ge(harness_read_until_eof(fd2, 5000), 0);
    close(fd2);
    /* The stats come over a connection the daemon holds already (a new
     * one would be refused too). */
    ck_assert_int_eq(presto_stats(p[1], &json), 0);
    ck_assert_int_eq(harness_json_number(json, "limits.connections", "value", &v), 0);
    ck_assert_int_eq((int)v, 4);
    ck_assert_int_eq(harness_json_number(json, "limits.connections", "hits", &v), 0);
    ck_assert_int_eq((int)v, 1);
    ck_assert_int_eq(harness_json_number(json, NULL, "connections", &v), 0);
    ck_assert_int_eq((int)v, 4);
    free(json);
    close(fd);
    for (int i = 0; i < 3; i++)
        presto_close(p[i]);
}
END_TEST

static void put_open(struct proto_wbuf *w, uint32_t batch_size)
{
    struct proto_open m = {.batch_size = batch_size, .world = 1, .prefetch = 1};
    snprintf(m.dataset, sizeof(m.dataset), "lim");
    proto_wbuf_init(w);
    proto_put_open(w, &m);
    ck_assert(!w->failed);
}

START_TEST(test_streams_per_connection)
{
    struct proto_wbuf w;
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    put_open(&w, 4);
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_OPEN, 1, w.data, (uint32_t)w.len), 0);
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_OPEN, 2, w.data, (uint32_t)w.len), 0);
    proto_wbuf_free(&w);
    ck_assert_uint_eq(read_error_for(fd, 2), PROTO_E_LIMIT);
    close(fd);
    expect_limit("streams_per_connection", 1, 1);
}
END_TEST

START_TEST(test_streams_per_user)
{
    presto_stream_t *s[3];
    char err[512];
    presto_stream_opts_t o = opts();
    o.prefetch = 1;
    ck_assert_int_eq(try_open(&o, &s[0], err, sizeof(err)), 0);
    ck_assert_int_eq(try_open(&o, &s[1], err, sizeof(err)), 0);
    ck_assert_int_eq(try_open(&o, &s[2], err, sizeof(err)), -PRESTO_E_LIMIT);
    ck_assert_msg(strstr(err, "streams_per_user"), "error: %s", err);
    expect_limit("streams_per_user", 2, 1);
    /* One ends: there is room again. */
    presto_stream_close(s[0]);
    double v;
    ck_assert_int_eq(harness_wait_stat(&H, NULL, "streams", 1, 3000, &v), 0);
    ck_assert_int_eq(try_open(&o, &s[2], err, sizeof(err)), 0);
    for (int i = 1; i < 3; i++)
        presto_stream_close(s[i]);
}
END_TEST

START_TEST(test_batch_size_and_prefetch)
{
    presto_stream_t *s;
    char err[512];
    presto_stream_opts_t o = opts();
    o.batch_size = 9;
    ck_assert_int_eq(try_open(&o, &s, err, sizeof(err)), -PRESTO_E_LIMIT);
    ck_assert_msg(strstr(err, "limits.batch_size"), "error: %s", err);
    expect_limit("batch_size", 8, 1);
    o = opts();
    o.prefetch = 5;
    ck_assert_int_eq(try_open(&o, &s, err, sizeof(err)), -PRESTO_E_LIMIT);
    ck_assert_msg(strstr(err, "limits.prefetch"), "error: %s", err);
    expect_limit("prefetch", 4, 1);
    /* At the limits it streams. */
    o.batch_size = 8;
    o.prefetch = 4;
    struct harness_epoch e;
    ck_assert_int_eq(harness_pull_epoch(&H, &o, &e), 0);
    ck_assert_uint_eq(e.samples, NSAMPLES);
}
END_TEST

START_TEST(test_frame_size)
{
    static uint8_t body[1024];
    struct proto_header h;
    uint8_t reply[256];
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    /* A body of exactly the limit is read (STATS ignores it). */
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_STATS, 1, body, sizeof(body)), 0);
    ck_assert_int_eq(harness_read_frame(fd, 5000, &h, reply, sizeof(reply)), 0);
    ck_assert_uint_eq(h.type, PROTO_STATS_REPLY);
    /* One byte more: TOOBIG from the header alone, then the close. */
    uint8_t hdr[PROTO_HEADER_SIZE];
    proto_header_encode(hdr, PROTO_STATS, 2, sizeof(body) + 1);
    ck_assert_int_eq(write(fd, hdr, sizeof(hdr)), (ssize_t)sizeof(hdr));
    ck_assert_uint_eq(read_error_for(fd, 2), PROTO_E_TOOBIG);
    ck_assert_int_ge(harness_read_until_eof(fd, 5000), 0);
    close(fd);
    expect_limit("frame_size", 1024, 1);
}
END_TEST

/* Sends STATS requests, 100 to a send(), without reading, until the
 * socket takes no more for half a second (the daemon stopped reading) or
 * max went: how many went. */
static long flood_stats(int fd, long max)
{
    enum { PER_SEND = 100 };
    uint8_t buf[PER_SEND * PROTO_HEADER_SIZE];
    long sent = 0;
    int fl = fcntl(fd, F_GETFL);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
    for (int idle = 0; sent < max && idle < 25;) {
        long k = max - sent < PER_SEND ? max - sent : PER_SEND;
        for (long i = 0; i < k; i++)
            proto_header_encode(buf + i * PROTO_HEADER_SIZE, PROTO_STATS,
                                (uint32_t)(sent + i + 1), 0);
        ssize_t n = send(fd, buf, (size_t)k * PROTO_HEADER_SIZE, MSG_NOSIGNAL);
        if (n == (ssize_t)(k * PROTO_HEADER_SIZE)) {
            sent += k;
            idle = 0;
            continue;
        }
        /* The daemon may have dropped us meanwhile (that is the point). */
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            break;
        ck_assert_msg(n < 0 && errno == EAGAIN, "send: %zd %s", n, strerror(errno));
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        if (poll(&pfd, 1, 20) == 0)
            idle++;
    }
    ck_assert_int_eq(fcntl(fd, F_SETFL, fl), 0);
    return sent;
}

START_TEST(test_output_stalled_client_dropped)
{
    long rss0 = harness_proc_status_kb(H.pid, "VmRSS");
    ck_assert_int_gt(rss0, 0);
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    long sent = flood_stats(fd, 1000000);
    /* Each reply is several KiB: unbounded, the replies asked for would
     * take hundreds of MiB. */
    ck_assert_int_gt(sent, 2000);
    long rss1 = harness_proc_status_kb(H.pid, "VmRSS");
    expect_hits_at_least("output_buffer", 1);
    double v;
    ck_assert_int_eq(harness_stat(&H, "limits.output_buffer", "value", &v), 0);
    ck_assert_int_eq((long)v, OUTPUT_LIMIT);
    /* Taking nothing for output_timeout (1 s) gets the connection dropped. */
    expect_limit("output_timeout", 1, 1);
    ck_assert_int_ge(harness_read_until_eof(fd, 5000), 0);
    close(fd);
    ck_assert_msg(harness_log_contains(&H, "none taken for limits.output_timeout"),
                  "the drop is not in the log");
    /* What it held is bounded by the limit, plus one reply. */
    ck_assert_msg(rss1 - rss0 < 4096, "RSS went from %ld to %ld kB for %ld unread requests",
                  rss0, rss1, sent);
    printf("%ld unread STATS requests: daemon RSS %ld -> %ld kB\n", sent, rss0, rss1);
}
END_TEST

START_TEST(test_output_slow_reader_kept)
{
    const long n = 300;
    struct proto_header h;
    uint8_t body[64];
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(flood_stats(fd, n), n);
    /* Reads every reply, slowly: 300 x 5 ms is longer than output_timeout,
     * but the daemon sees the output drain and keeps the connection. */
    for (long i = 0; i < n; i++) {
        ck_assert_int_eq(harness_read_frame(fd, 5000, &h, body, sizeof(body)), 0);
        ck_assert_uint_eq(h.type, PROTO_STATS_REPLY);
        ck_assert_uint_eq(h.req_id, (uint32_t)i + 1);
        usleep(5000);
    }
    close(fd);
    expect_limit("output_timeout", 1, 0);
    expect_hits_at_least("output_buffer", 1);
}
END_TEST

static Suite *limits_suite(void)
{
    Suite *s = suite_create("limits");
    const struct harness_case cases[] = {
        {"connections", test_connections},
        {"streams_per_connection", test_streams_per_connection},
        {"streams_per_user", test_streams_per_user},
        {"batch_prefetch", test_batch_size_and_prefetch},
        {"frame_size", test_frame_size},
        {"output_stalled", test_output_stalled_client_dropped},
        {"output_slow", test_output_slow_reader_kept},
    };
    /* A daemon of its own for each, so each limit's hits start at 0. */
    harness_add_cases(s, cases, sizeof(cases) / sizeof(cases[0]), daemon_setup, daemon_teardown,
                      CASE_TIMEOUT_S);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, "lim", NSAMPLES, 2, 7, 48, 80, data_root,
                             sizeof(data_root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(limits_suite()));
}
