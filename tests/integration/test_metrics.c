/*
 * The stats in Prometheus's text format, from C (so that valgrind and the
 * sanitizers see the daemon's side): presto_stats_prometheus() over the
 * socket (METRICS); metrics.listen's /metrics over a real HTTP GET on
 * loopback (port 0: the daemon picks one and says which in the stats), 404
 * elsewhere, no other method; a bad metrics.listen refused with FILE:LINE. The format itself, every JSON counter's
 * value in it and promtool are tests/python/test_metrics.py's.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "presto.h"
#include "proto.h"

#define NSAMPLES 8
#define NCLASSES 2
#define CASE_TIMEOUT_S 120

static struct harness H;
static char root[HARNESS_PATH_MAX];

static void daemon_setup(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "metrics: {listen: \"127.0.0.1:0\"}\n"
             "datasets:\n"
             "  - name: m\n"
             "    root: %s\n"
             "    steps: [decode, {resize: 32}, {center_crop: 32}]\n",
             root);
    ck_assert_msg(harness_start_config(&H, yaml, NULL) == 0, "prestod did not start");
}

static void daemon_teardown(void)
{
    harness_stop_checked(&H);
}

/* The port /metrics is served on, from the stats' "metrics.listen". */
static unsigned metrics_port(void)
{
    char *json = NULL;
    ck_assert_int_eq(harness_stats(&H, &json), 0);
    const char *at = strstr(json, "\"listen\":\"127.0.0.1:");
    ck_assert_msg(at, "no metrics.listen in the stats: %s", json);
    unsigned port = (unsigned)strtoul(at + strlen("\"listen\":\"127.0.0.1:"), NULL, 10);
    free(json);
    ck_assert_uint_gt(port, 0);
    return port;
}

/* Sends request to 127.0.0.1:port and reads the whole reply into buf. */
static size_t http(unsigned port, const char *request, char *buf, size_t len)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct timeval tv = {getenv("PRESTO_VALGRIND") ? 60 : 10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(send(fd, request, strlen(request), MSG_NOSIGNAL), (ssize_t)strlen(request));
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = recv(fd, buf + got, len - 1 - got, 0)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    close(fd);
    return got;
}

START_TEST(test_over_the_socket)
{
    presto_t *p;
    char *text = NULL;
    ck_assert_int_eq(harness_connect(&H, &p), 0);
    ck_assert_msg(presto_stats_prometheus(p, &text) == 0, "%s", presto_errmsg(p));
    ck_assert_msg(strncmp(text, "# HELP presto_version_info ", 27) == 0, "%.200s", text);
    ck_assert_ptr_nonnull(strstr(text, "# TYPE presto_samples_served_total counter\n"));
    ck_assert_ptr_nonnull(strstr(text, "presto_tier_entries{tier=\"memory\"} "));
    ck_assert_ptr_nonnull(strstr(text, "presto_dataset_samples{dataset=\"m\"} 8\n"));
    free(text);
    presto_close(p);

    /* The frame itself: METRICS, answered by METRICS_REPLY on the same
     * connection as STATS. */
    int fd = harness_raw_connect(&H);
    ck_assert_int_ge(fd, 0);
    struct proto_header h;
    uint8_t reply[512];
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_METRICS, 5, NULL, 0), 0);
    ck_assert_int_ge(harness_read_frame(fd, 5000, &h, reply, sizeof(reply)), 0);
    ck_assert_uint_eq(h.type, PROTO_METRICS_REPLY);
    ck_assert_uint_eq(h.req_id, 5);
    ck_assert_int_eq(harness_send_frame(fd, PROTO_VERSION, PROTO_STATS, 6, NULL, 0), 0);
    ck_assert_int_ge(harness_read_frame(fd, 5000, &h, reply, sizeof(reply)), 0);
    ck_assert_uint_eq(h.type, PROTO_STATS_REPLY);
    close(fd);
}
END_TEST

START_TEST(test_over_http)
{
    static char reply[1 << 20];
    unsigned port = metrics_port();
    http(port, "GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", reply,
         sizeof(reply));
    ck_assert_msg(strncmp(reply, "HTTP/1.1 200 ", 13) == 0, "%.300s", reply);
    ck_assert_ptr_nonnull(strstr(reply, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
    ck_assert_ptr_nonnull(strstr(reply, "\r\n\r\n# HELP presto_version_info "));
    ck_assert_ptr_nonnull(strstr(reply, "presto_metrics_requests_total 1\n"));
    http(port, "GET /elsewhere HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", reply,
         sizeof(reply));
    ck_assert_msg(strncmp(reply, "HTTP/1.1 404 ", 13) == 0, "%.300s", reply);
    http(port, "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
               "Connection: close\r\n\r\n", reply, sizeof(reply));
    ck_assert_msg(strncmp(reply, "HTTP/1.1 200 ", 13) != 0, "POST served: %.300s", reply);
    double v = -1;
    ck_assert_int_eq(harness_stat(&H, "metrics", "requests", &v), 0);
    ck_assert_msg(v == 1, "%g requests of /metrics answered, want 1", v);
}
END_TEST

START_TEST(test_bad_listen)
{
    char yaml[1024], out[HARNESS_PATH_MAX], log[4096] = "";
    snprintf(yaml, sizeof(yaml), "metrics:\n  listen: 127.0.0.1\ndatasets: []\n");
    ck_assert_int_eq(harness_write_file(&H, "bad-listen.yaml", yaml, H.conf, sizeof(H.conf)),
                     0);
    ck_assert_int_eq(harness_path(&H, "bad-listen.out", out, sizeof(out)), 0);
    char prestod[HARNESS_PATH_MAX * 2];
    snprintf(prestod, sizeof(prestod), "%s/prestod", harness_env("PRESTO_BUILD", "build"));
    const char *argv[] = {prestod, "-c", H.conf, "--check-config", NULL};
    ck_assert_int_ne(harness_run(argv, out, 30), 0);
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(log, 1, sizeof(log) - 1, f);
    log[n] = '\0';
    fclose(f);
    ck_assert_msg(strstr(log, "bad-listen.yaml:2: key 'metrics.listen'"), "%s", log);
}
END_TEST

static Suite *metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    const struct harness_case cases[] = {
        {"socket", test_over_the_socket},
        {"http", test_over_http},
    };
    harness_add_cases(s, cases, sizeof(cases) / sizeof(cases[0]), daemon_setup,
                      daemon_teardown, CASE_TIMEOUT_S);
    TCase *tc = harness_tcase("bad_listen", NULL, NULL, CASE_TIMEOUT_S);
    tcase_add_test(tc, test_bad_listen);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (harness_photos_missing())
        return HARNESS_SKIP;
    if (harness_init(&H) < 0)
        return EXIT_FAILURE;
    if (harness_make_dataset(&H, "m", NSAMPLES, NCLASSES, 3, 40, 64, root, sizeof(root)) < 0) {
        harness_cleanup(&H);
        return EXIT_FAILURE;
    }
    return harness_finish(&H, harness_run_suite(metrics_suite()));
}
